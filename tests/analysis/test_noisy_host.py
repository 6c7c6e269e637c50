"""The report says when a path was proven on a noisy host (topology/proven.py's host_load in
each condition's calibration), and says nothing when every attempt was calm."""

from __future__ import annotations

from quicbed.analysis.manifest import calibration_entries
from quicbed.analysis.report import noisy_host


def _manifest(host_load: list[dict]) -> dict:
    calibration = {"backend": "delayline", "checks": [], "host_load": host_load}
    return {"run_id": "r1", "conditions": {"c0": {"label": "india", "calibration": calibration}}}


def test_a_path_proven_again_after_a_spell_is_named_with_its_figures() -> None:
    loads = [
        {"attempt": 1, "steal": 0.214, "slow_ratio": 3.4, "contended": True},
        {"attempt": "wait", "calm": True, "steal": 0.01, "contended": False},
        {"attempt": 2, "steal": 0.012, "slow_ratio": 1.1, "contended": False},
    ]
    (line,) = noisy_host(calibration_entries([_manifest(loads)]))
    assert "india (run r1) was proven on a noisy host, then measured again" in line
    assert "attempt 1: steal 21.4 % of busy CPU, probe 3.4x its best (contended)" in line
    assert "attempt 2: steal 1.2 % of busy CPU, probe 1.1x its best (calm)" in line


def test_a_calm_calibration_or_an_old_run_adds_no_warning() -> None:
    calm = [{"attempt": 1, "steal": 0.01, "slow_ratio": 1.0, "contended": False}]
    assert noisy_host(calibration_entries([_manifest(calm)])) == []
    assert noisy_host(calibration_entries([_manifest([])])) == []
    old = {"run_id": "r0", "conditions": {"c0": {"label": "india", "calibration": {"checks": []}}}}
    assert noisy_host(calibration_entries([old])) == []
