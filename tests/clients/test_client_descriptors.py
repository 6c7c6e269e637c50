"""Clients as data: clients/<name>/client.yaml descriptors, and adding a client with no Python.

- the shipped descriptors give the tools the old Python literal held (labels, argv, capture);
- tests/fixtures/clients/own-ngtcp2, found through QUICBED_CLIENT_DIRS, reaches the registry,
  `python -m quicbed.clients list`, images/build.sh and the experiments' validation;
- a bad descriptor is refused in one line naming its file and field (the engine servers share);
- (path) the fixture client, in its own image, runs trials on the emulated path against the
  fixture server (tests/fixtures/servers/own-caddy): both plugged in as data, one bring-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_process import quicbed

from quicbed import doctor, servers
from quicbed.clients import tools
from quicbed.experiments.executor import tools_images
from quicbed.experiments.schema import load_experiment, parse_experiment
from quicbed.paths import REPO
from quicbed.yamlio import LocatedError

FIXTURES = REPO / "tests" / "fixtures" / "clients"
SERVER_FIXTURES = REPO / "tests" / "fixtures" / "servers"
OWN = "own-ngtcp2"
OWN_IMAGE = "quicbed-test/own-client:1.0"

# ---------------------------------------------------------------- the shipped descriptors


def test_shipped_clients_are_the_old_tools() -> None:
    """What clients/tools.py's literal held, checked on the loaded descriptors: the perf tools
    in the client image, the browsers in an image of their own (the perf image carries no
    browser); the stacks added since (stacks/aioquic, ...) come after them, each in its own."""
    old = {
        name: tools.TOOLS[name] for name in ("tls_perf", "quic_perf", "video_download", "chromium", "firefox")
    }
    assert list(tools.TOOLS)[:5] == list(old)
    images = {name: (t.image, t.dockerfile) for name, t in old.items()}
    perf = (tools.CLIENT_IMAGE, "images/client/Dockerfile")
    browser = ("quicbed/browser:dev", "images/browser/Dockerfile")
    assert images == {
        "tls_perf": perf,
        "quic_perf": perf,
        "video_download": perf,
        "chromium": browser,
        "firefox": browser,
    }
    assert tools.TOOLS["aioquic"].dockerfile == "stacks/aioquic/Dockerfile"
    tls, quic, video, chromium, firefox = old.values()
    assert firefox.command == ("browser_perf", "--browser", "firefox") and firefox.workloads == ("web",)
    assert len(tls.labels()) == 16 and "tls1.2-h1-pq-resume" in tls.labels()
    assert tls.defaults == {"tls": "1.3", "http": "2", "kex": "x25519", "resume": "no"}
    assert quic.labels()[:2] == ["quic-h3", "quic-h3-resume"]
    assert quic.argv("u", "r", "c", 30, {"backend": "ngtcp2", "kex": "x25519mlkem768", "resume": "yes"})[
        12:
    ] == [
        "--backend",
        "ngtcp2",
        "--groups",
        "X25519MLKEM768:X25519:secp256r1",
        "--resume",
    ]
    assert video.argv("u", "r", "c", 30, {"protocol": "tls1.2", "kex": "x25519"})[12:] == [
        "--groups",
        "X25519:secp256r1",
        "--transport",
        "tcp",
        "--tls",
        "1.2",
    ]
    assert video.workloads == ("video",) and chromium.workloads == ("web", "video", "cloud")
    assert chromium.command == ("browser_perf",) and chromium.start_s == 1.5
    # The dry run plans a player's trial at the media's length, video_download's at the rate.
    assert chromium.plays_streams and not video.plays_streams
    assert chromium.workload_flags == ("--duration", "--player-settings", "--workload")
    assert (quic.qlog_flag, chromium.qlog_flag, chromium.no_qlog) == (
        "--qlog",
        "",
        "chromium: NetLog not collected yet",
    )
    assert all(t.reports == ("tool_version", "library") for t in tools.TOOLS.values())


def test_the_servers_warm_up_fetches_as_the_runner_calls_the_tool() -> None:
    """servers.testbed spells no argv of its own (a layer below clients.tools): its untimed
    warm-up fetch is the tool's argv with no variant flags and no CPU samples."""
    from quicbed.servers.testbed import WARM_UP_TIMEOUT_S, WARM_UP_URL, warm_up_argv

    path = WARM_UP_URL.split("/", 3)[3]
    for tool in ("tls_perf", "quic_perf"):
        runner = tools.tool_argv(tool, path, "10.0.0.9", timeout_s=WARM_UP_TIMEOUT_S, cpu=False)
        assert warm_up_argv(tool, "10.0.0.9") == runner
        assert "--cpu" not in runner and runner[0] == tool


