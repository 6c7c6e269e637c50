"""The runner's Executor on the real testbed: one calibrated path per condition, the servers
in containers behind the router, the perf tools in the client container.

Nothing is measured through a path that failed calibration, unless `--force`; then every row
and the manifest say so.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import subprocess
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from quicbed import hostload, limits, rowschema, servers
from quicbed.clients.tools import TOOLS, UNSUPPORTED_EXIT, Tool, page_argv, tool_argv
from quicbed.dockercli import docker
from quicbed.errors import HostProblem, PathMismatch
from quicbed.paths import CACHE, REPO, STATE
from quicbed.servers import pki
from quicbed.servers.testbed import (
    CLIENT_PKI,
    SERVER_NAME,
    ReplaySite,
    ensure_pki,
    served_testbed,
    warm_up,
)
from quicbed.topology.backends import BackendChoice, check_links, choose_backend, proofs
from quicbed.topology.calibrate import Calibration
from quicbed.topology.calibration_reuse import calibrate_or_reuse
from quicbed.topology.calibration_table import print_calibration
from quicbed.topology.hosts import DockerHost, SideContainer, image_present
from quicbed.topology.net import (
    ADDRESSES,
    DEFAULT_IMAGE,
    Testbed,
    server_address,
)
from quicbed.topology.proven import proven
from quicbed.workloads import WORKLOADS, recorded
from quicbed.workloads.cloud import ensure_files
from quicbed.workloads.replay import ReplayPlan, plan_pages, write_site

from . import cross as crossflows
from .capture import (
    CLIENT_TRIALS,
    HandshakeCapture,
    TrialCapture,
    handshake_filter,
    handshake_tool,
    path_interface,
)
from .matrix import Condition, Trial, conditions
from .options import PathOptions
from .runner import TrialError
from .schema import Experiment

# The access log's protocol as a number, for `server_http` (the lowest in a trial).
_HTTP_VERSIONS = {
    "HTTP/1.0": 1.0,
    "HTTP/1.1": 1.1,
    "HTTP/2.0": 2.0,
    "HTTP/3.0": 3.0,
    "HTTP/2": 2.0,
    "HTTP/3": 3.0,
}
SERVER_LOG_WAIT_S = 1.0
# A server idle for longer than this answers its next handshake late: in interleaved order on
# india, the first QUIC trial of a server's turn was 1.5-4 ms later than the fresh one right
# after it for Caddy, up to 1.2 ms for nginx and HAProxy (capture: the server's first flight
# late, not the path). After the warm-up at its start (servers/testbed.py) the same holds.
REWARM_AFTER_IDLE_S = 1.0
CPU_BOUND_PCT = 90.0  # of one core: the host, not the network, may have set the pace


def trial_cpu_bound(row: dict[str, Any], shares: dict[str, float], client: str) -> bool:
    """A trial is CPU-bound when its tool says so, or a container used >= CPU_BOUND_PCT of a
    core. A tool that judges its own load (the browser: idle CPU, busiest thread, quota; its row
    carries cpu_bound) speaks for the client container, whose share of one core says nothing of
    eleven processes on two cores; the server's share still counts."""
    judged = {client} if "cpu_bound" in row else set()
    busy = [pct for host, pct in shares.items() if host not in judged]
    return bool(row.get("cpu_bound")) or max(busy, default=0.0) >= CPU_BOUND_PCT


