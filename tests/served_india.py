"""The served india path of the client path tests: servers started, the client container
(the perf client's or a browser's image), and india's RTT proven before anything is measured.

One helper for test_perf_path, test_browser_path, test_firefox_path and test_contention: the
RTT check is the path's proof, under a run's calibration rule (tests/contention.py
path_proof): a refusal on a contended host is measured again after a wait for calm, never
retried blindly, and the module's first test may be a behaviour test beside another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from contention import path_proof

from quicbed.paths import CACHE
from quicbed.servers.testbed import served_testbed
from quicbed.topology.calibrate import check_rtt
from quicbed.topology.profiles import load_profile
from quicbed.workloads import cloud, ensure_content


@contextlib.contextmanager
def served_india(
    tmp: Path,
    servers: list[str],
    files: Iterable[str] = (),
    client_image: str | None = None,
    rtt_samples: int = 20,
) -> Iterator[tuple[Any, dict[str, Any], float]]:
    """(testbed, server hosts by name, measured RTT in ms); logs under tmp/logs."""
    root = ensure_content(CACHE / "content", {"web"})
    if files:
        cloud.ensure_files(root, list(files))
    image = {"client_image": client_image} if client_image else {}
    with served_testbed(
        load_profile("india"),
        servers,
        log_root=tmp / "logs",
        pki_dir=tmp / "pki",
        content_dir=root,
        start=True,
        **image,
    ) as (tb, hosts):

        def proven(rtt: Any) -> None:
            assert rtt.passed, rtt

        rtt = path_proof("india's RTT", lambda: check_rtt(tb, rtt_samples), proven)
        yield tb, hosts, rtt.measured
