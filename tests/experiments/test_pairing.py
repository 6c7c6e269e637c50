"""Servers that speak only some protocols (servers/pairing.py): an experiment's trials are the
pairs its servers speak, a client variant no server speaks is refused, the dry run counts the
pairs not spoken. aioquic is the shipped HTTP/3-only server (stacks/aioquic/server.yaml)."""

from __future__ import annotations

import pytest

from quicbed.experiments import links
from quicbed.experiments.matrix import conditions, count_per_condition, trials
from quicbed.experiments.plan import dry_run
from quicbed.experiments.schema import ExperimentError, parse_experiment
from quicbed.experiments.shard import cell_seconds, cells_of
from quicbed.servers import get_server
from quicbed.servers.pairing import Spoken, needs, speaks

MIXED = """\
name: mixed
profiles:
  - {name: lab, rtt_ms: 80, rate_mbit: 20}
servers: [aioquic, caddy]
clients:
  - {tool: quic_perf, backend: ngtcp2}
  - {tool: tls_perf, tls: ["1.2", "1.3"], http: ["1.1", "2"]}
workload: {kind: web, objects: [index.html]}
repetitions: 3
"""


@pytest.fixture(autouse=True)
def fixed_profiles(monkeypatch):
    monkeypatch.setattr(links, "available_profiles", lambda: ["germany", "india"])


def test_what_a_variant_needs() -> None:
    assert needs(Spoken("quic-h3", "quic")) == ("TLSv1.3", ("HTTP/3.0",))
    assert needs(Spoken("tls1.2-h2", "tls1.2", {"http": "2"})) == ("TLSv1.2", ("HTTP/2.0",))
    assert needs(Spoken("tls1.3-h1", "tls1.3", {"http": "1.1"})) == ("TLSv1.3", ("HTTP/1.1",))
    # a browser over TCP negotiates h2 or http/1.1 by ALPN
    assert needs(Spoken("chromium-tls1.3", "tls1.3")) == ("TLSv1.3", ("HTTP/1.1", "HTTP/2.0"))


def test_the_descriptors_say_who_speaks_what() -> None:
    aioquic = get_server("aioquic")
    assert (aioquic.tls_versions, aioquic.http_versions) == (["TLSv1.3"], ["HTTP/3.0"])
    assert aioquic.health.protocols == ["h3"]
    quic, tls = Spoken("quic-h3", "quic"), Spoken("tls1.3-h2", "tls1.3", {"http": "2"})
    assert speaks("aioquic", quic) and not speaks("aioquic", tls)
    assert speaks("caddy", quic) and speaks("caddy", tls)
    assert not speaks("aioquic", Spoken("chromium-tls1.3", "tls1.3"))


def test_trials_only_for_spoken_pairs() -> None:
    exp = parse_experiment(MIXED)
    cond = conditions(exp)[0]
    made = trials(exp, cond)
    pairs = {(t.server, t.client.label) for t in made}
    assert pairs == {("aioquic", "quic-h3-ngtcp2")} | {
        ("caddy", label) for label in ("quic-h3-ngtcp2", "tls1.2-h1", "tls1.2-h2", "tls1.3-h1", "tls1.3-h2")
    }
    assert len(made) == count_per_condition(exp) == 6 * 3
    # the per-path plan (shards, units) costs only the spoken pairs
    (aioquic_cell,) = [c for c in cells_of(exp, cond) if c[0] == "aioquic"]
    (caddy_cell,) = [c for c in cells_of(exp, cond) if c[0] == "caddy"]
    assert 0 < cell_seconds(exp, cond, aioquic_cell) < cell_seconds(exp, cond, caddy_cell) / 3


def test_dry_run_counts_the_pairs_not_spoken() -> None:
    text = dry_run(parse_experiment(MIXED))
    assert "6 server x client pairs (2 servers x 5 clients, 4 not spoken)" in text
    assert "= 18 trials" in text
    assert "aioquic x tls1.2-h1 (TLSv1.2 with HTTP/1.1)" in text
    assert "caddy x" not in text.split("pairs not spoken")[1].splitlines()[0]
    every = dry_run(parse_experiment(MIXED.replace("[aioquic, caddy]", "[caddy]")))
    assert "pairs not spoken (no trials): none" in every


def test_a_variant_no_server_speaks_is_refused_with_its_line() -> None:
    text = MIXED.replace("[aioquic, caddy]", "[aioquic]")
    with pytest.raises(ExperimentError) as err:
        parse_experiment(text, "mixed.yaml")
    assert str(err.value) == (
        "mixed.yaml:7: clients[1]: client variant 'tls1.2-h1' needs TLSv1.2 with HTTP/1.1, which "
        "no server of this experiment speaks (aioquic speaks TLSv1.3 with HTTP/3.0)"
    )


def test_the_quick_slice_is_checked_too() -> None:
    # The full experiment is fine; its quick slice keeps only aioquic, which cannot serve TLS.
    text = MIXED + "quick:\n  servers: [aioquic]\n"
    with pytest.raises(ExperimentError, match=r"clients\[1\]: client variant 'tls1.2-h1' needs"):
        parse_experiment(text, "mixed.yaml")


def test_a_cross_flow_over_tcp_needs_servers_that_speak_it() -> None:
    # A web cross flow over TCP fetches from each trial's server with curl --http2; bulk TCP is
    # iperf3's and needs no server; a QUIC flow is fine with aioquic.
    quic_only = MIXED.replace("[aioquic, caddy]", "[aioquic]").replace(
        '  - {tool: tls_perf, tls: ["1.2", "1.3"], http: ["1.1", "2"]}\n', ""
    )
    ok = quic_only + (
        "cross:\n"
        "  - {kind: bulk, protocol: tcp, duration_s: 5}\n"
        "  - {kind: web, protocol: quic, duration_s: 5, rate_per_s: 1}\n"
    )
    assert len(parse_experiment(ok).cross) == 2
    bad = quic_only + "cross:\n  - {kind: web, protocol: tcp, duration_s: 5, rate_per_s: 1}\n"
    with pytest.raises(ExperimentError) as err:
        parse_experiment(bad, "x.yaml")
    assert str(err.value) == (
        "x.yaml:10: cross[0].protocol: a web tcp cross flow fetches from each trial's server with "
        "TLSv1.3 with HTTP/1.1 or HTTP/2.0; aioquic speaks TLSv1.3 with HTTP/3.0"
    )
