"""Render report sections to HTML (inline CSS, no external resources) and Markdown."""

from __future__ import annotations

import html as h
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .claims import FAILS, HOLDS, Direction, Verdict
from .figures import Figure


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: list[str]
    warn: bool = False


@dataclass(frozen=True)
class Table:
    frame: pd.DataFrame
    caption: str


@dataclass(frozen=True)
class FigureBlock:
    figure: Figure


@dataclass(frozen=True)
class VerdictList:
    items: list[tuple[Direction, Verdict]]


Block = Text | Bullets | Table | FigureBlock | VerdictList


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1400px;
 padding:0 1.5em;color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em;
 margin-top:2em} .stamp{color:#777;font-size:.9em}
table{border-collapse:collapse;margin:0 0 1.4em;font-size:.85em}
.cap{font-weight:600;margin:1.2em 0 .2em}
th,td{border:1px solid #ccc;padding:.25em .55em;text-align:left;vertical-align:top}
th{background:#f2f2f2} td{white-space:nowrap} .wide{overflow-x:auto}
.verdicts td{white-space:normal} tr:nth-child(even) td{background:#fafafa}
.warn{background:#fff4e0;border-left:4px solid #e69f00;padding:.5em 1em .5em 2em}
figure{margin:1em 0 2em} figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#555;font-size:.9em}
.holds{color:#1a7f37;font-weight:600} .fails{color:#c62828;font-weight:600}
.nodata{color:#777;font-weight:600} nav a{margin-right:1em}
"""


def relative(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path, base)).as_posix()


def status_class(status: str) -> str:
    return {HOLDS: "holds", FAILS: "fails"}.get(status, "nodata")


def html_table(frame: pd.DataFrame, caption: str) -> str:
    head = "".join(f"<th>{h.escape(str(c))}</th>" for c in frame.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{h.escape(cell(v))}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    # Wide tables scroll sideways instead of squeezing numbers onto two lines.
    # The caption sits above the table, not in it, so a narrow table doesn't wrap it.
    return (
        f"<p class='cap'>{h.escape(caption)}</p><div class='wide'><table><thead><tr>"
        f"{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def html_verdicts(items: list[tuple[Direction, Verdict]]) -> str:
    rows = "".join(
        f"<tr><td>{h.escape(d.claim)}</td><td class='{status_class(v.status)}'>"
        f"{h.escape(v.status)}</td><td>{'<br>'.join(h.escape(f) for f in v.found)}</td></tr>"
        for d, v in items
    )
    return (
        "<table class='verdicts'><thead><tr><th>claim</th><th>verdict</th>"
        f"<th>this run</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def html_block(block: Block, base: Path) -> str:
    match block:
        case Text(text):
            return f"<p>{h.escape(text)}</p>"
        case Bullets(items, warn):
            lis = "".join(f"<li>{h.escape(i)}</li>" for i in items)
            return f"<ul class='{'warn' if warn else ''}'>{lis}</ul>"
        case Table(frame, caption):
            return html_table(frame, caption)
        case FigureBlock(f):
            return (
                f"<figure><a href='{relative(f.svg, base)}'><img src='"
                f"{relative(f.png, base)}' alt='{h.escape(f.title)}'></a><figcaption>"
                f"<b>{h.escape(f.title)}.</b> {h.escape(f.caption)} (click for SVG)"
                "</figcaption></figure>"
            )
        case VerdictList(items):
            return html_verdicts(items)
    raise TypeError(f"unknown block {block!r}")


def anchor(title: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in title.lower())


def html(title: str, stamp: str, sections: list[Section], base: Path) -> str:
    nav = "".join(f"<a href='#{anchor(s.title)}'>{h.escape(s.title)}</a>" for s in sections)
    body = "".join(
        f"<h2 id='{anchor(s.title)}'>{h.escape(s.title)}</h2>"
        + "".join(html_block(b, base) for b in s.blocks)
        for s in sections
    )
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>"
        f"{h.escape(title)}</title><style>{CSS}</style></head><body><h1>{h.escape(title)}"
        f"</h1><p class='stamp'>generated {stamp}</p><nav>{nav}</nav>{body}</body></html>\n"
    )


def cell(value: object) -> str:
    """A table cell as text; gaps (groups without that metric) show as a dash."""
    return "–" if value is None or (isinstance(value, float) and value != value) else str(value)


# A backtick code span: CommonMark shows its text as it is, so it is left alone there.
CODE_SPAN = re.compile(r"(`+)(?:.|\n)*?\1")
# What starts raw HTML in Markdown: "<" before a tag name, "/", "!" or "?" ("<b>", "</p>",
# "<!--"). A "<" before a space or a digit ("0.9 < x") is text, and stays readable.
HTML_START = re.compile(r"<(?=[A-Za-z/!?])")


def md_text(text: str) -> str:
    """Text for report.md that cannot start raw HTML outside code spans: a name, an error or
    a claim read from a run (someone else's results) is shown, never rendered as HTML."""
    out, end = [], 0
    for span in CODE_SPAN.finditer(text):
        out += [HTML_START.sub("&lt;", text[end : span.start()]), span.group(0)]
        end = span.end()
    return "".join([*out, HTML_START.sub("&lt;", text[end:])])


def md_cell(value: object) -> str:
    return md_text(cell(value)).replace("|", "\\|").replace("\n", " ")


def md_table(frame: pd.DataFrame, caption: str = "") -> str:
    lines = [f"**{caption}**", ""] if caption else []
    lines.append("| " + " | ".join(md_cell(c) for c in frame.columns) + " |")
    lines.append("|" + "---|" * len(frame.columns))
    lines += ["| " + " | ".join(md_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def md_block(block: Block, base: Path) -> str:
    match block:
        case Text(text):
            return md_text(text)
        case Bullets(items, warn):
            return "\n".join(f"- {'⚠ ' if warn else ''}{md_text(i)}" for i in items)
        case Table(frame, caption):
            return md_table(frame, caption)
        case FigureBlock(f):
            return (
                f"![{md_text(f.title)}]({relative(f.png, base)})\n\n"
                f"*{md_text(f.title)}.* {md_text(f.caption)} "
                f"([SVG]({relative(f.svg, base)}))"
            )
        case VerdictList(items):
            frame = pd.DataFrame(
                [{"claim": d.claim, "verdict": v.status, "this run": "; ".join(v.found)} for d, v in items]
            )
            return md_table(frame)
    raise TypeError(f"unknown block {block!r}")


def markdown(title: str, stamp: str, sections: list[Section], base: Path) -> str:
    parts = [f"# {md_text(title)}", f"_generated {stamp}_"]
    for s in sections:
        parts.append(f"## {md_text(s.title)}")
        parts += [md_block(b, base) for b in s.blocks]
    return "\n\n".join(parts) + "\n"
