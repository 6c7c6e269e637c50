"""Servers as data: servers/<name>/server.yaml descriptors, and adding a server with no Python.

- the shipped descriptors give exactly the specs the old Python table held;
- version parsing, QUIC facts and settings behave as before (with a fake `docker exec`);
- tests/fixtures/servers/own-caddy, found through QUICBED_SERVER_DIRS, reaches the registry and
  the experiments' validation, and images/build.sh names the same images as Python;
- a bad descriptor is refused in one line naming its file and field;
- (docker) the fixture server starts in a container and answers h2 and h3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from quicbed import servers
from quicbed.errors import InputError
from quicbed.paths import REPO, read_versions
from quicbed.servers import accesslog, descriptors, lifecycle, pki, probe, versionparse
from quicbed.servers.descriptors import load_servers
from quicbed.workloads import ensure_content
from quicbed.yamlio import LocatedError

FIXTURES = REPO / "tests" / "fixtures" / "servers"
OWN = "own-caddy"

# ---------------------------------------------------------------- the shipped descriptors

# What servers/__init__.py's _specs() held before the descriptors, written out.
_QUIC_GO = {
    "stack": "quic-go",
    "congestion_control": "NewReno (quic-go default: its Cubic sender in Reno mode)",
    "initial_cwnd": "32 packets (initialCongestionWindow in quic-go)",
    "gso": "on when the kernel supports UDP GSO",
    "udp_buffers": "7 MiB requested (SO_RCVBUFFORCE when CAP_NET_ADMIN)",
    "tls_session_tickets": "on (Caddy default)",
}
_CADDY_CMD = ["caddy", "run", "--config", "/etc/quicbed/Caddyfile", "--adapter", "caddyfile"]


def _old_specs() -> dict[str, dict]:
    v = read_versions()
    return {
        "caddy": {
            "image": f"quicbed/caddy:{v['CADDY_VERSION']}",
            "version": v["CADDY_VERSION"],
            "command": _CADDY_CMD,
            "config": "/etc/quicbed/Caddyfile",
            "version_command": ["caddy", "build-info"],
            "quic": _QUIC_GO,
        },
        "nginx": {
            "image": f"quicbed/nginx:{v['NGINX_VERSION']}",
            "version": v["NGINX_VERSION"],
            "command": ["nginx", "-c", "/etc/quicbed/nginx.conf"],
            "config": "/etc/quicbed/nginx.conf",
            "version_command": ["nginx", "-v"],
            "quic": {
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
        },
        "caddy-debian": {
            "image": f"quicbed/caddy-debian:{v['CADDY_DEBIAN_VERSION']}",
            "version": v["CADDY_DEBIAN_VERSION"],
            "command": _CADDY_CMD,
            "config": "/etc/quicbed/Caddyfile",
            "version_command": ["caddy", "build-info"],
            "quic": {
                **_QUIC_GO,
                "stack": "quic-go (Debian's Caddy package)",
                "udp_buffers": "7 MiB receive; send buffer left at wmem_default",
            },
        },
    }


def _shipped() -> dict[str, servers.ServerSpec]:
    return descriptors.load_servers(dirs="")


def test_shipped_descriptors_reproduce_the_old_specs() -> None:
    shipped = _shipped()
    # The order is the old one: error messages ("known: caddy, nginx, caddy-debian") and
    # manifests list servers in it. The stacks added since (aioquic, HTTP/3 only) come after.
    assert list(shipped)[:4] == ["caddy", "nginx", "caddy-debian", "haproxy"]
    specs = {name: shipped[name] for name in list(shipped)[:4]}
    for name, old in _old_specs().items():
        spec = specs[name]
        assert spec.name == name
        for attr, value in old.items():
            got = getattr(spec, attr)
            assert got == value and type(got) is type(value), (name, attr)
        assert list(spec.quic) == list(old["quic"]), name  # key order, as in the manifest
        assert spec.server_log == f"/var/log/quicbed/{name}.log"
        assert spec.tls_versions == ["TLSv1.2", "TLSv1.3"]
        assert spec.http_versions == ["HTTP/1.1", "HTTP/2.0", "HTTP/3.0"]
        assert (spec.health.path, spec.health.status, spec.health.protocols) == (
            servers.HEALTH_PATH,
            204,
            ["h2", "h3"],
        )
        assert spec.dockerfile == f"images/{name}/Dockerfile"
    assert {n: s.access_log for n, s in specs.items()} == {
        "caddy": "caddy-json",
        "nginx": "quicbed-json",
        "caddy-debian": "caddy-json",
        "haproxy": "haproxy-json",
    }
    assert {n: s.compose_port for n, s in specs.items()} == {
        "caddy": 8443,
        "nginx": 9443,
        "caddy-debian": None,
        "haproxy": None,
    }
    caddy_facts = {"quic_go_version": "github.com/quic-go/quic-go", "go_version": "go"}
    assert specs["caddy"].build_info_facts == specs["caddy-debian"].build_info_facts == caddy_facts
    assert specs["nginx"].build_info_facts == {}


def test_package_exports_the_descriptor_registry() -> None:
    assert servers.SERVERS is descriptors.SERVERS
    assert servers.get_server("nginx") is servers.SERVERS["nginx"]
    for name in (
        "HEALTH_PATH",
        "CONTENT_MOUNT",
        "PKI_MOUNT",
        "LOG_MOUNT",
        "ACCESS_LOG",
        "ServerSpec",
        "ServerError",
        "UnknownServer",
        "docker_run_args",
        "start_server",
        "stop_server",
        "server_version",
        "server_settings",
        "read_access_log",
    ):
        assert hasattr(servers, name), name
    assert (
        servers.HEALTH_PATH,
        servers.CONTENT_MOUNT,
        servers.PKI_MOUNT,
        servers.LOG_MOUNT,
        servers.ACCESS_LOG,
    ) == ("/.quicbed-health", "/srv/content", "/etc/quicbed/pki", "/var/log/quicbed", "access.log")


# ---------------------------------------------------------------- probing with a fake docker exec

_BUILD_INFO = """go\tgo1.26.11
path\tgithub.com/caddyserver/caddy/v2/cmd/caddy
mod\tgithub.com/caddyserver/caddy/v2\tv2.11.9\th1:abc=
dep\tgithub.com/quic-go/quic-go\tv0.63.0\th1:def=
"""
_DEBIAN_BUILD_INFO = """go\tgo1.24.4
path\tgithub.com/caddyserver/caddy/v2/cmd/caddy
mod\tgithub.com/caddyserver/caddy/v2\t(devel)\t
"""


def _fake_exec(
    monkeypatch: pytest.MonkeyPatch, answers: dict[tuple[str, ...], tuple[int, str, str]]
) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []

    def fake(container: str, *cmd: str, timeout: float = 10) -> subprocess.CompletedProcess:
        calls.append(cmd)
        code, out, err = answers.get(cmd, (1, "", "not here"))
        return subprocess.CompletedProcess(["docker", "exec", container, *cmd], code, out, err)

    monkeypatch.setattr(probe, "exec_in", fake)
    monkeypatch.setattr(probe, "read_in", lambda container, path: None)  # no /proc here
    return calls


def test_version_parsers(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_exec(
        monkeypatch,
        {
            ("nginx", "-v"): (0, "", "nginx version: nginx/1.26.3\n"),
            ("caddy", "build-info"): (0, _BUILD_INFO, ""),
        },
    )
    assert servers.server_version("c", "nginx") == "1.26.3"
    assert servers.server_version("c", "caddy") == "v2.11.9"
    # Debian's Caddy has no module version: `caddy version`'s first word.
    _fake_exec(
        monkeypatch,
        {("caddy", "build-info"): (0, _DEBIAN_BUILD_INFO, ""), ("caddy", "version"): (0, "2.6.2\n", "")},
    )
    assert servers.server_version("c", "caddy-debian") == "2.6.2"
    _fake_exec(monkeypatch, {("caddy", "build-info"): (0, _DEBIAN_BUILD_INFO, "")})
    assert servers.server_version("c", "caddy-debian") == "unknown"
    _fake_exec(monkeypatch, {("nginx", "-v"): (127, "", "nginx: not found")})
    with pytest.raises(servers.ServerError, match=r"^nginx -v failed in c: nginx: not found$"):
        servers.server_version("c", "nginx")


def test_text_and_regex_parsers() -> None:
    def run(argv: list[str]) -> subprocess.CompletedProcess:
        raise AssertionError("no second command")

    assert versionparse.parse_version("1.2.3 (build 7)\nmore", "text", {}, run) == "1.2.3 (build 7)"
    pattern = {"pattern": r"version (\S+)"}
    assert versionparse.parse_version("h2o version 2.3.0", "regex", pattern, run) == "2.3.0"
    with pytest.raises(servers.ServerError, match="does not match"):
        versionparse.parse_version("unknown", "regex", {"pattern": r"^(v\S+)"}, run)


def test_settings_quic_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_exec(
        monkeypatch,
        {
            ("caddy", "build-info"): (0, _BUILD_INFO, ""),
            ("nginx", "-v"): (0, "", "nginx version: nginx/1.26.3"),
        },
    )
    caddy = servers.server_settings("c", "caddy")
    assert caddy["quic"] == {**_QUIC_GO, "quic_go_version": "v0.63.0", "go_version": "go1.26.11"}
    assert list(caddy["quic"])[-2:] == ["quic_go_version", "go_version"]
    assert (caddy["server"], caddy["image"], caddy["version"], caddy["config"]) == (
        "caddy",
        servers.get_server("caddy").image,
        "v2.11.9",
        "/etc/quicbed/Caddyfile",
    )
    assert caddy["tls_versions"] == ["TLSv1.2", "TLSv1.3"]
    assert caddy["http_versions"] == ["HTTP/1.1", "HTTP/2.0", "HTTP/3.0"]
    nginx = servers.server_settings("c", "nginx")
    assert nginx["quic"] == _old_specs()["nginx"]["quic"]
    assert list(nginx) == list(caddy)


def test_access_log_format_by_server(tmp_path: Path) -> None:
    caddy = {
        "request": {"proto": "HTTP/3.0", "uri": "/a", "tls": {"version": 772}},
        "duration": 0.001,
        "size": 1,
        "status": 200,
    }
    nginx = {
        "proto": "HTTP/2.0",
        "tls": "TLSv1.3",
        "path": "/b",
        "status": 200,
        "bytes": 2,
        "request_time": 0.002,
    }
    (tmp_path / "access.log").write_text(f"{json.dumps(caddy)}\n{json.dumps(nginx)}\n")
    assert [e["path"] for e in servers.read_access_log(tmp_path)] == ["/a", "/b"]
    nginx_spec, debian_spec = servers.get_server("nginx"), servers.get_server("caddy-debian")
    assert [e["path"] for e in servers.read_access_log(tmp_path, nginx_spec)] == ["/b"]
    assert [e["path"] for e in servers.read_access_log(tmp_path, debian_spec)] == ["/a"]
    assert list(accesslog.FORMATS) == ["caddy-json", "replay-json", "quicbed-json", "haproxy-json"]


def test_the_replay_log_names_the_origin_the_entry_and_each_connection(tmp_path: Path) -> None:
    """quicgo_replay's lines (replay-json): nginx's fields plus the origin asked for and the HAR
    entry that answered; its conn serial is kept over HTTP/3 too (nginx's is one per stream
    there, so quicbed-json drops it), and a line without `entry` is not one of its lines."""
    line = {
        "proto": "HTTP/3.0", "tls": "TLSv1.3", "method": "GET", "host": "cdn.page.example",
        "path": "/js/1.js", "status": 200, "bytes": 900, "request_time": 0.0031, "conn": "7",
        "entry": 12, "wait_ms": 3.0,
    }  # fmt: skip
    (tmp_path / "access.log").write_text(json.dumps(line) + "\n" + json.dumps({**line, "entry": -1}) + "\n")
    entries = servers.read_access_log(tmp_path, servers.get_server("quicgo"))
    assert [(e["host"], e["entry"], e["connection"], e["wait_ms"]) for e in entries] == [
        ("cdn.page.example", 12, "7", 3.0),
        ("cdn.page.example", -1, "7", 3.0),
    ]
    assert accesslog.FORMATS["quicbed-json"](line)["connection"] is None
    assert accesslog.FORMATS["replay-json"]({k: v for k, v in line.items() if k != "entry"}) is None


# ---------------------------------------------------------------- the fixture: a server as data


def test_fixture_is_discovered_both_ways() -> None:
    for dirs in (str(FIXTURES), str(FIXTURES / OWN), f"{FIXTURES}::"):
        specs = descriptors.load_servers(dirs=dirs)
        assert list(specs) == [*descriptors.load_servers(dirs=""), OWN], dirs  # the shipped ones first
    own = specs[OWN]
    assert (own.image, own.version, own.version_key, own.dockerfile) == (
        "quicbed-test/own-caddy:1.0",
        "1.0",
        None,
        None,
    )
    assert own.version_parser == "regex" and own.access_log == "caddy-json"


def _python(code: str, dirs: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != descriptors.ENV_DIRS}
    if dirs is not None:
        env[descriptors.ENV_DIRS] = dirs
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


_VALIDATE = """
    from pathlib import Path
    from quicbed.errors import InputError
    from quicbed.experiments import registry
    from quicbed.experiments.schema import parse_experiment
    print(",".join(registry.SERVERS))
    text = Path("experiments/ci/handshake.yaml").read_text()
    assert "servers: [caddy]" in text
    try:
        exp = parse_experiment(text.replace("servers: [caddy]", "servers: [caddy, own-caddy]"))
        print(",".join(exp.servers))
    except InputError as exc:
        print(exc)