def test_quicgo_offers_streams_and_the_matrix_asks_for_it() -> None:
    """quicgo's `streams` option (stacks/quicgo/client.yaml): "1" is the row of before (no
    label suffix), "30" the variant quicgo-s30, which the stack matrix's full run measures
    (the streams check of analysis/stack_matrix.py) and its quick run leaves out."""
    quicgo = tools.TOOLS["quicgo"]
    assert quicgo.options["streams"] == ("1", "30") and quicgo.defaults["streams"] == "1"
    assert quicgo.labels() == [
        "quicgo",
        "quicgo-s30",
        "quicgo-resume",
        "quicgo-resume-s30",
        "quicgo-pq",
        "quicgo-pq-s30",
        "quicgo-pq-resume",
        "quicgo-pq-resume-s30",
    ]
    argv = quicgo.argv("u", "r", "c", 30, {"kex": "x25519", "resume": "no", "streams": "30"})
    assert argv[12:] == ["--groups", "X25519:secp256r1", "--streams", "30"]
    matrix = REPO / "experiments" / "stacks" / "matrix.yaml"
    full = {c.label: c.options for c in load_experiment(matrix).clients}
    assert full["quicgo-s30"] == {"kex": "x25519", "resume": "no", "streams": "30"}
    assert full["quicgo"]["streams"] == "1"
    assert "quicgo-s30" not in {c.label for c in load_experiment(matrix, quick=True).clients}


# ---------------------------------------------------------------- the fixture: a client as data


def test_fixture_is_discovered_both_ways() -> None:
    for dirs in (str(FIXTURES), str(FIXTURES / OWN), f"{FIXTURES}::"):
        found = tools.load_clients(dirs=dirs)
        assert list(found)[-1] == OWN and len(found) == len(tools.TOOLS) + 1, dirs
    own = found[OWN]
    assert (own.image, own.dockerfile, own.command) == (OWN_IMAGE, None, ("quic_perf", "--backend", "ngtcp2"))
    # The command's own arguments come first, then the contract's, then the variant's.
    argv = own.argv("https://s/x", "s:443:a", "/ca.pem", 20, {"kex": "x25519", "resume": "yes"})
    assert argv[:5] == ["quic_perf", "--backend", "ngtcp2", "--url", "https://s/x"]
    assert argv[-3:] == ["--groups", "X25519:secp256r1", "--resume"]
    assert own.labels() == ["own-ngtcp2", "own-ngtcp2-resume", "own-ngtcp2-pq", "own-ngtcp2-pq-resume"]


def _python(args: list[str], dirs: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != tools.ENV_DIRS}
    if dirs is not None:
        env[tools.ENV_DIRS] = dirs
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


_VALIDATE = """
    from quicbed.errors import InputError
    from quicbed.experiments.schema import load_experiment, parse_experiment
    text = '''name: own
    profiles: [india]
    servers: [caddy]
    clients: [{tool: own-ngtcp2, resume: ["no", "yes"]}]
    workload: {kind: web, objects: [index.html]}
    '''
    try:
        print(",".join(c.label for c in parse_experiment(text).clients))
    except InputError as exc:
        print(exc)
"""


def test_fixture_reaches_listing_and_experiment_validation() -> None:
    """Adding a client touches no Python module: the environment variable is all it takes."""
    code = ["-c", textwrap.dedent(_VALIDATE)]
    with_fixture = _python(code, str(FIXTURES.relative_to(REPO)))
    assert with_fixture.returncode == 0, with_fixture.stderr
    assert with_fixture.stdout.strip() == "own-ngtcp2,own-ngtcp2-resume"
    without = _python(code, None)
    assert "clients[0].tool: unknown client tool 'own-ngtcp2'" in without.stdout, without.stdout

    listed = _python(["-m", "quicbed.clients", "list", "--json"], str(FIXTURES))
    assert listed.returncode == 0, listed.stderr
    entries = {e["name"]: e for e in json.loads(listed.stdout)}
    assert entries[OWN]["image"] == OWN_IMAGE and entries[OWN]["dockerfile"] is None
    assert entries["quic_perf"]["image"] == tools.CLIENT_IMAGE


