"""The report of one or more runs: report.html (self-contained, figures as files beside it)
and report.md, both rendered from the same list of sections."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from quicbed import rowschema
from quicbed.paths import REPO
from quicbed.workloads import ReportSection, report_sections

from . import cpu_bound, decisions, disagreements, render, stack_matrix
from . import loss_response as lr
from .claims import (
    DIRECTIONS,
    FAILS,
    HOLDS,
    NO_DATA,
    NOT_DECIDED,
    Direction,
    Verdict,
    evaluate,
    expectation_claim,
    gain_shrinks,
)
from .expectations import compile_expectation
from .figures import (
    CONGESTION,
    FAIRNESS,
    MATRIX,
    Figure,
    cross_timelines,
    goodput_against_bound,
    make_figures,
)
from .figures import stack_matrix as stack_matrix_figure
from .load import AnalysisError, load_runs, loss_paths, resolve_run_dir, results_root
from .manifest import calibration_entries, flatten, mixed_hosts, units_unlike, verdict_differences
from .overhead import account
from .render import Block, Bullets, FigureBlock, Section, Table, Text, VerdictList
from .stacks import StackWindow, explain_gain_shrinks, measured_windows, windows_table
from .tables import (
    CPU_BOUND_SHARE_MAX,
    CongestionGroup,
    comparison_table,
    congestion_groups,
    congestion_table,
    cpu_bound_groups,
    failures_table,
    fairness_table,
    flag_table,
    flagged_stacks,
    fmt,
    pageload_by_origins_table,
    pageload_vs_download_table,
    streaming_table,
    summary_table,
)

# Shown elsewhere (calibration) or too long for a table (the experiment file, sessions).
MANIFEST_SKIP = {"calibration", "conditions", "experiment_text", "sessions", "decisions"}


def figure_blocks(figures: list[Figure], section: str) -> list[FigureBlock]:
    return [FigureBlock(f) for f in figures if f.section == section]


def flags(df: pd.DataFrame, manifests: list[dict[str, Any]], judged: pd.Series | None = None) -> list[str]:
    """Everything a reader must know before trusting the numbers. `judged`: the rows some
    verdict reads (verdict_rows), where the caller has them already."""
    out = verdict_differences(manifests, set(df["server"].dropna().astype(str)) if "server" in df else set())
    out += df.attrs.get("notes", [])
    # Tables pool a protocol's trials within a facet and kind of measurement only: two
    # browsers, or a browser beside a perf tool, sit in facets or kinds of their own.
    clients = df.dropna(subset=["client"]).groupby(["protocol", "facet", "workload"])["client"].unique()
    pooled: dict[str, set[str]] = {}
    for (protocol, _, _), names in clients.items():
        if len(names) > 1:
            pooled.setdefault(str(protocol), set()).update(map(str, names))
    out += [
        f"Protocol {p} was measured by several clients ({', '.join(sorted(c))}); " "their trials are pooled."
        for p, c in pooled.items()
    ]
    out += [
        f"Calibration of {e['label']} (run {e['run']}) failed"
        + (" and the run went on (forced)" if e.get("forced") else "")
        + ": "
        + ("; ".join(e["failed_checks"]) or "see Run")
        for e in calibration_entries(manifests)
        if e["calibrated"] and not e.get("passed")
    ]
    out += mixed_hosts(calibration_entries(manifests))
    out += noisy_host(calibration_entries(manifests))
    out += units_unlike(manifests)
    out += [
        f"Against the paper: {g.line()}; its figures are shown, flagged, and no finding judges them."
        for g in left_out_of_findings(df)
    ]
    out += [
        f"Not loss-responsive under loss: {stack}; figures resting on it measure its congestion "
        "control, not its protocol (see Congestion response)."
        for stack in flagged_stacks(df[~df["failed"]])
    ]
    judged = verdict_rows(df, manifests) if judged is None else judged
    counts = [
        ("failed", df["failed"], pd.Series(True, index=df.index), "excluded from statistics"),
        # Only where a verdict reads them: the rest are listed under Flagged trials.
        ("CPU-bound", df["cpu_bound"], judged, "a host's CPU, not the path, may have limited them"),
        (
            "forced-calibration",
            df["calib_forced"],
            pd.Series(True, index=df.index),
            "their path failed calibration and the run went on anyway",
        ),
    ]
    for name, flagged, among, why in counts:
        if (flagged & among).any():
            of = f"{int(among.sum())} trials a verdict rests on" if not among.all() else f"{len(df)} trials"
            out.append(f"{int((flagged & among).sum())} of {of} are {name}: {why} (see Flagged trials).")
    return out


def noisy_host(entries: list[dict[str, Any]]) -> list[str]:
    """A path proven on a noisy host: a calibration measured while the host was contended
    (steal, a slow spell, CPU pressure), and whether it was measured again on a calm host."""
    out = []
    for e in entries:
        attempts = [x for x in e.get("host_load") or [] if x.get("attempt") in (1, 2)]
        if not any(x.get("contended") for x in attempts):
            continue
        seen = "; ".join(
            f"attempt {x['attempt']}: steal {100 * float(x.get('steal') or 0):.1f} % of busy CPU"
            + (f", probe {float(x['slow_ratio']):.1f}x its best" if x.get("slow_ratio") is not None else "")
            + (" (contended)" if x.get("contended") else " (calm)")
            for x in attempts
        )
        how = "then measured again after a wait for calm" if len(attempts) > 1 else "and passed there"
        out.append(f"The path of {e['label']} (run {e['run']}) was proven on a noisy host, {how}: {seen}.")
    return out


def finding_rows(df: pd.DataFrame) -> pd.Series:
    """The rows of the kinds the paper's findings rest on, failed ones included."""
    if any(d.rests_on is None for d in DIRECTIONS):
        return pd.Series(True, index=df.index)
    return df["workload"].isin({kind for d in DIRECTIONS for kind in d.rests_on or ()})


