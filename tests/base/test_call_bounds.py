"""Every wait of the host on a child process has a bound (issue 46): a hung dockerd, `ip`,
tcpdump, compiler or guest probe cannot hold a run or a clean for ever.

The scan reads the source (no import): calls of subprocess.run/check_output/check_call/call,
and .communicate()/.wait() of a child, with no timeout. A wait that follows a kill of the same
child (it ends at once) or whose child is bounded another way is listed below with why."""

from __future__ import annotations

import ast
import subprocess
import time
from pathlib import Path

import pytest

from quicbed.errors import HostProblem
from quicbed.hostcalls import host_run
from quicbed.paths import REPO

SUBPROCESS_CALLS = {"run", "check_output", "check_call", "call"}
SKIPPED_DIRS = {".venv", "tests", "bench", ".git", "node_modules"}
# Code that runs inside a container (its own process tree there), not on the host as root.
IN_CONTAINER = {"stacks/aioquic/server/quicbed_aioquic.py"}
# (file, function) -> why its unbounded wait is bounded after all.
BOUNDED_OTHERWISE = {
    ("quicbed/limits.py", "run_capped"): "waits for the process group it has just killed",
    ("experiments/capture.py", "stop"): "waits for tcpdump after kill(), when SIGINT went unanswered",
    ("experiments/cross.py", "_play"): "collects a flow's output after kill(), past its bound",
    ("experiments/cross.py", "_fetch_all"): "collects a fetch's output after kill(), past its bound",
    ("experiments/cross.py", "wait"): "waits for iperf3's server after kill(), past its 5 s",
    ("experiments/cross.py", "stop"): "self.wait(): the flows' own bounded wait (joins with timeouts)",
    ("experiments/executor.py", "run_trial"): "cross.wait(): joins each flow with a timeout",
    ("topology/calibrate.py", "_finish_ping"): "collects ping's output after kill(), past its 15 s",
    ("topology/calibrate.py", "finish_iperf"): "iperf3's client runs under `timeout -k 10` (start_iperf)",
}


def _unbounded_waits() -> list[tuple[str, str, int]]:
    found = []
    for path in sorted(REPO.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if set(Path(rel).parts) & SKIPPED_DIRS or rel in IN_CONTAINER:
            continue
        tree = ast.parse(path.read_text(), rel)
        for function in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]:
            for call in [n for n in ast.walk(function) if isinstance(n, ast.Call)]:
                if _unbounded(call):
                    found.append((rel, function.name, call.lineno))
    return found


def _unbounded(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute) or any(k.arg == "timeout" for k in call.keywords):
        return False
    of_subprocess = isinstance(func.value, ast.Name) and func.value.id == "subprocess"
    if of_subprocess and func.attr in SUBPROCESS_CALLS:
        return True
    # .wait(x) with an argument is an Event's or a Condition's timeout, not a child's
    return func.attr in ("communicate", "wait") and not call.args


def test_every_wait_on_a_child_has_a_bound() -> None:
    # Nested functions are seen from their outer function too: judge each call once, by the
    # innermost function that holds it.
    innermost: dict[tuple[str, int], str] = {}
    for rel, function, line in _unbounded_waits():
        innermost[(rel, line)] = function  # ast.walk visits outer functions first
    bad = [
        f"{rel}:{line} in {function}()"
        for (rel, line), function in sorted(innermost.items())
        if (rel, function) not in BOUNDED_OTHERWISE
    ]
    assert bad == [], "waits with no timeout (give one, or say here why it ends):\n" + "\n".join(bad)


def test_the_list_of_exceptions_names_only_what_is_there() -> None:
    seen = {(rel, function) for rel, function, _ in _unbounded_waits()}
    assert set(BOUNDED_OTHERWISE) <= seen, set(BOUNDED_OTHERWISE) - seen


def _children() -> set[int]:
    out = subprocess.run(["pgrep", "-f", "sleep 30"], capture_output=True, text=True, timeout=10).stdout
    return {int(pid) for pid in out.split()}


def test_a_command_past_its_bound_is_killed_and_named() -> None:
    before = _children()
    start = time.monotonic()
    with pytest.raises(HostProblem, match=r"`sleep 30` did not finish within 0.3 s"):
        host_run(["sleep", "30"], 0.3)
    assert time.monotonic() - start < 5
    assert _children() - before == set()  # killed, not left running


def test_a_command_within_its_bound_answers_as_run_does() -> None:
    proc = host_run(["sh", "-c", "echo out; echo err >&2; exit 3"], 10)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "err\n")
    with pytest.raises(subprocess.CalledProcessError):
        host_run(["false"], 10, check=True)
