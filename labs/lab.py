"""`quicbed lab PROFILE`: the path, a server and a Mininet CLI for one student, torn down
however the session ends.

Every lab has an id (`--id`, default a fresh one). It names the lab's containers
(`quicbed-ID-client`), its state directory (STATE/labs/ID: PKI, server logs, lab.json), the
testbed's run directory (STATE/runs/ID: UML, QEMU or delay-line control files) and so its
router, so two labs on one host share nothing by name; `quicbed clean --lab ID` removes one lab, plain
`quicbed clean` every one. Node names inside a lab stay `client`, `router`, `server`: each
lab's veths are made directly inside its own namespaces (topology/net.py), never in the host's.

Ends: `exit` or Ctrl-D at the prompt, Ctrl-C at the prompt (during a command Ctrl-C stops the
command, as in Mininet), SIGTERM, and SIGHUP (the terminal closed). SIGHUP and SIGTERM raise
LabClosed, which is not an Exception (Mininet's CLI catches KeyboardInterrupt and goes on) and
is installed even when the signal was inherited as ignored: the backed-out first attempt kept
an ignored SIGHUP ("nohup semantics"), so a lab started by a test runner that ignores SIGHUP
(nohup, a CI runner, a job started with SIGHUP masked) never ended on it, and its test, which
had no timeout-and-kill around it, waited. A lab without its terminal has no use.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quicbed.errors import InputError, QuicbedError
from quicbed.experiments.options import PathOptions
from quicbed.paths import STATE
from quicbed.topology.marker import mark_scope

LABS = STATE / "labs"
LAB_ID = re.compile(r"^[a-z0-9]{1,12}$")
CLOSING_SIGNALS = (signal.SIGHUP, signal.SIGTERM)
DEFAULT_SERVER = "nginx"  # TLS 1.2, TLS 1.3 and HTTP/3 from one server
AUTO_PATH = PathOptions()  # auto's backend, each tool's own image


class LabClosed(BaseException):
    """SIGHUP or SIGTERM during a lab: unwinds through Mininet's CLI to the teardown."""


def new_lab_id() -> str:
    return secrets.token_hex(3)


def check_lab_id(lab_id: str) -> str:
    if not LAB_ID.match(lab_id):
        raise InputError(f"--id: {lab_id!r}: 1-12 lowercase letters or digits")
    return lab_id


def lab_dir(lab_id: str) -> Path:
    return LABS / lab_id


def _silence_output() -> None:
    # The terminal is gone: writing to it (EIO) must not break the teardown that follows.
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)


def _close(signum: int, frame: object) -> None:
    if signum == signal.SIGHUP:
        _silence_output()
    # Once closing, further signals must not cut the teardown short.
    for sig in CLOSING_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise LabClosed


@contextlib.contextmanager
def closing_signals() -> Iterator[None]:
    """SIGHUP and SIGTERM end the lab, even if inherited as ignored (see the module doc); so
    does Ctrl-C at the prompt: Python leaves SIGINT ignored when it starts with it ignored
    (nohup, some runners and test harnesses), so KeyboardInterrupt is put back here."""
    previous = {sig: signal.signal(sig, _close) for sig in CLOSING_SIGNALS}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@dataclass(frozen=True)
class LabRecord:
    """What `quicbed clean --lab ID` needs to find a lab, written when it is up."""

    lab_id: str
    pid: int  # the `quicbed lab` process
    netns: tuple[str, ...]  # the namespaces of its namespace-only nodes (router, cross)
    profile: str

    def write(self) -> None:
        path = lab_dir(self.lab_id) / "lab.json"
        path.write_text(
            json.dumps(
                {"id": self.lab_id, "pid": self.pid, "netns": list(self.netns), "profile": self.profile}
            )
        )

    @classmethod
    def read(cls, lab_id: str) -> LabRecord | None:
        try:
            data = json.loads((lab_dir(lab_id) / "lab.json").read_text())
        except (OSError, ValueError):
            return None
        return cls(data["id"], int(data["pid"]), tuple(data["netns"]), data["profile"])