def left_out_of_findings(df: pd.DataFrame) -> list[cpu_bound.LeftOut]:
    """A browser's loads on a path that the paper's findings leave out (analysis/cpu_bound.py)."""
    return cpu_bound.left_out(df[~df["failed"] & finding_rows(df)])


def verdict_rows(df: pd.DataFrame, manifests: list[dict[str, Any]]) -> pd.Series:
    """The rows some verdict of the report reads: those of the kinds the paper's findings rest
    on (but a browser's loads on a path they leave out as CPU-bound), every row of a run with
    `expect:` lines, and the rows its `decide:` lines compare. A flag elsewhere (a CPU-bound
    page load no line judges) is listed, not a Summary warning."""
    judged = finding_rows(df) & ~cpu_bound.rows_of(df, left_out_of_findings(df))
    for manifest in manifests:
        mine = (
            df["run_id"] == str(manifest.get("run_id")) if "run_id" in df else pd.Series(True, index=df.index)
        )
        text = manifest.get("experiment_text")
        if expect_lines(text):
            judged |= mine
        for line in decide_lines(text, bool(manifest.get("quick"))):
            judged |= mine & decided_by(df, line)
    return judged


def decided_by(df: pd.DataFrame, line: dict[str, Any]) -> pd.Series:
    """The rows a recorded decide line compares: its sides' rows that have its metric (a line
    this version cannot read counts every row, so no flag is hidden by it)."""
    column = decisions.DECIDABLE.get(str(line.get("metric")))
    if column is None or column not in df:
        return pd.Series(True, index=df.index)
    sides = [str(line.get(k)) for k in ("a", "b")]
    member = [
        any(decisions.member(p, c, s) for s in sides)
        for p, c in zip(df["protocol"], df["client"], strict=True)
    ]
    return df[column].notna() & pd.Series(member, index=df.index)


def recorded_experiment(experiment_text: object) -> dict[str, Any]:
    """The experiment file a run recorded, as data ({} if it no longer reads as a mapping:
    it was validated when it ran, so the report judges what it can and loses nothing)."""
    try:
        data = yaml.safe_load(str(experiment_text or ""))
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def decide_lines(experiment_text: object, quick: bool) -> list[dict[str, Any]]:
    """The `decide:` lines of the file a run recorded (its quick: section's, for a quick run)."""
    data = recorded_experiment(experiment_text)
    overlay = data.get("quick") if quick else None
    lines = overlay.get("decide", data.get("decide")) if isinstance(overlay, dict) else data.get("decide")
    return [x for x in lines if isinstance(x, dict)] if isinstance(lines, list) else []


def summary_section(df: pd.DataFrame, manifests: list[dict[str, Any]], warnings: list[str]) -> Section:
    runs = ", ".join(str(m.get("run_id")) for m in manifests)
    ok = int((~df["failed"]).sum())
    # An auto run's trials against its plan, right after the count they explain.
    runs_of = df["run_id"].value_counts() if "run_id" in df else pd.Series(dtype=int)
    decided = [decisions.run_summary(m, int(runs_of.get(str(m.get("run_id")), 0))) for m in manifests]
    text = (
        f"Runs: {runs}. {len(df)} trials: {ok} analysed, {len(df) - ok} failed."
        + "".join(f" {line}" for line in decided if line)
        + " Medians with 95% percentile-bootstrap CIs; n = trials (or samples) behind each "
        "number. RTT-normalised values divide by each trial's calibrated RTT."
    )
    blocks: list[Block] = [Text(text)]
    if warnings:
        blocks.append(Bullets(warnings, warn=True))
    return Section("Summary", blocks)


