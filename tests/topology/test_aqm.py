"""The bottleneck queue as a link-spec key (`aqm`): parsing, the tc commands, which backend
runs it, and the calibration's reading of it. Pure logic; the guest proves it on a kernel
(tests/topology/test_netem_guest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from quicbed.errors import InputError
from quicbed.experiments.matrix import conditions
from quicbed.experiments.schema import ExperimentError, load_experiment
from quicbed.topology import backends, net
from quicbed.topology.backends import BackendChoice, Proof, check_queues
from quicbed.topology.calibrate import expected_loaded_rtt, leaf_qdisc, sender_rtts_ms
from quicbed.topology.linkspec import AQM_KINDS, Aqm, LinkSpec, queue_commands, rate_commands
from quicbed.topology.profiles import load_profile, parse_overrides

INDIA = LinkSpec(rate_mbit=20, delay_ms=40)


def _profile(tmp_path: Path, down: str, up: str = "{rate_mbit: 20, delay_ms: 40}") -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(f"down: {down}\nup: {up}\n")
    return path


def test_droptail_is_the_same_pfifo_as_before() -> None:
    """The default queue's commands, byte for byte as before `aqm` existed."""
    for spec in (INDIA, LinkSpec(rate_mbit=20, delay_ms=40, aqm=Aqm("droptail"))):
        assert rate_commands("eth1", spec, 80)[-1] == [
            *("tc", "qdisc", "add", "dev", "eth1", "parent", "1:1", "handle", "10:"),
            *("pfifo", "limit", "133"),
        ]
    assert len(rate_commands("eth1", INDIA, 80)) == 4


@pytest.mark.parametrize(
    ("aqm", "leaf"),
    [
        (Aqm("fq_codel"), "fq_codel limit 133"),
        (
            Aqm("fq_codel", target_ms=2.5, interval_ms=50, limit_packets=1000, ecn=False),
            "fq_codel limit 1000 target 2.5ms interval 50ms noecn",
        ),
        (Aqm("codel", ecn=True), "codel limit 133 ecn"),
        (Aqm("cake"), "cake unlimited"),  # htb shapes; cake's shaper stays off
        (Aqm("cake", interval_ms=40, ecn=True), "cake unlimited rtt 40ms"),
        (Aqm("pie", target_ms=20), "pie limit 133 target 20ms"),
        (Aqm("fq", limit_packets=500), "fq limit 500"),
    ],
)
def test_each_queue_is_one_leaf_under_the_parent_it_is_given(aqm: Aqm, leaf: str) -> None:
    spec = LinkSpec(rate_mbit=20, delay_ms=40, aqm=aqm)
    (command,) = queue_commands("vec1", "7:3", spec, 80)
    assert command[:9] == ["tc", "qdisc", "add", "dev", "vec1", "parent", "7:3", "handle", "10:"]
    assert " ".join(command[9:]) == leaf
    assert rate_commands("vec1", spec, 80)[-1][9:] == command[9:]  # rate_commands' leaf is it


def test_the_queue_size_keys_size_an_aqm_too_unless_it_has_its_limit() -> None:
    spec = LinkSpec(rate_mbit=20, delay_ms=40, queue_packets=50, aqm=Aqm("pie"))
    assert spec.queue_limit_packets(80) == 50
    assert (
        LinkSpec(rate_mbit=20, queue_packets=50, aqm=Aqm("pie", limit_packets=9)).queue_limit_packets(80) == 9
    )


def test_profile_yaml_takes_a_kind_or_a_mapping(tmp_path: Path) -> None:
    path = _profile(tmp_path, "{rate_mbit: 20, delay_ms: 40, aqm: cake}")
    assert load_profile(str(path)).down.aqm == Aqm("cake")
    path = _profile(
        tmp_path,
        "{rate_mbit: 20, aqm: {kind: fq_codel, target_ms: 5, interval_ms: 100, "
        "limit_packets: 1000, ecn: false}}",
    )
    profile = load_profile(str(path))
    assert profile.down.aqm == Aqm("fq_codel", 5.0, 100.0, 1000, False) and profile.up.aqm == Aqm()
    assert profile.to_dict()["down"]["aqm"] == {
        "kind": "fq_codel",
        "target_ms": 5.0,
        "interval_ms": 100.0,
        "limit_packets": 1000,
        "ecn": False,
    }
    assert "aqm" not in profile.to_dict()["up"]  # drop-tail records read as before


