"""Hostile input is refused fast, in one located line, never with a traceback: experiment and
profile YAML (bounded in quicbed.yamlio) and results directories (rows.jsonl, manifest.json)."""

from __future__ import annotations

import codecs
import json
import os
import random
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from analysis_synthetic import Model, write_run
from bad_experiments import BAD, expected_lines

from quicbed import cli, limits, paths, rowschema, yamlio
from quicbed.analysis import load
from quicbed.analysis.explain import NO_CAPTURE
from quicbed.experiments import cluster, links
from quicbed.experiments.commands import cmd_run
from quicbed.experiments.options import RunOptions
from quicbed.experiments.store import RunStore, StoreError, load_rows, new_run_id, read_manifest
from quicbed.experiments.synthetic import SyntheticExecutor
from quicbed.topology.profiles import load_profile
from quicbed.yamlio import LocatedError, parse_source

EXPECTED = expected_lines()
LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>\d+): \S")
TIME_LIMIT_S = 1.0  # generous: each refusal below takes milliseconds

VALID = """\
name: hostile
profiles:
  - {name: lab, rtt_ms: 80, rate_mbit: 20}
servers: [caddy]
clients:
  - quic_perf
workload: {kind: web, objects: [index.html]}
repetitions: 3
expect:
  - "0.9 < quic.connection_time.median / rtt < 1.15"
"""
VALID_LINES = VALID.count("\n")


@pytest.fixture(autouse=True)
def fixed_profiles(monkeypatch):
    # The corpus' messages list the known profiles; pin them as tests/experiments/test_experiments.py does.
    monkeypatch.setattr(links, "available_profiles", lambda: ["germany", "india"])
    monkeypatch.setattr(cli.signal, "signal", lambda *_: None)  # keep pytest's SIGTERM


def quicbed(capsys, *argv: str) -> tuple[int, list[str], float]:
    """`quicbed ARGV` in-process: exit code, the non-empty lines it printed, seconds taken."""
    start = time.perf_counter()
    code = cli.main(list(argv))
    elapsed = time.perf_counter() - start
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, [line for line in (out + err).splitlines() if line.strip()], elapsed


def refused(capsys, path: Path) -> str:
    """`quicbed run --dry-run PATH` must exit 2 with one `PATH:LINE: ...` line, in time."""
    code, lines, elapsed = quicbed(capsys, "run", "--dry-run", str(path))
    assert code == 2, lines
    assert len(lines) == 1, lines
    match = LOCATED.match(lines[0])
    assert match and match["file"] == str(path), lines[0]
    assert elapsed < TIME_LIMIT_S, f"took {elapsed:.2f} s"
    return lines[0]


# --- the committed corpus, through the CLI --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_is_refused_by_the_cli_in_one_line(name, capsys):
    line = refused(capsys, BAD / name)
    assert line == f"{BAD}/{EXPECTED[name]}"


# --- shapes too big to commit, made at run time ---------------------------------------------------


def _nested_lists(depth: int) -> str:
    return VALID + "seed:\n" + "  [\n" * depth + "  ]\n" * depth


def _nested_mappings(depth: int) -> str:
    return VALID + "seed:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(depth))


def _text(text: str) -> Callable[[], bytes]:
    return lambda: text.encode()


