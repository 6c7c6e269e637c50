"""Server lifecycle inside a container: container_options/docker_run_args, start_server
(health-checked), stop_server; exec_in/read_in, the docker exec helpers probe.py shares.

Container contract: the topology creates the server container itself (servers/testbed.py:
docker run -d --network none + container_options(...)), attaches the emulated interface, then
calls start_server(). Content is mounted read-only at /srv/content, the per-run PKI at
/etc/quicbed/pki, logs at /var/log/quicbed (bind-mounted from the run dir so they survive).
"""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

from quicbed.dockercli import docker

from .descriptors import get_server
from .spec import (
    CONTENT_MOUNT,
    KEEP_ALIVE,
    LOG_MOUNT,
    PKI_MOUNT,
    RUN_DIR,
    SERVER_PORT,
    ServerError,
    ServerSpec,
)


def container_options(name: str, content_dir: Path, pki_dir: Path, log_dir: Path) -> list[str]:
    """The `docker run` options a server container needs: mounts, capabilities, label.

    NET_ADMIN lets quic-go get its 7 MiB UDP buffers with SO_RCVBUFFORCE: in a container's
    netns net.core.rmem_max is read-only (kernel 6.x mirrors the host's value), so
    --sysctl cannot raise it there.
    """
    spec = get_server(name)
    return [
        "-v",
        f"{Path(content_dir).resolve()}:{CONTENT_MOUNT}:ro",
        "-v",
        f"{Path(pki_dir).resolve()}:{PKI_MOUNT}:ro",
        "-v",
        f"{Path(log_dir).resolve()}:{LOG_MOUNT}",
        "--cap-add",
        "NET_ADMIN",
        "--label",
        f"quicbed.server={spec.name}",
    ]


def docker_run_args(name: str, content_dir: Path, pki_dir: Path, log_dir: Path) -> list[str]:
    """Arguments for `docker run -d --network none --name X <these>`: options, image, cmd."""
    return [*container_options(name, content_dir, pki_dir, log_dir), get_server(name).image, *KEEP_ALIVE]


def exec_in(container: str, *cmd: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["docker", "exec", container, *cmd], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, 124, "", f"timed out after {timeout:.0f} s")


def read_in(container: str, path: str) -> str | None:
    proc = exec_in(container, "cat", path)
    return proc.stdout if proc.returncode == 0 else None


def _log_tail(container: str, spec: ServerSpec, lines: int = 30) -> str:
    proc = exec_in(container, "tail", "-n", str(lines), spec.server_log)
    return proc.stdout.strip() if proc.returncode == 0 else f"(no log: {proc.stderr.strip()})"


# Health protocol -> (curl flags, curl's %{http_version}).
_CURL = {"h1": (["--http1.1"], "1.1"), "h2": (["--http2"], "2"), "h3": (["--http3-only"], "3")}


def _health_transfer(spec: ServerSpec, protocol: str, timeout: float) -> list[str]:
    """curl's options and URL of one health request over `protocol`, from inside the server's
    container over loopback: the probe's and the rewarm's alike."""
    return [
        *_CURL[protocol][0],
        "--max-time",
        f"{max(timeout, 0.5):.1f}",
        "--cacert",
        f"{PKI_MOUNT}/ca.pem",
        "--resolve",
        f"server.quicbed:{SERVER_PORT}:127.0.0.1",
        f"https://server.quicbed:{SERVER_PORT}{spec.health.path}",
    ]


def _probe(container: str, spec: ServerSpec, protocol: str, timeout: float) -> tuple[bool, str]:
    """One request from inside the container: TLS handshake and HTTP over TCP or QUIC."""
    cmd = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_version} %{http_code}"]
    proc = exec_in(container, *cmd, *_health_transfer(spec, protocol, timeout), timeout=timeout + 3)
    want = f"{_CURL[protocol][1]} {spec.health.status}"
    return proc.returncode == 0 and proc.stdout.strip() == want, (proc.stdout + proc.stderr).strip()


