"""A recorded page replayed on the emulated india path (80 ms): the shipped median desktop
page (workloads/pages/median-desktop.har: 71 requests from 20 origins), laid out by
workloads/replay.py and served by the replay server (stacks/quicgo, `serves: replay`), each
origin at its own address on the server LAN with its own certificate from the run's CA.

Chromium and Firefox load it over HTTP/3 and over HTTP/2 (TLS 1.3). Every resource is proven
over the protocol asked for and from one of the page's origins (the row's own proof), every
request the server saw was for the origin that recorded it (its access log names the host and
the HAR entry that answered), and each origin's connections are counted in the row.
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from contention import path_proof

from quicbed.clients.tools import TOOLS, page_argv
from quicbed.paths import REPO
from quicbed.servers.accesslog import access_log_since
from quicbed.servers.descriptors import get_server
from quicbed.servers.testbed import ReplaySite, served_testbed
from quicbed.topology.calibrate import check_rtt
from quicbed.topology.profiles import load_profile
from quicbed.workloads.har import Page, load_har
from quicbed.workloads.replay import ReplayPlan, plan_replay, write_site

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

PAGE = REPO / "workloads" / "pages" / "median-desktop.har"
RECORDED = REPO / "tests" / "fixtures" / "har" / "chromium-playwright.har"  # Playwright's writer
SERVER = "quicgo"  # stacks/quicgo/server.yaml: quicgo_replay
HOP = {"quic": "h3", "tls1.3": "h2"}
PROTO = {"quic": "HTTP/3.0", "tls1.3": "HTTP/2.0"}


@dataclass
class Replayed:
    tb: Any
    page: Page
    plan: ReplayPlan
    logs: Path

    def argv(self, tool: str, protocol: str) -> list[str]:
        """The tool's contract for the landing document, with a --resolve for every origin."""
        url = f"{self.page.landing.origin}{self.page.landing.path}"
        return page_argv(tool, url, self.plan.resolves(), options={"protocol": protocol}, timeout_s=60)


@contextlib.contextmanager
def _served(tmp: Path, har: Path) -> Iterator[Replayed]:
    """The page of `har` laid out and served on india, its RTT proven."""
    page = load_har(har)
    plan = plan_replay(page)
    write_site(plan, page, tmp / "site")
    with served_testbed(
        load_profile("india"),
        [SERVER],
        log_root=tmp / "logs",
        pki_dir=tmp / "pki",
        content_dir=tmp / "site",
        client_image=TOOLS["chromium"].image,  # the browser image, Chromium's and Firefox's
        start=True,
        replay=ReplaySite(tmp / "site", plan.hosts()),
    ) as (tb, _):

        def proven(rtt: Any) -> None:
            assert rtt.passed, rtt

        path_proof("india's RTT", lambda: check_rtt(tb, 20), proven)
        yield Replayed(tb, page, plan, tmp / "logs" / SERVER)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory, clean_slate):
    with _served(tmp_path_factory.mktemp("replay"), PAGE) as served:
        yield served


def _load(replayed: Replayed, tool: str, protocol: str) -> tuple[dict, list[dict]]:
    """One load's row and the access-log entries the server wrote for it."""
    spec = get_server(SERVER)
    _, offset = access_log_since(replayed.logs, 0, spec)
    proc = replayed.tb.client.exec(replayed.argv(tool, protocol), timeout=150)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(rows) == 1, (proc.returncode, proc.stderr[-1500:], rows)
    logged, _ = access_log_since(replayed.logs, offset, spec)
    return rows[0], logged