GENERATED: dict[str, tuple[Callable[[], bytes], int, str]] = {
    # name: (file content, line, message)
    "lists_10000_deep": (
        _text(_nested_lists(10_000)),
        VALID_LINES + 1 + 32,
        "yaml: nested deeper than 32 levels",
    ),
    "mappings_300_deep": (
        _text(_nested_mappings(300)),
        VALID_LINES + 32,
        "yaml: nested deeper than 32 levels",
    ),
    "lists_10000_deep_one_line": (
        _text(VALID + "seed: " + "[" * 10_000 + "]" * 10_000 + "\n"),
        VALID_LINES + 1,
        "yaml: line is 20006 characters long",
    ),
    "long_line": (
        _text(VALID + "description: " + "x" * 5000 + "\n"),
        VALID_LINES + 1,
        "yaml: line is 5013 characters long (limit 4096)",
    ),
    "huge_scalar": (
        _text(VALID + "description: |\n" + ("  " + "x" * 99 + "\n") * 200),
        VALID_LINES + 1,
        "yaml: a value of 20000 characters (limit 10000)",
    ),
    "huge_integer": (
        _text(VALID + 'seed: !!int "' + "1" * 3000 + "\\\n  " + "1" * 3000 + '"\n'),
        VALID_LINES + 1,
        "yaml: cannot read '111",
    ),
    # The mapping, its key and the list are 3 values: the 5001st is item 4998, on line 4999.
    "twenty_thousand_values": (
        _text("seed: [\n" + "1,\n" * 20_000 + "]\n"),
        4999,
        "yaml: more than 5000 values",
    ),
    "wide_alias_bomb": (
        _text(
            VALID
            + "x: &x0 ["
            + ", ".join(["lol"] * 20)
            + "]\n"
            + "".join(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 20) + "]\n" for i in range(1, 12))
        ),
        VALID_LINES + 3,
        "yaml: more than 5000 values once aliases are expanded",
    ),
    "merge_bomb": (
        _text(
            VALID
            + "m0: &m0 {"
            + ", ".join(f"k{i}: {i}" for i in range(10))
            + "}\n"
            + "".join(f"m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * 10) + "]}\n" for i in range(1, 9))
        ),
        VALID_LINES + 4,
        "yaml: more than 5000 values once aliases are expanded",
    ),
    "larger_than_128_KiB": (
        _text(VALID + "# padding to a large file\n" * 6000),
        1,
        "file: larger than 128 KiB",
    ),
    "random_binary": (lambda: random.Random(7).randbytes(4096) + b"\0", 1, "file: "),
    "utf16_big_endian": (
        lambda: codecs.BOM_UTF16_BE + VALID.encode("utf-16-be"),
        1,
        "file: UTF-16 text; save the file as UTF-8",
    ),
    "utf32": (lambda: VALID.encode("utf-32"), 1, "file: UTF-32 text; save the file as UTF-8"),
    "zero_bytes": (lambda: b"", 1, "experiment: the file is empty"),
    "a_scalar_not_a_mapping": (_text("just some words\n"), 1, "experiment: expected a mapping"),
}


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_hostile_file_is_refused_fast_in_one_line(name, tmp_path, capsys):
    content, line, message = GENERATED[name]
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(content())
    assert refused(capsys, path).startswith(f"{path}:{line}: {message}")


def test_dev_zero_is_read_only_up_to_the_bound(capsys):
    assert refused(capsys, Path("/dev/zero")) == (
        "/dev/zero:1: file: larger than 128 KiB (profile and experiment files are a few KB)"
    )


