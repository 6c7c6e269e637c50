"""The bounds on what quicbed reads (issue 46: a hostile stack image or results folder must not
reach the host), and the readers that keep them.

Every figure is far above what a real run needs, so only a hostile or broken input meets one:
it is refused with one line naming the file (and line), never a traceback, a hang or a
MemoryError, and never with the refused file's bytes in the message (a trace naming
/etc/shadow must not print its first line).
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

# --- an experiment's size (experiments/schema.py), counted before any matrix is built --------
# The paper's full web sweep is 24 conditions and about 1,900 trials; these leave two orders of
# magnitude of room and stop a sweep of three 1,600-value axes (4e9 conditions) at validation.
MAX_CONDITIONS = 10_000
MAX_TRIALS = 1_000_000

# --- trace files (topology/traces.py) -----------------------------------------------------------
# The shipped traces are under 1 MiB; 5,000,000 opportunities of 8-digit timestamps fit in 64 MiB.
TRACE_MAX_BYTES = 64 * 1024 * 1024
# A trace repeats with its period, so no trial needs a longer one; 24 h is the longest trial
# (timeout_s <= 86,400 s) and keeps the delay line's uint32 millisecond timestamps (49 days) and
# calibration's per-window arrays (864,000 windows of 100 ms) small.
TRACE_MAX_MS = 24 * 3600 * 1000

# --- what tools and run directories hand back --------------------------------------------------
# A row is a few KB (a video row with its player settings under 20 KB).
ROW_LINE_MAX_BYTES = 1024 * 1024
# A tool's whole stdout (one row per repetition of its run, a browser's per-second trace).
TOOL_OUTPUT_MAX_BYTES = 64 * 1024 * 1024
# A run's JSON files beside the rows: manifest.json (experiment text, calibrations: < 1 MiB),
# a player's or the cross flows' trace of one trial.
RUN_JSON_MAX_BYTES = 64 * 1024 * 1024


class TooBig(ValueError):
    """A file or line over its bound, or not a regular file: the message names no content."""


def open_regular(path: Path | str, follow: bool = True) -> BinaryIO:
    """A regular file opened for reading. O_NONBLOCK so a FIFO cannot hang the open; the type
    is checked on the open descriptor (fstat), so a swap after a check cannot fool it; with
    follow=False a symbolic link is refused (O_NOFOLLOW) instead of read through."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise TooBig("a symbolic link (name the file itself)") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise TooBig(f"not a regular file ({_kind(mode)})")
    return os.fdopen(fd, "rb")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file"


def read_bounded(path: Path | str, limit: int, follow: bool = True) -> bytes:
    """A regular file's bytes, refused (TooBig) when over `limit`: its size is checked before
    reading, and the read stops at limit + 1 bytes in case it grew meanwhile."""
    with open_regular(path, follow) as f:
        if os.fstat(f.fileno()).st_size > limit:
            raise TooBig(f"larger than {_size(limit)}")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooBig(f"larger than {_size(limit)}")
    return data


def bounded_lines(f: BinaryIO, limit: int = ROW_LINE_MAX_BYTES) -> Iterator[tuple[int, bytes]]:
    """(line number, line with its newline if it has one) of a binary file; a line over
    `limit` bytes is refused (TooBig naming its number) without reading the rest of it."""
    number = 0
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        number += 1
        if len(line) > limit and not (len(line) == limit + 1 and line.endswith(b"\n")):
            raise TooBig(f"line {number} is longer than {_size(limit)}")
        yield number, line


def _size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit // 1024} KiB"


WATCH_EVERY_S = 5.0  # run_capped's watchdog: how often it is asked while the command runs


def run_capped(
    argv: list[str],
    timeout: float,
    cap: int = TOOL_OUTPUT_MAX_BYTES,
    watchdog: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """subprocess.run(argv, capture_output=True, text=True, timeout=timeout) with a bound: a
    command that prints more than `cap` bytes on stdout or stderr is killed there and TooBig
    raised, instead of root's memory filling (a container's tool printing without end)."""
    # Its own process group: what it started (a shell's children) ends with it.
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    kept = (bytearray(), bytearray())

    def kill() -> None:
        try:
            os.killpg(process.pid, 9)
        except ProcessLookupError:
            pass

    def drain(stream: BinaryIO, buffer: bytearray) -> None:
        while chunk := stream.read(1 << 16):
            if len(buffer) <= cap:
                buffer += chunk[: cap + 1 - len(buffer)]
                if len(buffer) > cap:
                    kill()
        stream.close()

    assert process.stdout and process.stderr
    streams = (process.stdout, process.stderr)
    pairs = zip(streams, kept, strict=True)
    readers = [threading.Thread(target=drain, args=pair, daemon=True) for pair in pairs]
    for reader in readers:
        reader.start()
    try:
        _wait(process, timeout, watchdog)
    except BaseException:  # the timeout, or Ctrl-C: the group is in its own session, so ended here
        kill()
        process.wait()
        raise
    finally:
        for reader in readers:
            reader.join(timeout=5)
    if any(len(buffer) > cap for buffer in kept):
        raise TooBig(f"printed over {_size(cap)}; stopped there")
    out, err = (bytes(buffer) for buffer in kept)
    return subprocess.CompletedProcess(
        argv, process.returncode, out.decode(errors="replace"), err.decode(errors="replace")
    )


def _wait(process: subprocess.Popen[bytes], timeout: float, watchdog: Callable[[], None] | None) -> None:
    """process.wait(timeout), asking the watchdog (which raises to give up) every
    WATCH_EVERY_S while it runs."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            process.wait(timeout=max(0.0, min(left, WATCH_EVERY_S)) if watchdog else max(0.0, left))
            return
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(process.args, timeout) from None
            if watchdog:
                watchdog()
