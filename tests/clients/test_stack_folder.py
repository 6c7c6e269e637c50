"""A stack is one folder (stacks/README.md): tests/fixtures/stacks/standin/, a client.yaml and
a server.yaml of one name reusing the quiche image under its own tag (nothing compiles), named
in QUICBED_CLIENT_DIRS and QUICBED_SERVER_DIRS, is listed by both registries' CLIs, checked by
doctor and taken by experiment validation as client and server, with no other file touched.
Without the variables none of them knows it: what the folder alone adds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_process import quicbed

from quicbed import doctor
from quicbed.clients import tools
from quicbed.paths import REPO, read_versions
from quicbed.servers import descriptors

STANDIN = REPO / "tests" / "fixtures" / "stacks" / "standin"
IMAGE = f"quicbed/quiche:{read_versions()['QUICHE_VERSION']}"
EXPERIMENT = """name: standin
profiles: [india]
servers: [standin]
clients: [{tool: standin, resume: ["no", "yes"]}]
workload: {kind: web, objects: [index.html]}
"""


def _env(with_standin: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (tools.ENV_DIRS, descriptors.ENV_DIRS)}
    if with_standin:
        env |= {tools.ENV_DIRS: str(STANDIN), descriptors.ENV_DIRS: str(STANDIN)}
    return env


def _listed(kind: str, with_standin: bool) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", f"quicbed.{kind}", "list"],
        env=_env(with_standin),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize("kind", ["clients", "servers"])
def test_both_registries_list_the_stack_folder(kind: str) -> None:
    """`python -m quicbed.clients list` and `... servers list` (what images/build.sh reads):
    the stand-in's image, no Dockerfile (prebuilt: build.sh only checks it exists)."""
    line = f"standin\t{IMAGE}\t-\t-"
    assert line in _listed(kind, True)
    assert not [entry for entry in _listed(kind, False) if entry.startswith("standin\t")]


def test_doctor_requires_the_stand_ins_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shipped, the quiche image is built on demand (doctor notes it); the stand-in names it as
    a prebuilt image, so with the stand-in doctor requires it to be present."""
    monkeypatch.delenv(tools.ENV_DIRS, raising=False)
    monkeypatch.delenv(descriptors.ENV_DIRS, raising=False)
    assert doctor.described_images()[IMAGE] is True
    monkeypatch.setenv(tools.ENV_DIRS, str(STANDIN))
    monkeypatch.setenv(descriptors.ENV_DIRS, str(STANDIN))
    assert doctor.described_images()[IMAGE] is False


def test_an_experiment_takes_the_stand_in_as_client_and_server(tmp_path: Path) -> None:
    """`quicbed run FILE --dry-run`: validation takes the stand-in on both sides (its two
    variants, an HTTP/3-only server that speaks them); without the folder it is refused."""
    exp = tmp_path / "standin.yaml"
    exp.write_text(EXPERIMENT)
    planned = quicbed("run", str(exp), "--dry-run", env=_env(True), timeout=120)
    assert planned.returncode == 0, planned.stderr
    lines = planned.stdout.splitlines()
    assert "servers: standin" in lines and "clients: standin, standin-resume" in lines, lines
    assert "pairs not spoken (no trials): none (every server speaks every client variant)" in lines
    refused = subprocess.run(
        [sys.executable, "-m", "quicbed.cli", "run", str(exp), "--dry-run"],
        env=_env(False),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2
    assert f"{exp}:4: clients[0].tool: unknown client tool 'standin'" in refused.stdout + refused.stderr