def test_profile_files_are_bounded_too(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(
        "down: &d ["
        + ", ".join(["x"] * 9)
        + "]\n"
        + "".join(
            f"l{i}: &d{i} [" + ", ".join([f"*d{i - 1}" if i > 1 else "*d"] * 9) + "]\n" for i in range(1, 9)
        )
    )
    with pytest.raises(LocatedError, match=rf"^{path}:4: yaml: more than 5000 values"):
        load_profile(str(path))


def test_bounds_are_far_above_the_shipped_files():
    repo = Path(__file__).resolve().parents[2]
    files = [*repo.glob("experiments/**/*.yaml"), *repo.glob("topology/profiles/*.yaml")]
    assert files
    for path in files:
        text = path.read_text()
        assert len(text.encode()) * 20 < yamlio.MAX_FILE_BYTES, path
        assert max(map(len, text.splitlines())) * 10 < yamlio.MAX_LINE_CHARS, path
        yamlio.load_source(path)  # and they load


# --- what the bounds must not break --------------------------------------------------------------


def test_utf8_bom_is_accepted(tmp_path, capsys):
    path = tmp_path / "bom.yaml"
    path.write_bytes(codecs.BOM_UTF8 + VALID.encode())
    code, lines, _ = quicbed(capsys, "run", "--dry-run", str(path))
    assert code == 0, lines


def test_merge_keys_are_overridden_by_the_mappings_own_keys():
    src = parse_source("base: &b {x: 1, y: 2}\nc: {<<: *b, x: 3}\nd: {<<: [{y: 5}, *b]}\n")
    assert src.data["c"] == {"x": 3, "y": 2}
    assert src.data["d"] == {"y": 5, "x": 1}  # the first mapping merged wins
    with pytest.raises(LocatedError, match=r"<string>:1: yaml: duplicate key 'x'"):
        parse_source("c: {x: 1, x: 2}\n")


def test_an_alias_in_a_list_reports_the_alias_line_not_the_anchors():
    src = parse_source("p: &p {name: a}\nl:\n  - x\n  - *p\n")
    assert src.data["l"][1] == {"name": "a"}
    assert src.line(("l", 1)) == 4


def test_messages_quoting_the_file_stay_one_short_line():
    err = LocatedError("f.yaml", 3, "a\nb", "unknown '" + "x\n" * 5000 + "'")
    text = str(err)
    assert "\n" not in text and text.startswith("f.yaml:3: a\\nb: unknown 'x\\nx")
    assert len(text) < 2 * yamlio.MAX_SHOWN_CHARS


# --- results directories: quicbed check ----------------------------------------------------------


@pytest.fixture
def synthetic_run(tmp_path) -> tuple[Path, Path]:
    """(experiment file, run directory) of a small synthetic run."""
    exp = tmp_path / "hostile.yaml"
    exp.write_text(VALID)
    results = tmp_path / "results"
    assert cmd_run(exp, lambda e, d: SyntheticExecutor(), RunOptions(results=results, progress=False)) == 0
    return exp, next(results.iterdir())


def _insert_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: number - 1]) + text + "\n" + "".join(lines[number - 1 :]))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"trial_id": "c0/cad', "not a JSON row (Unterminated string"),
        ("[1, 2]", "a row must be a JSON object, not list"),
        ('{"protocol": "quic"}', "the row has no trial_id"),
        ("[" * 100_000, "not a JSON row"),
    ],
    ids=["torn-in-the-middle", "list", "no-trial-id", "100000-brackets"],
)
def test_damaged_row_in_the_middle_names_file_and_line(synthetic_run, capsys, text, problem):
    exp, run_dir = synthetic_run
    _insert_line(run_dir / "rows.jsonl", 2, text)
    with pytest.raises(StoreError, match=re.escape(f"{run_dir}/rows.jsonl:2: {problem}")):
        load_rows(run_dir)
    code, lines, _ = quicbed(capsys, "check", str(exp), str(run_dir))
    assert code != 0 and len(lines) == 1
    assert lines[0].startswith(f"quicbed: {run_dir}/rows.jsonl:2: {problem}")


def test_broken_last_line_with_its_newline_is_damage_not_a_torn_write(synthetic_run):
    _, run_dir = synthetic_run
    with open(run_dir / "rows.jsonl", "a") as f:
        f.write("hand edited\n")
    with pytest.raises(StoreError, match=r"rows.jsonl:4: not a JSON row"):
        load_rows(run_dir)


def test_torn_last_line_is_skipped_and_the_check_goes_on(synthetic_run, capsys):
    exp, run_dir = synthetic_run
    with open(run_dir / "rows.jsonl", "a") as f:
        f.write('{"trial_id": "c0/caddy/quic-h3/index.html/r3", "connect')  # a crash mid-write
    rows, torn = load_rows(run_dir)
    assert len(rows) == 3 and torn == 1
    code, lines, _ = quicbed(capsys, "check", str(exp), str(run_dir))
    assert code == 0 and lines[-1] == "1/1 expectations passed"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"run_id": "x",', "manifest.json:1: not valid JSON (Expecting property name"),
        ("[1, 2, 3]", "manifest.json is not a run manifest (a JSON list, not an object)"),
        (
            '{"run_id": "x", "quick": false}',
            "manifest.json has no usable matrix_hash, sessions, conditions (written by another version",
        ),
        ("\xff\xfe", "manifest.json: not valid JSON"),
    ],
    ids=["not-json", "list", "another-version", "not-utf8"],
)
def test_unusable_manifest_is_one_line_exit_2(synthetic_run, capsys, content, problem):
    exp, run_dir = synthetic_run
    (run_dir / "manifest.json").write_bytes(content.encode("latin-1"))
    with pytest.raises(StoreError, match=re.escape(problem)):
        read_manifest(run_dir)
    code, lines, _ = quicbed(capsys, "check", str(exp), str(run_dir))
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"{run_dir}/{problem}")