NEEDS_FULL = "needs FULL=1"
AGAINST = "Against the paper"


@dataclass(frozen=True)
class Tally:
    """The verdicts of "Against the paper", counted: the quick run's opening line and the
    last line of `make reproduce` say them."""

    findings: int = 0
    holds: int = 0
    fails: int = 0
    not_decided: int = 0
    needs_full: int = 0  # a quick run's findings whose rows its slice does not have

    @classmethod
    def of(cls, verdicts: Sequence[Verdict]) -> Tally:
        n = Counter(v.status for v in verdicts)
        return cls(len(verdicts), n[HOLDS], n[FAILS], n[NOT_DECIDED], n[NEEDS_FULL])

    @property
    def decided(self) -> int:
        return self.holds + self.fails

    def sentence(self) -> str:
        """'12 of 14 findings decided (10 hold, 2 do not hold), 2 not decided'."""
        if not self.findings:
            return "no finding of the paper judged (no rows they rest on)"
        parts = [
            f"{self.decided} of {self.findings} findings decided "
            f"({self.holds} hold, {self.fails} do not hold)"
        ]
        if self.not_decided:
            parts.append(f"{self.not_decided} {NOT_DECIDED}")
        if self.needs_full:
            parts.append(f"{self.needs_full} need FULL=1 (the quick slice lacks their rows)")
        unjudged = self.findings - self.decided - self.not_decided - self.needs_full
        if unjudged:
            parts.append(f"{unjudged} without the data to judge")
        return ", ".join(parts)


def tally(sections: Sequence[Section]) -> Tally:
    """The verdicts of the report's "Against the paper" section (none: an empty tally)."""
    return Tally.of(
        [
            v
            for s in sections
            if s.title == AGAINST
            for b in s.blocks
            if isinstance(b, VerdictList)
            for _, v in b.items
        ]
    )


def quick_intro(counted: Tally) -> str:
    """A quick run's first line: what it decided, what it left open and why (a finding is
    "needs FULL=1" only where its verdict says the slice lacks its rows)."""
    text = f"A quick run: {counted.decided} of {counted.findings} findings decided"
    if counted.not_decided:
        text += f", {counted.not_decided} {NOT_DECIDED} (each says the pairs a decision would need)"
    if counted.needs_full:
        text += (
            f", {counted.needs_full} marked '{NEEDS_FULL}': the quick slice lacks the rows they "
            "need, which the paper's repetitions have (`make reproduce FULL=1`)"
        )
    return text + "."


def lacks_rows(v: Verdict) -> bool:
    """A quick slice's "not enough data" that more repetitions would fill: not one whose rows
    were left out as CPU-bound (analysis/cpu_bound.py), which a full run would not change."""
    return v.status == NO_DATA and not any(cpu_bound.LEFT_OUT in line for line in v.found)


def directions_section(
    ok: pd.DataFrame, quick: bool = False, windows: list[StackWindow] | None = None
) -> Section:
    """The paper's findings against the rows. From a quick run, a finding without the rows a
    verdict needs is marked as needing the full run, not left as a bare "not enough data":
    the quick slice is chosen for time, and says which claims it cannot judge. A comparison
    with rows but no decision is "not decided", with its figures. A finding that does not
    hold says what the captured evidence makes of it, where it has a reading."""
    verdicts = [(d, explained(d, v, windows or [])) for d, v in evaluate(ok)]
    # The verdicts first, the method after them: a reader looks for the findings.
    blocks: list[Block] = []
    if quick:
        verdicts = [(d, Verdict(NEEDS_FULL, v.found) if lacks_rows(v) else v) for d, v in verdicts]
        blocks.append(Text(quick_intro(Tally.of([v for _, v in verdicts]))))
    method = Text(
        "How: each finding of the paper (as a direction), what this run found, and whether "
        "it holds. A finding that compares two protocols pairs their trials (a pair: one "
        "repetition of a run's condition, server and object, which ran side by side) and "
        "is judged by a sequential sign test by betting over its pairs in round order at "
        "α 0.01, valid however often it is looked at, so a run that stopped once its own "
        "comparisons were decided is judged without bias (Waudby-Smith and Ramdas, JRSS B "
        "86(1), 2024); it says the pair that decided it, or how many a decision would "
        "need. A similarity is an equivalence test against a stated margin. Each finding's "
        "own test:"
    )
    tests = Bullets([f"{d.claim}: {d.test}" for d, _ in verdicts if d.test])
    return Section(AGAINST, [*blocks, VerdictList(verdicts), method, tests])


def explained(d: Direction, v: Verdict, windows: list[StackWindow]) -> Verdict:
    if d.check is not gain_shrinks or v.status != FAILS:
        return v
    return Verdict(v.status, (*v.found, explain_gain_shrinks(windows)))


