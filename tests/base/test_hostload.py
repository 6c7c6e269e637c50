"""The host's CPU wait over a trial (quicbed/hostload.py): PSI's "some" total, as a share."""

from pathlib import Path

import pytest

from quicbed import hostload


def test_a_wait_share_is_the_stall_over_the_wall_time_clamped_to_a_share() -> None:
    assert hostload.wait_share(1_000_000, 1_250_000, 1.0) == pytest.approx(0.25)
    assert hostload.wait_share(0, 5_000_000, 1.0) == 1.0  # counters of several CPUs
    assert hostload.wait_share(10, 5, 1.0) == 0.0
    assert hostload.wait_share(None, 5, 1.0) is None
    assert hostload.wait_share(0, 5, 0.0) is None


def test_the_stall_total_is_read_from_the_some_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    psi = tmp_path / "cpu"
    psi.write_text(
        "some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    monkeypatch.setattr(hostload, "PSI_CPU", psi)
    assert hostload.cpu_wait_us() == 123456
    psi.write_text("garbage\n")
    assert hostload.cpu_wait_us() is None
    monkeypatch.setattr(hostload, "PSI_CPU", tmp_path / "absent")
    assert hostload.cpu_wait_us() is None
