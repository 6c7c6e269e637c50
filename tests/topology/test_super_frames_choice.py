"""Which paths carry GSO super-frames whole (topology/net.py, Testbed.super_frames): pure
logic of the backend and the profile's rates; what crosses is judged on the path in
test_delayline_superframes.py."""

from __future__ import annotations

import pytest

from quicbed.topology.backends import BackendChoice
from quicbed.topology.net import SUPER_FRAMES_FROM_MBIT, HostSpec, Testbed, TestbedConfig
from quicbed.topology.profiles import apply_overrides, load_profile


@pytest.mark.parametrize(
    ("backend", "rate_mbit", "whole"),
    [
        ("delayline", 1000, True),
        ("delayline", SUPER_FRAMES_FROM_MBIT, True),
        ("delayline", 100, False),
        ("uml", 1000, False),
    ],
)
def test_super_frames_only_on_a_backend_that_carries_them_and_a_fast_path(
    backend: str, rate_mbit: float, whole: bool
) -> None:
    """Below SUPER_FRAMES_FROM_MBIT every path stays per packet (htb would pass a 64 KB frame
    at once: 26 ms of a 20 Mbit/s link); on a backend that cannot cut them, never."""
    profile = apply_overrides(load_profile("germany"), {"rate_mbit": f"{rate_mbit:g}"})
    tb = Testbed(
        TestbedConfig(profile=profile, backend=backend, client=HostSpec("quicbed/client:dev"), servers=())
    )
    tb.backend_choice = BackendChoice(backend, "a test's choice")
    assert tb.super_frames is whole
