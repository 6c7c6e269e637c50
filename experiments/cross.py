"""Cross traffic: competing flows that share the trial's bottleneck (experiment `cross:`).

    cross:
      - {kind: bulk, protocol: tcp, cc: cubic, start_s: 0, duration_s: 30}
      - {kind: bulk, protocol: quic, duration_s: 30}

A `kind: web` flow is short fetches instead: a `file` (default 1MB) from the trial's server,
each over a fresh connection (TLS 1.3 + HTTP/2, or QUIC), arriving as a Poisson process of
`rate_per_s`, seeded per trial.

Every flow ends in the client's network namespace, so it crosses the same router port, and so
the same bottleneck queue, as the measured trial, on every backend (a host of its own on the
client LAN would have a port, and a bottleneck, of its own). Its far end is the trial's server:
- TCP: the host's iperf3, the sender in the server's namespace (`-R` for down), with the
  flow's own congestion control on its socket (`-C`); iperf3 reports the one the sender used.
- QUIC, and web fetches: downloads from the trial's server (its stack, and so its congestion
  control: such a flow names none) by curl (over HTTP/3, or TLS 1.3) in a side container of
  the client image that shares the client's network namespace, from client ports of its own
  (SIDECAR_PORTS).
Each starts `start_s` after the trial's tool and runs `duration_s`; the trial waits for its
flows, so none spills into the next trial. What each flow got is read off a capture on the
client's interface (analysis/fairness.py): over the trial's transfer, the trial's and each
flow's rate, Jain's index over the down flows, and the trial's share.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from quicbed.analysis import fairness
from quicbed.experiments.capture import PacketCapture
from quicbed.fields import check_choice, check_list, check_mapping, check_number
from quicbed.workloads.cloud import CLOUD_SIZES
from quicbed.yamlio import PathKey, Source

KINDS = ("bulk", "web")
PROTOCOLS = ("tcp", "quic")
DIRECTIONS = ("down", "up")
MAX_FLOWS = 8
IPERF_PORT = 5301  # flow i's iperf3 listens on IPERF_PORT + i, in the server's namespace
# Flow i's curl binds 20000 + 1000 i ... + 999: below Linux's ephemeral ports (32768-60999),
# so no trial's own connection takes one; a thousand, as a web flow's closed TCP connections
# hold theirs for a minute (TIME_WAIT).
SIDECAR_PORTS = 20000
PORT_SPAN = 1000
WEB_FILE = "1MB"  # what a web flow fetches unless it says
MAX_WEB_RATE = 20.0  # fetches per second: each is a docker exec (~80 ms of a core here)
QUIC_HEADROOM = 1.25  # a QUIC flow's object holds this much more than the link can carry
END_GRACE_S = 15.0  # how long past its end a flow may take before it is killed
SNAPLEN = 128  # the accounting capture keeps headers only
TIMELINE_BIN_S = 0.25  # the per-flow rates over a trial, for the report's figure
CC_FILE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


@dataclass(frozen=True)
class CrossFlow:
    name: str  # x0, x1, ...: the row's names for the flows, in file order
    kind: str
    protocol: str
    direction: str
    start_s: float
    duration_s: float
    cc: str | None = None  # a bulk TCP flow's; the others' is their server's stack's
    rate_per_s: float | None = None  # a web flow's fetches per second
    file: str | None = None  # what a web flow fetches

    @property
    def in_sidecar(self) -> bool:
        """Its client is curl in the side container (else iperf3 in the client's namespace)."""
        return self.kind == "web" or self.protocol == "quic"

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


def available_cc() -> tuple[str, ...]:
    try:
        return tuple(CC_FILE.read_text().split())
    except OSError:
        return ("cubic", "reno")


def quic_object(rate_mbit: float, duration_s: float) -> str | None:
    """The smallest cloud file a QUIC flow cannot finish within duration_s at rate_mbit."""
    need = rate_mbit * 1e6 / 8 * duration_s * QUIC_HEADROOM
    fits = [name for name, size in CLOUD_SIZES.items() if size >= need]
    return min(fits, key=CLOUD_SIZES.__getitem__) if fits else None


def parse_cross(src: Source, value: Any, max_down_mbit: float, timeout_s: float) -> tuple[CrossFlow, ...]:
    flows = check_list(src, ("cross",), value, lambda p, v: _flow(src, p, v, max_down_mbit, timeout_s))
    if len(flows) > MAX_FLOWS:
        raise src.error(("cross",), f"{len(flows)} flows; at most {MAX_FLOWS}")
    return tuple(replace(f, name=f"x{i}") for i, f in enumerate(flows))


def _flow(src: Source, path: PathKey, spec: Any, max_down_mbit: float, timeout_s: float) -> CrossFlow:
    check_mapping(src, path, spec, None, {"kind"})
    kind = check_choice(src, (*path, "kind"), spec["kind"], KINDS, "cross-traffic kind")
    keys = {"kind", "protocol", "direction", "start_s", "duration_s"}
    keys |= {"rate_per_s", "file"} if kind == "web" else {"cc"}
    check_mapping(
        src, path, spec, keys, {"protocol", "duration_s", *(["rate_per_s"] if kind == "web" else [])}
    )
    protocol = check_choice(src, (*path, "protocol"), spec["protocol"], PROTOCOLS, "protocol")
    direction = check_choice(
        src, (*path, "direction"), spec.get("direction", "down"), DIRECTIONS, "direction"
    )
    start_s = check_number(src, (*path, "start_s"), spec.get("start_s", 0), 0, 3600)
    duration_s = check_number(src, (*path, "duration_s"), spec["duration_s"], 1, 3600)
    if start_s + duration_s > timeout_s:
        raise src.error(
            (*path, "duration_s"),
            f"the flow ends at {start_s + duration_s:g} s, after the trial's timeout_s ({timeout_s:g} s)",
        )
    if kind == "web":
        return _web(src, path, spec, CrossFlow("", kind, protocol, direction, start_s, duration_s))
    cc = None
    if protocol == "tcp":
        cc = check_choice(
            src, (*path, "cc"), spec.get("cc", "cubic"), available_cc(), "congestion control on this host"
        )
    elif "cc" in spec:
        raise src.error(
            (*path, "cc"), "a QUIC flow sends with its server's own congestion control; leave cc out"
        )
    if protocol == "quic" and direction == "up":
        raise src.error(
            (*path, "direction"), "a QUIC cross flow is a download from the trial's server; up is TCP's"
        )
    if protocol == "quic" and quic_object(max_down_mbit, duration_s) is None:
        raise src.error(
            (*path, "duration_s"),
            f"{duration_s:g} s at {max_down_mbit:g} Mbit/s is more than the largest file the servers hold",
        )
    return CrossFlow("", kind, protocol, direction, start_s, duration_s, cc)


def _web(src: Source, path: PathKey, spec: Any, flow: CrossFlow) -> CrossFlow:
    if flow.direction == "up":
        raise src.error((*path, "direction"), "a web flow fetches from the trial's server; up is bulk TCP's")
    rate = check_number(src, (*path, "rate_per_s"), spec["rate_per_s"], 0.1, MAX_WEB_RATE)
    file = check_choice(src, (*path, "file"), spec.get("file", WEB_FILE), tuple(CLOUD_SIZES), "cloud file")
    return replace(flow, rate_per_s=rate, file=file)


# --- a trial's flows --------------------------------------------------------------------------


@dataclass
class _Run:
    """One flow of one trial: its process, and what it said."""

    flow: CrossFlow
    argv: list[str]
    server: subprocess.Popen[str] | None = None  # iperf3's listening end
    proc: subprocess.Popen[str] | None = None
    out: str = ""
    err: str = ""
    code: int | None = None
    thread: threading.Thread | None = None
    fetches: list[subprocess.Popen[str]] = field(default_factory=list)  # a web flow's


@dataclass
class Endpoints:
    """Where a trial's flows run: the client's and the server's namespaces, and the side
    container (curl) for QUIC flows."""

    client_popen: Any  # NsHost.popen_argv of the client
    server_popen: Any  # the same, of the trial's server
    server_pid: int
    server_address: str
    client_address: str
    client_pid: int
    client_intf: str  # the client's interface on the path, where the flows are counted
    sidecar: str | None  # the container that runs curl in the client's namespace
    url: str  # the trial server's URL of the QUIC flows' file (without the file)
    resolve: str
    cacert: str


@dataclass
class CrossTraffic:
    flows: tuple[CrossFlow, ...]
    ends: Endpoints
    quic_file: str | None
    seed: int = 1  # a web flow's arrivals: the same for a trial's every attempt
    runs: list[_Run] = field(default_factory=list)
    t0: float = 0.0
    pcap: Path | None = None  # what account() reads
    series: dict[str, fairness.FlowSeries] = field(default_factory=dict)  # what it found
    own_capture: PacketCapture | None = None  # a header-only one, when the trial keeps none

    def start(self, trial_pcap: Path | None) -> None:
        """The count at the client (the trial's own capture if it keeps one), iperf3's
        servers listening, then each flow on its own clock from now: call it just before
        the tool."""
        from quicbed.topology.calibrate import wait_listening

        if trial_pcap:
            self.pcap = trial_pcap
        else:
            self.pcap = accounting_capture_path()
            self.own_capture = PacketCapture(self.ends.client_pid, self.ends.client_intf, self.pcap, SNAPLEN)
            self.own_capture.start()
        self.runs = [_Run(flow, self._argv(i, flow)) for i, flow in enumerate(self.flows)]
        for i, run in enumerate(self.runs):
            if not run.flow.in_sidecar:
                argv = ["iperf3", "-s", "-1", "-J", "-p", str(IPERF_PORT + i), "-B", self.ends.server_address]
                run.server = subprocess.Popen(
                    self.ends.server_popen(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
                )
                wait_listening(self.ends.server_pid, IPERF_PORT + i, run.server)
        self.t0 = time.time()
        for run in self.runs:
            run.thread = threading.Thread(target=self._play, args=(run,), daemon=True)
            run.thread.start()

    def _argv(self, i: int, flow: CrossFlow) -> list[str]:
        if not flow.in_sidecar:
            argv = ["iperf3", "-c", self.ends.server_address, "-p", str(IPERF_PORT + i), "-J"]
            argv += ["-t", f"{flow.duration_s:g}", "-C", str(flow.cc)]
            return self.ends.client_popen([*argv, *(["-R"] if flow.direction == "down" else [])])
        low = SIDECAR_PORTS + PORT_SPAN * i
        assert self.ends.sidecar
        version = ["--http3-only"] if flow.protocol == "quic" else ["--tlsv1.3", "--http2"]
        bulk = flow.kind == "bulk"
        # A bulk flow runs until --max-time; a web fetch has the flow's length to finish.
        limit = flow.duration_s if bulk else flow.duration_s + END_GRACE_S
        file = self.quic_file if bulk else flow.file
        return [
            "docker", "exec", self.ends.sidecar, "curl", *version, "-s", "-o", "/dev/null",
            "-w", "%{json}", "--max-time", f"{limit:g}", "--local-port", f"{low}-{low + PORT_SPAN - 1}",
            "--cacert", self.ends.cacert, "--resolve", self.ends.resolve, f"{self.ends.url}{file}",
        ]  # fmt: skip

    def _play(self, run: _Run) -> None:
        time.sleep(max(0.0, self.t0 + run.flow.start_s - time.time()))
        if run.flow.kind == "web":
            self._fetch_all(run)
            return
        run.proc = subprocess.Popen(run.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            run.out, run.err = run.proc.communicate(timeout=run.flow.duration_s + END_GRACE_S)
        except subprocess.TimeoutExpired:
            run.proc.kill()
            run.out, run.err = run.proc.communicate()
        run.code = run.proc.returncode

    def _fetch_all(self, run: _Run) -> None:
        """Fetches at Poisson arrivals of the flow's rate until its end; then their ends."""
        flow = run.flow
        rng = random.Random(f"{self.seed}/{flow.name}")
        at = self.t0 + flow.start_s
        while (at := at + rng.expovariate(flow.rate_per_s or 1.0)) < self.t0 + flow.end_s:
            time.sleep(max(0.0, at - time.time()))
            fetch = subprocess.Popen(run.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            run.fetches.append(fetch)
        outs = []
        for fetch in run.fetches:
            try:
                outs.append(fetch.communicate(timeout=max(0.1, at + END_GRACE_S - time.time()))[0])
            except subprocess.TimeoutExpired:
                fetch.kill()
                outs.append(fetch.communicate()[0])
        run.out = "\n".join(o.strip() or "{}" for o in outs)  # a killed fetch says nothing
        run.code = 0

    def wait(self) -> None:
        """Until every flow has ended (or was killed END_GRACE_S past its end)."""
        for run in self.runs:
            if run.thread:
                run.thread.join(timeout=max(0.0, self.t0 + run.flow.end_s + 2 * END_GRACE_S - time.time()))
            if run.server:
                try:
                    run.server.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    run.server.kill()
                    run.server.wait()

    def stop(self) -> None:
        """Kill what still runs (a trial cut short), and end the count."""
        for run in self.runs:
            for proc in (run.proc, run.server, *run.fetches):
                if proc and proc.poll() is None:
                    proc.kill()
        self.wait()
        if self.own_capture:
            self.own_capture.stop()

    def results(self) -> list[dict[str, Any]]:
        """Each flow's own word: iperf3's sender congestion control, curl's protocol and
        bytes, or the error that ended it."""
        runs = {run.flow.name: run for run in self.runs}
        return [self._result(flow, runs.get(flow.name)) for flow in self.flows]

    def _result(self, flow: CrossFlow, run: _Run | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "flow": flow.name,
            "kind": flow.kind,
            "protocol": flow.protocol,
            "direction": flow.direction,
            "start_s": flow.start_s,
            "duration_s": flow.duration_s,
            "cc": flow.cc,
        }
        if flow.kind == "web":
            out.update(rate_per_s=flow.rate_per_s, file=flow.file)
        if run is None:  # accounting a capture alone (tests)
            return out
        if flow.kind == "web":
            return {**out, **_fetches(run.out)}
        try:
            said = json.loads(run.out) if run.out.strip() else {}
        except json.JSONDecodeError:
            said = {}
        if not flow.in_sidecar:
            end = said.get("end", {})
            out["sender_cc"] = end.get("sender_tcp_congestion")
            if said.get("error") or run.code != 0:
                out["error"] = str(said.get("error") or run.err.strip()[-200:] or f"iperf3 exit {run.code}")
        else:
            out["http_version"] = said.get("http_version")
            out["file"] = self.quic_file
            # curl's 28 is --max-time: the flow ran its whole duration, as it should.
            if run.code == 0:
                out["error"] = (
                    f"the file ended before {flow.duration_s:g} s (the link is faster than planned)"
                )
            elif run.code != 28:
                out["error"] = str(said.get("errormsg") or run.err.strip()[-200:] or f"curl exit {run.code}")
        return out

    def classify(self, packet: fairness.Packet) -> str | None:
        """A captured packet's flow: a cross flow's name, "trial" (the rest of the trial
        server's port 443 traffic toward the client), or None."""
        client, server = self.ends.client_address, self.ends.server_address
        toward_client = (packet.src, packet.dst) == (server, client)
        for i, flow in enumerate(self.flows):
            if flow.in_sidecar:
                low = SIDECAR_PORTS + PORT_SPAN * i
                if toward_client and packet.sport == 443 and low <= packet.dport < low + PORT_SPAN:
                    return flow.name
            elif flow.direction == "down" and toward_client and packet.sport == IPERF_PORT + i:
                return flow.name
            elif flow.direction == "up" and (packet.src, packet.dst, packet.dport) == (
                client,
                server,
                IPERF_PORT + i,
            ):
                return flow.name
        if toward_client and packet.sport == 443:
            return "trial"
        return None

    def account(self) -> dict[str, Any]:
        """The row's share figures, from the capture on the client's interface (after
        stop(); a header-only capture of its own is removed once read)."""
        assert self.pcap
        try:
            self.series = series = fairness.flow_bytes(fairness.read_pcap(self.pcap), self.classify)
        finally:
            if self.own_capture:
                self.pcap.unlink(missing_ok=True)
        flows = self.results()
        for flow in flows:
            s = series.get(flow["flow"])
            seen = s is not None and s.first is not None
            flow["started_s"] = round(s.first - self.t0, 3) if seen and s and s.first else None
            flow["ended_s"] = round(s.last - self.t0, 3) if seen and s and s.last else None
            flow["mbit"] = _round(s.mbit()) if s else None
            if not seen and "error" not in flow:
                flow["error"] = "no packet of it crossed the client's interface"
        row: dict[str, Any] = {"cross_flows": json.dumps(flows)}
        trial = series.get("trial")
        if not trial or trial.first is None or trial.last is None or trial.last <= trial.first:
            return {**row, "cross_window_s": None, "trial_mbit": None, "cross_mbit": None,
                    "jain_index": None, "trial_share": None}  # fmt: skip
        rates = fairness.window_rates(series, trial.first, trial.last)
        for flow in flows:
            flow["mbit_in_trial"] = _round(rates.get(flow["flow"], 0.0))
        down = [rates.get(f["flow"], 0.0) for f in flows if f["direction"] == "down"]
        # Jain's index is of long flows sharing a link: a web flow's fetches come and go.
        bulk = [rates.get(f["flow"], 0.0) for f in flows if f["direction"] == "down" and f["kind"] == "bulk"]
        total = rates["trial"] + sum(down)
        row.update(
            cross_flows=json.dumps(flows),
            cross_window_s=round(trial.last - trial.first, 3),
            trial_mbit=_round(rates["trial"]),
            cross_mbit=_round(sum(down)),
            jain_index=_round(fairness.jain_index([rates["trial"], *bulk]), 4),
            trial_share=_round(rates["trial"] / total, 4) if total else None,
        )
        return row


def timeline(
    series: dict[str, fairness.FlowSeries], t0: float, bin_s: float = TIMELINE_BIN_S
) -> dict[str, Any]:
    """Every flow's rate (Mbit/s) per bin from t0 to its last packet: the trial first."""
    ends = [s.last for s in series.values() if s.last is not None]
    bins = max(1, int((max(ends, default=t0) - t0) / bin_s) + 1)
    mbit: dict[str, list[float]] = {}
    for name in sorted(series, key=lambda n: (n != "trial", n)):
        counts = [0] * bins
        for t, size in zip(series[name].times, series[name].sizes, strict=True):
            if t >= t0:
                counts[min(bins - 1, int((t - t0) / bin_s))] += size
        mbit[name] = [round(c * 8 / bin_s / 1e6, 3) for c in counts]
    return {"bin_s": bin_s, "t_s": [round(i * bin_s, 3) for i in range(bins)], "mbit": mbit}


def _fetches(out: str) -> dict[str, Any]:
    """A web flow's fetches, from curl's -w %{json} lines: how many, how many failed, and the
    median and longest time of the ones that completed (the longest says how late the flow's
    last packet may come: a fetch begun just before its end still has all of it to run)."""
    done, failed = [], 0
    for line in out.splitlines():
        try:
            said = json.loads(line)
        except json.JSONDecodeError:
            failed += 1
            continue
        if said.get("exitcode") == 0 and said.get("response_code") == 200:
            done.append(float(said["time_total"]) * 1000)
        else:
            failed += 1
    return {
        "fetches": len(done) + failed,
        "fetches_failed": failed,
        "fetch_ms_median": round(statistics.median(done), 1) if done else None,
        "fetch_ms_max": round(max(done), 1) if done else None,
    }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def accounting_capture_path() -> Path:
    """Where a trial's header-only capture goes when the experiment keeps no pcap of its own."""
    handle = tempfile.NamedTemporaryFile(prefix="quicbed-cross-", suffix=".pcap", delete=False)
    handle.close()
    return Path(handle.name)
