"""Per-trial capture (experiment `capture: [qlog, pcap, keys]`): the files of the contract in
quicbed/rowschema.py (CAPTURE_FILES), written into the trial's directory trials/<trial id>/.

- pcap: the host's tcpdump in the client's network namespace, on its interface on the path,
  started and seen listening before the tool runs, stopped (SIGINT: it flushes) after it exits;
  it writes straight into the run directory, so nothing is copied.
- keys and the client's qlog: the tool writes them itself (its adapter's keylog_flag and
  qlog_flag, clients/tools.py) into the run directory's trials/, bind-mounted into the client
  container at CLIENT_TRIALS for the condition: no per-trial copy (a `docker cp` costs 40 ms a
  file here).
- the server's qlog: a server whose descriptor says how (servers/<name>/server.yaml `qlog:`)
  writes one file per connection into its log directory; the files that appeared during the
  trial are concatenated into server.sqlog (JSON-SEQ allows it: each file starts with its
  header record) and removed.

What could not be written, and why, goes to the row's capture_missing.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed import rowschema, safefs
from quicbed.analysis import wire
from quicbed.clients.tools import Tool
from quicbed.servers.spec import LOG_MOUNT, ServerSpec
from quicbed.topology.marker import marked_argv

CLIENT_TRIALS = "/var/lib/quicbed/trials"  # the run directory's trials/ inside the client
LISTEN_TIMEOUT_S = 5.0  # tcpdump says "listening on" within ~50 ms; a busy host may be slower
STOP_TIMEOUT_S = 5.0
# A server writes a connection's qlog until the connection closes, just after the client's
# last packet: new files are awaited this long, and taken once their size holds still.
SERVER_QLOG_WAIT_S = 2.0
SETTLE_S = 0.1


class CaptureError(RuntimeError):
    """A capture could not start (the trial runs without it; the row says why)."""


class PacketCapture:
    """tcpdump on `intf` in the network namespace of `pid`, into `path`: full packets, or
    the first `snaplen` bytes of each (headers: what cross-traffic accounting reads); with
    `count`, only the first that many packets that match `expression` (a BPF filter)."""

    def __init__(
        self,
        pid: int,
        intf: str,
        path: Path,
        snaplen: int = 0,
        out_fd: int | None = None,
        count: int | None = None,
        expression: tuple[str, ...] = (),
    ) -> None:
        self.pid, self.intf, self.path, self.snaplen = pid, intf, path, snaplen
        # Given, tcpdump writes to this descriptor (its stdout) and never opens `path` itself:
        # in a directory a container can write, root's tcpdump would follow a link put there.
        self.out_fd = out_fd
        self.count, self.expression = count, expression
        self.proc: subprocess.Popen[bytes] | None = None
        self._said = b""

    def start(self) -> None:
        """Returns once tcpdump listens (its "listening on" line), so the tool's first packet
        is in the file; raises CaptureError with tcpdump's words otherwise."""
        self.launch()
        self.wait_listening()

    def launch(self) -> None:
        """tcpdump started, not yet listening: wait_listening() before the tool runs (two
        captures launched together wait out their start-up once)."""
        # --immediate-mode: packets still in a ring-buffer block at SIGINT would be lost.
        argv = [
            "tcpdump",
            "-i",
            self.intf,
            "-n",
            "-s",
            str(self.snaplen),
            "--immediate-mode",
            "-U",
            *(["-c", str(self.count)] if self.count else []),
            "-w",
            "-" if self.out_fd is not None else str(self.path),
            *self.expression,
        ]
        # -n alone enters the netns: nsenter execs tcpdump, so the pid is tcpdump's own.
        try:
            self.proc = subprocess.Popen(
                ["nsenter", "-t", str(self.pid), "-n", "--", *marked_argv(argv)],
                stdin=subprocess.DEVNULL,
                stdout=self.out_fd if self.out_fd is not None else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        finally:
            if self.out_fd is not None:  # tcpdump holds its own copy now (or never started)
                os.close(self.out_fd)
                self.out_fd = None

    def wait_listening(self) -> None:
        assert self.proc and self.proc.stderr
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        while b"listening on" not in self._said:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                said = self._said.decode(errors="replace").strip()[-200:]
                self.stop()
                raise CaptureError(f"tcpdump did not start: {said}")
            ready, _, _ = select.select([self.proc.stderr], [], [], left)
            if ready:
                self._said += os.read(self.proc.stderr.fileno(), 4096)

    def interrupt(self) -> None:
        """SIGINT without waiting: stop() then reaps it (two captures end together)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)

    def stop(self) -> None:
        """SIGINT: tcpdump writes out what it holds and exits."""
        if not self.proc:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None


def path_interface(intf_names: list[str], host: str = "client") -> str:
    """A host's interface on the emulated path: its only one besides lo."""
    names = [n for n in intf_names if n != "lo"]
    if len(names) != 1:
        raise CaptureError(f"the {host} has {len(names)} path interfaces ({', '.join(names)})")
    return names[0]


# --- the handshake on the wire (rowschema.WIRE: client_turn_ms, server_turn_ms, wire_rtts) ---
# Every trial of a tool that opens one connection per GET (the perf tools and the stack
# clients; not a browser, whose page load opens several) is captured at both ends, whatever
# its workload and whether the experiment asks for `capture:`: each such row's
# connection_time_ms is a fresh connection's handshake, which "Handshake arithmetic" judges
# (analysis/claims.py), so every one of them should carry its turns. Per trial, not per
# condition: a condition-long capture would take every packet of a cloud transfer (tcpdump's
# CPU beside the receiver on 2 cores), where a capture of the connection's first
# HANDSHAKE_PACKETS headers ends by itself (tcpdump -c) before the transfer does. Its cost is
# the two tcpdumps' start-up, waited out together, and the reading of their headers: capture_s,
# left out of wall_s as every capture's time is. Measured in the CI handshake run on india
# (2-core VM, steal 0 %, 2026-12-07): a median of 18-24 ms a trial per client; 47-61 ms when
# each stop waited for tcpdump's exit, which is now reaped aside (stop()).
HANDSHAKE_SNAPLEN = 96  # the link, IPv4 and TCP headers with options: all the turns read
# Packets per end: a TLS 1.2 handshake with its ACKs is about 15 at either end; 64 hold one
# with retransmissions. A capture that ends before the handshake does is refused, not read.
HANDSHAKE_PACKETS = 64
HANDSHAKE_READ_MAX = 1 << 20  # 64 headers are 7 KiB: anything more is not this capture's
HANDSHAKE_PORT = 443  # every server of the testbed listens there (TCP and UDP)


def handshake_tool(tool: Tool) -> bool:
    """Whether a trial of this tool is captured for its handshake (see above)."""
    return "cloud" in tool.workloads and not tool.browser


def handshake_filter(exclude: range) -> tuple[str, ...]:
    """The BPF filter of the trial's connection: port 443, less the client ports of `exclude`
    (the cross flows' own fetches from the same server, which would fill the count)."""
    return ("port", str(HANDSHAKE_PORT), "and", "not", "portrange", f"{exclude.start}-{exclude.stop - 1}")


@dataclass
class HandshakeCapture:
    """The first packets' headers of a trial's connection on the client's and the server's
    path interfaces, for the row's turns and wire RTTs (analysis/wire.py handshake_columns).

    tcpdump writes into an unnamed temporary file of the testbed's (O_TMPFILE, or unlinked
    as it is made; its descriptor passed as tcpdump's stdout): no path is ever built from a row, a trial id or
    anything a container can write, and none exists for anyone to replace."""

    ends: dict[str, tuple[int, list[str]]]  # "client"/"server" -> (namespace pid, interfaces)
    expression: tuple[str, ...]
    missing: str | None = None  # why the columns are absent
    spent_s: float = 0.0  # the captures' own time (capture_s)
    captures: dict[str, PacketCapture] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)  # end -> its temporary file
    data: dict[str, bytes] = field(default_factory=dict)  # end -> what tcpdump wrote

    def launch(self) -> None:
        """Both tcpdumps started; wait_listening() before the tool."""
        with self._timed():
            try:
                for end, (pid, intfs) in self.ends.items():
                    self.files[end] = tempfile.TemporaryFile(prefix="quicbed-handshake-")
                    self.captures[end] = PacketCapture(
                        pid, path_interface(intfs, end), Path(f"<{end} handshake headers>"),
                        HANDSHAKE_SNAPLEN, os.dup(self.files[end].fileno()), HANDSHAKE_PACKETS,
                        self.expression,
                    )  # fmt: skip
                    self.captures[end].launch()
            except (CaptureError, OSError) as exc:
                self._fail(f"tcpdump did not start: {exc}")

    def wait_listening(self) -> None:
        with self._timed():
            try:
                for capture in self.captures.values():
                    capture.wait_listening()
            except CaptureError as exc:
                self._fail(str(exc))

    def stop(self) -> None:
        """Right after the tool: both told to stop and their files read at once (-U wrote each
        packet as it came, and the handshake's came an RTT or more before the tool's end), and
        reaped aside: the kernel's close of a packet socket waits out a grace period (~30 ms
        here, SIGKILL alike) that no trial needs to spend."""
        with self._timed():
            for capture in self.captures.values():
                capture.interrupt()
            captures, self.captures = list(self.captures.values()), {}
            threading.Thread(target=_reap, args=(captures,), daemon=True).start()
            for end, file in self.files.items():
                file.seek(0)
                self.data[end] = file.read(HANDSHAKE_READ_MAX)
                file.close()
            self.files = {}

    def columns(self, row: dict[str, Any], rtt_ms: float | None) -> dict[str, Any]:
        """The row's wire columns, or capture_missing's "handshake" reason; and capture_s."""
        with self._timed():
            wire_columns = self._read(row, rtt_ms)
        spent = {"capture_s": round(row.get("capture_s", 0.0) + self.spent_s, 3)}
        if wire_columns is None:
            return {
                **spent,
                "capture_missing": {**(row.get("capture_missing") or {}), "handshake": self.missing},
            }
        return {**spent, **wire_columns}

    def _read(self, row: dict[str, Any], rtt_ms: float | None) -> dict[str, float] | None:
        if self.missing is None and set(self.data) != set(self.ends):
            self.missing = "the captures were not read"
        if self.missing is not None:
            return None
        try:
            seen = {end: wire.read_packets(data) for end, data in self.data.items()}
            for end, packets in seen.items():
                _covers_handshake(end, packets, row)
            return wire.handshake_columns(row, seen["client"], seen["server"], rtt_ms)
        except wire.WireError as exc:
            self.missing = str(exc)
            return None

    def _fail(self, why: str) -> None:
        self.missing = self.missing or why
        for capture in self.captures.values():
            capture.stop()
        self.captures = {}

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        clock = time.monotonic()
        try:
            yield
        finally:
            self.spent_s += time.monotonic() - clock


