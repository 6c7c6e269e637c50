"""HTTP servers under test (Caddy/quic-go, nginx): registry, lifecycle, settings, access logs.

Container contract: the topology creates the server container itself (docker run -d
--network none + docker_run_args(...)), attaches the emulated interface, then calls
start_server(). Content is mounted read-only at /srv/content, the per-run PKI at
/etc/quicbed/pki, logs at /var/log/quicbed (bind-mounted from the run dir so they survive).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from quicbed.paths import read_versions

CONTENT_MOUNT = "/srv/content"
PKI_MOUNT = "/etc/quicbed/pki"
LOG_MOUNT = "/var/log/quicbed"
ACCESS_LOG = "access.log"
HEALTH_PATH = "/.quicbed-health"
# Where the launcher shell inside the container leaves the server's pid and exit code.
RUN_DIR = "/run/quicbed"
# quic-go asks for 7 MiB UDP buffers and warns below; nginx is configured to ask the same.
UDP_BUFFER = 7 * 1024 * 1024
KEEP_ALIVE = ["sleep", "infinity"]


class UnknownServer(KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class ServerError(RuntimeError):
    """A server failed to start or stop; the message carries its exit code and log tail."""


@dataclass(frozen=True)
class ServerSpec:
    name: str
    image: str
    version: str
    command: list[str]  # runs in the foreground inside the container
    config: str  # the baked-in config file inside the image
    version_command: list[str]
    # Facts about the QUIC stack that no sysctl shows (from the implementations' sources).
    quic: dict[str, str] = field(default_factory=dict)

    @property
    def server_log(self) -> str:
        """The server's own stdout/stderr inside the container."""
        return f"{LOG_MOUNT}/{self.name}.log"


def _specs() -> dict[str, ServerSpec]:
    v = read_versions()
    caddy_cmd = ["caddy", "run", "--config", "/etc/quicbed/Caddyfile", "--adapter", "caddyfile"]
    quic_go = {
        "stack": "quic-go",
        # quic-go's cubic_sender.go, instantiated with "true, // use Reno" (checked in v0.63).
        "congestion_control": "NewReno (quic-go default: its Cubic sender in Reno mode)",
        "initial_cwnd": "32 packets (initialCongestionWindow in quic-go)",
        # The emulated links turn tx-udp-segmentation off, so GSO batches are split in the
        # sender's kernel before they reach the router.
        "gso": "on when the kernel supports UDP GSO",
        "udp_buffers": "7 MiB requested (SO_RCVBUFFORCE when CAP_NET_ADMIN)",
        # Clients make fresh connections unless --resume; then TLS 1.3 resumes and QUIC
        # accepts 0-RTT (Go's crypto/tls offers no TLS 1.2 resumption to libcurl).
        "tls_session_tickets": "on (Caddy default)",
    }
    specs = [
        ServerSpec(
            name="caddy",
            image=f"quicbed/caddy:{v['CADDY_VERSION']}",
            version=v["CADDY_VERSION"],
            command=caddy_cmd,
            config="/etc/quicbed/Caddyfile",
            version_command=["caddy", "build-info"],
            quic=quic_go,
        ),
        ServerSpec(
            name="nginx",
            image=f"quicbed/nginx:{v['NGINX_VERSION']}",
            version=v["NGINX_VERSION"],
            command=["nginx", "-c", "/etc/quicbed/nginx.conf"],
            config="/etc/quicbed/nginx.conf",
            version_command=["nginx", "-v"],
            quic={
                "stack": "nginx (ngx_event_quic, OpenSSL 3.5 QUIC TLS API)",
                "congestion_control": "NewReno (RFC 9002, nginx's own implementation)",
                "initial_cwnd": "min(10*MSS, max(2*MSS, 14720)) bytes (RFC 9002)",
                "gso": "off (quic_gso default)",
                "udp_buffers": "rcvbuf=7m sndbuf=7m on the listen socket, clamped by rmem_max",
                "workers": "1",
                "stream_buffer": "4m (http3_stream_buffer_size; the 64k default caps a "
                                 "stream at 64 KB per RTT)",
                "tls_session_tickets": "on, with a shared session cache; TLS 1.3 0-RTT over TCP "
                                       "on (ssl_early_data); QUIC early data refused by nginx's "
                                       "OpenSSL compatibility layer",
            },
        ),
    ]
    if "CADDY_DEBIAN_VERSION" in v:
        specs.append(
            ServerSpec(
                name="caddy-debian",
                image=f"quicbed/caddy-debian:{v['CADDY_DEBIAN_VERSION']}",
                version=v["CADDY_DEBIAN_VERSION"],
                command=caddy_cmd,
            config="/etc/quicbed/Caddyfile",
                version_command=["caddy", "build-info"],
                quic={**quic_go, "stack": "quic-go (Debian's Caddy package)",
                      # Caddy 2.6 wraps the UDP socket, so this quic-go cannot size it:
                      # "connection doesn't allow setting of send buffer size".
                      "udp_buffers": "7 MiB receive; send buffer left at wmem_default"},
            )
        )
    return {s.name: s for s in specs}


