"""Link backends in the test run: a test marked `backend("uml")` runs where that backend has
proven that it runs on this host (topology/backends/proof.py), and is skipped as "cannot run
here: …" with the probe's reason where it has not (an allowed skip, tests/allowed_skips.txt).
The run ends with one line per backend: ran, or cannot run here and why, and what auto picks."""

from __future__ import annotations

import os
from typing import Any

import pytest

_proofs: dict[str, Any] = {}
_ran: dict[str, int] = {}
_seen: list[str] = []  # backend-specific tests set up in this session (any worker)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "backend(name): needs this link backend to run here")


def _proof(name: str) -> Any:
    if name not in _proofs:
        from quicbed.topology.backends import prove

        _proofs[name] = prove(name)
    return _proofs[name]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A backend-specific test runs where its backend has proven itself; else it is skipped
    with the proof's reason. Checked at set-up: only tests selected to run ask for a proof."""
    marker = item.get_closest_marker("backend")
    if marker is None or os.geteuid() != 0:  # the conftest skips path tests as "needs root"
        return
    proof = _proof(marker.args[0])
    if not proof.runs and proof.setup:
        # a missing package, an unfetched kernel, a build that failed: the set-up's fault
        pytest.fail(f"set-up failure, not a host that cannot run it: {marker.args[0]}: {proof.reason}")
    if not proof.runs:
        pytest.skip(f"cannot run here: {marker.args[0]}: {proof.reason}")
    # counted on the controller too, under xdist (user properties travel with the report)
    item.user_properties.append(("link_backend", marker.args[0]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "setup" or "backend" not in report.keywords:
        return
    _seen.append(report.nodeid)
    for key, value in report.user_properties:
        if key == "link_backend":
            _ran[value] = _ran.get(value, 0) + 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _seen:  # no backend-specific test was selected
        return
    from quicbed.errors import QuicbedError
    from quicbed.topology.backends import BACKENDS, choose_backend

    write = terminalreporter.write_line
    write("")
    for name in BACKENDS:
        proof = _proof(name)
        if proof.runs:
            write(f"link backend {name}: runs here ({_ran.get(name, 0)} backend-specific tests " "ran on it)")
        else:
            write(f"link backend {name}: cannot run here: {proof.reason}")
    try:
        choice = choose_backend("auto")
        write(f"link backend auto: {choice.name} ({choice.reason}); every other path test ran " "on it")
    except QuicbedError as exc:
        write(f"link backend auto: none: {exc}")
