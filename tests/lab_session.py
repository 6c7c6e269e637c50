"""A `quicbed lab` in its own session on a pseudo-terminal, as a student's terminal runs it:
the lab is the session leader with the pty as its controlling terminal, so closing the pty's
master is a real hang-up (the kernel sends SIGHUP), not a signal from the test. Every wait has
a deadline, and `close()` kills the lab's whole session and cleans the lab, so a lab that does
not end can fail its test but never hang the suite or leave the path to the next test."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

START_TIMEOUT = 150.0  # bring-up with a UML router and the server, plus the short calibration


class LabSession:
    def __init__(
        self, profile: str, lab_id: str, *extra: str, ignored: tuple[signal.Signals, ...] = ()
    ) -> None:
        self.lab_id = lab_id
        self.master, slave = pty.openpty()
        # A terminal 200 columns wide: the calibration table's rows stay one line each.
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        # setsid -c: a new session whose controlling terminal is stdin (the pty); the pid
        # stays the lab's (no fork: the child of Popen is no process-group leader).
        argv = ["setsid", "-c", sys.executable, "-m", "quicbed.cli", "lab", profile, "--id", lab_id, *extra]

        # ignored: signals the lab inherits as ignored, as from nohup (SIGHUP) or a runner
        # that starts its jobs with SIGINT ignored; the lab must end on them all the same.
        def ignore() -> None:
            for sig in ignored:
                signal.signal(sig, signal.SIG_IGN)

        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            preexec_fn=ignore,  # only a signal disposition
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                # rich sizes a dumb terminal 80x25 unless both
                # COLUMNS and LINES are set
                "COLUMNS": "200",
                "LINES": "50",
                "TERM": "dumb",
            },
        )
        os.close(slave)
        self.seen = ""

    def expect(self, pattern: str, timeout: float) -> re.Match[str]:
        """Read until `pattern` (a regex) is in the output since the last match."""
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, self.seen)
            if match:
                self.seen = self.seen[match.end() :]
                return match
            left = deadline - time.monotonic()
            if left <= 0 or self.master < 0:
                raise AssertionError(f"no {pattern!r} within {timeout} s; got:\n{self.seen[-3000:]}")
            ready, _, _ = select.select([self.master], [], [], min(left, 1.0))
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # EIO: the lab closed its end
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"lab ended before {pattern!r}:\n{self.seen[-3000:]}")
                self.seen += chunk.decode(errors="replace")

    def started(self) -> None:
        self.expect(r"lab> ", START_TIMEOUT)

    def command(self, line: str, timeout: float = 180) -> str:
        """Type a command at the prompt; return its output, up to the next prompt."""
        os.write(self.master, line.encode() + b"\n")
        return self.expect(r"(?s)^(.*?)lab> ", timeout).group(1)

    def hang_up(self) -> None:
        os.close(self.master)
        self.master = -1

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        """Whatever happened: kill the lab's session, then clean this lab."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        if self.master >= 0:
            os.close(self.master)
            self.master = -1
        subprocess.run(
            [sys.executable, "-m", "quicbed.cli", "clean", "--lab", self.lab_id],
            capture_output=True,
            timeout=120,
        )