SERVERS: dict[str, ServerSpec] = _specs()


def get_server(name: str) -> ServerSpec:
    try:
        return SERVERS[name]
    except KeyError:
        raise UnknownServer(
            f"unknown server {name!r}; valid servers: {', '.join(sorted(SERVERS))}"
        ) from None


def docker_run_args(name: str, content_dir: Path, pki_dir: Path, log_dir: Path) -> list[str]:
    """Arguments for `docker run -d --network none --name X <these>`: mounts, caps, image, cmd.

    NET_ADMIN lets quic-go get its 7 MiB UDP buffers with SO_RCVBUFFORCE: in a container's
    netns net.core.rmem_max is read-only (kernel 6.x mirrors the host's value), so
    --sysctl cannot raise it there.
    """
    spec = get_server(name)
    return [
        "-v", f"{Path(content_dir).resolve()}:{CONTENT_MOUNT}:ro",
        "-v", f"{Path(pki_dir).resolve()}:{PKI_MOUNT}:ro",
        "-v", f"{Path(log_dir).resolve()}:{LOG_MOUNT}",
        "--cap-add", "NET_ADMIN",
        "--label", f"quicbed.server={spec.name}",
        spec.image,
        *KEEP_ALIVE,
    ]


def _exec(container: str, *cmd: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["docker", "exec", container, *cmd], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, 124, "", f"timed out after {timeout:.0f} s")


def _read(container: str, path: str) -> str | None:
    proc = _exec(container, "cat", path)
    return proc.stdout if proc.returncode == 0 else None


def _log_tail(container: str, spec: ServerSpec, lines: int = 30) -> str:
    proc = _exec(container, "tail", "-n", str(lines), spec.server_log)
    return proc.stdout.strip() if proc.returncode == 0 else f"(no log: {proc.stderr.strip()})"


def _probe(container: str, h3: bool, timeout: float) -> tuple[bool, str]:
    """One request from inside the container: TLS handshake and HTTP over TCP or QUIC."""
    proto = ["--http3-only"] if h3 else ["--http2"]
    cmd = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
           "--max-time", f"{max(timeout, 0.5):.1f}", *proto,
           "--cacert", f"{PKI_MOUNT}/ca.pem",
           "--resolve", "server.quicbed:443:127.0.0.1",
           f"https://server.quicbed{HEALTH_PATH}"]
    proc = _exec(container, *cmd, timeout=timeout + 3)
    want = "3 204" if h3 else "2 204"
    return proc.returncode == 0 and proc.stdout.strip() == want, (proc.stdout + proc.stderr).strip()


def _failure(container: str, spec: ServerSpec, why: str) -> ServerError:
    return ServerError(
        f"{spec.name} in container {container}: {why}\n"
        f"--- last lines of {spec.server_log} ---\n{_log_tail(container, spec)}"
    )


