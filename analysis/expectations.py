"""A tiny, safe expectation language for CI: `quic.connection_time.median / rtt < 1.15`.

An experiment's `expect:` lines are claims like the paper's (analysis/claims.py): both are
judged by claims.evaluate, for `quicbed check` and for the report alike. This module is the
language: parsing, whitelisting, and judging one line over one condition's successful rows.

Parsed with `ast` and checked against a whitelist; evaluated by walking the tree, never `eval`.
Names: `[server.]group.metric.statistic`, `rtt` (calibrated RTT, ms) and `rate` (down, Mbit/s).
Group labels contain dots and dashes (`tls1.3`, `tls1.3-h2`), which Python would misparse, so
before parsing each known label is rewritten to an identifier (`tls13`, `tls13_h2`); both
spellings are accepted.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from quicbed.clients.tools import TOOLS
from quicbed.rowschema import CHECKS, METRICS, PROTOCOLS
from quicbed.servers import SERVERS

# What a line may name: the timing metrics and the protocol checks.
MEASURES: dict[str, str] = {**METRICS, **CHECKS}
STATISTICS: tuple[str, ...] = ("median", "mean", "p25", "p75", "p90", "p95", "min", "max", "count")

_BINOPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: lambda a, b: a / b if b else math.nan,
}
_CMPOPS: dict[type, tuple[str, Callable[[float, float], bool]]] = {
    ast.Lt: ("<", operator.lt),
    ast.LtE: ("<=", operator.le),
    ast.Gt: (">", operator.gt),
    ast.GtE: (">=", operator.ge),
    ast.Eq: ("==", operator.eq),
    ast.NotEq: ("!=", operator.ne),
}
_SCALARS = ("rtt", "rate")
_ALLOWED = (
    ast.Compare,
    ast.BinOp,
    ast.UnaryOp,
    ast.Constant,
    ast.Name,
    ast.Attribute,
    ast.Load,
    ast.USub,
    ast.UAdd,
    *_BINOPS,
    *_CMPOPS,
)
MAX_LENGTH = 500


def ident(label: str) -> str:
    """`tls1.3-h2` -> `tls13_h2`: the identifier spelling of a group or server label."""
    return label.replace(".", "").replace("-", "_")


def client_labels() -> list[str]:
    """Every label a client variant can have (for expectation group names)."""
    return [label for tool in TOOLS.values() for label in tool.labels()]


def _labels() -> tuple[dict[str, str], dict[str, str]]:
    groups = {ident(g): g for g in (*PROTOCOLS, *client_labels())}
    servers = {ident(s): s for s in SERVERS}
    return groups, servers


@dataclass(frozen=True)
class Ref:
    """One measured quantity: a statistic of a metric over one group's rows in a condition."""

    server: str | None
    group: str
    metric: str
    statistic: str


@dataclass(frozen=True)
class Expectation:
    text: str
    line: int
    tree: ast.Compare
    refs: tuple[Ref, ...]


