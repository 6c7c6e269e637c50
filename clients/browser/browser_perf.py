#!/opt/browser/bin/python3
"""browser_perf: page loads in a headless browser, one fresh browser per load, as JSON rows.

    browser_perf --url https://server.quicbed/web/pages/news/index.html \\
                 --resolve server.quicbed:443:10.0.1.2 --cacert /etc/quicbed/pki/ca.pem \\
                 -n 1 --cpu --timeout 30 --protocol quic|tls1.3|tls1.2 \\
                 [--browser chromium-full|headless-shell|firefox]

Each load starts a new browser process (Debian's Chromium driven by Playwright for Python, or
Debian's firefox-esr over WebDriver BiDi) with a new profile directory and a new HOME under
/tmp/quicbed-browser-*, whose NSS database trusts the run's CA and nothing else of the run;
both are deleted on every exit path. One JSON object per load on stdout (keys:
clients/browser/README.md); exit 0 when every row has error == "", 1 otherwise, 2 on a usage
error, 3 for a valid request this client cannot do.

This file is the command line and the loop over loads; the rest lives beside it along its
seams: page_row.py (the row, the protocol proof, the error categories), proc_watch.py (the
browser's processes, CPU and sockets from /proc), load_common.py (what every load shares),
chromium_driver.py and firefox_driver.py (one load in each browser). The pure parts import
nothing outside the standard library, so the unit tests load this file on the host, where
Playwright and the browsers are not installed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NoReturn
from urllib.parse import urlsplit

# The modules live beside this file (/opt/browser/src in the image, where the command is a link).
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import chromium_driver
import firefox_driver
from chromium_driver import (  # noqa: F401 - the names the unit tests and tools know
    BROWSERS,
    CANNOT_PIN,
    DEFAULT_BROWSER,
    LEAN_SWITCHES,
    Load,
    chromium_args,
)
from load_common import PLAYER_PAGE, BrowserLoad
from page_row import (  # noqa: F401
    ERROR_CATEGORIES,
    EXPECTED,
    PLAYER_KEYS,
    ROW_KEYS,
    LoadError,
    add_cpu,
    build_row,
    categorize,
    drop_cancelled,
    drop_favicon,
    empty_row,
    http_problems,
    judge,
    one_line,
)
from proc_watch import (  # noqa: F401
    HARD_GRACE_S,
    CpuSnapshot,
    allowed_cpu_jiffies,
    children_of,
    cpu_limits,
    kill_marked,
    process_kind,
)

VERSION = "1.3"
# --settle's default cap: 1000 ms took chromium-full from 8 of 8 CPU-bound germany loads to 0
# of 8 (bench/README.md); the wait ends as soon as the browser is quiet (proc_watch.py).
SETTLE_CAP_MS = 1000
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNSUPPORTED = 0, 1, 2, 3
# --browser -> the driver module that loads a page in it: each has BROWSERS (name ->
# executable), CANNOT_PIN, versions(browser), version_line() and new_load(args, rep, vers).
DRIVERS: dict[str, ModuleType] = {
    **dict.fromkeys(chromium_driver.BROWSERS, chromium_driver),
    **dict.fromkeys(firefox_driver.BROWSERS, firefox_driver),
}


# ------------------------------------------------------------------------------ arguments


class UsageError(Exception):
    """Exit 2: a flag or value this tool does not take."""


class Unsupported(Exception):
    """Exit 3: a valid request this client cannot do."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print the whole usage
        raise UsageError(message)


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
        return value

    return parse


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not JSON: {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("not a JSON object")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


@dataclass(frozen=True)
class Resolve:
    host: str
    port: int
    address: str


def _resolve(text: str) -> Resolve:
    host, sep, rest = text.partition(":")
    port, sep2, address = rest.partition(":")
    if not (host and sep and sep2 and address and port.isdigit() and 0 < int(port) < 65536):
        raise argparse.ArgumentTypeError(f"expected NAME:PORT:ADDRESS, got {text!r}")
    return Resolve(host.lower(), int(port), address.strip("[]"))


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The contract's arguments (clients/tools.py). UsageError for a bad flag or value,
    Unsupported for a valid request this client cannot do."""
    p = _Parser(
        prog="browser_perf",
        add_help=True,
        description="Page loads in a fresh headless browser; one JSON row per load.",
    )
    p.add_argument("--url", required=True)
    p.add_argument(
        "--resolve",
        type=_resolve,
        action="append",
        default=[],
        metavar="NAME:PORT:ADDRESS",
        help="the only name resolution (no DNS)",
    )
    p.add_argument("--cacert", required=True, help="the CA the browser trusts (PEM)")
    p.add_argument(
        "-n",
        "--repetitions",
        type=_positive(int),
        default=1,
        help="loads, each in a new browser process with a new profile",
    )
    p.add_argument("--pause", type=_non_negative_int, default=0, metavar="MS", help="pause between loads")
    p.add_argument(
        "--settle",
        type=_non_negative_int,
        default=SETTLE_CAP_MS,
        metavar="MS",
        help="after the browser starts, wait until it is quiet (a tenth of a core over 100 ms), "
        f"at most MS (default {SETTLE_CAP_MS}; 0: navigate at once), before navigating: its "
        "start-up work (a spare renderer, its own services) out of the timed window",
    )
    p.add_argument("--cpu", action="store_true", help="accepted for the contract: CPU is always measured")
    p.add_argument(
        "--timeout",
        type=_positive(float),
        default=30.0,
        metavar="S",
        help="page load timeout (navigation start to the load event)",
    )
    p.add_argument("--protocol", choices=tuple(EXPECTED), default="quic")
    p.add_argument(
        "--browser",
        choices=tuple(DRIVERS),
        default=DEFAULT_BROWSER,
        help="the full Chromium (default), Debian's chromium-headless-shell (lean: a fifth of "
        "the CPU; QUIC and TLS 1.3 only) or Debian's firefox-esr (its own QUIC stack, neqo)",
    )
    p.add_argument("--keylog", metavar="FILE", help="TLS key log (SSLKEYLOGFILE) for captures")
    p.add_argument(
        "--duration",
        type=_positive(float),
        metavar="S",
        help="play the DASH manifest at --url for S seconds of media in the "
        "testbed's dash.js page (" + PLAYER_PAGE + ") instead of loading a page",
    )
    p.add_argument(
        "--player-settings",
        type=_json_object,
        metavar="JSON",
        help="with --duration: dash.js settings (its updateSettings object) merged "
        "into its defaults; the row's player_settings shows those in force",
    )
    p.add_argument(
        "--workload",
        choices=("web", "cloud"),
        default="web",
        help="web: load --url as a page (default); cloud: download the file at --url with "
        "fetch() in a blank page of its origin, reading the body to the end without keeping it "
        "(the perf tools' transfer keys; Chromium only)",
    )
    p.add_argument("--verbose", action="store_true", help="the browser's arguments on stderr")
    p.add_argument("--version", action="store_true", help="print versions and exit")
    if "--version" in argv:
        return argparse.Namespace(version=True)
    args = p.parse_args(argv)
    url = urlsplit(args.url)
    if url.scheme not in ("https", "http") or not url.hostname:
        raise UsageError(f"--url: not an http(s) URL: {args.url!r}")
    if url.scheme != "https":
        raise Unsupported("only https:// URLs: the load must go over QUIC or TLS")
    if args.duration is not None and args.duration >= args.timeout:
        raise UsageError(f"--timeout {args.timeout:g} must exceed --duration {args.duration:g}")
    if args.workload == "cloud" and args.duration is not None:
        raise UsageError("--workload cloud: a download has no --duration (that is a playback)")
    if args.player_settings is not None and args.duration is None:
        raise UsageError("--player-settings: only with --duration (a playback)")
    driver = DRIVERS[args.browser]
    if args.protocol in driver.CANNOT_PIN.get(args.browser, ()):
        raise Unsupported(driver.CANNOT_PIN[args.browser][args.protocol])
    why_not = driver.unsupported(args)
    if why_not:
        raise Unsupported(why_not)
    if not os.path.isfile(args.cacert):
        raise UsageError(f"--cacert: no such file: {args.cacert}")
    port = url.port or 443
    if not any(r.host == url.hostname.lower() and r.port == port for r in args.resolve):
        raise Unsupported(f"no --resolve for {url.hostname}:{port}: the browser never uses DNS")
    return args


# ------------------------------------------------------------------------------ driver

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {"load": None, "printed": set(), "failed": False}


def emit(row: dict[str, Any]) -> None:
    """Print a row once per repetition (the main thread and the watchdog may both try)."""
    with _LOCK:
        if row["rep"] in _STATE["printed"]:
            return
        _STATE["printed"].add(row["rep"])
        if row["error"]:
            _STATE["failed"] = True
        keys = (*ROW_KEYS, *PLAYER_KEYS) if "trace" in row else ROW_KEYS
        sys.stdout.write(json.dumps({k: row.get(k) for k in keys}) + "\n")
        sys.stdout.flush()


def _kill_driver() -> None:
    """Playwright's node driver is our child: it goes too when a load is abandoned."""
    for pid in children_of(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _abandon(load: BrowserLoad, error: str) -> None:
    """The last resort of the watchdog: the main thread is stuck inside Playwright."""
    load.row["error"] = error
    emit(load.row)
    load.cleanup()
    _kill_driver()
    os._exit(EXIT_ERROR)


def _watchdog(load: BrowserLoad, done: threading.Event, deadline_s: float) -> None:
    if done.wait(deadline_s):
        return
    load.watchdog_fired = True
    kill_marked(load.token)  # Playwright's call fails now; the main thread writes the row
    if not done.wait(HARD_GRACE_S):
        _abandon(
            load,
            f"timeout: no load event within {load.args.timeout:g} s "
            f"(browser killed by the watchdog; driver unresponsive)",
        )


def _on_signal(signum: int, frame: Any) -> None:
    """SIGTERM/SIGINT/SIGHUP: close the browser the hard way, remove its files, leave."""
    load = _STATE.get("load")
    if load is not None:
        load.cleanup()
    _kill_driver()
    os._exit(128 + signum)


def run_load(args: argparse.Namespace, rep: int, vers: dict[str, str]) -> dict[str, Any]:
    load = DRIVERS[args.browser].new_load(args, rep, vers)
    _STATE["load"] = load
    done = threading.Event()
    dog = threading.Thread(target=_watchdog, args=(load, done, args.timeout + HARD_GRACE_S), daemon=True)
    dog.start()
    try:
        load.run(vers)
    except LoadError as e:
        load.row["error"] = one_line(str(e))
    except Exception as e:  # any failure of the browser is a row, not a crash
        load.row["error"] = one_line(load.failure(f"{type(e).__name__}: {e}", None))
    finally:
        done.set()
        load.cleanup()
        _STATE["load"] = None
    if load.watchdog_fired and not load.row["error"].startswith("timeout"):
        load.row["error"] = f"timeout: no load event within {args.timeout:g} s (watchdog)"
    load.row["error"] = one_line(load.row["error"])
    return load.row


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
    except UsageError as e:
        print(f"browser_perf: usage error: {e} (see browser_perf --help)", file=sys.stderr)
        return EXIT_USAGE
    except Unsupported as e:
        print(f"browser_perf: unsupported: {e}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    if getattr(args, "version", False) and not hasattr(args, "url"):
        lines = [module.version_line() for module in dict.fromkeys(DRIVERS.values())]
        print(f"browser_perf {VERSION} ({'; '.join(text for text, _ in lines)})")
        return EXIT_OK if all(ok for _, ok in lines) else EXIT_ERROR
    vers = DRIVERS[args.browser].versions(args.browser)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    for rep in range(args.repetitions):
        if rep and args.pause:
            time.sleep(args.pause / 1000.0)
        emit(run_load(args, rep, vers))
    return EXIT_ERROR if _STATE["failed"] else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