def _reap(captures: list[PacketCapture]) -> None:
    for capture in captures:
        capture.stop()


def _covers_handshake(end: str, packets: list[wire.Packet], row: dict[str, Any]) -> None:
    """A capture that reached its count before handshake done lacks the end of it."""
    t_handshake = row.get("t_handshake")
    if (
        len(packets) >= HANDSHAKE_PACKETS
        and isinstance(t_handshake, int | float)
        and packets[-1][0] < t_handshake
    ):
        raise wire.WireError(f"the {end}'s first {HANDSHAKE_PACKETS} packets ended before the handshake did")


class ServerQlog:
    """The qlog files a server writes into its log directory (host side), per trial.

    The server can write that directory (it is mounted read-write): every file is listed,
    copied and removed through safefs, below `anchor` (the run directory), never through a
    link it put there, and only regular files of at most safefs.MAX_FILE_BYTES are taken."""

    def __init__(self, log_dir: Path, spec: ServerSpec, anchor: Path | None = None) -> None:
        self.dir = log_dir / Path(spec.qlog_dir).relative_to(LOG_MOUNT)
        self.anchor = anchor if anchor is not None and log_dir.is_relative_to(anchor) else log_dir
        self.rel = self.dir.relative_to(self.anchor)

    def forget_earlier(self) -> None:
        """Files of connections before the trial (health checks, warm-ups) are no trial's."""
        with safefs.opened_dir(self.anchor, self.rel) as qlog:
            if qlog is None:  # not made yet, or not a directory: nothing of ours to remove
                return
            for name in qlog.names():
                qlog.unlink(name)  # a link is removed itself, never its target

    def collect(self, dest: safefs.SafeDir, name: str) -> bool:
        """The trial's files, once written out, appended to `name` in dest; False if none came."""
        with safefs.opened_dir(self.anchor, self.rel) as qlog:
            if qlog is None:  # not made yet (the server wrote nothing), or not a directory
                return False
            files = sorted(self._settled(qlog).items(), key=lambda item: item[1])
            if not files:
                return False
            out = dest.open_file(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                copied = [self._move(qlog, file, out) for file, _ in files]
            finally:
                os.close(out)
            return any(copied)

    @staticmethod
    def _settled(qlog: safefs.SafeDir) -> dict[str, int]:
        """Regular file name -> mtime, once their sizes hold still (or the wait is over)."""
        deadline = time.monotonic() + SERVER_QLOG_WAIT_S
        sizes: dict[str, tuple[int, int]] = {}
        while time.monotonic() < deadline:
            now = {n: (st.st_size, st.st_mtime_ns) for n, st in qlog.regular_files().items()}
            if now and {n: v[0] for n, v in now.items()} == {n: v[0] for n, v in sizes.items()}:
                sizes = now
                break
            sizes = now
            time.sleep(SETTLE_S)
        return {n: v[1] for n, v in sizes.items()}

    @staticmethod
    def _move(qlog: safefs.SafeDir, name: str, out: int) -> bool:
        """One file appended to out and removed; a link, FIFO or oversized file only removed."""
        try:
            return qlog.copy_out(name, out) > 0
        except (safefs.UnsafeFile, FileNotFoundError):
            return False
        finally:
            qlog.unlink(name)


@dataclass
class TrialCapture:
    """One trial's capture: what the executor starts before the tool and ends after it."""

    kinds: tuple[str, ...]
    run_dir: Path
    trial_id: str
    tool: Tool
    quic: bool  # the trial's protocol is QUIC (qlog is QUIC's)
    server: ServerSpec
    server_log_dir: Path  # the server's log directory on the host
    client_root: str  # the run directory's trials/ as the tool sees it
    missing: dict[str, str] = field(default_factory=dict)
    pcap: PacketCapture | None = None
    qlog: ServerQlog | None = None
    spent_s: float = 0.0  # the capture's own time, which the row's wall_s leaves out

    @property
    def rel_dir(self) -> str:
        return rowschema.capture_dir(self.trial_id)

    @property
    def dir(self) -> Path:
        return self.run_dir / self.rel_dir

    def _tool_path(self, kind: str) -> str:
        name = rowschema.CAPTURE_FILES[kind]
        return f"{self.client_root}/{Path(self.rel_dir).name}/{name}"

    def tool_args(self) -> list[str]:
        """The tool's capture flags (its adapter's), and the reasons for what it cannot."""
        keylog = qlog = None
        if "keys" in self.kinds:
            if self.tool.keylog_flag:
                keylog = self._tool_path("keys")
            else:
                self.missing["keys"] = f"{self.tool.name} takes no key log"
        if "qlog" in self.kinds:
            if not self.quic:
                self.missing["qlog/client"] = "TCP trial: qlog is QUIC's"
            elif self.tool.qlog_flag:
                qlog = self._tool_path("qlog/client")
            else:
                self.missing["qlog/client"] = self.tool.no_qlog or f"{self.tool.name} writes no qlog"
        return self.tool.capture_argv(keylog, qlog)

    def start(self, pid: int, intf_names: list[str]) -> None:
        """Before the tool: the directory, the server's earlier qlog files away, tcpdump."""
        clock = time.monotonic()
        try:
            self._start(pid, intf_names)
        finally:
            self.spent_s += time.monotonic() - clock

    def _trial_dir(self, create: bool = False) -> safefs.SafeDir:
        """The trial's directory, reached from the run directory without following a link:
        the client container can write trials/ and everything below it."""
        return safefs.open_dir(self.run_dir, self.rel_dir, create=create)

    def _start(self, pid: int, intf_names: list[str]) -> None:
        try:
            trial = self._trial_dir(create=True)
        except OSError as exc:  # made a link (or a file) by the client: nothing is written there
            self._unusable(exc)
            return
        with trial:
            for name in rowschema.CAPTURE_FILES.values():  # a retried trial starts afresh
                trial.unlink(name)
            if "keys" in self.kinds and self.tool.keylog_flag:  # secrets: 0600 from the start
                os.close(trial.create_private(rowschema.CAPTURE_FILES["keys"]))
            self._start_qlog()
            if "pcap" in self.kinds:
                self._start_pcap(trial, pid, intf_names)

    def _start_qlog(self) -> None:
        if "qlog" in self.kinds:
            if not self.quic:
                self.missing["qlog/server"] = "TCP trial: qlog is QUIC's"
            elif self.server.qlog_env:
                self.qlog = ServerQlog(self.server_log_dir, self.server, anchor=self.run_dir)
                self.qlog.forget_earlier()
            else:
                self.missing["qlog/server"] = self.server.no_qlog or f"{self.server.name} writes no qlog"

    def _start_pcap(self, trial: safefs.SafeDir, pid: int, intf_names: list[str]) -> None:
        name = rowschema.CAPTURE_FILES["pcap"]
        try:
            intf = path_interface(intf_names)
            out = trial.open_file(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            self.pcap = PacketCapture(pid, intf, self.dir / name, out_fd=out)
            self.pcap.start()
        except (CaptureError, OSError) as exc:
            self.pcap = None
            self.missing["pcap"] = str(exc)

    def pcap_path(self) -> Path | None:
        """The full-packet capture being written, if there is one (cross traffic reads it)."""
        return self.pcap.path if self.pcap else None

    def stop_packets(self) -> None:
        """Right after the tool exits: tcpdump flushes and ends."""
        clock = time.monotonic()
        if self.pcap:
            self.pcap.stop()
        self.spent_s += time.monotonic() - clock

    def finish(self) -> dict[str, Any]:
        """After the server has logged the trial: its qlog; then the row's capture columns."""
        self.stop_packets()
        clock = time.monotonic()
        try:
            with self._trial_dir() as trial:
                files = self._finish_in(trial)
        except OSError as exc:  # the trial's directory is gone or was made a link: nothing taken
            files = []
            self._unusable(exc)
        self.spent_s += time.monotonic() - clock
        return {
            "capture_files": files,
            "capture_missing": dict(sorted(self.missing.items())),
            "capture_s": round(self.spent_s, 3),
        }

    def _unusable(self, exc: OSError) -> None:
        for kind in rowschema.CAPTURE_FILES:
            if self._asked(kind):
                self.missing.setdefault(kind, f"trial directory unusable: {exc.strerror or exc}")

    def _finish_in(self, trial: safefs.SafeDir) -> list[str]:
        """The server's qlog in, the key log 0600, strays out; the files the row names."""
        if self.qlog and not self.qlog.collect(trial, rowschema.CAPTURE_FILES["qlog/server"]):
            self.missing["qlog/server"] = f"{self.server.name} wrote no qlog during the trial"
        trial.make_private(rowschema.CAPTURE_FILES["keys"])  # the tool may have made it anew
        files = []
        for kind, name in rowschema.CAPTURE_FILES.items():
            if not self._asked(kind):
                continue
            st = trial.lstat(name)  # a link or a FIFO the client left is no capture file
            if st is not None and stat.S_ISREG(st.st_mode) and 0 < st.st_size <= safefs.MAX_FILE_BYTES:
                files.append(f"{self.rel_dir}/{name}")
            elif kind not in self.missing:
                self.missing[kind] = f"{self._writer(kind)} wrote nothing"
        _remove_stray_dir(trial, "client.sqlog.d")
        return files

    def _asked(self, kind: str) -> bool:
        return kind.split("/")[0] in self.kinds

    def _writer(self, kind: str) -> str:
        return {"pcap": "tcpdump", "qlog/server": self.server.name}.get(kind, self.tool.name)


def _remove_stray_dir(trial: safefs.SafeDir, name: str) -> None:
    """libcurl's QLOGDIR, if the tool died before its end: its entries, then itself; a link
    in its place is removed as a link, and nothing below it is followed."""
    with contextlib.suppress(OSError):
        with trial.subdir(name) as stray:
            for entry in stray.names():
                stray.unlink(entry)
        trial.rmdir(name)
    st = trial.lstat(name)
    if st is not None and stat.S_ISLNK(st.st_mode):
        trial.unlink(name)