@pytest.mark.parametrize(
    ("down", "expected"),
    [
        (
            "{rate_mbit: 20, aqm: red}",
            ":1: down.aqm: must be one of droptail, fq_codel, codel, cake, pie, fq, got 'red'",
        ),
        ("{rate_mbit: 20, aqm: {target_ms: 5}}", ":1: down.aqm.kind: kind must be one of"),
        ("{rate_mbit: 20, aqm: [fq]}", ":1: down.aqm: must be a queue kind"),
        (
            "{rate_mbit: 20, aqm: {kind: fq, ecn: true}}",
            ":1: down.aqm.ecn: fq has no ecn (it takes: limit_packets)",
        ),
        ("{rate_mbit: 20, aqm: {kind: cake, target_ms: 5}}", ":1: down.aqm.target_ms: cake has no target_ms"),
        ("{rate_mbit: 20, aqm: {kind: cake, ecn: false}}", ":1: down.aqm.ecn: cake always marks ECN-capable"),
        (
            "{rate_mbit: 20, aqm: {kind: droptail, limit_packets: 5}}",
            "down.aqm.limit_packets: droptail has no",
        ),
        (
            "{rate_mbit: 20, aqm: {kind: codel, target_ms: 0}}",
            ":1: down.aqm.target_ms: must be a finite number > 0",
        ),
        (
            "{rate_mbit: 20, aqm: {kind: codel, target_ms: .nan}}",
            "down.aqm.target_ms: must be a finite number",
        ),
        (
            "{rate_mbit: 20, aqm: {kind: pie, limit_packets: 0}}",
            "down.aqm.limit_packets: must be >= 1 packet",
        ),
        (
            "{rate_mbit: 20, aqm: {kind: pie, limit_packets: 1.5}}",
            "down.aqm.limit_packets: must be a whole number",
        ),
        ("{rate_mbit: 20, aqm: {kind: pie, ecn: 'yes'}}", "down.aqm.ecn: must be true or false, got 'yes'"),
        ("{rate_mbit: 20, aqm: {kind: pie, tupdate_ms: 5}}", "down.aqm.tupdate_ms: pie has no tupdate_ms"),
    ],
)
def test_a_bad_aqm_is_one_line_naming_file_line_and_field(tmp_path: Path, down: str, expected: str) -> None:
    path = _profile(tmp_path, down)
    with pytest.raises(InputError) as err:
        load_profile(str(path))
    assert str(err.value).startswith(str(path)) and expected in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_set_aqm_takes_a_kind_in_either_direction() -> None:
    both = load_profile("india", parse_overrides(["aqm=fq_codel"]))
    assert both.down.aqm == both.up.aqm == Aqm("fq_codel")
    up = load_profile("india", parse_overrides(["up.aqm=pie"]))
    assert up.down.aqm == Aqm() and up.up.aqm == Aqm("pie")
    with pytest.raises(InputError, match=r"^--set up.aqm: must be one of droptail, .* got 'codle'$"):
        load_profile("india", parse_overrides(["up.aqm=codle"]))


SWEEP = """\
name: aqm-sweep
profiles: [india]
sweep:
  aqm: [droptail, fq_codel, {kind: codel, target_ms: 3}]
servers: [caddy]
clients: [quic_perf]
workload: {kind: web, objects: [index.html]}
"""


def test_aqm_is_a_sweep_axis(tmp_path: Path) -> None:
    file = tmp_path / "e.yaml"
    file.write_text(SWEEP)
    conds = conditions(load_experiment(file))
    assert [c.link.up.aqm for c in conds] == [Aqm(), Aqm("fq_codel"), Aqm("codel", target_ms=3.0)]
    assert conds[1].label == "india aqm=fq_codel"
    file.write_text(SWEEP.replace("droptail,", "red,"))
    with pytest.raises(ExperimentError, match=r"e.yaml:4: sweep.aqm\[0\]: must be one of droptail"):
        load_experiment(file)


# -- which backend runs it -------------------------------------------------------------------
@pytest.fixture
def no_aqm_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host's kernel, as here: no sch_fq_codel, sch_cake, ... (never probed in a unit test)."""
    monkeypatch.setattr("quicbed.topology.backends.base.host_has_qdisc", lambda kind, *a: False)


@pytest.mark.usefixtures("no_aqm_here")
def test_droptail_runs_everywhere_and_the_host_kernel_backends_need_the_qdisc() -> None:
    for name, backend in backends.BACKENDS.items():
        assert backend.runs_queue(Aqm())
        if name == "vm":  # Debian's kernel in the QEMU router has them all
            assert backend.queue_kinds == frozenset(AQM_KINDS) and backend.runs_queue(Aqm("cake"))
        else:
            assert backend.queue_kinds is None and not backend.runs_queue(Aqm("fq_codel"))


@pytest.mark.usefixtures("no_aqm_here")
def _prove_as(monkeypatch: pytest.MonkeyPatch, proof: Callable[[str], Proof]) -> None:
    for backend in backends.BACKENDS.values():
        monkeypatch.setattr(backend, "prove", classmethod(lambda cls, fresh=False: proof(cls.name)))