def expect_lines(experiment_text: object) -> list[str]:
    """The `expect:` lines of the experiment file a run recorded (validated when it ran)."""
    lines = recorded_experiment(experiment_text).get("expect")
    return [str(x) for x in lines] if isinstance(lines, list) else []


def expectations_section(ok: pd.DataFrame, manifests: list[dict[str, Any]]) -> Section | None:
    """Each run's own `expect:` lines, judged per condition by the engine of the claims."""
    items: list[tuple[Direction, Verdict]] = []
    problems: list[str] = []
    for manifest in manifests:
        run = str(manifest.get("run_id"))
        rows = ok[ok["run_id"] == run] if "run_id" in ok else ok
        for text in expect_lines(manifest.get("experiment_text")):
            try:
                claim = expectation_claim(compile_expectation(text))
            except ValueError as exc:  # a name this version no longer knows
                problems.append(f"run {run}: `{text}` cannot be judged: {exc}")
                continue
            if len(manifests) > 1:
                claim = Direction(f"run {run}, {claim.claim}", claim.check)
            items += evaluate(rows, [claim])
    if not items and not problems:
        return None
    blocks: list[Any] = [
        Text(
            "The experiment file's own expectations (`quicbed check`), per "
            "condition: calibrated RTT, configured downlink rate."
        )
    ]
    if problems:
        blocks.append(Bullets(problems, warn=True))
    return Section("Expectations", [*blocks, VerdictList(items)])


def decisions_section(manifests: list[dict[str, Any]]) -> Section | None:
    """The experiment's `decide:` lines as the run decided them: each cell's answer, the
    rounds it took and why its trials stopped (analysis/decisions.py)."""
    rows = []
    for manifest in manifests:
        recorded = manifest.get("conditions")
        conditions: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
        for e in manifest.get("decisions") or []:
            if not isinstance(e, dict):
                continue
            row: dict[str, Any] = {"run": str(manifest.get("run_id"))} if len(manifests) > 1 else {}
            needed = e.get("rounds_needed")
            cond = conditions.get(str(e.get("condition")))
            label = cond.get("label") if isinstance(cond, dict) else None
            rows.append(
                row
                | {
                    "question": e.get("decide"),
                    "condition": f"{e.get('condition')} {label}" if label else e.get("condition"),
                    "server": e.get("server"),
                    "object": e.get("object"),
                    "answer": e.get("answer", e.get("decision")),
                    "rounds": e.get("rounds"),
                    "stopped": e.get("why"),
                    "rounds A above / below B": f"{e.get('a_above_b')} / {e.get('a_below_b')}",
                    "rounds a decision would need": needed if needed is not None else "",
                }
            )
    if not rows:
        return None
    alpha = next(
        (e.get("alpha") for m in manifests for e in m.get("decisions") or [] if isinstance(e, dict)), None
    )
    return Section(
        "Decided as it ran",
        [
            Text(
                "Each `decide:` line per condition, server and object. A round pairs A's and "
                "B's trials of one repetition; the answer is a sequential sign test by betting "
                f"(alpha {alpha}), whose error rate holds however often it is asked, so trials "
                "stop once a cell is decided (Waudby-Smith and Ramdas, JRSS B 86(1), 2024; "
                "a similarity is two one-sided tests against the stated ratio). A: the line's "
                "first group; B: its second."
            ),
            Table(pd.DataFrame(rows), "Decisions"),
        ],
    )


# Tables of their own that a workload's report section names (workloads/<kind>.py).
TABLES: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {
    "streaming": streaming_table,
    "pageload_vs_download": pageload_vs_download_table,
    "pageload_by_origins": pageload_by_origins_table,
}


def workload_section(spec: ReportSection, ok: pd.DataFrame, figures: list[Figure]) -> Section | None:
    """One of a workload's sections: medians of its metrics per group, QUIC against TLS on
    the compared ones, its own table, and its figures; None when the run has no such rows."""
    rows = spec.rows(ok)
    if rows.empty:
        return None
    keys = list(spec.keys)
    blocks: list[Any] = [Text(spec.intro)] if spec.intro else []
    if spec.metrics:
        blocks.append(
            Table(summary_table(rows, keys, list(spec.metrics)), "Medians per condition and protocol")
        )
        comparisons = comparison_table(
            rows, [k for k in keys if k != "protocol"], list(spec.compared or spec.metrics)
        )
        if not comparisons.empty:
            blocks.append(
                Table(
                    comparisons,
                    "QUIC against TLS 1.2 and TLS 1.3 " "(Δ = QUIC − other; negative = QUIC lower)",
                )
            )
    if spec.table:
        table = TABLES[spec.table](spec.own_rows(ok))
        if table.empty and not spec.metrics:
            return None  # a section of its own table alone, and no row for it
        if not table.empty:
            blocks.append(Table(table, spec.table_caption))
            if spec.table == "pageload_vs_download":
                blocks.append(cpu_bound_note(ok))
    return Section(spec.title, blocks + figure_blocks(figures, spec.figures))


