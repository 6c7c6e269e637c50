"""Mininet nodes for the testbed: Docker containers as hosts, and commands run from the host
into a node's network namespace.

A container host is started with `--network none`, so its only interfaces are lo and the
emulated link that Mininet moves in: nothing can go around the path.
"""

from __future__ import annotations

import json
import pty
import re
import select
import subprocess
from collections.abc import Sequence

from mininet.link import Intf
from mininet.node import Host

from quicbed import limits
from quicbed.dockercli import PULL_NEVER, answering, docker, image_present, missing_image
from quicbed.errors import EnvironmentProblem, HostProblem
from quicbed.hostcalls import host_run
from quicbed.topology.marker import marked_argv, scope

LABEL = "quicbed"  # every container the testbed makes carries this label, for `quicbed clean`


def in_netns(
    pid: int, argv: Sequence[str], timeout: float = 60, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a host binary inside the network namespace of `pid` (host's filesystem). It is
    marked (topology/marker.py): whatever it leaves running, `quicbed clean` finds."""
    # host_run: its own process group, ended whole past the bound (a `sh -c`'s children too)
    proc = host_run(["nsenter", "-t", str(pid), "-n", "--", *marked_argv(argv)], timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed in netns of {pid}: " f"{(proc.stderr or proc.stdout).strip()}"
        )
    return proc


class HostIntf(Intf):
    """An interface configured from the host with the host's tools, so container images
    need neither ifconfig nor CAP_NET_ADMIN."""

    def cmd(self, *args: str, **kwargs: object) -> str:
        command = " ".join(str(a) for a in args)
        proc = in_netns(self.node.pid, ["sh", "-c", command], check=False)
        return proc.stdout + proc.stderr

    def updateIP(self) -> str | None:  # Mininet's name
        """The address, read with the host's `ip`. Mininet's own runs ifconfig inside the
        node, which container images lack; its CLI then cannot turn `server` into an address
        (`mininet> client ping server` failed with "Temporary failure in name resolution")."""
        out = self.cmd("ip", "-o", "-4", "addr", "show", "dev", self.name)
        match = re.search(r"\binet (\d+\.\d+\.\d+\.\d+)", out)
        self.ip = match.group(1) if match else None
        return self.ip


class NsHost(Host):
    """A plain namespace host: the router, the cross-traffic host, and client and server where
    Docker cannot run (HostSpec(image=None): the netem guest, topology/guest.py)."""

    def run(
        self, argv: Sequence[str], timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return in_netns(self.pid, argv, timeout=timeout, check=check)

    def popen_argv(self, argv: Sequence[str]) -> list[str]:
        # Marked: a process left behind in this namespace stays findable after it is gone.
        return ["nsenter", "-t", str(self.pid), "-n", "--", *marked_argv(argv)]

    def exec(
        self, argv: Sequence[str], timeout: float = 120, check: bool = False, detach: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """DockerHost.exec's counterpart: a namespace host's own tools are the host's."""
        if detach:
            subprocess.Popen(
                self.popen_argv(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            return subprocess.CompletedProcess(list(argv), 0, "", "")
        proc = in_netns(self.pid, argv, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"{self.name}: {' '.join(argv)} exited {proc.returncode}: "
                f"{(proc.stderr or proc.stdout).strip()[-800:]}"
            )
        return proc


class DockerHost(NsHost):
    """A Docker container as a Mininet host (our own small Containernet).

    params: image, docker_args (extra `docker run` arguments), run_id.
    The Mininet shell is `docker exec` into the container, so lab commands
    (`client curl ...`) use the container's own tools.
    """

    shell: subprocess.Popen[bytes] | None  # Mininet's: the node's shell, while it runs

    def __init__(
        self, name: str, image: str, run_id: str, docker_args: Sequence[str] = (), **params: object
    ) -> None:
        self.name, self.image, self.run_id = name, image, run_id
        self.container = f"quicbed-{run_id}-{name}"
        self._start_container(list(docker_args))
        super().__init__(name, **params)

    def _start_container(self, docker_args: list[str]) -> None:
        run_args = [
            "run",
            "-d",
            *PULL_NEVER,
            "--network",
            "none",
            "--name",
            self.container,
            "--hostname",
            self.name,
            "--label",
            LABEL,
            "--label",
            f"{LABEL}.run={self.run_id}",
            *(["--label", f"{LABEL}.scope={owner}"] if (owner := scope()) else []),
            "--init",
            *docker_args,
            self.image,
            "sleep",
            "infinity",
        ]
        proc = docker(*run_args)
        if proc.returncode != 0 and not image_present(self.image):
            raise missing_image(self.image)
        if proc.returncode != 0:
            raise EnvironmentProblem(
                f"cannot start container {self.container} from " f"{self.image}: {proc.stderr.strip()}"
            )
        state = docker("inspect", "-f", "{{json .State}}", self.container)
        if state.returncode != 0:
            raise EnvironmentProblem(f"cannot inspect container {self.container}: {state.stderr.strip()}")
        self.container_pid = int(json.loads(state.stdout)["Pid"])

    def startShell(self, mnopts: object = None) -> None:  # Mininet's API
        if self.shell:
            return
        cmd = [
            "docker",
            "exec",
            "-it",
            self.container,
            "env",
            "PS1=" + chr(127),
            "bash",
            "--norc",
            "--noediting",
            "-is",
            "mininet:" + self.name,
        ]
        self.master, self.slave = pty.openpty()
        # Its own session, like Mininet's shells (mnexec -d): a Ctrl-C or hang-up of the lab's
        # terminal goes to the lab's process group, and must not kill the node's shell.
        self.shell = self._popen(
            cmd,
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            close_fds=False,
            start_new_session=True,
        )
        self.stdin = open(self.master, encoding="utf-8", errors="replace")
        self.stdout = self.stdin
        # Mininet moves interfaces into the namespace of self.pid: the container's init.
        self.pid = self.container_pid
        self.pollOut = select.poll()
        self.pollOut.register(self.stdout)
        self.outToNode[self.stdout.fileno()] = self
        self.inToNode[self.stdin.fileno()] = self
        self.execed, self.lastCmd, self.lastPid, self.readbuf = False, None, None, ""
        while True:
            data = self.read(1024)
            if data and data[-1] == chr(127):
                break
            self.pollOut.poll()
        self.waiting = False
        self.cmd("unset HISTFILE; stty -echo; set +m")

    def exec(
        self, argv: Sequence[str], timeout: float = 120, check: bool = False, detach: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside the container (its filesystem and tools)."""
        # The command's own timeout (a trial's is its length), not the control calls' 30 s; it
        # raises TimeoutExpired, which the trial records, not a HostProblem that ends the run.
        cmd = ["docker", "exec", *(["-d"] if detach else []), self.container, *argv]
        # A container's output is bounded (TooBig); a dockerd that stops answering meanwhile
        # ends the command with a HostProblem instead of holding it to its timeout.
        proc = limits.run_capped(cmd, timeout, watchdog=None if detach else answering)
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"{self.name}: {' '.join(argv)} exited {proc.returncode}: "
                f"{(proc.stderr or proc.stdout).strip()[-800:]}"
            )
        return proc

    def terminate(self) -> None:
        try:
            docker("rm", "-f", self.container)
        finally:
            if self.shell and self.shell.poll() is None:
                self.shell.kill()
            self.shell = None


class SideContainer:
    """A container of another image in a container host's network namespace, with its mounts:
    what runs beside the client in its namespace (cross traffic's curl, experiments/cross.py;
    a second client image). Same interface, same path: only the filesystem differs. Labelled
    as the testbed's containers are, so `quicbed clean` removes it too."""

    def __init__(self, host: DockerHost, image: str, role: str) -> None:
        self.host, self.image, self.name = host, image, host.name
        self.container = f"{host.container}-{role}"
        self.pid = host.pid  # the namespace's: nsenter into it reaches the same interfaces
        owner = scope()
        run_args = [
            "run", "-d", *PULL_NEVER, "--name", self.container, "--network", f"container:{host.container}",
            "--volumes-from", host.container, "--label", LABEL, "--label", f"{LABEL}.run={host.run_id}",
            *(["--label", f"{LABEL}.scope={owner}"] if owner else []), "--init", image, "sleep", "infinity",
        ]  # fmt: skip
        proc = docker(*run_args)
        if proc.returncode != 0:
            if not image_present(image):
                raise missing_image(image)
            raise HostProblem(f"{self.container} did not start: {proc.stderr.strip()[-300:]}")

    def exec(self, argv: Sequence[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # the command's own timeout: a trial raises TimeoutExpired
            ["docker", "exec", self.container, *argv], capture_output=True, text=True, timeout=timeout
        )

    def intfList(self) -> list[Intf]:  # Mininet's name, as the host's
        return self.host.intfList()

    def stop(self) -> None:
        docker("rm", "-f", self.container)