def netns_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def first_commands(server_url: str) -> list[str]:
    return [
        "client ping -c 3 server",
        f"client tls_perf --url {server_url} --cacert /etc/quicbed/pki/ca.pem --tls 1.3 -n 3",
        f"client quic_perf --url {server_url} --cacert /etc/quicbed/pki/ca.pem -n 3",
        "link down.queue_ms=200    (change the path: any --set; `link` alone restores it)",
        "cc bbr                    (TCP congestion control of every host)",
        "play quic                 (20 s of DASH video in headless Chromium: startup, stalls)",
    ]


def topology_lines(tb: Any, lab_id: str, server: str) -> list[str]:
    from quicbed.topology.net import ADDRESSES, ROUTER_CLIENT_IP, ROUTER_SERVER_IP

    p = tb.profile
    return [
        f"quicbed lab {lab_id}: {p.name} ({p.description}); link backend {tb.backend.name}"
        + (f" ({tb.backend_choice.reason})" if tb.backend_choice else ""),
        f"  client {ADDRESSES['client']} ─┐                                   ┌─ server "
        f"{ADDRESSES['server']} ({server})",
        f"  cross  {ADDRESSES['cross']} ─┴─ {ROUTER_CLIENT_IP} router {ROUTER_SERVER_IP} ─┘",
        f"  down {p.down.rate_text()} Mbit/s {p.down.delay_ms:g} ms {p.down.loss_pct:g} % loss; "
        f"up {p.up.rate_text()} Mbit/s {p.up.delay_ms:g} ms {p.up.loss_pct:g} % loss",
    ]


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _zombie(pid):
            return True
        time.sleep(0.1)
    return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def clean_lab(lab_id: str, say: Callable[[str], None] = lambda _m: None) -> list[str]:
    """Remove one lab: ask its process to tear down (SIGTERM), then remove what is left."""
    from quicbed.topology.clean import CleanLeftSome, clean_testbed

    check_lab_id(lab_id)
    record = LabRecord.read(lab_id)
    removed: list[str] = []
    if record and Path(f"/proc/{record.pid}").exists() and "quicbed" in _cmdline(record.pid):
        say(f"asking lab {lab_id} (pid {record.pid}) to tear down")
        os.kill(record.pid, signal.SIGTERM)
        if wait_gone(record.pid, 60):
            removed.append(f"lab process {record.pid} (torn down)")
    try:
        removed += clean_testbed(
            lab_id, owner=record.pid if record else None, netns=record.netns if record else ()
        )
    except CleanLeftSome as left:  # the lab's record stays: a second clean --lab finds the rest
        left.removed[:0] = removed
        raise
    shutil.rmtree(lab_dir(lab_id), ignore_errors=True)
    return removed


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def lab_cli_class(tb: Any) -> type:
    from mininet.cli import CLI
    from mininet.log import error, output

    from quicbed.labs.exercises import set_congestion_control
    from quicbed.topology.profiles import apply_overrides, parse_overrides

    class LabCLI(CLI):
        """Mininet's CLI with two lab commands, and Ctrl-C at the prompt ends the lab (Mininet
        prints "Interrupt" and goes on); Ctrl-C during a command still stops the command."""

        prompt = "lab> "
        base = tb.profile

        def run(self) -> None:
            try:
                self.cmdloop()
            except KeyboardInterrupt:
                output("\n")

        def do_link(self, line: str) -> None:
            """Change the path: link KEY=VALUE ... (as quicbed's --set: loss_pct=5,
            down.queue_ms=200, down.rate_mbit=10); `link` alone restores the profile."""
            try:
                profile = apply_overrides(self.base, parse_overrides(line.split()))
                tb.apply_link(profile.down, profile.up)
                tb.profile = profile
            except QuicbedError as exc:
                error(f"link: {exc}\n")
                return
            output("\n".join(topology_lines(tb, "", "")[3:]) + "\n")

        def do_play(self, line: str) -> None:
            """Play the DASH video in a fresh headless Chromium and print its QoE:
            play quic|tls1.3|tls1.2 [SECONDS] (of media; default 20)."""
            from quicbed.labs.exercises import playback, playback_line

            words = line.split()
            if (
                not words
                or words[0] not in ("quic", "tls1.3", "tls1.2")
                or len(words) > 2
                or (len(words) == 2 and not (words[1].isdigit() and 1 <= int(words[1]) <= 180))
            ):
                error("play: usage: play quic|tls1.3|tls1.2 [SECONDS of media, 1-180]\n")
                return
            try:
                row = playback(tb, words[0], int(words[1]) if len(words) == 2 else None)
            except RuntimeError as exc:
                error(f"play: {exc}\n")
                return
            output(playback_line(words[0], row) + "\n")

        def do_cc(self, line: str) -> None:
            """TCP congestion control of every host from now on: cc cubic|bbr|reno."""
            try:
                set_congestion_control(tb, line.strip() or "cubic")
            except QuicbedError as exc:
                error(f"cc: {exc}\n")
                return
            output(f"TCP congestion control: {line.strip() or 'cubic'}\n")

    return LabCLI