def start_server(container: str, name: str, timeout: float = 20) -> None:
    """Start the server in the running container; return once it answers h2 and h3 on :443.

    Raises ServerError (exit code + the server's log tail) if it exits or does not answer
    within timeout seconds; a server that did not come up is killed again.
    """
    spec = get_server(name)
    deadline = time.monotonic() + timeout
    for f in ("ca.pem", "server.pem", "server.key"):
        check = _exec(container, "test", "-r", f"{PKI_MOUNT}/{f}")
        if check.returncode != 0:
            raise ServerError(f"{spec.name} in container {container}: {PKI_MOUNT}/{f} missing "
                              f"(is the container running, with the PKI mounted?) "
                              f"{check.stderr.strip()}")
    pid_file, exit_file = f"{RUN_DIR}/{spec.name}.pid", f"{RUN_DIR}/{spec.name}.exit"
    # Before the detached launcher runs: a previous run's exit file must not be mistaken
    # for this one's.
    _exec(container, "mkdir", "-p", RUN_DIR)
    _exec(container, "rm", "-f", exit_file, pid_file)
    # A fixed launcher: the server's argv comes from the registry, quoted, never from callers.
    launcher = (
        f"mkdir -p {RUN_DIR}; "
        # A simple command alone in the background job, so $! is the server itself.
        f"{shlex.join(spec.command)} >>{spec.server_log} 2>&1 & "
        f"echo $! >{pid_file}; wait $!; echo $? >{exit_file}"
    )
    proc = subprocess.run(["docker", "exec", "-d", container, "sh", "-c", launcher],
                          capture_output=True, text=True, timeout=15)
    if proc.returncode != 0:
        raise ServerError(f"docker exec in {container} failed: {proc.stderr.strip()}")
    last = ""
    while True:
        code = _read(container, exit_file)
        if code is not None:
            raise _failure(container, spec, f"exited with code {code.strip()} during start")
        left = deadline - time.monotonic()
        if left <= 0:
            stop_server(container, name, timeout=2)  # short: the caller's timeout is spent
            raise _failure(container, spec,
                           f"no answer on 443 within {timeout:.0f} s (last probe: {last})")
        ok_tcp, last = _probe(container, h3=False, timeout=min(2.0, left))
        if ok_tcp:
            ok_udp, last = _probe(container, h3=True, timeout=min(2.0, max(left, 0.5)))
            if ok_udp:
                return
        time.sleep(0.2)


