"""A link backend is one class (issue 47): a stand-in Backend subclass, defined here and in no
other file, is picked up by the CLI's --backend, auto's order, doctor, `quicbed clean` and the
queue refusal, with nothing else told of it."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from quicbed import cli
from quicbed.errors import InputError
from quicbed.topology import backends
from quicbed.topology import clean as cleaning
from quicbed.topology.backends import base
from quicbed.topology.backends.proof import Proof
from quicbed.topology.linkspec import Aqm, LinkSpec

STANDIN_MARK = "quicbed-standin-"


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[base.Backend]]:
    """A backend that runs here, tried after netem and before the delay line, queueing
    drop-tail only; the others are proven by stand-ins too (no boot), netem as absent and the
    delay line as unable to run, so that UML comes next."""

    class StandInBackend(base.TcBackend):
        name = "standin"
        auto_rank = 5
        marks = (STANDIN_MARK,)
        queue_kinds = frozenset({"droptail"})

        @classmethod
        def prove(cls, fresh: bool = False) -> Proof:
            return Proof("standin", True, "the stand-in answers")

        @classmethod
        def ceiling_mbit(cls, proof: Proof) -> float:
            return 50.0

        def forward(self, client_lan: base.Lan, server_lan: base.Lan) -> None:
            raise NotImplementedError

        def tc(self, commands: object) -> str:
            raise NotImplementedError

    for backend, runs in (
        (backends.NetemBackend, False),
        (backends.UmlBackend, True),
        (backends.VmBackend, False),
        (backends.DelayLineBackend, False),
    ):
        proof = Proof(backend.name, runs, f"{backend.name} stand-in proof")
        monkeypatch.setattr(backend, "prove", classmethod(lambda cls, fresh=False, p=proof: p))
    try:
        yield StandInBackend
    finally:
        del base.REGISTRY["standin"]


def test_it_registers_by_being_defined(standin: type[base.Backend]) -> None:
    assert backends.BACKENDS["standin"] is standin
    assert [b.name for b in backends.in_auto_order()] == ["netem", "standin", "delayline", "uml", "vm"]


def test_the_cli_takes_its_name_and_refuses_an_unknown_one(standin: type[base.Backend]) -> None:
    cli._validate_backend(argparse.Namespace(backend="standin"))
    with pytest.raises(InputError) as err:
        cli._validate_backend(argparse.Namespace(backend="bogus"))
    assert str(err.value) == (
        "--backend: unknown link backend 'bogus' (choose from auto, netem, standin, delayline, uml, vm)"
    )
    assert cli.main(["calibrate", "india", "--backend", "bogus"]) == 2


def test_auto_tries_it_in_its_rank_and_respects_its_ceiling(standin: type[base.Backend]) -> None:
    choice = backends.choose_backend("auto", 20)
    assert choice == backends.BackendChoice("standin", "no sch_netem in this kernel; the stand-in answers")
    above = backends.choose_backend("auto", 80)
    assert above.name == "uml"
    assert "80 Mbit/s is above what the standin router forwards (50)" in above.reason
    assert backends.choose_backend("standin").reason == "--backend standin; the stand-in answers"


def test_doctor_lists_it(standin: type[base.Backend], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        backends.DelayLineBackend,
        "prove",
        classmethod(lambda cls, fresh=False: Proof("delayline", True, "d")),
    )
    checks = {c.item: c for c in backends.backend_checks()}
    assert (
        checks["link backend standin"].ok and "the stand-in answers" in checks["link backend standin"].detail
    )
    assert checks["link backend auto"].detail.startswith("standin (")
    order = checks["link backend order"].detail
    assert order.startswith("auto tries netem, standin, delayline, uml, vm: the delay line before")


def test_clean_finds_what_it_leaves_running(standin: type[base.Backend]) -> None:
    assert cleaning._is_testbed_process(f"/usr/bin/thing --id {STANDIN_MARK}ab12")
    assert not cleaning._is_testbed_process("/usr/bin/thing --id other")


def test_a_queue_it_lacks_is_refused_naming_it(standin: type[base.Backend]) -> None:
    codel = LinkSpec(rate_mbit=10, delay_ms=10, aqm=Aqm("fq_codel"))
    with pytest.raises(InputError) as err:
        backends.check_queues(codel, codel, backends.BackendChoice("standin", "--backend standin"))
    assert "--backend standin, and standin's kernel has none" in str(err.value)


def test_a_run_chooses_once_per_kind_of_link(monkeypatch: pytest.MonkeyPatch) -> None:
    """Conditions alike in rate, trace and queues share one choice, made before the first
    condition and passed down (the testbed does not choose again)."""
    from quicbed.experiments import executor
    from quicbed.experiments.schema import parse_experiment

    exp = parse_experiment(
        "name: once\nprofiles: [india, germany]\nservers: [caddy]\nclients: [quic_perf]\n"
        "workload: {kind: cloud, files: [1MB]}\nsweep: {loss_pct: [0, 1, 2]}\nrepetitions: 1\n"
    )
    asked: list[float] = []

    def choose(requested: str, rate: float = 0.0, trace: bool = False, queues: object = ()) -> object:
        asked.append(rate)
        return backends.BackendChoice("delayline", f"stand-in at {rate:g}")

    monkeypatch.setattr(executor, "choose_backend", choose)
    choices = executor.choose_per_condition(exp, "auto")
    assert len(choices) == 6 and sorted(asked) == [20.0, 100.0]
    assert {c.reason for c in choices.values()} == {"stand-in at 20", "stand-in at 100"}