def test_listing_says_a_bad_descriptor_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad-client" / "client.yaml"
    bad.parent.mkdir()
    bad.write_text((FIXTURES / OWN / "client.yaml").read_text().replace("label:", "lable:"))
    proc = _python(["-m", "quicbed.clients", "list"], str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"quicbed: {bad}:11: lable: unknown field; did you mean 'label'?"
    ]
    missing = _python(["-m", "quicbed.clients", "list"], str(tmp_path / "nope"))
    assert (missing.returncode, missing.stderr.strip()) == (
        2,
        f"quicbed: QUICBED_CLIENT_DIRS: {tmp_path}/nope: no such directory",
    )


def _build_sh(names: list[str], dirs: str) -> list[str]:
    """images/build.sh's tag_of and dockerfile_of, sourced without its main loop."""
    script = (
        f'set -euo pipefail; eval "$(sed "/^targets=/,\\$d" {REPO}/images/build.sh)"; '
        'for n in "$@"; do echo "$(tag_of "$n") $(dockerfile_of "$n")"; done'
    )
    env = {**os.environ, tools.ENV_DIRS: dirs}
    proc = subprocess.run(
        ["bash", "-c", script, "tags", *names],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO / "images",
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_build_sh_names_client_images_from_the_descriptors() -> None:
    dockerfile = f"{REPO}/images/client/Dockerfile"
    assert _build_sh(["client", "quic_perf", OWN], str(FIXTURES)) == [
        f"quicbed/client:dev {dockerfile}",
        f"quicbed/client:dev {dockerfile}",
        f"{OWN_IMAGE} ",  # prebuilt: no Dockerfile, build.sh only checks that it exists
    ]


def test_an_on_demand_image_is_listed_so_and_left_to_the_run_that_needs_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stack compiled from source says `on_demand: true`: the listing says so, build.sh's
    `all` reads it (and leaves the image to the run or test that needs it), and doctor notes
    a missing one instead of failing."""
    later = tmp_path / "quicgo-later"
    later.mkdir()
    text = (REPO / "stacks" / "quicgo" / "client.yaml").read_text()
    (later / "client.yaml").write_text(
        text.replace("image: quicbed/quicgo", "image: quicbed-test/later") + "on_demand: true\n"
    )
    image = f"quicbed-test/later:{tools.TOOLS['quicgo'].image.split(':')[1]}"
    listed = _python(["-m", "quicbed.clients", "list"], str(tmp_path))
    assert f"quicgo-later\t{image}\tstacks/quicgo/Dockerfile\ton-demand" in listed.stdout.splitlines()
    # The shipped quicgo is built by `make images`; its on-demand copy is not.
    (shipped,) = [line for line in listed.stdout.splitlines() if line.startswith("quicgo\t")]
    assert shipped.startswith("quicgo\tquicbed/quicgo") and shipped.endswith("\t-"), shipped
    script = (
        f'eval "$(sed "/^targets=/,\\$d" {REPO}/images/build.sh)"; echo "${{on_demand_by[quicgo-later]}}"'
    )
    env = {**os.environ, tools.ENV_DIRS: str(tmp_path)}
    sourced = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, cwd=REPO / "images"
    )
    assert sourced.stdout.strip() == "on-demand", sourced.stderr
    monkeypatch.setenv(tools.ENV_DIRS, str(tmp_path))
    described = doctor.described_images()
    assert described[image] is True and described[tools.TOOLS["quicgo"].image] is False


def test_doctor_checks_the_images_the_descriptors_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """doctor asks python -m quicbed.servers/clients list --json: every image once, a user's
    own included; a bad descriptor is its one line, not a traceback."""
    monkeypatch.setenv(tools.ENV_DIRS, str(FIXTURES))
    monkeypatch.setenv("QUICBED_SERVER_DIRS", str(SERVER_FIXTURES))
    # Each once: quinn's and quiche's one image each serves its client and its server.
    assert list(doctor.described_images()) == list(
        dict.fromkeys(
            [
                *(spec.image for spec in servers.SERVERS.values()),
                "quicbed-test/own-caddy:1.0",
                *(t.image for t in tools.TOOLS.values()),
                OWN_IMAGE,
            ]
        )
    )
    monkeypatch.setenv(tools.ENV_DIRS, str(tmp_path / "nope"))
    with pytest.raises(doctor.DescriptorProblem) as err:
        doctor.described_images()
    assert str(err.value) == f"quicbed: {tools.ENV_DIRS}: {tmp_path}/nope: no such directory"


# ---------------------------------------------------------------- the executor's image


_EXPERIMENT = """name: own
profiles: [india]
servers: [caddy]
clients: [{CLIENTS}]
workload: {kind: web, objects: [index.html]}
"""


def test_the_client_container_runs_the_first_tools_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first client's image is the client container's; another tool's image gets a side
    container in the same namespace (the path test below runs both)."""
    own = tools.load_clients(dirs=str(FIXTURES))
    monkeypatch.setattr(tools, "TOOLS", own)
    monkeypatch.setattr("quicbed.experiments.schema.TOOLS", own)
    monkeypatch.setattr("quicbed.experiments.executor.TOOLS", own)
    assert tools_images(parse_experiment(_EXPERIMENT.replace("{CLIENTS}", OWN))) == [OWN_IMAGE]
    assert tools_images(parse_experiment(_EXPERIMENT.replace("{CLIENTS}", "quic_perf"))) == [
        tools.CLIENT_IMAGE
    ]
    both = parse_experiment(_EXPERIMENT.replace("{CLIENTS}", f"quic_perf, {OWN}, tls_perf"))
    assert tools_images(both) == [tools.CLIENT_IMAGE, OWN_IMAGE]


# ---------------------------------------------------------------- bad descriptors

_VALID = (FIXTURES / OWN / "client.yaml").read_text()

# (name, edit of the valid fixture, field in the message, words of the message)
BAD = [
    (
        "missing-command",
        lambda t: t.replace("command: [quic_perf, --backend, ngtcp2]\n", ""),
        "command",
        "missing",
    ),
    ("typo", lambda t: t.replace("workloads:", "workload:"), "workload", "did you mean 'workloads'?"),
    (
        "command-string",
        lambda t: t.replace("command: [quic_perf,", "command: quic_perf #"),
        "command",
        "non-empty list",
    ),
    ("label-option", lambda t: t.replace("{kex}{resume}", "{kex}{tls}"), "label", "not a template"),
    ("protocol", lambda t: t.replace("protocol: quic", "protocol: quic2"), "protocol", "gives 'quic2'"),
    (
        "workload",
        lambda t: t.replace("[get]", "[get, audio]"),
        "workloads[1]",
        "'audio' is not one of",
    ),
    (
        "unquoted-no",
        lambda t: t.replace('values: ["no", "yes"]', "values: [no, yes]"),
        "options.resume.values[0]",
        "not a boolean",
    ),
    (
        "default",
        lambda t: t.replace("    flag: --groups", "    default: x448\n    flag: --groups"),
        "options.kex.default",
        "'x448' is not one of",
    ),
    (
        "short-key",
        lambda t: t.replace('{"no": "", "yes": -resume}', '{"no": "", "maybe": -m}'),
        "options.resume.short.maybe",
        "not one of the option's values",
    ),
    ("flag", lambda t: t.replace("flag: --groups", "flag: groups"), "options.kex.flag", "not a --long-flag"),
    ("give-without-flag", lambda t: t.replace("    flag: --groups\n", ""), "options.kex.give", "needs flag"),
    (
        "expand-string",
        lambda t: t.replace("[--resume]", "--resume"),
        "options.resume.expand.yes",
        "non-empty list",
    ),
    ("capture", lambda t: t.replace("  qlog: --qlog\n", ""), "capture", "give qlog"),
    (
        "report",
        lambda t: t.replace("[tool_version, library]", "[tool_version, versions]"),
        "reports[1]",
        "'versions' is not one of",
    ),
    ("tool-option", lambda t: t.replace("  kex:\n", "  tool:\n"), "options.tool", "not tool"),
    ("no-version", lambda t: t.replace('version: "1.0"\n', ""), "version_key", "not neither"),
    (
        "upper-image",
        lambda t: t.replace("image: quicbed-test/own-client", "image: Own/Client"),
        "image",
        "not an image name",
    ),
    ("start", lambda t: t + "start_s: -1\n", "start_s", "from 0 to 600"),
    ("plays-streams", lambda t: t + "plays_streams: yes-please\n", "plays_streams", "true or false"),
    ("on-demand-type", lambda t: t + 'on_demand: "yes"\n', "on_demand", "true or false"),
    ("on-demand-prebuilt", lambda t: t + "on_demand: true\n", "on_demand", "only an image built here"),
    ("yaml", lambda t: t.replace("options:\n  kex:", "options:\n kex: [\n  kex:"), "yaml", ""),
    ("empty", lambda t: "# nothing yet\n", "client", "the file is empty"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_descriptor_is_one_line_with_file_and_field(tmp_path: Path, case) -> None:
    name, edit, field, words = case
    path = tmp_path / "my-client" / "client.yaml"
    path.parent.mkdir()
    text = edit(_VALID)
    assert text != _VALID, name
    path.write_text(text)
    with pytest.raises(LocatedError) as err:
        tools.load_descriptor(path, {})
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}:"), msg
    assert f": {field}: " in msg, msg
    assert words in msg, msg


def test_two_descriptors_of_one_name(tmp_path: Path) -> None:
    (tmp_path / "quic_perf").mkdir()
    (tmp_path / "quic_perf" / "client.yaml").write_text(_VALID)
    with pytest.raises(LocatedError, match="client 'quic_perf' is also described by"):
        tools.load_clients(dirs=str(tmp_path))


# ---------------------------------------------------------------- on the path


@pytest.mark.path
@pytest.mark.usefixtures("clean_slate")
def test_fixture_client_runs_on_the_path_in_its_own_image(tmp_path: Path) -> None:
    """Both plugged in as data (the fixture client in its own image, the fixture server):
    `quicbed run` measures the client's trials with QUIC's one-RTT handshake."""
    for source, tag in (
        ("quicbed/client:dev", OWN_IMAGE),
        ("quicbed/caddy:v2.11.9", "quicbed-test/own-caddy:1.0"),
    ):
        subprocess.run(["docker", "tag", source, tag], check=True, timeout=60)
    experiment = tmp_path / "own.yaml"
    experiment.write_text(
        _EXPERIMENT.replace("{CLIENTS}", f"{{tool: {OWN}, resume: ['no', 'yes']}}, quic_perf").replace(
            "[caddy]", "[own-caddy]"
        )
        + "repetitions: 3\n"
    )
    env = {
        tools.ENV_DIRS: str(FIXTURES),
        "QUICBED_SERVER_DIRS": str(SERVER_FIXTURES),
        "QUICBED_RESULTS": str(tmp_path / "results"),
    }
    proc = quicbed("run", str(experiment), "--no-progress", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["executor"]["client_image"]["image"] == OWN_IMAGE, manifest["executor"]["client_image"]
    # quic_perf's image, the project's client image, ran beside it in a side container.
    assert list(manifest["executor"]["client_images"]) == [OWN_IMAGE, tools.CLIENT_IMAGE]
    tool = manifest["executor"]["client_tools"][OWN]
    assert (tool["descriptor"], tool["command"]) == (
        f"tests/fixtures/clients/{OWN}/client.yaml",  # relative: runs of two checkouts compare
        ["quic_perf", "--backend", "ngtcp2"],
    )
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    # The versions the descriptor says it reports are in every row.
    assert all(r[column] for r in rows for column in tool["versions_in"]), [r["library"] for r in rows]
    assert (
        sorted(r["client"] for r in rows) == ["own-ngtcp2"] * 3 + ["own-ngtcp2-resume"] * 3 + ["quic-h3"] * 3
    )
    assert all(r["error"] is None and r["protocol"] == "quic" for r in rows), rows
    assert {r["backend"] for r in rows} == {"ngtcp2", "libcurl"}
    theirs = [r["connection_time_ms"] / r["calib_rtt_ms"] for r in rows if r["client"] == "quic-h3"]
    assert all(0.9 < x < 1.2 for x in theirs), theirs  # the side container is on the same path
    rtt = rows[0]["calib_rtt_ms"]
    fresh = [r["connection_time_ms"] / r["calib_rtt_ms"] for r in rows if r["client"] == "own-ngtcp2"]
    assert all(0.9 < x < 1.2 for x in fresh), fresh  # QUIC: one RTT to a first connection
    print(f"own-ngtcp2 connection_time / rtt ({rtt:.1f} ms): {[round(x, 3) for x in fresh]}")


def test_build_sh_builds_a_client_and_a_server_of_one_name() -> None:
    # aioquic is a client (stacks/aioquic) and a server (stacks/aioquic): the server keeps
    # the name, the client image is keyed client:aioquic, and the server's image takes the
    # client's wheels (one pin: the requirements.txt its Dockerfile COPYs).
    assert _build_sh(["aioquic", "client:aioquic"], "") == [
        f"{servers.get_server('aioquic').image} {REPO}/stacks/aioquic/server/Dockerfile",
        f"{tools.TOOLS['aioquic'].image} {REPO}/stacks/aioquic/Dockerfile",
    ]
    script = (
        f'set -euo pipefail; eval "$(sed "/^targets=/,\\$d" {REPO}/images/build.sh)"; '
        "wheel_requirements aioquic; wheel_requirements client:aioquic; wheel_requirements nginx"
    )
    images = REPO / "images"
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, cwd=images)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"{REPO}/stacks/aioquic/requirements.txt {REPO}/stacks/aioquic/server/prebuilt/wheels",
        f"{REPO}/stacks/aioquic/requirements.txt {REPO}/stacks/aioquic/prebuilt/wheels",
    ]
