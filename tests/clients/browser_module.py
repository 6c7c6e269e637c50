"""browser_perf.py, loaded by path for the browser clients' unit tests: it runs in the client
image as a script, not as a package module. Loading it puts its directory first on sys.path,
so its sibling modules (page_row, cloud_fetch, firefox_driver...) import by name after it."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from quicbed.paths import REPO


def load_browser_perf() -> ModuleType:
    path = REPO / "clients" / "browser" / "browser_perf.py"
    spec = importlib.util.spec_from_file_location("browser_perf", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["browser_perf"] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


def browser_argv(url: str, ca: str, *extra: str) -> list[str]:
    """browser_perf's arguments for `url` as the runner gives them, with `extra` after."""
    return ["--url", url, "--resolve", "server.quicbed:443:10.0.2.10", "--cacert", ca, *extra]