class TestbedExecutor:
    __test__ = False

    def __init__(
        self,
        exp: Experiment,
        run_dir: Path,
        path: PathOptions | None = None,
        console: Console | None = None,
    ) -> None:
        path = path or PathOptions()
        client_image, backend = path.client_image, path.backend
        self.exp, self.run_dir, self.force = exp, run_dir, path.force
        # The client container runs the first tool's image (its descriptor's); a tool of another
        # image runs in a side container of it, sharing its namespace and mounts. --client-image
        # runs every tool in one image.
        self.client_images = [client_image] if client_image else tools_images(exp)
        self.client_image = self.client_images[0]
        self.image_override = bool(client_image)
        self.side_clients: dict[str, SideContainer] = {}  # image -> its container, per condition
        self.backend = backend  # "auto" resolves per profile (its rate), recorded per condition
        # Chosen once per run, before the first condition: a requested backend this host
        # lacks, or a queue or trace the chosen one cannot run, fails here, not later.
        self.choices = choose_per_condition(exp, backend)
        self.console = console or Console(stderr=True, highlight=False)
        self.content_dir = CACHE / "content"
        # Keys are made per run and kept out of the results (which people share).
        self.pki_dir = STATE / "pki" / run_dir.name
        self.tb: Testbed | None = None
        self.hosts: dict[str, DockerHost] = {}
        self.started: set[str] = set()
        self.last_served: dict[str, float] = {}  # server -> when its last trial ended (monotonic)
        self.log_root = run_dir / rowschema.LOGS_DIR
        self.log_offsets: dict[str, int] = {}  # server -> access-log bytes already read
        self.sidecar: SideContainer | None = None  # the cross flows' curl, per condition
        self.cross_file: str | None = None  # the file they download, per condition
        self.log_name: str | None = None  # logs/<this>/: the condition's id unless set
        self.images_ready = False  # the on-demand images this run needs are built
        self.replay: tuple[ReplaySite, ReplayPlan] | None = None  # the recorded page's site
        self.calib_rtt_ms: float | None = None  # the condition's, for the rows' wire_rtts

    def _replayed(self) -> tuple[ReplaySite, ReplayPlan] | None:
        """The workload's recorded pages laid out for their replay server, served at once
        (workloads/replay.py plan_pages), once per run, under the cache by the pages' names
        (each the digest of its HAR); None for the testbed's content."""
        pages = self.exp.workload.pages
        if not pages:
            return None
        if self.replay is None:
            read = [recorded.page_of(page) for page in pages]  # refused if a file changed
            plan = plan_pages(read)
            key = hashlib.sha256("\0".join(page.name for page in pages).encode()).hexdigest()
            root = CACHE / "replay" / key[:16]
            write_site(plan, read, root)
            self.replay = (ReplaySite(root, plan.hosts()), plan)
        return self.replay

    def prepare(self) -> None:
        """What every path of the run shares (keys, content), made once before --parallel's
        paths come up side by side: two making it at once would race."""
        self._prepare_content()
        replayed = self._replayed()
        ensure_pki(self.pki_dir, replayed[1].names if replayed else ())
        self._ensure_images()

    def set_log_name(self, name: str) -> None:
        """Two paths of one condition at once (--parallel): each one's servers log apart."""
        self.log_name = name

    # -- Executor protocol ---------------------------------------------------------------
    def manifest_info(self) -> dict[str, Any]:
        here = {
            name: ("runs: " if p.runs else "cannot run here: ") + p.reason for name, p in proofs().items()
        }
        return {
            "link_backend": self.backend,
            "link_backend_per_condition": "calibration.backend",
            "link_backends_here": here,
            "kernel": platform.release(),
            "force": self.force,
            "client_image": _image_info(self.client_image),
            "client_images": {image: _image_info(image) for image in self.client_images},
            "client_tools": {
                name: _tool_info(TOOLS[name]) for name in dict.fromkeys(c.tool for c in self.exp.clients)
            },
            "server_images": {name: _image_info(spec.image) for name, spec in servers.SERVERS.items()},
            "pki": "fresh private CA per run (not stored with the results)",
            **({"capture": self._capture_info()} if self.exp.capture else {}),
        }

    def _capture_info(self) -> dict[str, Any]:
        """What this run captures, and what each of its stacks can write (its descriptor's
        and its adapter's word); per trial, the row's capture_files and capture_missing."""
        return {
            "kinds": list(self.exp.capture),
            "dir": f"{rowschema.TRIALS_DIR}/<trial id with / as ~>/",
            "server_qlog": {name: _server_qlog(servers.get_server(name)) for name in self.exp.servers},
            "client_qlog": {c.label: _client_qlog(c.protocol, TOOLS[c.tool]) for c in self.exp.clients},
        }

    @contextlib.contextmanager
    def condition(self, cond: Condition) -> Iterator[dict[str, Any]]:
        names = list(self.exp.servers)
        self._prepare_content()
        self._ensure_images()
        timing: dict[str, float] = {}
        clock = time.monotonic()
        self.log_root, self.log_offsets = self.run_dir / rowschema.LOGS_DIR / (self.log_name or cond.id), {}
        trials_dir = self.run_dir / rowschema.TRIALS_DIR
        if self.exp.capture:
            trials_dir.mkdir(parents=True, exist_ok=True)
        replayed = self._replayed()

        def bring_up() -> contextlib.AbstractContextManager[tuple[Testbed, dict[str, DockerHost]]]:
            return served_testbed(
                cond.link,
                names,
                log_root=self.log_root,
                pki_dir=self.pki_dir,
                content_dir=self.content_dir,
                replay=replayed[0] if replayed else None,
                backend=self.choices[cond.id],
                client_image=self.client_image,
                tcp_cc=str(cond.params.get("server.tcp_cc", "cubic")),
                # The tools write key logs and qlog straight into the run directory.
                client_mounts=((trials_dir, CLIENT_TRIALS),) if self.exp.capture else (),
            )

        def calibrated(up: tuple[Testbed, dict[str, DockerHost]]) -> Calibration:
            nonlocal clock
            tb = up[0]
            timing["bringup_s"], clock = time.monotonic() - clock, time.monotonic()
            assert tb.backend  # up once served_testbed has yielded
            self.console.print(f"{cond.id}: calibrating {cond.label} via {tb.backend.name}")
            cal = calibrate_or_reuse(tb)
            timing["calibration_s"], clock = time.monotonic() - clock, time.monotonic()
            print_calibration(cal, self.console)
            return cal

        # A refusal on a contended host, or a short path, is measured again once on a calm
        # host with a fresh bring-up (topology/proven.py).
        say = functools.partial(self.console.print, f"{cond.id}:")
        with proven(bring_up, calibrated, say=say) as ((tb, hosts), cal):
            self.tb, self.hosts, self.started, self.last_served = tb, hosts, set(), {}
            if not cal.passed and not self.force:
                failed = ", ".join(f"{c.metric}/{c.direction}" for c in cal.checks if not c.passed)
                raise PathMismatch(
                    f"calibration failed ({failed}); refusing to measure "
                    "(--force measures anyway and marks every row)"
                )
            cal.forced = not cal.passed
            self.calib_rtt_ms = cal.measured("rtt_median_ms")
            try:
                # Servers start here, after calibration, so no trial's wall time holds a start.
                # One that fails here is tried again by its trials, which record the error.
                for name in names:
                    with contextlib.suppress(servers.ServerError):
                        self.ensure_server(name)
                for i, image in enumerate(self.client_images[1:], start=2):
                    self.side_clients[image] = SideContainer(tb.client, image, f"client{i}")
                timing["server_start_s"] = time.monotonic() - clock
                self._start_cross(cond)
                yield {
                    "rtt_ms": cal.measured("rtt_median_ms"),
                    "passed": cal.passed,
                    "forced": cal.forced,
                    "calibration": cal.to_dict(),
                    "ca_sha256": pki.cert_sha256(self.pki_dir / "ca.pem"),
                    "servers": {n: self._server_facts(n) for n in names},
                    "timing": {k: round(v, 3) for k, v in timing.items()},
                }
            finally:
                for side in [*self.side_clients.values(), *([self.sidecar] if self.sidecar else [])]:
                    side.stop()
                self.side_clients = {}
                self.tb, self.hosts, self.sidecar, self.cross_file = None, {}, None, None

    def ensure_server(self, name: str) -> None:
        host = self.hosts[name]
        if name in self.started and self._server_alive(host, name):
            return
        servers.start_server(host.container, name, timeout=30, qlog="qlog" in self.exp.capture)
        self.started.add(name)
        assert self.tb
        warm_up(self.tb, host, name)
        self.last_served[name] = time.monotonic()

    def run_trial(self, trial: Trial) -> dict[str, Any]:
        assert self.tb
        host = self.hosts[trial.server]
        replayed = self._replayed()
        resolves = tuple(replayed[1].resolves()) if replayed else ()
        argv = self._tool_argv(trial, server_address(self.tb.servers.index(host)), resolves)
        client = self._client_of(trial)
        self._rewarm(trial.server, host)
        self._server_log(trial.server)  # skip what earlier trials (or a restart) logged
        capture = self._capture(trial)
        if capture:
            argv += capture.tool_args()
            capture.start(client.pid, [i.name for i in client.intfList()])
        cross = self._cross(trial, host)
        handshake = self._handshake_capture(trial, client, host)  # listening: stopped below
        try:
            # The capture starts before and stops after this: tool_wall_s holds neither.
            retrans = _tcp_retrans(host.container_pid)
            if cross:
                cross.start(capture.pcap_path() if capture else None)
            # Whatever else the host ran meanwhile (the link's router too): a neighbour's share.
            with hostload.OtherWork([client.container, host.container]) as work:
                proc, overflow = self._exec_bounded(client, argv, trial.timeout_s + 15)
            if cross:
                cross.wait()  # its flows end before the next trial begins
        finally:
            self.last_served[trial.server] = time.monotonic()
            if cross:
                cross.stop()
            if capture:
                capture.stop_packets()
            if handshake:
                handshake.stop()
        if overflow:
            raise TrialError(f"{trial.client.tool}: {overflow}", capture.finish() if capture else None)
        retrans = _tcp_retrans(host.container_pid) - retrans
        try:
            rows = rowschema.tool_rows(proc.stdout)
        except rowschema.ToolRowError as exc:
            raise TrialError(f"{trial.client.tool}: {exc}", capture.finish() if capture else None) from None
        if not rows:
            # A failed trial's capture is the one most worth opening: the row names it.
            kept = capture.finish() if capture else None
            if proc.returncode == UNSUPPORTED_EXIT:
                raise TrialError(f"unsupported: {proc.stderr.strip()[-300:]}", kept)
            raise TrialError(
                f"{trial.client.tool} gave no row (exit {proc.returncode}): " f"{proc.stderr.strip()[-300:]}",
                kept,
            )
        row = rows[-1]
        if cross:
            row.update(cross.account())
            row["cross_trace_file"] = self._write_json(
                rowschema.cross_trace_path(trial.trial_id), crossflows.timeline(cross.series, cross.t0)
            )
        if "trace" in row:  # a player's per-second trace: a file beside the rows, not a cell
            row["trace_file"] = self._write_trace(trial.trial_id, row.pop("trace"))
        row.update(
            cpu_client_pct=round(work.own_pct[client.container], 1),
            cpu_server_pct=round(work.own_pct[host.container], 1),
            host_cpu_other_pct=None if work.other_pct is None else round(work.other_pct, 1),
            host_steal_pct=None if work.steal is None else round(100 * work.steal, 1),
            tool_wall_s=round(work.wall_s, 3),
            transfer_s=_transfer_s(row),
            **self._server_saw(trial.server),
            server_tcp_retrans=retrans if retrans >= 0 else None,
        )
        if capture:  # after _server_saw: the server has logged, and closed, the trial's connections
            row.update(capture.finish())
        if handshake:  # after capture.finish: its capture_s and capture_missing are added to
            row.update(handshake.columns(row, self.calib_rtt_ms))
        row["cpu_bound"] = trial_cpu_bound(row, work.own_pct, client.container)
        page = trial.workload.page(trial.object)
        if page:  # the page as recorded, beside what the tool saw
            row.update(page_origins=page.origins, page_requests=page.requests, page_bytes=page.body_bytes)
        if row.get("error"):
            raise TrialError(row["error"], row)
        return row

    # -- helpers -------------------------------------------------------------------------
    def _rewarm(self, name: str, host: DockerHost) -> None:
        """A server idle since its last trial for over REWARM_AFTER_IDLE_S is warmed again
        before this one's handshake is measured (servers.rewarm: loopback, in its container)."""
        if time.monotonic() - self.last_served.get(name, 0.0) > REWARM_AFTER_IDLE_S:
            servers.rewarm(host.container, name)

    def _client_of(self, trial: Trial) -> DockerHost | SideContainer:
        """The container the trial's tool runs in: the client's, or its image's side one."""
        assert self.tb
        image = TOOLS[trial.client.tool].image
        if self.image_override or image == self.client_image:
            return self.tb.client
        return self.side_clients[image]

    def _start_cross(self, cond: Condition) -> None:
        """The condition's QUIC cross flows: their file, and the container they run in."""
        assert self.tb
        if not any(f.in_sidecar for f in self.exp.cross):
            return
        bulk = [f.duration_s for f in self.exp.cross if f.in_sidecar and f.kind == "bulk"]
        if bulk:
            self.cross_file = crossflows.quic_object(cond.link.down.rate_mbit, max(bulk))
            if self.cross_file is None:  # the schema checked every condition's rate: a bug
                raise RuntimeError(f"no file for {max(bulk):g} s at {cond.link.down.rate_mbit:g} Mbit/s")
        files = {self.cross_file, *(f.file for f in self.exp.cross)} - {None}
        ensure_files(self.content_dir, sorted(str(f) for f in files))
        self.sidecar = SideContainer(self.tb.client, DEFAULT_IMAGE, "cross")

    def _cross(self, trial: Trial, host: DockerHost) -> crossflows.CrossTraffic | None:
        if not self.exp.cross:
            return None
        assert self.tb
        client = self.tb.client
        address = server_address(self.tb.servers.index(host))
        ends = crossflows.Endpoints(
            client_popen=client.popen_argv,
            server_popen=host.popen_argv,
            server_pid=host.pid,
            server_address=address,
            client_address=ADDRESSES["client"],
            client_pid=client.pid,
            client_intf=path_interface([i.name for i in client.intfList()]),
            sidecar=self.sidecar.container if self.sidecar else None,
            url=f"https://{SERVER_NAME}/cloud/",
            resolve=f"{SERVER_NAME}:443:{address}",
            cacert=f"{CLIENT_PKI}/ca.pem",
        )
        seed = zlib.crc32(trial.trial_id.encode())
        return crossflows.CrossTraffic(self.exp.cross, ends, self.cross_file, seed=seed)

    def _capture(self, trial: Trial) -> TrialCapture | None:
        if not self.exp.capture:
            return None
        assert self.tb
        # A namespace client (no container) runs the tool on the host's filesystem.
        docker_client = isinstance(self.tb.client, DockerHost)
        return TrialCapture(
            kinds=self.exp.capture,
            run_dir=self.run_dir,
            trial_id=trial.trial_id,
            tool=TOOLS[trial.client.tool],
            quic=trial.client.protocol == "quic",
            server=servers.get_server(trial.server),
            server_log_dir=self.log_root / trial.server,
            client_root=CLIENT_TRIALS if docker_client else str(self.run_dir / rowschema.TRIALS_DIR),
        )

    def _handshake_capture(
        self, trial: Trial, client: DockerHost | SideContainer, host: DockerHost
    ) -> HandshakeCapture | None:
        """The trial's connection captured at both ends (capture.py says which trials, and
        why per trial), listening; None for a tool that is not captured so."""
        if not handshake_tool(TOOLS[trial.client.tool]):
            return None
        # The cross flows' curl fetches from port 443 too, from client ports of its own.
        cross_ports = range(
            crossflows.SIDECAR_PORTS, crossflows.SIDECAR_PORTS + crossflows.PORT_SPAN * crossflows.MAX_FLOWS
        )
        handshake = HandshakeCapture(
            ends={
                "client": (client.pid, [i.name for i in client.intfList()]),
                "server": (host.pid, [i.name for i in host.intfList()]),
            },
            expression=handshake_filter(cross_ports),
        )
        handshake.launch()
        handshake.wait_listening()
        return handshake

    def _server_log(self, server: str) -> list[dict[str, Any]]:
        """The access-log entries the server wrote since the last call."""
        entries, self.log_offsets[server] = servers.access_log_since(
            self.log_root / server, self.log_offsets.get(server, 0), servers.get_server(server)
        )
        return entries

    def _server_saw(self, server: str) -> dict[str, Any]:
        """The trial's requests as the server logged them. A server may log a request just
        after the client has its last byte (HTTP/3: when the stream closes): wait a moment."""
        entries = self._server_log(server)
        deadline = time.monotonic() + SERVER_LOG_WAIT_S
        while not entries and time.monotonic() < deadline:
            time.sleep(0.02)
            entries = self._server_log(server)
        versions = [_HTTP_VERSIONS[p] for e in entries if (p := str(e.get("proto"))) in _HTTP_VERSIONS]
        return {"server_http": min(versions) if versions else None, "server_requests": len(entries)}

    @staticmethod
    def _exec_bounded(
        client: DockerHost | SideContainer, argv: list[str], timeout: float
    ) -> tuple[subprocess.CompletedProcess[str], str]:
        """The tool's run, or an empty one and why its output was refused (over the bound)."""
        try:
            return client.exec(argv, timeout=timeout), ""
        except limits.TooBig as exc:
            return subprocess.CompletedProcess(argv, -9, "", ""), str(exc)

    def _write_trace(self, trial_id: str, trace: object) -> str:
        return self._write_json(rowschema.trace_path(trial_id), trace)

    def _write_json(self, rel: str, trace: object) -> str:
        path = self.run_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(trace))
        tmp.replace(path)
        return rel

    def _ensure_images(self) -> None:
        """Build the on-demand images (stacks compiled from source, which make images leaves
        out) that this run's servers and tools need and this host lacks: once, before the
        first path comes up, saying so, since it takes minutes."""
        if self.images_ready:
            return
        wanted = {name: servers.get_server(name) for name in self.exp.servers}
        needed = {name: spec.image for name, spec in wanted.items() if spec.on_demand}
        if not self.image_override:
            needed |= {c.tool: TOOLS[c.tool].image for c in self.exp.clients if TOOLS[c.tool].on_demand}
        for name, image in needed.items():
            if image_present(image):
                continue
            self.console.print(f"building {image} for {name} (on demand, once: a few minutes)")
            build = subprocess.run(
                [str(REPO / "images" / "build.sh"), name], capture_output=True, text=True, timeout=3600
            )
            if build.returncode != 0:
                tail = (build.stderr.strip().splitlines() or ["no output"])[-1]
                raise HostProblem(f"image {image}: images/build.sh {name} failed: {tail}")
        self.images_ready = True

    def _prepare_content(self) -> None:
        workload = self.exp.workload
        WORKLOADS[workload.kind].prepare_content(self.content_dir, workload.objects)

    def _server_facts(self, name: str) -> dict[str, Any]:
        container = self.hosts[name].container
        facts: dict[str, Any] = {}
        for key, fn in (("version", servers.server_version), ("settings", servers.server_settings)):
            try:
                facts[key] = fn(container, name)
            except Exception as exc:  # facts are best effort, recorded as such
                facts[key] = f"unavailable: {exc}"
        return facts

    @staticmethod
    def _server_alive(host: DockerHost, name: str) -> bool:
        """From the host's /proc, not `docker exec pgrep` (which cost ~80 ms every trial)."""
        return _runs_in(host.container_pid, Path(servers.get_server(name).command[0]).name)

    @staticmethod
    def _tool_argv(trial: Trial, address: str, page_resolves: tuple[str, ...] = ()) -> list[str]:
        """The trial's argv: a GET of its object from the server at `address`, or a recorded
        page's landing document with its origins' `page_resolves` (ReplayPlan.resolves)."""
        workload = WORKLOADS[trial.workload.kind]
        workload_args = workload.tool_args(trial.workload.duration_s, dict(trial.workload.settings))
        page = trial.workload.page(trial.object)
        if page:
            return page_argv(
                trial.client.tool,
                page.landing_url,
                list(page_resolves),
                options=trial.client.options,
                timeout_s=trial.timeout_s,
                workload_args=workload_args,
            )
        return tool_argv(
            trial.client.tool,
            workload.url_path(trial.object),
            address,
            options=trial.client.options,
            timeout_s=trial.timeout_s,
            workload_args=workload_args,
        )


