"""How a server's version command's output becomes its version: the named parsers a descriptor
picks with `version_probe.parser`, each implemented once here.

    text           the output's first line
    regex          `pattern`'s first group (or its whole match) searched in the output
    go-build-info  the version of `module` in Go's build-info dump (`caddy build-info`); when
                   that says "(devel)", the first word of `fallback`'s output
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .spec import ServerError

Run = Callable[[list[str]], subprocess.CompletedProcess]


def build_info(text: str) -> dict[str, str]:
    """module -> version from Go's debug.BuildInfo dump (`caddy build-info`); "go" -> toolchain."""
    mods = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 3 and f[0] in ("mod", "dep"):
            mods[f[1]] = f[2]
        elif len(f) == 2 and f[0] == "go":
            mods["go"] = f[1]
    return mods


def _text(out: str, options: dict[str, Any], run: Run) -> str:
    return out.splitlines()[0].strip()


def _regex(out: str, options: dict[str, Any], run: Run) -> str:
    match = re.search(options["pattern"], out)
    if not match:
        raise ServerError(f"version output does not match {options['pattern']!r}: {out[:200]}")
    return match.group(1) if match.re.groups else match.group(0)


def _go_build_info(out: str, options: dict[str, Any], run: Run) -> str:
    # `caddy version` says "unknown" when Caddy itself is the main module, as with go install,
    # hence build-info first.
    version = build_info(out).get(options["module"], "(devel)")
    if version == "(devel)" and options.get("fallback"):
        # Debian's package has no module info, but `caddy version` works.
        version = (run(options["fallback"]).stdout.split() or ["unknown"])[0]
    return version


@dataclass(frozen=True)
class Parser:
    parse: Callable[[str, dict[str, Any], Run], str]
    required: tuple[str, ...] = ()  # its options in version_probe (checked by descriptors.py)
    optional: tuple[str, ...] = ()


PARSERS: dict[str, Parser] = {
    "text": Parser(_text),
    "regex": Parser(_regex, required=("pattern",)),
    "go-build-info": Parser(_go_build_info, required=("module",), optional=("fallback",)),
}


def parse_version(out: str, parser: str, options: dict[str, Any], run: Run) -> str:
    """The version in `out` (the version command's stdout + stderr), by PARSERS[parser]; `run`
    runs a further command in the same container (go-build-info's fallback)."""
    return PARSERS[parser].parse(out, options, run)
