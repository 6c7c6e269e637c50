"""The link backend is chosen by proof, on the real path: with a stand-in UML kernel that
panics at boot as Debian's does on Xeons with AVX-512/AMX (fixtures/uml-panics) and a stand-in
QEMU that boots no guest (fixtures/qemu-fails), `auto` takes the delay line (which it tries
before either router, so neither is booted for it) and says why once, the run's manifest and
report name the backend and the reason, an explicit `--backend uml` fails at once with the
panic's reason, doctor names the failure, and `quicbed lab check` still grades. On a host whose
kernel has netem, auto takes netem: those tests check that instead."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from cli_process import quicbed

from quicbed.topology.backends import host_has_netem
from quicbed.topology.clean import leftovers

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

STAND_IN = Path(__file__).parents[1] / "fixtures" / "uml-panics" / "linux.uml"
QEMU_STAND_IN = Path(__file__).parents[1] / "fixtures" / "qemu-fails" / "qemu-system-x86_64"
PANIC_REASON = "uml cannot run on this CPU: ptrace set fp regs failed, errno = 14"
QEMU_LINE = "qemu-system-x86_64: stand-in: no guest boots on this host"
TOPOLOGY_IMAGE = os.environ.get("QUICBED_TEST_IMAGE", "debian:trixie-slim")
FAIL_FAST_S = 30  # the bound: a run that can never start exits within it
EXPERIMENT = """\
name: uml-panics
profiles: [india]
servers: [caddy]
clients: [{tool: quic_perf, backend: ngtcp2}]
workload: {kind: web, objects: [index.html]}
repetitions: 2
expect:
  - "0.9 < quic.connection_time.median / rtt < 1.15"
"""


def _quicbed(
    args: list[str], tmp_path: Path, timeout: float = 300
) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {
        "QUICBED_UML_BINARY": str(STAND_IN),
        "QUICBED_QEMU_BINARY": str(QEMU_STAND_IN),
        "QUICBED_RESULTS": str(tmp_path / "results"),
    }
    start = time.monotonic()
    proc = quicbed(*args, env=env, timeout=timeout)
    return proc, time.monotonic() - start


def _expected_auto() -> tuple[str, str]:
    if host_has_netem():
        return "netem", "the host kernel has sch_netem"
    # netem passed over, then the delay line's own proof: auto never reaches UML or QEMU.
    return "delayline", "no sch_netem in this kernel; the user-space delay line runs everywhere"


def test_auto_falls_back_and_says_why_once(tmp_path: Path) -> None:
    out = tmp_path / "cal.json"
    proc, _ = _quicbed(
        [
            "calibrate",
            "india",
            "--samples",
            "20",
            "--udp-packets",
            "2000",
            "--seconds",
            "2",
            "--client-image",
            TOPOLOGY_IMAGE,
            "--json",
            str(out),
        ],
        tmp_path,
    )
    name, reason = _expected_auto()
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("link backend:")]
    assert lines == [f"link backend: {name} ({reason})"], lines
    cal = json.loads(out.read_text())
    assert (cal["backend"], cal["backend_reason"], cal["passed"]) == (name, reason, True)
    assert cal["link"]["backend_reason"] == reason


def test_an_explicit_uml_backend_fails_at_once_with_the_reason(tmp_path: Path) -> None:
    """calibrate, run and reproduce alike: exit 4 well within 30 s, one line, nothing left."""
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    for name in ("alpha", "bravo"):
        (experiments / f"{name}.yaml").write_text(EXPERIMENT.replace("uml-panics", name))
    commands = {
        "calibrate": ["calibrate", "india", "--backend", "uml"],
        "run": ["run", str(experiments / "alpha.yaml"), "--backend", "uml", "--no-progress"],
        "reproduce": ["reproduce", "--experiments", str(experiments), "--backend", "uml", "--no-progress"],
    }
    for command, args in commands.items():
        proc, seconds = _quicbed(args, tmp_path, timeout=120)
        text = proc.stdout + proc.stderr
        assert proc.returncode == 4, (command, text[-2000:])
        assert seconds < FAIL_FAST_S, (command, seconds)
        assert text.count("ptrace set fp regs failed, errno = 14") == 1, (command, text)
        assert "Traceback" not in text, (command, text)
    assert "bravo" not in "".join(p.name for p in (tmp_path / "results").glob("*"))
    assert leftovers() == []


def test_a_run_records_the_backend_and_why_and_the_report_shows_it(tmp_path: Path) -> None:
    file = tmp_path / "uml-panics.yaml"
    file.write_text(EXPERIMENT)
    proc, _ = _quicbed(["run", str(file), "--no-progress", "--check"], tmp_path, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    name, reason = _expected_auto()
    assert manifest["executor"]["link_backends_here"]["uml"] == f"cannot run here: {PANIC_REASON}"
    (condition,) = manifest["conditions"].values()
    calibration = condition["calibration"]["calibration"]
    assert (calibration["backend"], calibration["backend_reason"]) == (name, reason)
    assert condition["ran_on"]["link_backend"] == name
    rows = [json.loads(ln) for ln in (run_dir / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["error"] is None for r in rows), rows
    report, _ = _quicbed(["report", str(run_dir), "--out", str(tmp_path / "report")], tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"{name} ({reason})" in text
    assert re.search(r"\| 20\.0 / 1\d\.\d \|", text), text  # goodput beside the rate


def test_doctor_names_the_uml_failure_and_the_backend_auto_uses(tmp_path: Path) -> None:
    proc, _ = _quicbed(["doctor"], tmp_path)
    lines = {ln.split("  ")[0].strip(): ln for ln in proc.stdout.splitlines()}
    assert f"cannot run here: {PANIC_REASON}" in lines["link backend uml"]
    assert QEMU_LINE in lines["link backend vm"]
    assert "auto tries netem, delayline, uml, vm: the delay line before" in lines["link backend order"]
    name, reason = _expected_auto()
    assert f"ok       {name} ({reason})" in lines["link backend auto"], proc.stdout
    assert "link backend delayline" in lines and " ok " in lines["link backend delayline"]


def test_lab_check_grades_where_uml_panics(tmp_path: Path) -> None:
    """A student's right answers (the physics: 80 ms, 3/2/1 round trips) pass on this host."""
    answers = tmp_path / "answers.yaml"
    answers.write_text(
        "rtt_ms: 80 ms\ntls12_rtts: 3\ntls13_rtts: 2\nquic_rtts: 1\n" "quic_connection_ms: 82 ms\n"
    )
    proc, _ = _quicbed(["lab", "check", "round-trips", str(answers)], tmp_path, timeout=600)
    name, reason = _expected_auto()
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "5 of 5 answers pass", proc.stdout
    assert f"link backend: {name} ({reason})" in proc.stderr