# --- results directories: quicbed report ---------------------------------------------------------


@pytest.fixture
def analysis_run(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("QUICBED_RESULTS", str(tmp_path))
    return write_run(
        tmp_path,
        "r1",
        Model(repetitions=2, workloads=("web",), conditions={"india": (80.0, 20.0, 20.0, 0.0)}),
        parquet=False,
    )


def report(capsys, run_dir: Path) -> tuple[int, list[str]]:
    code, lines, _ = quicbed(capsys, "report", str(run_dir), "--out", str(run_dir.parent / "out"))
    return code, lines


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not a JSON row (Expecting property name"),
        ('"a string"', "a row must be a JSON object, not str"),
        ("[" * 100_000, "not a JSON row (nested too deeply)"),
    ],
    ids=["not-json", "string", "100000-brackets"],
)
def test_report_refuses_a_damaged_row_naming_file_and_line(analysis_run, capsys, text, problem):
    _insert_line(analysis_run / "rows.jsonl", 3, text)
    code, lines = report(capsys, analysis_run)
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"quicbed report: {analysis_run}/rows.jsonl:3: {problem}")


def test_explain_reads_rows_as_the_report_and_the_store_do(analysis_run, capsys):
    """One reader of rows.jsonl (quicbed/runfolder.py): `quicbed explain` refuses a damaged
    line mid-file as the report and a resume do (it used to skip it silently), and finds its
    trial past a line a crash tore."""
    rows = analysis_run / "rows.jsonl"
    trial = json.loads(rows.read_text().splitlines()[0])["trial_id"]
    original = rows.read_text()
    _insert_line(rows, 2, "{not json")
    code, lines, _ = quicbed(capsys, "explain", str(analysis_run), trial)
    assert code == 2 and lines == [
        f"quicbed explain: {rows}:2: not a JSON row (Expecting property name enclosed in double quotes)"
    ]
    with pytest.raises(StoreError, match=r"rows.jsonl:2: not a JSON row"):
        load_rows(analysis_run)
    rows.write_text(original + '{"run_id": "r1", "trial_')
    code, lines, _ = quicbed(capsys, "explain", str(analysis_run), trial)
    assert code == 1 and lines == [f"quicbed explain: {trial}: {NO_CAPTURE}"]  # found; no capture
    assert len(load_rows(analysis_run)[0]) == len(original.splitlines())


def test_report_skips_a_torn_last_line_with_a_warning(analysis_run, capsys):
    with open(analysis_run / "rows.jsonl", "a") as f:
        f.write('{"run_id": "r1", "trial_')
    code, lines = report(capsys, analysis_run)
    assert code == 0
    assert any(line.startswith("warning: r1/rows.jsonl: last line torn") for line in lines)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{\n  oops", "manifest.json:2: not valid JSON (Expecting property name"),
        ('"a string"', "manifest.json: a JSON str, not an object"),
        ('{"conditions": {"c0": "india"}}', "manifest.json: 'conditions.c0' should be an object, not str"),
        (
            '{"conditions": {"c0": {"calibration": {"calibration": {"checks": {"rtt": 1}}}}}}',
            "manifest.json: 'conditions.c0.calibration.calibration.checks' should be a list, not dict",
        ),
        ('{"manifest_version": 99}', "manifest.json: written by a newer quicbed (manifest version 99"),
    ],
    ids=["not-json", "string", "condition-not-object", "checks-not-list", "newer-version"],
)
def test_report_refuses_an_unusable_manifest(analysis_run, capsys, content, problem):
    (analysis_run / "manifest.json").write_text(content)
    code, lines = report(capsys, analysis_run)
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"quicbed report: {analysis_run}/{problem}")