def cpu_bound_note(ok: pd.DataFrame) -> Block:
    """Whether the page loads measure the network or the client's CPU: a load is CPU-bound
    when its browser found its CPUs (almost) never idle, a thread of it busy the whole load, or
    its quota throttling it (clients/browser/README.md, "CPU-bound")."""
    heavy = cpu_bound_groups(ok)
    if not heavy:
        return Text(
            f"CPU-bound share at most {CPU_BOUND_SHARE_MAX:.0%} in every group: the page loads "
            "measure the path, not the client's CPU."
        )
    return Bullets(
        [
            f"CPU-bound share over {CPU_BOUND_SHARE_MAX:.0%}: {g}. These page-load figures "
            "measure this host's CPU as much as the network: on a bigger machine the same "
            "page on the same path loads faster."
            for g in heavy
        ],
        warn=True,
    )


CONGESTION_INTRO = (
    "Whether each sender's goodput (payload bytes over the time they took) is one a "
    "loss-responsive (Reno-like, TCP-friendly) congestion control can reach at the path's "
    "loss p (the data direction's, calibrated where measured) and RTT R. The bound is Mathis "
    "et al.'s square-root law, 1448 B × √(3/2) / (R √p), with one ACK per packet: the generous "
    "end (delayed ACKs and timeouts only lower it; Padhye et al.'s formula with timeouts, beside "
    "it, is lower still). CUBIC is in its Reno-friendly region here, so it holds for CUBIC too. "
    f"Verdicts: '{lr.NOT_RESPONSIVE}' above {lr.FLAG_FACTOR:g}× the bound; '{lr.NOT_BINDING}' "
    f"when the bound is above {lr.LINK_SHARE:.0%} of the link's rate; '{lr.DEMAND_LIMITED}' for "
    "a player, a browser or the paced video download below that (its rate is its demand's); "
    f"'{lr.TOO_SHORT}' under {lr.MIN_PACKETS} full packets. A comparison of QUIC against TCP "
    "through a sender that is not loss-responsive measures that sender's congestion control, "
    "not QUIC."
)


def flagged_sentences(groups: list[CongestionGroup]) -> list[str]:
    """One sentence per condition and flagged stack, with the figures of each flagged group
    (what the client fetched, how many trials)."""
    by_stack: dict[tuple[str, str], list[CongestionGroup]] = {}
    for g in groups:
        if g.verdict == lr.NOT_RESPONSIVE:
            by_stack.setdefault((g.condition, g.stack), []).append(g)
    out = []
    for (condition, stack), mine in by_stack.items():
        figures = ", ".join(
            f"{fmt(g.goodput)} Mbit/s ({g.keys[3]}, {g.keys[4]} {g.keys[5]}, n={g.n})" for g in mine
        )
        out.append(
            f"{condition}: {stack}: {figures} against a bound of {fmt(mine[0].path.bound_mbit)} "
            f"Mbit/s at {mine[0].path.describe()}: {lr.NOT_RESPONSIVE}"
        )
    return out


def congestion_section(
    ok: pd.DataFrame, manifests: list[dict[str, Any]], figures: list[Figure] | None = None
) -> Section | None:
    """Per condition × server × client (and what it fetched) under loss: the stack's median
    goodput against the bounds; None when no run has loss."""
    groups = congestion_groups(ok, loss_paths(ok, manifests))
    if not groups:
        return None
    blocks: list[Block] = [Text(CONGESTION_INTRO)]
    flagged = flagged_sentences(groups)
    if flagged:
        blocks += [Text("Not loss-responsive:"), Bullets(flagged, warn=True)]
    short = [g for g in groups if g.verdict == lr.TOO_SHORT]
    shown = [g for g in groups if g.verdict != lr.TOO_SHORT]
    if shown:
        runs = ok["run_id"].nunique()
        blocks.append(Table(congestion_table(shown, runs), "Goodput against the loss bound per stack"))
    if short:
        blocks.append(
            Text(
                f"{len(short)} group(s) not shown: {lr.TOO_SHORT} (median payload under "
                f"{lr.MIN_PACKETS} full packets: "
                + ", ".join(sorted({f"{g.keys[4]} {g.keys[5]}" for g in short}))
                + ")."
            )
        )
    blocks += figure_blocks(figures or [], CONGESTION)
    return Section("Congestion response", blocks)


def manifest_table(manifests: list[dict[str, Any]]) -> pd.DataFrame:
    flat = [flatten({k: v for k, v in m.items() if k not in MANIFEST_SKIP}) for m in manifests]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    return pd.DataFrame(
        [
            {
                "field": k,
                **{
                    str(m.get("run_id")): str(f.get(k, "–"))[:160]
                    for m, f in zip(manifests, flat, strict=True)
                },
            }
            for k in keys
        ]
    )


