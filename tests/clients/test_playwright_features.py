"""The driver's copy of Playwright's own --disable-features (clients/browser/chromium_driver.py
PLAYWRIGHT_DISABLED_FEATURES) is the list of the Playwright in the browser image.

Chromium reads only the last --disable-features, and ours comes after Playwright's: a feature
Playwright turns off that our copy lacks would be switched back on in every load (HttpsUpgrades,
PaintHolding change what a load does). A Playwright upgrade that changes its list fails here."""

from __future__ import annotations

import re
import subprocess

import pytest
from browser_module import load_browser_perf

load_browser_perf()  # the drivers import as the image's script does: by name, beside it
from chromium_driver import PLAYWRIGHT_DISABLED_FEATURES  # noqa: E402

IMAGE = "quicbed/browser:dev"
# Where the image's Playwright keeps its Chromium switches (one bundle since 1.5x).
FIND = (
    'lib="$(dirname "$(find / -path /proc -prune -o -name coreBundle.js -print -quit)")"; '
    'cat "$lib/coreBundle.js"'
)


def features_in(source: str) -> tuple[str, ...]:
    """The names in `disabledFeatures = [...]` of Playwright's JavaScript, comments left out."""
    m = re.search(r"disabledFeatures\s*=\s*(?:\([^)]*\)\s*=>\s*)?\[(.*?)\]", source, re.S)
    assert m, "no disabledFeatures list in the image's Playwright"
    code = "\n".join(line.split("//", 1)[0] for line in m.group(1).splitlines())
    return tuple(re.findall(r"[\"']([A-Za-z0-9_]+)[\"']", code))


def test_the_parser_reads_a_list_with_comments() -> None:
    source = 'const disabledFeatures = (x) => [\n  "A", // why\n  // "Gone",\n  \'B\'\n];'
    assert features_in(source) == ("A", "B")


@pytest.mark.docker
def test_the_pinned_list_is_the_image_playwrights() -> None:
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", IMAGE, "-c", FIND],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-500:]
    assert set(features_in(proc.stdout)) == set(PLAYWRIGHT_DISABLED_FEATURES)
