"""Trace-driven links (`trace:` in a link spec): Mahimahi's format read and refused where it is
wrong, the rate a trace offers per window, the shipped traces against their models, and which
backend may replay one. Pure logic; tests/topology/test_trace_path.py replays one for real."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quicbed import limits
from quicbed.errors import InputError
from quicbed.topology import backends
from quicbed.topology.backends import BackendChoice, check_links, choose_backend
from quicbed.topology.backends.delayline import delayline_config
from quicbed.topology.calibrate import trace_error_bounds
from quicbed.topology.linkspec import LinkSpec, parse_linkspec
from quicbed.topology.profiles import load_profile
from quicbed.topology.traces import (
    SHIPPED,
    SHIPPED_DIR,
    load_trace,
    opportunities_at,
    step_model,
    trace_text,
    windowed_error,
)


def _trace(tmp_path: Path, text: str, name: str = "t.trace") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("1\n2\nx3\n", ":3:", "not a whole number of milliseconds"),
        ("5\n3\n", ":2:", "timestamps must not go back (earlier than the line before)"),
        ("0\n0\n", ":", "must last more than 0 ms"),
        ("\n\n", ":", "no delivery opportunities"),
        ("-1\n", ":1:", "not a whole number"),
    ],
)
def test_a_bad_trace_names_its_file_and_line(tmp_path: Path, text: str, where: str, message: str) -> None:
    path = _trace(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_trace(path, "p.yaml", 4, "down.trace")
    assert str(err.value).startswith(f"p.yaml:4: down.trace: {path}{where} ")
    assert message in str(err.value)


def test_a_trace_offers_1500_bytes_per_line_and_repeats_with_its_last_timestamp(tmp_path: Path) -> None:
    # Two opportunities at ms 1, one at ms 150, the period ends at 200: 4 lines in 200 ms.
    trace = load_trace(_trace(tmp_path, "1\n1\n150\n200\n"))
    assert trace.period_ms == 200
    assert trace.mean_rate_mbit() == pytest.approx(4 * 1500 * 8 / 200e3)
    per_packet = 1500 * 8 / 100e3  # one opportunity in a 100 ms window, in Mbit/s
    # The opportunity at 200 is due at 200 ms: in the next period's first window, beside the
    # next repetition's two at 201 ms.
    assert trace.offered_mbit(0, 4) == pytest.approx([2 * per_packet, per_packet, 3 * per_packet, per_packet])
    assert trace.offered_mbit(5, 1) == pytest.approx([per_packet])  # 400 + 150


def test_even_spacing_carries_fractions_over_and_a_step_steps() -> None:
    ops = opportunities_at(step_model([(12, 1), (1.2, 1)]))  # 12 Mbit/s: one opportunity per ms
    assert ops[:3] == [1, 2, 3] and ops.count(1000) == 1
    slow = [t for t in ops if t > 1000]
    assert len(slow) == 100 and slow[-1] == 2000  # 1.2 Mbit/s for 1 s: one every 10 ms


def test_the_shipped_traces_are_what_their_models_give() -> None:
    """traces/ is generated (python -m quicbed.topology.traces): an edited file fails here."""
    for name, model in SHIPPED.items():
        path = SHIPPED_DIR / f"{name}.trace"
        assert path.read_text() == trace_text(opportunities_at(model())), name
    step = load_trace(SHIPPED_DIR / "step-10-2-10.trace")
    rates = step.window_rates_mbit(1000)
    assert rates[:5] == pytest.approx([10] * 5, abs=0.05) and rates[6:10] == pytest.approx([2] * 4, abs=0.05)
    assert rates[11:] == pytest.approx([10] * 4, abs=0.05)
    lte = load_trace(SHIPPED_DIR / "lte-drive.trace")
    assert min(lte.window_rates_mbit()) == 0  # it has outages


def test_windowed_error_is_a_share_of_the_mean_rate() -> None:
    median, p95 = windowed_error([10, 10, 0, 9], [10, 10, 0, 10], mean_mbit=10)
    assert median == 0 and p95 == pytest.approx(0.1)
    # A slow trace's bound is whole packets: one packet is 12 % of 1 Mbit/s per 100 ms.
    assert trace_error_bounds(1.0) == pytest.approx((0.12, 0.24))
    assert trace_error_bounds(24.0) == (0.01, 0.03)


def test_a_link_spec_takes_a_trace_instead_of_a_rate(tmp_path: Path) -> None:
    path = _trace(tmp_path, opportunities_text := trace_text(opportunities_at(step_model([(6, 1)]))))
    assert opportunities_text
    yaml_file = tmp_path / "p.yaml"
    yaml_file.write_text("")
    spec = parse_linkspec({"trace": "t.trace", "delay_ms": 40}, str(yaml_file), "down")
    assert spec.trace == str(path) and spec.rate_mbit == pytest.approx(6.0)
    assert spec.to_dict()["trace_sha256"] == load_trace(path).sha256
    shipped = parse_linkspec({"trace": "traces/step-10-2-10.trace"}, str(yaml_file), "down")
    assert shipped.trace == str(SHIPPED_DIR / "step-10-2-10.trace")  # the repository's, found second
    config = delayline_config(spec, 40, seed=1, generation=2, rtt_ms=80)
    assert f"trace={path}\n" in config and "link_limit_bytes=60000\n" in config  # 40 packets: one BDP


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"trace": "t.trace", "rate_mbit": 5}, "down.trace", "give rate_mbit or trace, not both"),
        ({"trace": "missing.trace"}, "down.trace", "cannot read trace"),
        ({"trace": "t.trace", "aqm": "fq_codel"}, "down.aqm", "drop-tail only"),
        ({"delay_ms": 4}, "down.rate_mbit", "missing (the bottleneck rate in Mbit/s, or a trace)"),
    ],
)
def test_a_bad_trace_key_is_one_line(tmp_path: Path, data: dict, field: str, message: str) -> None:
    _trace(tmp_path, "1\n2\n")
    yaml_file = tmp_path / "p.yaml"
    yaml_file.write_text("")
    with pytest.raises(InputError) as err:
        parse_linkspec(data, str(yaml_file), "down")
    assert f"{field}: " in str(err.value) and message in str(err.value)


def test_a_trace_cannot_be_set_on_the_command_line() -> None:
    with pytest.raises(InputError, match="cannot override 'trace'"):
        load_profile("india", {"trace": "traces/step-10-2-10.trace"})


def test_only_the_delay_line_replays_a_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = tmp_path / "traced.yaml"
    profile.write_text(
        "down: {trace: traces/step-10-2-10.trace, delay_ms: 40}\nup: {rate_mbit: 10, delay_ms: 40}\n"
    )
    traced = load_profile(str(profile))
    assert traced.has_trace
    for name in ("netem", "uml", "vm"):
        with pytest.raises(InputError) as err:
            check_links(traced.down, traced.up, BackendChoice(name, f"--backend {name}; runs"), "profile t: ")
        assert str(err.value).startswith("profile t: down.trace: a trace-driven link needs a backend")
        assert f"{name} has no exact trace replay" in str(err.value)
    check_links(traced.down, traced.up, BackendChoice("delayline", "runs"))

    # auto skips the kernels, netem included: none of them replays a trace.
    def proved(backend: type, prove: object) -> None:
        monkeypatch.setattr(backend, "prove", classmethod(lambda cls, fresh=False: prove()))  # type: ignore[operator]

    proved(backends.DelayLineBackend, lambda: backends.Proof("delayline", True, "runs"))
    proved(backends.NetemBackend, lambda: pytest.fail("a trace needs no netem proof"))
    choice = choose_backend("auto", traced.max_rate_mbit, trace=True)
    assert choice.name == "delayline" and "only delayline replays" in choice.reason
    proved(backends.DelayLineBackend, lambda: backends.Proof("delayline", False, "no cc"))
    with pytest.raises(backends.HostProblem, match="cannot run here: no cc"):
        choose_backend("auto", traced.max_rate_mbit, trace=True)


CANARY = "CANARY-7e2b-root-hash"


def _refused(path: Path) -> str:
    """load_trace's one line for a trace named by p.yaml:4 down.trace; never a hang."""
    with pytest.raises(InputError) as err:
        load_trace(path, "p.yaml", 4, "down.trace", shown="t.trace")
    text = str(err.value)
    assert text.startswith("p.yaml:4: down.trace: t.trace") and "\n" not in text, text
    return text