def calibration_status(e: dict[str, Any]) -> str:
    if not e["calibrated"]:
        return "not calibrated (condition skipped?)"
    status = "pass" if e.get("passed") else "FAILED"
    status += " (forced)" if e.get("forced") else ""
    return "; ".join([status, *e["failed_checks"]])


def configured_vs_measured(e: dict[str, Any], configured: str, *measured: str) -> str:
    return " / ".join(fmt(e.get(k)) for k in (configured, *measured))


def calibration_table(manifests: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "run": e["run"],
                "condition": str(e["label"]),
                "profile": str(e["profile"]),
                "RTT (ms) configured / min / median": configured_vs_measured(
                    e, "rtt_ms", "rtt_min_ms", "rtt_median_ms"
                ),
                "down (Mbit/s) configured / goodput": configured_vs_measured(
                    e, "rate_down_mbit", "goodput_down_mbit"
                ),
                "up (Mbit/s) configured / goodput": configured_vs_measured(
                    e, "rate_up_mbit", "goodput_up_mbit"
                ),
                "loss (%) configured / down / up": configured_vs_measured(
                    e, "loss_pct", "loss_down_pct", "loss_up_pct"
                ),
                "link backend (why)": backend_shown(e),
                "calibration": calibration_status(e),
            }
            for e in calibration_entries(manifests)
        ]
    )


def backend_shown(e: dict[str, Any]) -> str:
    """The backend that carried the condition, and why it was chosen on that host; and a
    router task (a delay line, a UML kernel) that ran without real-time priority, whose
    packets busy endpoints can delay."""
    backend, reason = e.get("link_backend"), e.get("backend_reason")
    if not backend:
        return "–"
    shown = f"{backend} ({reason})" if reason else str(backend)
    for key, router in (("delayline_priority", "the delay line"), ("uml_priority", "the UML router")):
        if e.get(key) == "default":  # DelayLineBackend.priority(), uml.take_realtime
            shown += f"; {router} ran at the default priority: busy endpoints can delay packets"
    return shown


def overhead_table(df: pd.DataFrame, manifests: list[dict[str, Any]]) -> pd.DataFrame:
    """Per run and condition: wall time ÷ transfer time, and where the rest went."""
    out = []
    for manifest in manifests:
        rows = df[df["run_id"] == manifest.get("run_id")] if "run_id" in df else df
        for acc in account(rows.to_dict("records"), manifest):
            if acc.ratio is None:
                continue
            out.append(
                {
                    "run": manifest.get("run_id"),
                    "condition": acc.condition,
                    "trials": acc.trials,
                    "transfers (s)": round(acc.transfer_s, 1),
                    "wall (s)": round(acc.total_s, 1),
                    "wall ÷ transfers": round(acc.ratio, 2),
                    **{
                        k.removesuffix("_s").replace("_", " ") + " (s)": round(v, 1)
                        for k, v in acc.setup.items()
                    },
                    "tool start/exit (s)": round(acc.tool_s, 1),
                    "median per-trial overhead (s)": round(acc.median_trial_overhead_s or 0, 3),
                }
            )
    return pd.DataFrame(out)


def run_section(
    df: pd.DataFrame, manifests: list[dict[str, Any]], windows: list[StackWindow] | None = None
) -> Section:
    blocks: list[Block] = [
        Table(manifest_table(manifests), "Manifest"),
        Table(calibration_table(manifests), "Calibration: configured against measured"),
    ]
    if windows:
        blocks.append(
            Table(
                windows_table(windows),
                "What the stacks did, as measured: initial congestion windows from captured "
                "trials (`quicbed explain RUN TRIAL` shows one trial's timeline)",
            )
        )
    overhead = overhead_table(df, manifests)
    if not overhead.empty:
        blocks.append(Table(overhead, "The testbed's own time: wall time against transfers"))
    return Section("Run", blocks)


FAIRNESS_INTRO = (
    "Each trial shared its bottleneck with the cross flows the experiment declares "
    "(`cross:`). Every flow is counted at the client, after the bottleneck, over the trial's "
    "transfer (its first to last packet there): the trial's share of the down bytes (0.5 "
    "beside one competing flow is an equal split) and Jain's index over the trial and the down "
    "bulk cross flows (1 = equal rates, 1/n = one flow took everything; web fetches come and "
    "go, so they count in the share, not in the index). Rates are IP bytes, "
    "headers and retransmissions included: what each flow took of the link."
)