"""


def test_fixture_reaches_registry_and_experiment_validation() -> None:
    """Adding a server touches no Python module: the environment variable is all it takes."""
    with_fixture = _python(_VALIDATE, str(FIXTURES.relative_to(REPO)))
    assert with_fixture.returncode == 0, with_fixture.stderr
    shipped = list(load_servers(dirs=""))  # in their descriptors' order
    assert with_fixture.stdout.splitlines() == [
        ",".join([*shipped, "own-caddy"]),
        "caddy,own-caddy",
    ]
    without = _python(_VALIDATE, None)
    assert without.returncode == 0, without.stderr
    lines = without.stdout.splitlines()
    assert lines[0] == ",".join(shipped)
    assert f"servers[1]: unknown server 'own-caddy' (known: {', '.join(shipped)})" in lines[1]


def _build_sh_tags(names: list[str], dirs: str = "") -> list[str]:
    """images/build.sh's tag_of, sourced without its main loop."""
    script = (
        f'set -euo pipefail; eval "$(sed "/^targets=/,\\$d" {REPO}/images/build.sh)"; '
        'for n in "$@"; do tag_of "$n"; done'
    )
    env = {**os.environ, descriptors.ENV_DIRS: dirs}
    # From images/, so that build.sh's own directory (dirname of an empty BASH_SOURCE) is right.
    proc = subprocess.run(
        ["bash", "-c", script, "tags", *names],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO / "images",
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_servers_list_answers_build_sh_and_doctor() -> None:
    """python -m quicbed.servers list: name, image, dockerfile per line; --json: every field."""
    env = {**os.environ, descriptors.ENV_DIRS: str(FIXTURES)}
    run = [sys.executable, "-m", "quicbed.servers", "list"]
    plain = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60, check=True)
    specs = descriptors.load_servers(dirs=str(FIXTURES))
    assert plain.stdout.splitlines() == [
        f"{s.name}\t{s.image}\t{s.dockerfile or '-'}\t{'on-demand' if s.on_demand else '-'}"
        for s in specs.values()
    ]
    listed = subprocess.run([*run, "--json"], env=env, capture_output=True, text=True, timeout=60, check=True)
    own = json.loads(listed.stdout)[-1]
    assert (own["name"], own["image"], own["version"], own["version_key"]) == (
        OWN,
        "quicbed-test/own-caddy:1.0",
        "1.0",
        None,
    )


