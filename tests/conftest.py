"""Shared fixtures. Tests marked `path` bring up the real emulated path (root + Docker)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

# skips_plugin: a skip not on tests/allowed_skips.yaml fails the session; backends_plugin:
# backend-specific tests run where their link backend proved itself (one summary line each).
# tiers_plugin: what each path test judges (timing tests run alone) and its tier (tests/tiers.yaml).
pytest_plugins = ["skips_plugin", "backends_plugin", "tiers_plugin"]


def pytest_configure(config: pytest.Config) -> None:
    """One scope per session (topology/marker.py): what the suite starts carries it, and the
    suite's clean-ups remove only that, never a user's lab or run on the same host. Under
    pytest-xdist each worker has a scope of its own (the session's, then the worker's id),
    so one worker's clean-up never ends the other's path."""
    from quicbed.topology.marker import SCOPE

    base = os.environ.setdefault(SCOPE, f"pytest-{os.getpid()}-{time.time_ns()}")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and not base.endswith(f"-{worker}"):
        os.environ[SCOPE] = f"{base}-{worker}"


def _docker_ready() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needs_env = [i for i in items if i.get_closest_marker("path") or i.get_closest_marker("docker")]
    if not needs_env:
        return
    reason = None
    if os.geteuid() != 0:
        reason = "needs root"
    elif not _docker_ready():
        reason = "needs a running Docker engine (make docker)"
    if reason:
        for item in needs_env:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def calibrations_of_this_session(tmp_path_factory: pytest.TempPathFactory):
    """Runs started by tests prove route and RTT on every bring-up and reuse goodput and loss
    from the session's first calibration of the same path (topology/calibration_reuse.py), by
    either worker: under pytest-xdist, the store is in the directory the workers' own
    temporary directories share. Tests about calibration itself call calibrate() directly or
    unset the variable."""
    from quicbed.topology.calibration_reuse import REUSE_ENV

    base = tmp_path_factory.getbasetemp()
    store = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "calibrations"
    store.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(REUSE_ENV, str(store))
        yield


@pytest.fixture(scope="module")
def clean_slate():
    """Nothing of the session's earlier tests around before the module's tests, nothing left
    after (the session's scope only: a user's lab on this host stays up)."""
    from quicbed.topology.clean import clean

    clean()
    yield
    clean()