def fairness_section(ok: pd.DataFrame, figures: list[Figure]) -> Section | None:
    table = fairness_table(ok)
    if table.empty:
        return None
    return Section(
        "Shared bottleneck: cross traffic",
        [
            Text(FAIRNESS_INTRO),
            Table(table, "Medians per profile, server and protocol [95 % CI]"),
            *figure_blocks(figures, FAIRNESS),
        ],
    )


MATRIX_INTRO = (
    "Every client against every server it ran with, per profile, judged by the physics any "
    "pair must obey, one column group per check: the connection time net of the client's CPU, "
    "in calibrated RTTs, against the protocol's count (QUIC 1, TLS 1.3 2, TLS 1.2 3) within "
    "max(+3 %, +1.5 ms); for lossless downloads of 1 MB or more the TCP model's time for the "
    "transfer over the measured one (at least 0.97); for a resumed session the first byte in "
    "RTTs (QUIC 0-RTT 1, resumed 2; TLS 1.3 with early data 2, resumed 3; TLS 1.2 3), every "
    "trial resumed where the tool reports it; 30 parallel streams on one connection where a "
    "client offers them; and at 5 % loss (a run of experiments/stacks/matrix-loss.yaml "
    "reported with it) that every trial completes within the timeout, with its goodput. A "
    "client that cannot do a check (exit 3, or no such option in its descriptor) is "
    "'unsupported', not a failure. `quicbed compare` of two such runs is a stack upgrade's "
    "regression check."
)


DISAGREE_INTRO = (
    "Where the stacks disagree: a server's stack (its trials pooled over the clients of one "
    "transport; for the handshake, of one protocol) or a client's (pooled over the servers) "
    "whose goodput of the model or handshake RTTs differ from the other stacks' beyond the "
    "statistics (the 95 % CIs of its median and of all the others' trials apart, the medians "
    f"at least {disagreements.MATERIAL * 100:g} % apart), and why, from what was measured."
)


def matrix_section(
    df: pd.DataFrame, figures: list[Figure], windows: list[StackWindow] | None = None
) -> Section | None:
    """The client x server matrix of the runs' rows, failed ones included: a client's exit 3
    is an unsupported check, a lossy trial that did not finish a failed one. `windows`: the
    measured initial windows, which may explain where the stacks disagree."""
    found = stack_matrix.cells(df)
    if not stack_matrix.is_matrix(found):
        return None
    blocks: list[Block] = [Text(MATRIX_INTRO)]
    failing = [
        f"fails {', '.join(k for k, v in c.checks.items() if v == stack_matrix.FAIL)}: "
        f"{c.profile}: {c.client} × {c.server}"
        for c in found
        if c.verdict == stack_matrix.FAIL
    ]
    if failing:
        blocks.append(Bullets(failing, warn=True))
    cannot: dict[str, set[str]] = {}
    for c in found:
        for check in c.unsupported:
            cannot.setdefault(c.client, set()).add(check)
    if cannot:
        order = stack_matrix.CHECKS
        blocks.append(
            Bullets(
                [
                    f"{client} cannot do: {', '.join(c for c in order if c in checks)}"
                    for client, checks in cannot.items()
                ]
            )
        )
    disagree = disagreements.lines(df, windows or [])
    if disagree:
        blocks += [Text(DISAGREE_INTRO), Bullets(disagree)]
    blocks.append(Table(stack_matrix.matrix_table(found), "Medians per cell [95 % CI]"))
    blocks.extend(figure_blocks(figures, MATRIX))
    return Section("Client × server matrix", blocks)


def flagged_section(
    df: pd.DataFrame, manifests: list[dict[str, Any]], judged: pd.Series | None = None
) -> Section | None:
    tables = [
        (failures_table(df), "Failed trials (excluded from statistics)"),
        (flag_table(df, "cpu_bound"), "CPU-bound trials (kept, but suspect)"),
        (flag_table(df, "calib_forced"), "Trials on a path whose calibration was forced"),
    ]
    blocks: list[Block] = [Table(t, caption) for t, caption in tables if not t.empty]
    unjudged = df["cpu_bound"] & ~(verdict_rows(df, manifests) if judged is None else judged)
    if unjudged.any():
        kinds = ", ".join(f"{k} {n}" for k, n in df[unjudged]["workload"].value_counts().sort_index().items())
        blocks.insert(
            0,
            Text(
                f"{int(unjudged.sum())} of {len(df)} trials are CPU-bound where no verdict rests on "
                f"them ({kinds}): their own sections' figures may measure a CPU, no finding does."
            ),
        )
    return Section("Flagged trials", blocks) if blocks else None