def compile_expectation(text: str, line: int = 0) -> Expectation:
    """Parse and whitelist; raises ValueError with a one-line reason."""
    groups, servers = _labels()
    rewritten = text
    for label in sorted({*groups.values(), *servers.values()}, key=len, reverse=True):
        if ident(label) != label:
            rewritten = re.sub(rf"(?<!\w){re.escape(label)}(?=\.)", ident(label), rewritten)
    if len(text) > MAX_LENGTH:
        raise ValueError(f"longer than {MAX_LENGTH} characters; split it into several")
    try:
        tree = ast.parse(rewritten.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not an expression: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise ValueError("nested too deeply") from None
    if not isinstance(tree, ast.Compare):
        raise ValueError("an expectation must be a comparison, e.g. `quic.ttfb.median < 2 * rtt`")
    refs: list[Ref] = []
    _check_node(tree, groups, servers, refs)
    return Expectation(text, line, tree, tuple(refs))


def _check_node(node: ast.AST, groups: dict, servers: dict, refs: list[Ref]) -> None:
    ops = [getattr(node, "op", None), *getattr(node, "ops", [])]
    if not isinstance(node, _ALLOWED) or any(op and not isinstance(op, _ALLOWED) for op in ops):
        raise ValueError(
            f"'{ast.unparse(node)}' is not allowed (only + - * /, comparisons, " "numbers and metric names)"
        )
    if isinstance(node, ast.Constant) and (
        isinstance(node.value, bool) or not isinstance(node.value, int | float)
    ):
        raise ValueError(f"{node.value!r} is not a number")
    if isinstance(node, ast.Name) and node.id not in _SCALARS:
        raise ValueError(f"unknown name '{node.id}' (use rtt, rate or group.metric.statistic)")
    if isinstance(node, ast.Attribute):
        refs.append(_ref(node, groups, servers))  # a whole a.b.c.d chain; don't descend
        return
    for child in ast.iter_child_nodes(node):
        _check_node(child, groups, servers, refs)


def _ref(node: ast.Attribute, groups: dict, servers: dict) -> Ref:
    parts: list[str] = []
    cur: ast.AST = node
    while isinstance(cur, ast.Attribute):
        parts.insert(0, cur.attr)
        cur = cur.value
    if not isinstance(cur, ast.Name):
        raise ValueError(f"'{ast.unparse(node)}' is not a metric name")
    parts.insert(0, cur.id)
    if len(parts) not in (3, 4):
        raise ValueError(f"'{'.'.join(parts)}': expected [server.]group.metric.statistic")
    server = servers.get(parts[0]) if len(parts) == 4 else None
    if len(parts) == 4 and server is None:
        raise ValueError(f"unknown server '{parts[0]}' (known: {', '.join(servers.values())})")
    group, metric, stat = parts[-3:]
    if group not in groups:
        raise ValueError(
            f"unknown group '{group}' (protocols: {', '.join(PROTOCOLS)}; "
            "or a client label like tls1.3-h2)"
        )
    if metric not in MEASURES:
        raise ValueError(f"unknown metric '{metric}' (known: {', '.join(MEASURES)})")
    if stat not in STATISTICS:
        raise ValueError(f"unknown statistic '{stat}' (known: {', '.join(STATISTICS)})")
    return Ref(server, groups[group], metric, stat)


@dataclass(frozen=True)
class Outcome:
    passed: bool
    detail: str  # the evaluated sides, e.g. "1.02 < 1.15"


def evaluate(exp: Expectation, lookup: Callable[[Ref], float], rtt: float, rate: float) -> Outcome:
    """Evaluate against one condition; a missing or NaN value fails rather than passes."""
    groups, servers = _labels()

    def value(node: ast.AST) -> float:
        match node:
            case ast.Constant(value=v):
                return float(v)
            case ast.Name(id="rtt"):
                return rtt
            case ast.Name(id="rate"):
                return rate
            case ast.Attribute():
                return lookup(_ref(node, groups, servers))
            case ast.UnaryOp(op=ast.USub(), operand=x):
                return -value(x)
            case ast.UnaryOp(operand=x):
                return value(x)
            case ast.BinOp(left=a, op=op, right=b):
                return _BINOPS[type(op)](value(a), value(b))
        raise ValueError(f"unexpected node {ast.dump(node)}")  # compile_expectation prevents this

    tree = exp.tree
    sides = [value(tree.left), *(value(c) for c in tree.comparators)]
    passed, detail = True, _fmt(sides[0])
    for (symbol, fn), a, b in zip((_CMPOPS[type(o)] for o in tree.ops), sides[:-1], sides[1:], strict=True):
        passed &= not (math.isnan(a) or math.isnan(b)) and fn(a, b)
        detail += f" {symbol} {_fmt(b)}"
    return Outcome(passed, detail)


def _fmt(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.4g}"


def statistic(values: Sequence[float | None], name: str) -> float:
    """One of STATISTICS over the finite values (gaps: None); NaN when there are none (so the check fails)."""
    xs = sorted(v for v in values if v is not None and not math.isnan(v))
    if name == "count":
        return float(len(xs))
    if not xs:
        return math.nan
    if name == "mean":
        return sum(xs) / len(xs)
    q = {"min": 0, "max": 100, "median": 50}[name] if name[1:].isalpha() else int(name[1:])
    pos = (len(xs) - 1) * q / 100  # linear interpolation, as numpy's default
    low = int(pos)
    high = min(low + 1, len(xs) - 1)
    return xs[low] + (xs[high] - xs[low]) * (pos - low)


def measure(ok: pd.DataFrame, ref: Ref) -> float:
    """`ref`'s statistic over the successful rows `ok` of its group (protocol or client
    label) and server."""
    column = MEASURES[ref.metric]
    if ok.empty or column not in ok:
        return statistic([], ref.statistic)
    mine = ok[(ok["protocol"] == ref.group) | (ok["client"] == ref.group)]
    if ref.server is not None:
        mine = mine[mine["server"] == ref.server]
    values = pd.to_numeric(mine[column], errors="coerce")
    return statistic([float(v) for v in values], ref.statistic)


def condition_rtt(ok: pd.DataFrame, configured: float) -> float:
    """The calibrated RTT if the rows carry one, else the configured one."""
    if ok.empty or "calib_rtt_ms" not in ok:
        return configured
    calibrated = statistic(list(pd.to_numeric(ok["calib_rtt_ms"], errors="coerce")), "median")
    return configured if math.isnan(calibrated) else calibrated


def judge(exp: Expectation, ok: pd.DataFrame, rtt_ms: float, rate_mbit: float) -> Outcome:
    """One expectation over one condition's successful rows."""
    return evaluate(exp, lambda ref: measure(ok, ref), condition_rtt(ok, rtt_ms), rate_mbit)