@contextlib.contextmanager
def lab_path(
    profile: Any,
    *,
    lab_id: str | None = None,
    server: str = DEFAULT_SERVER,
    path: PathOptions = AUTO_PATH,
    tcp_cc: str = "cubic",
) -> Iterator[Any]:
    """The lab's path and server, recorded for `quicbed clean --lab`; torn down on the way
    out, however it is left. Used by the CLI, the checker and the Containernet-style API.
    `path` is the one record a run's executor is given too (its backend and client image; a
    lab measures whatever its calibration says, so `force` does not apply)."""
    from quicbed.servers.testbed import served_testbed
    from quicbed.topology.net import DEFAULT_IMAGE
    from quicbed.workloads import ensure_content, player
    from quicbed.workloads.cloud import ensure_files
    from quicbed.workloads.store import default_root

    lab_id = check_lab_id(lab_id or new_lab_id())
    record = LabRecord.read(lab_id)
    if record and Path(f"/proc/{record.pid}").exists() and not _zombie(record.pid):
        raise InputError(
            f"--id: lab {lab_id} is running (pid {record.pid}); " f"end it or `quicbed clean --lab {lab_id}`"
        )
    directory = lab_dir(lab_id)
    directory.mkdir(parents=True, exist_ok=True)
    mark_scope(directory)
    # The experiments' content root: the video ladder is made once for both (minutes).
    root = default_root()
    ensure_content(root, {"web", "video"})
    ensure_files(root, ["5KB", "1MB", "10MB"])
    player.ensure_player(root)  # the DASH player page of the video exercise's `play`
    try:
        with served_testbed(
            profile,
            [server],
            log_root=directory / "logs",
            pki_dir=directory / "pki",
            content_dir=root,
            backend=path.backend,
            client_image=path.client_image or DEFAULT_IMAGE,
            tcp_cc=tcp_cc,
            start=True,
            run_id=lab_id,
        ) as (tb, _hosts):
            LabRecord(
                lab_id, os.getpid(), (netns_of(tb.router.pid), netns_of(tb.cross.pid)), profile.name
            ).write()
            yield tb
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_lab(
    profile: Any,
    *,
    lab_id: str,
    server: str = DEFAULT_SERVER,
    path: PathOptions = AUTO_PATH,
    tcp_cc: str = "cubic",
    calibrate_first: bool = True,
) -> int:
    """Bring the lab up, print its topology, calibration and first commands, run the CLI,
    tear down. Raises LabClosed on SIGHUP/SIGTERM (after the teardown)."""
    from quicbed.servers.testbed import SERVER_NAME
    from quicbed.topology.calibrate import calibrate
    from quicbed.topology.calibration_table import print_calibration

    with (
        closing_signals(),
        lab_path(profile, lab_id=lab_id, server=server, path=path, tcp_cc=tcp_cc) as tb,
    ):
        print("\n".join(topology_lines(tb, lab_id, server)), flush=True)
        if calibrate_first:
            print("calibrating (about 15 s) ...", flush=True)
            print_calibration(calibrate(tb, rtt_samples=20, udp_packets=2000, goodput_seconds=2.0))
        print("try:", *(f"  {c}" for c in first_commands(f"https://{SERVER_NAME}/web/index.html")), sep="\n")
        print(
            f"end: exit, Ctrl-D or Ctrl-C here; from another terminal: " f"quicbed clean --lab {lab_id}",
            flush=True,
        )
        lab_cli_class(tb)(tb.net)
    return 0