def test_build_sh_reads_descriptors_through_the_engine_not_sed(tmp_path: Path) -> None:
    """YAML written any way YAML allows (a folded image, a flow mapping, a quoted key) names
    the same image in build.sh as in Python: build.sh asks python -m quicbed.servers list."""
    own = tmp_path / "folded"
    own.mkdir()
    text = (FIXTURES / OWN / "server.yaml").read_text()
    text = text.replace("image: quicbed-test/own-caddy", "image: >-\n  quicbed-test/folded")
    (own / "server.yaml").write_text(text.replace('version: "1.0"', '"version": "2.0"  # quoted key'))
    assert descriptors.load_servers(dirs=str(own))["folded"].image == "quicbed-test/folded:2.0"
    assert _build_sh_tags(["folded"], str(own)) == ["quicbed-test/folded:2.0"]


def test_build_sh_names_the_same_images_as_python() -> None:
    specs = descriptors.load_servers(dirs=str(FIXTURES))
    assert _build_sh_tags(list(specs), str(FIXTURES)) == [s.image for s in specs.values()]
    assert _build_sh_tags(["client", "tools"]) == ["quicbed/client:dev", "quicbed/tools:dev"]


# ---------------------------------------------------------------- bad descriptors

_VALID = (FIXTURES / OWN / "server.yaml").read_text()
VERSIONS = {"CADDY_VERSION": "v2.11.9"}