def test_a_trace_must_be_a_regular_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    assert "not a regular file (a character device)" in _refused(Path("/dev/zero"))
    assert "not a regular file (a FIFO)" in _refused(tmp_path / "fifo")  # and the open did not block
    assert "not a regular file (a directory)" in _refused(tmp_path)


def test_a_trace_is_not_read_through_a_symbolic_link_nor_echoed(tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text(f"root:{CANARY}:19000::::::\n")
    (tmp_path / "link.trace").symlink_to(secret)
    text = _refused(tmp_path / "link.trace")
    assert "a symbolic link" in text and CANARY not in text
    text = _refused(secret)  # named directly: refused at its line, its content not shown
    assert text.endswith("t.trace:1: not a whole number of milliseconds") and CANARY not in text


@pytest.mark.parametrize("line", ["1000000000000", "86400001", "0000000000000000000086400001", "9" * 5000])
def test_a_trace_longer_than_a_day_is_refused(tmp_path: Path, line: str) -> None:
    text = _refused(_trace(tmp_path, f"1\n{line}\n"))
    assert text.endswith("t.trace:2: a timestamp beyond 86400000 ms (24 h): too long a trace")


def test_a_day_long_trace_is_taken(tmp_path: Path) -> None:
    assert load_trace(_trace(tmp_path, "1\n00086400000\n")).period_ms == limits.TRACE_MAX_MS


def test_a_trace_over_the_size_bound_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "TRACE_MAX_BYTES", 1024)
    path = _trace(tmp_path, "1\n" * 600)
    assert _refused(path).endswith("t.trace: cannot use it as a trace: larger than 1 KiB")


def test_a_trace_path_with_a_newline_is_refused_before_any_config_is_written(tmp_path: Path) -> None:
    # The delay line's config is key=value lines: "x\nloss_pct=100" would add a key.
    path = _trace(tmp_path, "1\n2\n").rename(tmp_path / "x\nloss_pct=100")
    with pytest.raises(InputError) as err:
        load_trace(path, "p.yaml", 4, "down.trace", shown="x\nloss_pct=100")
    text = str(err.value)
    assert "\n" not in text and "must not hold control characters" in text, text
    assert text.startswith("p.yaml:4: down.trace: 'x\\nloss_pct=100'"), text


def test_the_delay_line_config_refuses_a_control_character_in_any_value() -> None:
    spec = LinkSpec(rate_mbit=20, delay_ms=40, trace="/tmp/a.trace\nloss_pct=100")
    with pytest.raises(InputError, match="the delay line's trace holds a control character"):
        delayline_config(spec, 40.0, seed=1, generation=1)