def tools_images(exp: Experiment) -> list[str]:
    """The images the experiment's client tools run in, first the first client's (the client
    container's; DEFAULT_IMAGE if it names none)."""
    return list(dict.fromkeys(TOOLS[c.tool].image for c in exp.clients)) or [DEFAULT_IMAGE]


def _tool_info(tool: Tool) -> dict[str, Any]:
    """What the manifest keeps of a client's descriptor: where it came from and how it ran."""
    file = Path(tool.file).resolve()
    # Relative inside the checkout: two checkouts' runs must not differ by where they live.
    return {
        "descriptor": str(file.relative_to(REPO)) if file.is_relative_to(REPO) else str(file),
        "image": tool.image,
        "command": list(tool.command),
        "versions_in": list(tool.reports),  # the row columns with its versions
    }


def _server_qlog(spec: servers.ServerSpec) -> str:
    return f"{spec.qlog_env} -> {spec.qlog_dir}" if spec.qlog_env else f"cannot: {spec.no_qlog}"


def _client_qlog(protocol: str, tool: Tool) -> str:
    if protocol != "quic":
        return "cannot: TCP, qlog is QUIC's"
    return f"{tool.qlog_flag} FILE" if tool.qlog_flag else f"cannot: {tool.no_qlog}"


def _transfer_s(row: dict[str, Any]) -> float | None:
    """The tool's own clock, from connection start to the last byte (None if it never ended)."""
    t_start, t_done = row.get("t_start"), row.get("t_done")
    if isinstance(t_start, int | float) and isinstance(t_done, int | float):
        return round(t_done - t_start, 6)
    return None


