"""The plan says before a run which rates this host's cores carry (experiments/plan.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quicbed.experiments.plan import rate_cpu_text
from quicbed.experiments.schema import load_experiment

FAST = Path(__file__).resolve().parents[2] / "experiments" / "neighbours" / "fast.yaml"


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("quicbed.experiments.plan.os.cpu_count", lambda: 2)


@pytest.mark.usefixtures("two_cores")
def test_fast_sweep_fits_two_cores_and_names_the_cpu_bound_browser() -> None:
    text = rate_cpu_text(load_experiment(FAST))
    by_rate = dict(part.split(": ", 1) for part in text.split(": ", 1)[1].split("; "))
    assert set(by_rate) == {"50 Mbit/s", "100 Mbit/s", "200 Mbit/s", "500 Mbit/s", "1000 Mbit/s"}
    assert all("fits 2" in verdict for verdict in by_rate.values()), text
    assert "CPU-bound" not in by_rate["200 Mbit/s"], text
    assert "chromium-quic above ~245" in by_rate["500 Mbit/s"], text
    assert "chromium-tls1.3" not in by_rate["500 Mbit/s"], text
    assert "chromium-tls1.3 above ~560" in by_rate["1000 Mbit/s"], text


@pytest.mark.usefixtures("two_cores")
def test_a_rate_beyond_two_cores_is_said_before_the_run(tmp_path: Path) -> None:
    text = FAST.read_text().replace("rate_mbit: [50, 100, 200, 500, 1000]", "rate_mbit: [2000]")
    path = tmp_path / "faster.yaml"
    path.write_text(text)
    verdict = rate_cpu_text(load_experiment(path))
    assert "2000 Mbit/s" in verdict and "2 cores cannot carry it" in verdict, verdict