def test_report_notes_a_manifest_without_calibration(analysis_run, capsys):
    (analysis_run / "manifest.json").write_text(json.dumps({"run_id": "r1", "tool": "other"}))
    code, lines = report(capsys, analysis_run)
    assert code == 0
    assert any("manifest.json records no calibration" in line for line in lines)


# --- issue 46: bounded input (quicbed/limits.py) ---------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
QUICBED = REPO / ".venv" / "bin" / "quicbed"
CANARY = "CANARY-5f1d0c-not-for-your-eyes"


def _block(values) -> str:
    return "".join(f"    - {v}\n" for v in values)


def _three_axes_of_1600() -> str:
    """4,096,000,000 conditions in 4,800 values: under the YAML bounds, over MAX_CONDITIONS."""
    return VALID.replace(
        "servers:",
        "sweep:\n"
        + "  loss_pct:\n"
        + _block(round(i * 0.001, 3) for i in range(1600))
        + "  jitter_ms:\n"
        + _block(round(1 + i * 0.001, 3) for i in range(1600))
        + "  queue_packets:\n"
        + _block(10 + i for i in range(1600))
        + "servers:",
        1,
    )


def cli_subprocess(*argv: str, timeout: float = 120) -> tuple[int, list[str]]:
    """`quicbed ARGV` as its own process (as a user runs it): exit code and non-empty lines;
    the old code hung or died of MemoryError here, so a timeout fails the test."""
    run = subprocess.run([str(QUICBED), *argv], capture_output=True, text=True, timeout=timeout, cwd=REPO)
    out = run.stdout + run.stderr
    assert "Traceback" not in out and "MemoryError" not in out, out
    return run.returncode, [line for line in out.splitlines() if line.strip()]


def test_a_sweep_of_three_1600_value_axes_is_refused_at_its_line_by_the_cli(tmp_path):
    path = tmp_path / "huge-sweep.yaml"
    path.write_text(_three_axes_of_1600())
    code, lines = cli_subprocess("run", str(path), "--dry-run")
    sweep_line = VALID.splitlines().index("servers: [caddy]") + 1
    expected = (
        f"{path}:{sweep_line}: sweep: 4,096,000,000 conditions (1 profile(s) x the sweep's axes); "
        f"an experiment may have at most {limits.MAX_CONDITIONS:,}"
    )
    assert code == 2 and lines == [expected], lines


def test_a_sweep_of_three_1600_value_axes_is_refused_in_well_under_a_second(tmp_path, capsys):
    path = tmp_path / "huge-sweep.yaml"
    path.write_text(_three_axes_of_1600())
    assert "sweep: 4,096,000,000 conditions" in refused(capsys, path)  # < TIME_LIMIT_S, in-process


def test_too_many_trials_are_refused_at_repetitions(tmp_path, capsys):
    # 2 profiles x (1 server x 2 variants x 3 objects) x 100,000 repetitions = 1,200,000 trials.
    path = tmp_path / "many-trials.yaml"
    path.write_text(
        VALID.replace("  - {name: lab,", "  - {name: lab2, rtt_ms: 40, rate_mbit: 20}\n  - {name: lab,")
        .replace("  - quic_perf\n", "  - {tool: quic_perf, backend: [libcurl, ngtcp2]}\n")
        .replace("objects: [index.html]", "objects: [index.html, sample.png, pages/news]")
        .replace("repetitions: 3", "repetitions: 100000")
    )
    assert refused(capsys, path) == (
        f"{path}:9: repetitions: 1,200,000 trials (2 condition(s) x 6 server/client/object cell(s) "
        "x 100000 repetition(s)); an experiment may have at most 1,000,000"
    )
    path.write_text(path.read_text().replace("repetitions: 100000", "repetitions: 80000"))
    code, lines, _ = quicbed(capsys, "run", "--dry-run", str(path))  # 960,000: allowed
    assert code == 0, lines


def test_the_bounds_are_those_the_readme_states():
    text = (REPO / "experiments" / "README.md").read_text()
    assert f"{limits.MAX_CONDITIONS:,} conditions" in text and f"{limits.MAX_TRIALS:,} trials" in text


