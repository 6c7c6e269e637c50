"""The GitHub Actions workflows shipped as examples (docs/) pass actionlint, the linter GitHub
users run; a broken one does not (so the lint is not a no-op). `make actionlint` builds it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from quicbed.paths import CACHE, REPO, read_versions

WORKFLOWS = sorted([*REPO.glob("docs/ci/*.yml"), REPO / "docs/cluster/github-matrix.yml"])


@pytest.fixture(scope="module")
def actionlint() -> Path:
    binary = CACHE / "bin" / f"actionlint-{read_versions()['ACTIONLINT_VERSION']}"
    if not binary.is_file():
        pytest.skip(f"{binary} not built (make actionlint)")
    return binary


def _lint(actionlint: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(actionlint), "-no-color", *map(str, files)], capture_output=True, text=True, timeout=120
    )


def test_shipped_workflows_pass_actionlint(actionlint: Path) -> None:
    assert REPO / "docs/ci/github-actions.yml" in WORKFLOWS
    proc = _lint(actionlint, *WORKFLOWS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_a_broken_workflow(actionlint: Path, tmp_path: Path) -> None:
    text = (REPO / "docs/ci/github-actions.yml").read_text()
    broken = tmp_path / "broken.yml"
    broken.write_text(
        text.replace("runs-on: ubuntu-24.04", "runs-on: ubuntu-24.04\n" "    needs: no-such-job", 1)
    )
    proc = _lint(actionlint, broken)
    assert proc.returncode == 1 and "no-such-job" in proc.stdout, proc.stdout
