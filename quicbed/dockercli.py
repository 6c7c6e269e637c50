"""The docker CLI, called with a deadline, and the images it may use.

A hung dockerd (kill -STOP) leaves every `docker` call waiting forever: a run, `quicbed clean`
or a lab would hang without a word. Each control call (run -d, inspect, rm, ps, info, exec -d)
answers within seconds when Docker is well, so docker() gives it DOCKER_TIMEOUT_S and turns
the wait into one HostProblem line. A trial's own `docker exec` keeps its trial's timeout.

Images come from this host only (`--pull never`, in PULL_NEVER): a missing image must not be
fetched from a registry by root, but named with its fix (`make images`).
"""

from __future__ import annotations

import subprocess

from quicbed.errors import HostProblem

DOCKER_TIMEOUT_S = 30.0
PULL_NEVER = ("--pull", "never")  # in every `docker run` / `docker create` of the code


# Once Docker has not answered, later calls of this process give it this long: the tear-down
# after a hung dockerd (container removals) then takes seconds, not 30 s a call.
AFTER_NO_ANSWER_S = 2.0
LIVENESS_TIMEOUT_S = 10.0  # how long a trial's watchdog waits for `docker version`


class _Daemon:
    """What the last control call saw: a daemon that left one unanswered gets seconds."""

    unanswered = False


_daemon = _Daemon()


def docker(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """`docker ARGS`, output captured as text; HostProblem if Docker does not answer within
    `timeout` (unless given: DOCKER_TIMEOUT_S, read at the call, or AFTER_NO_ANSWER_S while
    the last call went unanswered)."""
    argv = ["docker", *args]
    if timeout is None:  # a control call: seconds when Docker is well
        timeout = AFTER_NO_ANSWER_S if _daemon.unanswered else DOCKER_TIMEOUT_S
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        _daemon.unanswered = True
        raise HostProblem(no_answer(argv, timeout)) from None
    _daemon.unanswered = False  # it answers again
    return proc


def answering() -> None:
    """A watchdog for a long `docker exec` (a trial): HostProblem unless the daemon answers
    `docker version` within LIVENESS_TIMEOUT_S. A trial's own command may rightly take
    minutes; a stopped dockerd (kill -STOP) would hold it, and every later one, to its end."""
    docker("version", "--format", "{{.Server.Version}}", timeout=LIVENESS_TIMEOUT_S)


def no_answer(argv: list[str], timeout: float) -> str:
    """The one line for a docker call that timed out (its command, shortened)."""
    return f"Docker did not answer within {timeout:g} s: {' '.join(argv)[:160]}"


def image_present(image: str) -> bool:
    return docker("image", "inspect", "--format", "{{.Id}}", image).returncode == 0


def missing_image(image: str) -> HostProblem:
    """The one line for an image this host has not built (exit 4)."""
    return HostProblem(f"image {image} is not built on this host: make images")