def _traced(tmp_path: Path, trace: str) -> Path:
    """An experiment whose profile's downlink follows `trace` (line 3: the profile)."""
    path = tmp_path / "traced.yaml"
    path.write_text(
        VALID.replace(
            "  - {name: lab, rtt_ms: 80, rate_mbit: 20}",
            f"  - {{name: lab, rtt_ms: 80, down: {{trace: '{trace}'}}, up: {{rate_mbit: 5}}}}",
        ).replace('  - "0.9 < quic.connection_time.median / rtt < 1.15"\n', '  - "quic.ttfb.count > 0"\n')
    )
    return path


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "shadow"
    secret.write_text(f"root:{CANARY}:19000:0:99999:7:::\n")
    return secret


def _fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "fifo.trace")
    return str(tmp_path / "fifo.trace")


def _link_to_secret(tmp_path: Path) -> str:
    (tmp_path / "link.trace").symlink_to(_secret(tmp_path))
    return str(tmp_path / "link.trace")


def _long_trace(tmp_path: Path) -> str:
    (tmp_path / "long.trace").write_text("1\n" + "1" + "0" * 12 + "\n")  # 10^12 ms: 31 years
    return str(tmp_path / "long.trace")


HOSTILE_TRACES: dict[str, tuple[Callable[[Path], str], str]] = {
    "dev-zero": (lambda _: "/dev/zero", "/dev/zero: cannot use it as a trace: not a regular file"),
    "fifo": (_fifo, "fifo.trace: cannot use it as a trace: not a regular file (a FIFO)"),
    "directory": (lambda p: str(p), "cannot use it as a trace: not a regular file (a directory)"),
    "symlink-to-a-secret": (_link_to_secret, "link.trace: cannot use it as a trace: a symbolic link"),
    "a-secret-itself": (lambda p: str(_secret(p)), "shadow:1: not a whole number of milliseconds"),
    "10^12-ms": (_long_trace, "long.trace:2: a timestamp beyond 86400000 ms (24 h)"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_TRACES))
def test_a_hostile_trace_is_refused_fast_naming_the_profile_line_not_its_bytes(name, tmp_path, capsys):
    make, message = HOSTILE_TRACES[name]
    path = _traced(tmp_path, make(tmp_path))
    line = refused(capsys, path)  # exit 2, one line, < 1 s
    assert line.startswith(f"{path}:3: profiles[0].down.trace: "), line
    assert message in line and CANARY not in line, line


def test_the_cli_never_prints_a_secret_a_trace_links_to(tmp_path):
    for trace in (_link_to_secret(tmp_path), str(tmp_path / "shadow")):
        code, lines = cli_subprocess("run", str(_traced(tmp_path, trace)), "--dry-run")
        assert code == 2 and len(lines) == 1 and CANARY not in lines[0], lines


class OwnKeysExecutor(SyntheticExecutor):
    """A tool whose rows claim quicbed's own keys: another trial, run and file."""

    def run_trial(self, trial):
        return super().run_trial(trial) | {"run_id": "other", "trace_file": "../../etc/passwd", "attempt": 9}


def test_a_tool_row_setting_runner_owned_keys_is_an_error_row(tmp_path):
    exp = tmp_path / "hostile.yaml"
    exp.write_text(VALID)
    results = tmp_path / "results"
    assert cmd_run(exp, lambda e, d: OwnKeysExecutor(), RunOptions(results=results, progress=False)) == 1
    run_dir = next(results.iterdir())
    rows, _ = load_rows(run_dir)
    assert len(rows) == 3
    for row in rows:
        assert row["error"].startswith(
            "tool row: sets attempt, run_id, trace_file, which only quicbed writes"
        )
        assert row["run_id"] == run_dir.name and row["attempt"] == 1 and "trace_file" not in row


class MisplacedFilesExecutor(SyntheticExecutor):
    """An executor's keys naming files, as a tool would set them: anywhere but the trial's."""

    def run_trial(self, trial):
        own = rowschema.capture_dir(trial.trial_id)
        return super().run_trial(trial) | {"capture_files": [f"{own}/../../../etc/shadow"]}


