"""The UML boot probe's logic: the reason it gives for a kernel that panics, times out or is
missing, and its cache. The stand-in kernel (fixtures/uml-panics) is a script, so these need
no root; the fall-back on a real path is test_backend_choice.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quicbed.topology.backends import proof

STAND_IN = Path(__file__).parents[1] / "fixtures" / "uml-panics" / "linux.uml"
PANIC_REASON = "uml cannot run on this CPU: ptrace set fp regs failed, errno = 14"


def test_the_reason_names_the_cpu_fault_before_the_panic() -> None:
    console = STAND_IN.read_text()
    assert proof.uml_failure(console) == PANIC_REASON
    panic_only = "Run /init as init process\nKernel panic - not syncing: VFS: Unable to mount\n"
    assert proof.uml_failure(panic_only) == (
        "uml cannot run on this host: Kernel panic - not syncing: VFS: Unable to mount"
    )
    assert proof.uml_failure("booting\n", timed_out=True) == (
        f"uml cannot run on this host: no answer within {proof.UML_PROBE_TIMEOUT_S:.0f} s"
    )
    assert proof.uml_failure("") == "uml cannot run on this host: it exited without output"


@pytest.fixture
def probe_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(proof, "PROBE_CACHE", tmp_path / "probes")
    return tmp_path / "probes"


def test_a_kernel_that_panics_is_proven_unable_and_the_proof_is_cached(
    probe_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUICBED_UML_BINARY", str(STAND_IN))
    first = proof.prove_uml()
    assert (first.runs, first.reason, first.cached) == (False, PANIC_REASON, False)
    assert len(list(probe_cache.glob("uml-*.json"))) == 1
    again = proof.prove_uml()
    assert (again.runs, again.reason, again.cached) == (False, PANIC_REASON, True)
    assert not proof.prove_uml(fresh=True).cached  # doctor boots it afresh
    proof.forget_uml_proof()
    assert list(probe_cache.glob("uml-*.json")) == []


def test_the_cache_is_per_kernel_binary(
    probe_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Another UML binary (an upgrade of the package) is probed again, not read from the cache."""
    monkeypatch.setenv("QUICBED_UML_BINARY", str(STAND_IN))
    proof.prove_uml()
    other = tmp_path / "linux.uml"
    other.write_text(STAND_IN.read_text().replace("errno = 14", "errno = 5"))
    other.chmod(0o755)
    monkeypatch.setenv("QUICBED_UML_BINARY", str(other))
    assert proof.prove_uml().reason.endswith("errno = 5")
    assert len(list(probe_cache.glob("uml-*.json"))) == 2


def test_a_missing_kernel_says_what_to_install(probe_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUICBED_UML_BINARY", "/nonexistent/linux.uml")
    found = proof.prove_uml()
    assert not found.runs and "apt-get install user-mode-linux" in found.reason


def test_a_negative_proof_expires_and_the_kernel_is_booted_again(
    probe_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One timed-out boot on a busy host must not rule the backend out there for good."""
    monkeypatch.setenv("QUICBED_UML_BINARY", str(STAND_IN))
    proof.prove_uml()
    (cache,) = probe_cache.glob("uml-*.json")
    assert proof.prove_uml().cached
    old = cache.stat().st_mtime - proof.NEGATIVE_PROOF_TTL_S - 1
    os.utime(cache, (old, old))
    again = proof.prove_uml()
    assert (again.runs, again.cached) == (False, False)  # booted again, not read


def test_a_missing_set_up_step_is_a_set_up_failure_not_a_host_that_cannot(
    probe_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUICBED_UML_BINARY", "/nonexistent/linux.uml")
    missing = proof.prove_uml()
    assert (missing.runs, missing.setup) == (False, True) and "apt-get install" in missing.reason
    monkeypatch.setenv("QUICBED_UML_BINARY", str(STAND_IN))
    panics = proof.prove_uml()
    assert (panics.runs, panics.setup) == (False, False)  # the host cannot: an allowed skip