def _runs_in(init_pid: int, comm: str) -> bool:
    """Whether a process named `comm` runs in the PID namespace of the container's init."""
    try:
        pid_ns = os.readlink(f"/proc/{init_pid}/ns/pid")
    except OSError:
        return False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if (
                Path(f"/proc/{entry}/comm").read_text().strip() == comm
                and os.readlink(f"/proc/{entry}/ns/pid") == pid_ns
            ):
                return True
        except OSError:  # gone meanwhile
            continue
    return False


def _tcp_retrans(pid: int) -> int:
    """TCP RetransSegs of the network namespace of process `pid` (the server container's),
    from the host's /proc: no docker exec per trial. -1 when it cannot be read."""
    try:
        lines = [
            ln.split()
            for ln in Path(f"/proc/{pid}/net/snmp").read_text().splitlines()
            if ln.startswith("Tcp:")
        ]
        return int(dict(zip(lines[0], lines[1], strict=True))["RetransSegs"])
    except (OSError, IndexError, KeyError, ValueError):
        return -1


def _image_info(image: str) -> dict[str, str]:
    proc = docker("image", "inspect", "-f", "{{.Id}} {{.Created}}", image)
    if proc.returncode != 0:
        return {"image": image, "id": "missing"}
    image_id, created = proc.stdout.split(maxsplit=1)
    return {"image": image, "id": image_id, "created": created.strip()}


def choose_per_condition(exp: Experiment, backend: str) -> dict[str, BackendChoice]:
    """Each condition's link backend (conditions alike in rate, trace and queues share one
    choice), with its queues and trace checked against it."""
    chosen: dict[tuple[object, ...], BackendChoice] = {}
    out = {}
    for cond in conditions(exp):
        down, up = cond.link.down, cond.link.up
        key = (cond.link.max_rate_mbit, cond.link.has_trace, down.aqm, up.aqm)
        if key not in chosen:
            chosen[key] = choose_backend(backend, *key[:2], (down.aqm, up.aqm))
        check_links(down, up, chosen[key], f"{exp.file}: {cond.label}: ")
        out[cond.id] = chosen[key]
    return out