def build_sections(
    df: pd.DataFrame,
    manifests: list[dict[str, Any]],
    figures: list[Figure],
    warnings: list[str],
    windows: list[StackWindow] | None = None,
    judged: pd.Series | None = None,
) -> list[Section]:
    ok = df[~df["failed"]]
    # Only where a finding has rows, failed or not: a run of other questions would open with
    # fourteen "not enough data" lines above its own verdicts.
    against = (
        directions_section(ok, quick=any(m.get("quick") for m in manifests), windows=windows)
        if finding_rows(df).any()
        else None
    )
    own = [expectations_section(ok, manifests), decisions_section(manifests)]
    # The paper's runs lead with its findings; any other run with the questions it asked, and
    # the paper's findings its rows reach come after them.
    verdicts = [against, *own] if of_the_paper(manifests) else [*own, against]
    sections = [
        summary_section(df, manifests, warnings),
        *verdicts,
        congestion_section(ok, manifests, figures),
        *(workload_section(spec, ok, figures) for spec in report_sections()),
        fairness_section(ok, figures),
        matrix_section(df, figures, windows),
        run_section(df, manifests, windows),
        flagged_section(df, manifests, judged),
    ]
    return [s for s in sections if s is not None]


PAPER_EXPERIMENTS = ("experiments", "paper")  # the shipped reproduction's (make reproduce)


def of_the_paper(manifests: list[dict[str, Any]]) -> bool:
    """Whether any run is one of the paper's experiments, by the file it ran (as given to
    `quicbed run`: relative to where it ran, or absolute)."""
    for m in manifests:
        path = Path(str(m.get("file", "")))
        if path.is_absolute():
            path = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        if path.parts[:2] == PAPER_EXPERIMENTS:
            return True
    return False


def default_out_dir(runs: Sequence[str], manifests: list[dict[str, Any]]) -> Path:
    if len(runs) == 1:
        return resolve_run_dir(runs[0]) / rowschema.REPORT_DIR
    return results_root() / "reports" / "+".join(str(m.get("run_id")) for m in manifests)


@dataclass(frozen=True)
class Written:
    """A report on disk: report.html (report.md beside it), the Summary's warnings, and its
    findings' verdicts counted."""

    html: Path
    warnings: list[str]
    tally: Tally


def build_report(run_ids: Sequence[str | Path], out_dir: str | Path | None = None) -> Written:
    """Analyse the runs, write report.html and report.md."""
    runs = [str(r) for r in run_ids]
    df, manifests = load_runs(runs)
    out = Path(out_dir) if out_dir else default_out_dir(runs, manifests)
    judged = verdict_rows(df, manifests)
    warnings = flags(df, manifests, judged)
    try:
        return write_files(df, manifests, out, warnings, judged)
    except OSError as exc:
        raise AnalysisError(f"cannot write the report to {out}: " f"{exc.strerror or exc}") from None


def write_files(
    df: pd.DataFrame,
    manifests: list[dict[str, Any]],
    out: Path,
    warnings: list[str],
    judged: pd.Series | None = None,
) -> Written:
    figure_dir = out / "figures"
    out.mkdir(parents=True, exist_ok=True)
    # Figures of an earlier report of the same runs would linger unreferenced.
    for stale in [*figure_dir.glob("*.png"), *figure_dir.glob("*.svg")]:
        stale.unlink()
    ok = df[~df["failed"]]
    figures = make_figures(ok, figure_dir)
    figures += goodput_against_bound(congestion_groups(ok, loss_paths(ok, manifests)), figure_dir)
    figures += cross_timelines(ok, figure_dir)
    found = stack_matrix.cells(df)
    if stack_matrix.is_matrix(found):
        figures += stack_matrix_figure(found, figure_dir)
    sections = build_sections(df, manifests, figures, warnings, measured_windows(ok), judged)
    title = "quicbed report: " + ", ".join(str(m.get("run_id")) for m in manifests)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    (out / "report.md").write_text(render.markdown(title, stamp, sections, out))
    html_path = out / "report.html"
    html_path.write_text(render.html(title, stamp, sections, out))
    return Written(html_path, warnings, tally(sections))


def write_report(run_ids: Sequence[str | Path], out_dir: str | Path | None = None) -> Path:
    """Analyse the runs and write report.html and report.md; returns report.html's path."""
    return build_report(run_ids, out_dir).html


def report_runs(argv_run_ids: list[str], out: str | None) -> Written | None:
    """`quicbed report`'s work, printed: the warnings and where the report is, or one line
    saying why it could not be written (then None)."""
    try:
        written = build_report(argv_run_ids, out)
    except AnalysisError as exc:
        print(f"quicbed report: {exc}", file=sys.stderr)
        return None
    for warning in written.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"report: {written.html}")
    print(f"        {written.html.with_suffix('.md')}")
    return written


def main_report(argv_run_ids: list[str], out: str | None) -> int:
    """CLI entry: `quicbed report RUN_ID... [--out DIR]`. Errors: one line, exit code 2."""
    return 0 if report_runs(argv_run_ids, out) else 2