def stop_server(container: str, name: str, timeout: float = 10) -> None:
    """SIGTERM the server started by start_server, SIGKILL after timeout; a no-op if not running."""
    spec = get_server(name)
    pid = (_read(container, f"{RUN_DIR}/{spec.name}.pid") or "").strip()
    if not pid.isdigit() or _read(container, f"{RUN_DIR}/{spec.name}.exit") is not None:
        return
    _exec(container, "kill", "-TERM", pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _exec(container, "kill", "-0", pid).returncode != 0:
            return
        time.sleep(0.2)
    _exec(container, "kill", "-KILL", pid)


def server_version(container: str, name: str) -> str:
    """The version the binary reports (caddy: 'v2.11.9', nginx: '1.26.3')."""
    spec = get_server(name)
    proc = _exec(container, *spec.version_command)
    out = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0 or not out:
        raise ServerError(f"{shlex.join(spec.version_command)} failed in {container}: {out}")
    if spec.name == "nginx":  # "nginx version: nginx/1.26.3"
        return out.rsplit("/", 1)[-1].split()[0]
    # caddy build-info: "mod github.com/caddyserver/caddy/v2 v2.11.9 h1:..." (`caddy version`
    # says "unknown" when Caddy itself is the main module, as with go install).
    version = _build_info(out).get("github.com/caddyserver/caddy/v2", "(devel)")
    if version == "(devel)":  # Debian's package has no module info, but `caddy version` works
        version = (_exec(container, "caddy", "version").stdout.split() or ["unknown"])[0]
    return version


def _build_info(text: str) -> dict[str, str]:
    """module -> version from `caddy build-info` (Go's debug.BuildInfo dump)."""
    mods = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 3 and f[0] in ("mod", "dep"):
            mods[f[1]] = f[2]
        elif len(f) == 2 and f[0] == "go":
            mods["go"] = f[1]
    return mods


def server_settings(container: str, name: str) -> dict:
    """What shapes the TCP-vs-QUIC comparison on the server side, for the run manifest."""
    spec = get_server(name)

    def sysctl(key: str) -> str | None:
        value = _read(container, "/proc/sys/" + key.replace(".", "/"))
        return " ".join(value.split()) if value is not None else None

    routes = _exec(container, "ip", "-o", "route", "show", "table", "all").stdout.splitlines()
    links = _exec(container, "ip", "-o", "link", "show").stdout.splitlines()
    ifaces = [ln.split(":")[1].strip().split("@")[0] for ln in links if ln.count(":") >= 2]
    initcwnd = sorted({r.split("initcwnd ")[1].split()[0] for r in routes if "initcwnd " in r})
    return {
        "server": spec.name,
        "image": spec.image,
        "version": server_version(container, name),
        "config": spec.config,
        "config_sha256": (_exec(container, "sha256sum", spec.config).stdout.split() or [None])[0],
        "tls_versions": ["TLSv1.2", "TLSv1.3"],
        "http_versions": ["HTTP/1.1", "HTTP/2.0", "HTTP/3.0"],
        "tcp_cc": sysctl("net.ipv4.tcp_congestion_control"),
        # Linux's default initial window is 10 segments unless a route sets initcwnd.
        "initcwnd": initcwnd or ["10 (kernel default, no route initcwnd)"],
        "initrwnd_routes": [r for r in routes if "initrwnd " in r],
        "routes": routes,
        "tcp_slow_start_after_idle": sysctl("net.ipv4.tcp_slow_start_after_idle"),
        "tcp_ecn": sysctl("net.ipv4.tcp_ecn"),
        "tcp_rmem": sysctl("net.ipv4.tcp_rmem"),
        "tcp_wmem": sysctl("net.ipv4.tcp_wmem"),
        "rmem_max": sysctl("net.core.rmem_max"),
        "wmem_max": sysctl("net.core.wmem_max"),
        "rmem_default": sysctl("net.core.rmem_default"),
        "wmem_default": sysctl("net.core.wmem_default"),
        # GSO/GRO change what QUIC and TCP cost in CPU at high rates.
        "links": links,
        "offloads": {i: _offloads(container, i) for i in ifaces if i != "lo"},
        "qdiscs": _exec(container, "tc", "qdisc", "show").stdout.splitlines(),
        "quic": _quic_facts(container, spec),
    }


_OFFLOADS = ("tcp-segmentation-offload", "generic-segmentation-offload",
             "generic-receive-offload", "tx-udp-segmentation", "rx-udp-gro-forwarding",
             "tx-checksumming", "rx-checksumming")


def _offloads(container: str, iface: str) -> dict[str, str]:
    out = _exec(container, "ethtool", "-k", iface).stdout
    features = dict(line.strip().split(": ", 1) for line in out.splitlines() if ": " in line)
    return {k: features[k].split()[0] for k in _OFFLOADS if k in features}


def _quic_facts(container: str, spec: ServerSpec) -> dict[str, str]:
    facts = dict(spec.quic)
    if spec.name.startswith("caddy"):  # the exact quic-go and Go versions inside the binary
        mods = _build_info(_exec(container, "caddy", "build-info").stdout)
        facts["quic_go_version"] = mods.get("github.com/quic-go/quic-go", "unknown")
        facts["go_version"] = mods.get("go", "unknown")
    return facts


_TLS_CODES = {769: "TLSv1.0", 770: "TLSv1.1", 771: "TLSv1.2", 772: "TLSv1.3"}


def _normalize(entry: dict) -> dict | None:
    if "request" in entry:  # Caddy's JSON access log
        req = entry["request"]
        tls = req.get("tls") or {}
        return {
            "server": "caddy",
            "ts": entry.get("ts"),
            "proto": req.get("proto"),
            "tls": _TLS_CODES.get(tls.get("version"), str(tls.get("version") or "")) or None,
            "alpn": tls.get("proto"),
            "cipher": tls.get("cipher_suite"),
            "resumed": tls.get("resumed"),
            "method": req.get("method"),
            "path": req.get("uri", "").split("?", 1)[0],
            "status": entry.get("status"),
            "bytes": entry.get("size"),
            "duration_ms": float(entry.get("duration", 0)) * 1000,
            "remote": req.get("remote_ip"),
        }
    if "proto" in entry and "request_time" in entry:  # nginx, log_format quicbed
        return {
            "server": "nginx",
            "ts": entry.get("ts"),
            "proto": entry["proto"],
            "tls": entry.get("tls") or None,
            "alpn": entry.get("alpn") or None,
            "cipher": entry.get("cipher") or None,
            "resumed": entry.get("reused") == "r",
            "method": entry.get("method"),
            "path": entry.get("path"),
            "status": entry.get("status"),
            "bytes": entry.get("bytes"),
            "duration_ms": float(entry["request_time"]) * 1000,
            "remote": entry.get("remote"),
        }
    return None  # Caddy also logs non-access events if misconfigured; skip them


def read_access_log(log_dir: Path) -> list[dict]:
    """The server's access log, normalized: proto ('HTTP/2.0'/'HTTP/3.0'), tls ('TLSv1.2'/
    'TLSv1.3'), path, bytes (body), status, duration_ms. Health probes are left out."""
    path = Path(log_dir) / ACCESS_LOG
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = _normalize(json.loads(line))
        except (json.JSONDecodeError, TypeError, ValueError):
            continue  # a line cut by a crash; the rest is still good
        if entry and entry["path"] != HEALTH_PATH:
            entries.append(entry)
    return entries