# (name, edit of the valid fixture, field in the message, words of the message)
BAD = [
    (
        "missing-field",
        lambda t: t.replace("config: /etc/quicbed/Caddyfile\n", ""),
        "config",
        "missing (required)",
    ),
    ("typo", lambda t: t.replace("description:", "descripton:"), "descripton", "did you mean 'description'?"),
    (
        "command-string",
        lambda t: t.replace("command: [caddy, run,", "command: caddy run #"),
        "command",
        "must be a non-empty list",
    ),
    (
        "key-not-pinned",
        lambda t: t.replace('version: "1.0"', "version_key: NOPE_VERSION"),
        "version_key",
        "NOPE_VERSION is not in versions.env",
    ),
    (
        "both-versions",
        lambda t: t.replace('version: "1.0"', 'version: "1.0"\nversion_key: CADDY_VERSION'),
        "version_key",
        "not both",
    ),
    ("no-version", lambda t: t.replace('version: "1.0"\n', ""), "version_key", "not neither"),
    ("number-version", lambda t: t.replace('version: "1.0"', "version: 1.0"), "version", "quote it"),
    (
        "bad-tag",
        lambda t: t.replace('version: "1.0"', 'version: "1.0+deb"'),
        "version",
        "cannot be an image tag",
    ),
    (
        "upper-image",
        lambda t: t.replace("image: quicbed-test/own-caddy", "image: Quicbed/Own"),
        "image",
        "not an image name",
    ),
    (
        "bad-parser",
        lambda t: t.replace("parser: regex", "parser: magic"),
        "version_probe.parser",
        "unknown parser 'magic'; known: text, regex, go-build-info",
    ),
    (
        "bad-regex",
        lambda t: t.replace(r"(v\S+)'", "(v'"),
        "version_probe.pattern",
        "not a regular expression",
    ),
    (
        "option-of-other-parser",
        lambda t: t.replace("parser: regex", "parser: go-build-info"),
        "version_probe.pattern",
        "unknown field",
    ),
    (
        "bad-format",
        lambda t: t.replace("access_log: caddy-json", "access_log: apache"),
        "access_log",
        "unknown format 'apache'; known: caddy-json, replay-json, quicbed-json",
    ),
    (
        "bad-health",
        lambda t: t.replace("protocols: [h2, h3]", "protocols: [h2, h4]"),
        "health.protocols[1]",
        "'h4' is not one of h1, h2, h3",
    ),
    ("bad-port", lambda t: t + "compose_port: 70000\n", "compose_port", "from 1 to 65535"),
    ("bad-serves", lambda t: t + "serves: pages\n", "serves", "'pages' is not one of content, replay"),
    (
        "no-dockerfile",
        lambda t: t + "dockerfile: images/nope/Dockerfile\n",
        "dockerfile",
        "not a file in the repository",
    ),
    ("numeric-fact", lambda t: t + "  workers: 1\n", "quic.workers", "quote it"),
    ("relative-config", lambda t: t.replace("config: /etc/", "config: etc/"), "config", "absolute path"),
    ("yaml", lambda t: t.replace("protocols:\n  tls", "protocols:\n tls: [\n  tls"), "yaml", ""),
    ("empty", lambda t: "# nothing yet\n", "server", "the file is empty"),
    ("list", lambda t: "- image: x\n", "server", "must be a mapping"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_descriptor_is_one_line_with_file_and_field(tmp_path: Path, case) -> None:
    name, edit, field, words = case
    path = tmp_path / "my-server" / "server.yaml"
    path.parent.mkdir()
    text = edit(_VALID)
    assert text != _VALID, name
    path.write_text(text)
    with pytest.raises(LocatedError) as err:
        descriptors.load_descriptor(path, VERSIONS)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}:"), msg
    assert f": {field}: " in msg, msg
    assert words in msg, msg


def test_valid_fixture_loads(tmp_path: Path) -> None:
    spec = descriptors.load_descriptor(FIXTURES / OWN / "server.yaml", VERSIONS)
    assert spec.name == OWN and spec.image == "quicbed-test/own-caddy:1.0"


def test_bad_directory_name(tmp_path: Path) -> None:
    path = tmp_path / "My_Server" / "server.yaml"
    path.parent.mkdir()
    path.write_text(_VALID)
    with pytest.raises(LocatedError, match=r"server\.yaml:1: name: the directory's name 'My_Server'"):
        descriptors.load_descriptor(path, VERSIONS)


def test_duplicate_name_and_bad_dirs(tmp_path: Path) -> None:
    (tmp_path / "caddy").mkdir()
    (tmp_path / "caddy" / "server.yaml").write_text(_VALID)
    with pytest.raises(LocatedError) as err:
        descriptors.load_servers(dirs=str(tmp_path))
    assert f"{tmp_path}/caddy/server.yaml:1: name: server 'caddy' is also described by " in str(err.value)
    assert str(descriptors.SHIPPED_DIR / "caddy" / "server.yaml") in str(err.value)
    with pytest.raises(InputError, match=r"^QUICBED_SERVER_DIRS: /nonexistent: no such directory$"):
        descriptors.load_servers(dirs="/nonexistent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no server.yaml"):
        descriptors.load_servers(dirs=str(tmp_path / "empty"))


def test_bad_user_descriptor_fails_the_cli_in_one_line(tmp_path: Path) -> None:
    """No silent dropping: a descriptor whose versions.env key is missing stops quicbed."""
    path = tmp_path / "pinned" / "server.yaml"
    path.parent.mkdir()
    text = _VALID.replace('version: "1.0"', "version_key: PINNED_VERSION")
    path.write_text(text)
    line = text.splitlines().index("version_key: PINNED_VERSION") + 1
    env = {**os.environ, descriptors.ENV_DIRS: str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "quicbed.cli", "run", "--dry-run", "experiments/ci/handshake.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"quicbed: {path}:{line}: version_key: PINNED_VERSION is not in versions.env (pin it there "
        "as PINNED_VERSION=..., or give a literal version:)"
    ]


# ---------------------------------------------------------------- docker: the fixture serves


def _docker(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)


@pytest.mark.docker
def test_fixture_server_starts_and_answers_h2_h3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's prebuilt image (here: quicbed/caddy under another name) and its descriptor are
    all it takes: images/build.sh checks the image, the server starts, answers h2 and h3."""
    base = servers.get_server("caddy").image
    if _docker("image", "inspect", base, check=False).returncode != 0:
        pytest.fail(f"{base} not built (images/build.sh caddy)")
    spec = descriptors.load_descriptor(FIXTURES / OWN / "server.yaml")
    monkeypatch.setitem(servers.SERVERS, OWN, spec)  # what QUICBED_SERVER_DIRS does at import
    env = {**os.environ, descriptors.ENV_DIRS: str(FIXTURES)}
    build = ["bash", str(REPO / "images" / "build.sh"), OWN]

    _docker("rmi", spec.image, check=False)
    absent = subprocess.run(build, env=env, capture_output=True, text=True, timeout=60)
    assert absent.returncode == 1
    assert f"images: {spec.image} not found: {OWN}'s descriptor" in absent.stderr

    _docker("tag", base, spec.image)
    container = f"dev-srv-test-{OWN}-{uuid.uuid4().hex[:6]}"
    try:
        present = subprocess.run(build, env=env, capture_output=True, text=True, timeout=60)
        assert present.returncode == 0, present.stderr
        assert f"images: {spec.image} present (prebuilt" in present.stdout

        root = ensure_content(tmp_path / "content", {"web"})
        keys = pki.generate_pki(tmp_path / "pki", "127.0.0.1")
        logs = tmp_path / "logs"
        logs.mkdir()
        _docker(
            "run",
            "-d",
            "--network",
            "none",
            "--name",
            container,
            *servers.docker_run_args(OWN, root, keys.dir, logs),
        )
        # Returns once the health check answered over h2 and over h3 on :443.
        servers.start_server(container, OWN, timeout=20)
        for protocol in ("h2", "h3"):
            ok, answer = lifecycle._probe(container, spec, protocol, timeout=5)
            assert ok, (protocol, answer)
        fetch = _docker(
            "exec",
            container,
            "curl",
            "-sS",
            "--fail",
            "--http3-only",
            "-o",
            "/dev/null",
            "--cacert",
            f"{servers.PKI_MOUNT}/ca.pem",
            "--resolve",
            "server.quicbed:443:127.0.0.1",
            "https://server.quicbed/web/index.html",
            check=False,
        )
        assert fetch.returncode == 0, fetch.stderr
        entries = servers.read_access_log(logs, spec)
        assert [(e["path"], e["proto"]) for e in entries] == [("/web/index.html", "HTTP/3.0")]
        assert servers.server_version(container, OWN).startswith("v2.")
        settings = servers.server_settings(container, OWN)
        assert settings["image"] == spec.image
        assert settings["quic"] == {"stack": "quic-go (a user's own Caddy image)"}
        assert (logs / f"{OWN}.log").exists()
        servers.stop_server(container, OWN)
    finally:
        _docker("rm", "-f", container, check=False)
        _docker("rmi", spec.image, check=False)  # only the tag: quicbed/caddy keeps the image