def test_a_row_naming_another_trials_files_is_an_error_row(tmp_path):
    exp = tmp_path / "hostile.yaml"
    exp.write_text(VALID)
    results = tmp_path / "results"
    assert (
        cmd_run(exp, lambda e, d: MisplacedFilesExecutor(), RunOptions(results=results, progress=False)) == 1
    )
    for row in load_rows(next(results.iterdir()))[0]:
        assert row["error"].startswith("tool row: sets capture_files") and "capture_files" not in row


def test_tool_rows_are_bounded_and_may_not_set_owned_keys():
    ok = '{"protocol": "quic", "ttfb_ms": 1}'
    assert rowschema.tool_rows(f"noise\n{ok}\n") == [{"protocol": "quic", "ttfb_ms": 1}]
    for stdout, problem in [
        ('{"trace_file": "../x"}', "tool row: sets trace_file"),
        ('{"capture_files": ["/etc/shadow"]}', "tool row: sets capture_files"),
        ('{"param_server.tcp_cc": "bbr"}', "tool row: sets param_server.tcp_cc"),
        ("{" + " " * limits.ROW_LINE_MAX_BYTES + "}", "tool output line 1: a row over 1 MiB"),
        ("{" * 100_000, "tool output line 1: not a JSON row"),
        ("[1]\n{1}", "tool output line 2: not a JSON row"),
    ]:
        with pytest.raises(rowschema.ToolRowError, match=re.escape(problem)):
            rowschema.tool_rows(stdout)


def test_a_command_that_prints_without_end_is_stopped_at_the_bound():
    """DockerHost.exec reads a container's output through run_capped: `yes` would fill root's
    memory; it is killed one byte past the bound, in well under a second at 1 MiB."""
    start = time.monotonic()
    with pytest.raises(limits.TooBig, match="^printed over 1 MiB; stopped there$"):
        limits.run_capped(["yes", "A" * 100], timeout=30, cap=1 << 20)
    assert time.monotonic() - start < 5
    with pytest.raises(limits.TooBig):  # stderr is bounded too
        limits.run_capped(["sh", "-c", "yes >&2"], timeout=30, cap=1 << 20)
    proc = limits.run_capped(["sh", "-c", "printf 'out\\n'; printf '\\377err' >&2; exit 3"], timeout=30)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "\ufffderr")  # not UTF-8: no crash
    with pytest.raises(subprocess.TimeoutExpired):
        limits.run_capped(["sleep", "30"], timeout=0.5)


@pytest.mark.parametrize(
    "rel", ["../../secret", "/etc/shadow", "traces/../../x", "traces/./t.json", "", "a//b"]
)
def test_a_row_named_path_outside_the_run_is_refused(tmp_path, rel):
    with pytest.raises(rowschema.RunPathError):
        rowschema.run_file(tmp_path, rel) if rel else rowschema.run_file(tmp_path, None)


def test_a_row_named_path_through_a_symlink_is_refused(tmp_path):
    (tmp_path / "traces").symlink_to("/etc")
    with pytest.raises(rowschema.RunPathError, match="symbolic link"):
        rowschema.run_file(tmp_path, "traces/passwd")
    assert rowschema.run_file(tmp_path, "cross/c0~x.json") == tmp_path / "cross" / "c0~x.json"


def test_a_ray_head_writes_a_trace_only_at_its_trials_own_path(tmp_path):
    trial = "c0/caddy/quic-h3/index.html/r0"
    own = {"trial_id": trial, "trace_file": rowschema.trace_path(trial)}
    assert cluster._trace_file(tmp_path, own) == tmp_path / rowschema.trace_path(trial)
    for rel in ("../../etc/cron.d/x", "/etc/passwd", rowschema.trace_path("c0/other")):
        assert cluster._trace_file(tmp_path, {"trial_id": trial, "trace_file": rel}) is None