def rewarm(container: str, name: str, timeout: float = 3.0) -> bool:
    """One health request over each protocol of the server's health check, from inside its
    container over loopback, in one exec: its handshake code, threads and buffers in use
    again after it sat idle, with nothing on the emulated link. Whether every one answered
    (a server that did not is left to the trial, which records its own failure)."""
    spec = get_server(name)
    cmd: list[str] = ["curl", "-sS"]
    for i, protocol in enumerate(spec.health.protocols):
        # --next starts a transfer afresh: each one carries all of its options.
        cmd += [*(["--next"] if i else []), "--fail", "-o", "/dev/null"]
        cmd += _health_transfer(spec, protocol, timeout)
    return exec_in(container, *cmd, timeout=timeout * len(spec.health.protocols) + 3).returncode == 0


def _failure(container: str, spec: ServerSpec, why: str) -> ServerError:
    return ServerError(
        f"{spec.name} in container {container}: {why}\n"
        f"--- last lines of {spec.server_log} ---\n{_log_tail(container, spec)}"
    )


def start_server(container: str, name: str, timeout: float = 20, qlog: bool = False) -> None:
    """Start the server in the running container; return once it answers its health check
    (h2 and h3 on :443 for the shipped servers). With `qlog`, a server whose descriptor says
    how (qlog: env, dir) writes a qlog file per connection into its qlog dir.

    Raises ServerError (exit code + the server's log tail) if it exits or does not answer
    within timeout seconds; a server that did not come up is killed again.
    """
    spec = get_server(name)
    deadline = time.monotonic() + timeout
    for f in ("ca.pem", "server.pem", "server.key"):
        check = exec_in(container, "test", "-r", f"{PKI_MOUNT}/{f}")
        if check.returncode != 0:
            raise ServerError(
                f"{spec.name} in container {container}: {PKI_MOUNT}/{f} missing "
                f"(is the container running, with the PKI mounted?) "
                f"{check.stderr.strip()}"
            )
    pid_file, exit_file = f"{RUN_DIR}/{spec.name}.pid", f"{RUN_DIR}/{spec.name}.exit"
    # Before the detached launcher runs: a previous run's exit file must not be mistaken
    # for this one's.
    exec_in(container, "mkdir", "-p", RUN_DIR)
    exec_in(container, "rm", "-f", exit_file, pid_file)
    # A fixed launcher: the server's argv comes from its descriptor, quoted, never from callers.
    launcher = (
        f"mkdir -p {RUN_DIR}; "
        # A simple command alone in the background job, so $! is the server itself.
        f"{shlex.join(spec.command)} >>{spec.server_log} 2>&1 & "
        f"echo $! >{pid_file}; wait $!; echo $? >{exit_file}"
    )
    env = ["-e", f"{spec.qlog_env}={spec.qlog_dir}"] if qlog and spec.qlog_env else []
    if env:
        exec_in(container, "mkdir", "-p", spec.qlog_dir)
    proc = docker("exec", "-d", *env, container, "sh", "-c", launcher, timeout=15)  # -d: returns at once
    if proc.returncode != 0:
        raise ServerError(f"docker exec in {container} failed: {proc.stderr.strip()}")
    last = ""
    while True:
        code = read_in(container, exit_file)
        if code is not None:
            raise _failure(container, spec, f"exited with code {code.strip()} during start")
        left = deadline - time.monotonic()
        if left <= 0:
            stop_server(container, name, timeout=2)  # short: the caller's timeout is spent
            raise _failure(
                container, spec, f"no answer on {SERVER_PORT} within {timeout:.0f} s " f"(last probe: {last})"
            )
        for i, protocol in enumerate(spec.health.protocols):
            # The first probe gets what is left (at most 2 s), the next ones at least 0.5 s.
            probe_timeout = min(2.0, left) if i == 0 else min(2.0, max(left, 0.5))
            ok, last = _probe(container, spec, protocol, timeout=probe_timeout)
            if not ok:
                break
        else:
            return
        time.sleep(0.2)


def stop_server(container: str, name: str, timeout: float = 10) -> None:
    """SIGTERM the server started by start_server, SIGKILL after timeout; a no-op if not running."""
    spec = get_server(name)
    pid = (read_in(container, f"{RUN_DIR}/{spec.name}.pid") or "").strip()
    if not pid.isdigit() or read_in(container, f"{RUN_DIR}/{spec.name}.exit") is not None:
        return
    exec_in(container, "kill", "-TERM", pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if exec_in(container, "kill", "-0", pid).returncode != 0:
            return
        time.sleep(0.2)
    exec_in(container, "kill", "-KILL", pid)