def test_an_aqm_the_chosen_backend_cannot_run_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _prove_as(monkeypatch, lambda name: backends.Proof(name, name == "delayline", "cannot"))
    india = load_profile("india", {"aqm": "fq_codel"})
    auto = BackendChoice("delayline", "no sch_netem in this kernel")
    with pytest.raises(InputError) as err:
        check_queues(india.down, india.up, auto, "profile india: ")
    assert str(err.value) == (
        "profile india: aqm: fq_codel needs a backend whose kernel has sch_fq_codel; auto chose "
        "delayline here, and this host's kernel has none (netem, delayline, uml queue in it); "
        "backends that run it: vm (not on this host: cannot)"
    )
    # One direction only names it; a backend with its own kernel is offered where it runs.
    _prove_as(monkeypatch, lambda name: backends.Proof(name, name != "netem", "no sch_netem"))
    up = load_profile("india", {"up.aqm": "cake"})
    with pytest.raises(InputError) as err:
        check_queues(up.down, up.up, BackendChoice("netem", "--backend netem; yes"), "")
    assert str(err.value) == (
        "up.aqm: cake needs a backend whose kernel has sch_cake; --backend netem, and this host's "
        "kernel has none (netem, delayline, uml queue in it); backends that run it: vm; run with --backend vm"
    )
    check_queues(up.down, up.up, BackendChoice("vm", "--backend vm; boots"), "")  # runs there


@pytest.mark.usefixtures("no_aqm_here")
def test_a_testbed_refuses_the_queue_before_anything_comes_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(net, "require", lambda *_: None)
    monkeypatch.setattr(net, "choose_backend", lambda *_: BackendChoice("uml", "no sch_netem"))
    monkeypatch.setattr(net, "Mininet", lambda **_: pytest.fail("brought up"))
    namespace = net.HostSpec(image=None)
    cfg = net.TestbedConfig(load_profile("india", {"aqm": "pie"}), client=namespace, servers=(namespace,))
    with pytest.raises(
        InputError, match=r"^profile india: aqm: pie needs a backend whose kernel has sch_pie; auto"
    ):
        net.Testbed(cfg).start()


# -- calibration -----------------------------------------------------------------------------
TC_S = """\
qdisc htb 1: root refcnt 2 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000
 Sent 9512345 bytes 6512 pkt (dropped 0, overlimits 4312 requeues 0)
 backlog 0b 0p requeues 0
qdisc fq_codel 10: parent 1:1 limit 133p flows 1024 quantum 1514 target 5ms interval 100ms ecn
 Sent 9512345 bytes 6512 pkt (dropped 27, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
  maxpacket 1514 drop_overlimit 0 new_flow_count 3 ecn_mark 0
  new_flows_len 0 old_flows_len 0
"""


def test_the_leaf_qdisc_and_its_drops_are_read_from_tc() -> None:
    leaf = leaf_qdisc(TC_S)
    assert leaf and leaf.kind == "fq_codel" and leaf.dropped == 27
    assert leaf.line.startswith("qdisc fq_codel 10: parent 1:1 limit 133p")
    assert leaf_qdisc(TC_S.split("qdisc fq_codel")[0]) is None
    assert (
        leaf_qdisc("qdisc pfifo 10: parent 1:1 limit 133p\n Sent 1 bytes 1 pkt (dropped 3, o 0)\n").kind
        == "pfifo"
    )


def test_the_loaded_rtt_is_the_base_plus_what_the_queue_holds() -> None:
    """india: 80 ms, 20 Mbit/s: a frame is 0.61 ms; one BDP of drop-tail is 133 frames, 80.8 ms."""
    droptail = expected_loaded_rtt(INDIA, INDIA)
    assert droptail.base_ms == pytest.approx(80 + 0.6056 + 0.0264, abs=1e-3)
    assert droptail.expected_ms == pytest.approx(droptail.base_ms + 133 * 0.6056, abs=1e-3)
    assert droptail.low_ms < droptail.expected_ms < droptail.high_ms
    fq_codel = expected_loaded_rtt(INDIA, LinkSpec(rate_mbit=20, delay_ms=40, aqm=Aqm("fq_codel")))
    assert fq_codel.expected_ms == pytest.approx(fq_codel.base_ms + 5)
    assert fq_codel.high_ms == pytest.approx(fq_codel.base_ms + 5 + 2)  # 2 ms > one frame's 0.6
    assert fq_codel.high_ms < droptail.base_ms + 0.25 * 133 * 0.6056  # far below a full queue
    cake = expected_loaded_rtt(INDIA, LinkSpec(rate_mbit=20, delay_ms=40, aqm=Aqm("cake", interval_ms=200)))
    assert cake.expected_ms == pytest.approx(cake.base_ms + 10)  # 5 % of cake's rtt
    fq = expected_loaded_rtt(INDIA, LinkSpec(rate_mbit=20, delay_ms=40, aqm=Aqm("fq")))
    assert fq.expected_ms == pytest.approx(fq.base_ms + 100 * 0.6056, abs=1e-3)  # its flow_limit
    fq4 = expected_loaded_rtt(INDIA, LinkSpec(rate_mbit=20, delay_ms=40, aqm=Aqm("fq")), flows=4)
    assert fq4.expected_ms == droptail.expected_ms  # 4 flows fill all 133 packets, in turn


def test_the_flow_rtt_is_the_senders_per_measured_second() -> None:
    result = {
        "intervals": [
            {"sum": {"omitted": True}, "streams": [{"rtt": 81000}]},
            {"sum": {"omitted": False}, "streams": [{"rtt": 85500}]},
            {"sum": {}, "streams": [{"rtt": 86000}]},
        ]
    }
    assert sender_rtts_ms(result) == [85.5, 86.0]