@pytest.mark.parametrize("protocol", ["quic", "tls1.3"])
@pytest.mark.parametrize("tool", ["chromium", "firefox"])
def test_a_replayed_page_loads_from_every_origin(replayed: Replayed, tool: str, protocol: str) -> None:
    row, logged = _load(replayed, tool, protocol)
    assert row["error"] == "", row["error"]
    fetched = 1 + row["resources"]  # the document and its subresources
    assert row["resource_protocols"] == {HOP[protocol]: fetched}, row["resource_protocols"]
    names = set(replayed.plan.names)
    assert row["origins"] == len(names) == 20, row
    # Each request the server saw: the protocol asked for, answered by the entry recorded at
    # that origin and target, for every response of the page.
    responses = {r.entry: r for r in replayed.plan.responses}
    sites = replayed.plan.sites
    assert {e["proto"] for e in logged} == {PROTO[protocol]}, collections.Counter(e["proto"] for e in logged)
    answered = [e for e in logged if e["entry"] in responses]
    assert len(answered) == len(logged) == fetched, [e for e in logged if e["entry"] not in responses]
    for e in answered:
        response = responses[e["entry"]]
        assert (e["host"], e["status"]) == (sites[response.site].name, response.status), e
    assert {e["host"] for e in answered} == names
    # The setups on the critical path (clients/browser/critical_path.py): the document's, then
    # its origins' (all named by the document): two at least, whatever the browser's sockets say.
    chain, critical = row["critical_chain"], row["critical_connections"]
    print(f"{tool} {protocol}: {critical} on the critical path of {row['connections']}: {chain}")
    assert chain[0] == replayed.page.origins[0].host and len(chain) == critical >= 2, row
    # Connections: no two origins share an address or a certificate, so no connection serves
    # two origins (the server's serials); each origin's are counted in the row. A browser may
    # open two to one origin: CORS-anonymous requests (the page's fonts and fetch preloads) do
    # not share a connection with credentialed ones.
    by_origin = collections.defaultdict(set)
    for e in answered:
        by_origin[e["host"]].add(e["connection"])
    serials = [c for conns in by_origin.values() for c in conns]
    assert None not in serials and len(serials) == len(set(serials)), by_origin
    counted = row["origin_connections"]
    if (tool, protocol) == ("firefox", "quic"):  # its QUIC sockets name no address: unknown
        assert counted == {} and row["connections"] >= len(names), row
        return
    assert set(counted) == names and all(n >= 1 for n in counted.values()), counted
    if tool == "chromium":  # DevTools' connection ids: the server's count, origin by origin
        assert counted == {host: len(conns) for host, conns in by_origin.items()}, (counted, by_origin)


def test_no_packet_of_a_replayed_page_leaves_the_testbed(replayed: Replayed) -> None:
    """A capture on every interface of the client but loopback over a Chromium QUIC load and a
    Firefox TLS 1.3 load of the page: every packet is between the client and one of the page's
    origins at port 443 (or the client's ICMP answers to one); no DNS for the twenty names (the
    browsers resolve them from --resolve and the hosts file), nothing else."""
    loads = [" ".join(replayed.argv(t, p)) for t, p in (("chromium", "quic"), ("firefox", "tls1.3"))]
    script = (
        "tcpdump -i any -n -l -U -w /tmp/replay.pcap 'not host 127.0.0.1 and not ip6 host ::1' "
        "2>/dev/null & cap=$!; sleep 1; "
        f"{loads[0]} >/tmp/replay.json; {loads[1]} >>/tmp/replay.json; "
        "sleep 1; kill $cap; wait $cap; tcpdump -n -r /tmp/replay.pcap 2>/dev/null"
    )
    out = replayed.tb.client.exec(["sh", "-c", script], timeout=300).stdout
    rows = [
        json.loads(line) for line in replayed.tb.client.exec(["cat", "/tmp/replay.json"]).stdout.splitlines()
    ]
    assert [(r["protocol"], r["error"]) for r in rows] == [("quic", ""), ("tls1.3", "")], rows
    origins = set(replayed.plan.hosts().values())
    packet = re.compile(r"IP6? (\S+) > (\S+): ")
    lines = [line for line in out.splitlines() if line.strip()]
    strays, seen = [], set()
    for line in lines:
        m = packet.search(line)
        if not m:
            if "ARP" not in line:  # the link's own neighbour resolution, not the browsers'
                strays.append(line)
            continue
        ends = [m.group(1), m.group(2).rstrip(":")]
        hosts = {*ends, *(e.rsplit(".", 1)[0] for e in ends)}  # ICMP's ends carry no port
        served = [e for e in ends if e.rsplit(".", 1)[0] in origins and e.endswith(".443")]
        if served:
            seen.add(served[0].rsplit(".", 1)[0])
        elif not (" ICMP " in line and hosts & origins):
            strays.append(line)
    print(f"{len(lines)} packets captured, {len(strays)} not to or from an origin's :443")
    assert strays == [], strays[:10]
    assert seen == origins, sorted(origins - seen)  # and every origin was reached


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, clean_slate):
    with _served(tmp_path_factory.mktemp("recorded"), RECORDED) as served:
        yield served


@pytest.mark.parametrize(("tool", "protocol"), [("chromium", "quic"), ("firefox", "tls1.3")])
def test_a_page_recorded_by_another_har_writer_replays(recorded: Replayed, tool: str, protocol: str) -> None:
    """tests/fixtures/har/chromium-playwright.har (Playwright's HAR recorder, not quicbed's
    code) replays as the shipped pages do: every recorded request answered by its origin's
    entry, over the protocol asked for."""
    served = recorded
    row, logged = _load(served, tool, protocol)
    assert row["error"] == "" and row["origins"] == len(served.plan.names) == 5, row
    assert row["resource_protocols"] == {HOP[protocol]: len(served.page.entries)}, row
    assert sorted(e["entry"] for e in logged) == [e.index for e in served.page.entries], logged