def test_the_report_reads_no_trace_outside_the_run(analysis_run, capsys):
    secret = _secret(analysis_run.parent)
    rows = [json.loads(line) for line in (analysis_run / "rows.jsonl").read_text().splitlines()]
    rows[0]["trace_file"] = f"../{secret.name}"
    (analysis_run / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    notes: list[str] = []
    df, _ = load.load_run(analysis_run, notes)
    assert df["trace_path"].isna().all()
    assert "1 row(s) name a trace_file outside the run directory; ignored" in " ".join(notes)


# --- run ids (rowschema.RUN_ID_PATTERN) -------------------------------------------------------------


@pytest.mark.parametrize("run_id", ["../x", "..", ".hidden", "a/b", "a..b", "x" * 129, "", "é"])
def test_bad_run_ids(run_id):
    assert rowschema.run_id_problem(run_id)


def test_run_ids_the_runner_makes_are_good(tmp_path):
    assert rowschema.run_id_problem(new_run_id("web-india_2.0", tmp_path)) is None


def test_a_manifest_with_run_id_dotdot_is_refused_by_check_and_resume(synthetic_run, capsys):
    exp, run_dir = synthetic_run
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps(manifest | {"run_id": "../x"}))
    for argv in (("check", str(exp), str(run_dir)), ("run", str(exp), "--resume", str(run_dir))):
        code, lines, _ = quicbed(capsys, *argv)
        assert code == 2 and len(lines) == 1 and "bad run id '../x'" in lines[0], lines


def test_a_run_id_on_the_command_line_must_be_one(synthetic_run, capsys, tmp_path, monkeypatch):
    exp, run_dir = synthetic_run
    monkeypatch.setattr(paths, "RESULTS", run_dir.parent)
    for argv in (
        ("run", str(exp), "--resume", "../x"),
        ("check", str(exp), "../x"),
        ("check", str(exp), ".."),
        ("merge", run_dir.name, "--out", "../escaped"),
        ("report", "../x"),
        ("compare", "../x", run_dir.name),
    ):
        code, lines, _ = quicbed(capsys, *argv)
        assert code == 2 and any("bad run id" in line for line in lines), (argv, lines)
    assert not (run_dir.parent.parent / "escaped").exists()


def test_a_report_of_a_run_with_a_hostile_run_id_deletes_nothing(analysis_run, capsys):
    root = analysis_run.parent
    other = write_run(
        root,
        "r2",
        Model(repetitions=2, workloads=("web",), conditions={"india": (80.0, 20.0, 20.0, 0.0)}),
        parquet=False,
    )
    victim = root.parent / f"{root.name}-victim+r1" / "figures"
    victim.mkdir(parents=True)
    (victim / "keep.png").write_bytes(b"not yours")
    manifest = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps(manifest | {"run_id": f"../../{root.name}-victim"}))
    code, lines, _ = quicbed(capsys, "report", str(other), str(analysis_run))
    assert code == 2 and len(lines) == 1 and "bad run id" in lines[0], lines
    assert (victim / "keep.png").read_bytes() == b"not yours"


# --- a results folder's files are not followed elsewhere ---------------------------------------------


def test_a_lock_file_linked_elsewhere_is_not_truncated(synthetic_run, capsys, tmp_path):
    exp, run_dir = synthetic_run
    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0::/root:/bin/sh\n")
    (run_dir / ".lock").unlink()
    (run_dir / ".lock").symlink_to(victim)
    with pytest.raises(StoreError):
        RunStore(run_dir).open()
    assert victim.read_text() == "root:x:0:0::/root:/bin/sh\n"


def test_rows_linked_to_dev_zero_are_refused_fast(synthetic_run, capsys):
    exp, run_dir = synthetic_run
    (run_dir / "rows.jsonl").unlink()
    (run_dir / "rows.jsonl").symlink_to("/dev/zero")
    with pytest.raises(StoreError, match="a symbolic link"):
        load_rows(run_dir)
    code, lines, elapsed = quicbed(capsys, "check", str(exp), str(run_dir))
    assert code != 0 and len(lines) == 1 and elapsed < TIME_LIMIT_S, lines


def test_a_row_line_over_the_bound_is_refused_naming_its_line(synthetic_run):
    _, run_dir = synthetic_run
    _insert_line(run_dir / "rows.jsonl", 2, '{"trial_id": "' + "x" * limits.ROW_LINE_MAX_BYTES + '"}')
    with pytest.raises(StoreError, match=r"rows.jsonl: line 2 is longer than 1 MiB"):
        load_rows(run_dir)
