"""Handshake physics of the perf tools on the emulated path (prints figures; asserts nothing).

For india (80 ms) and a 200 ms variant: median connection time ÷ calibrated RTT per protocol
against theory (fresh: TLS 1.2 3, TLS 1.3 2, QUIC 1), TTFB − connection time in RTTs (≥ 1),
setup RTTs of a resumed connection as TTFB ÷ RTT − 1 (TLS 1.2 2; TLS 1.3 1 and QUIC 0 with
0-RTT early data; nginx for TLS, Caddy for QUIC), and 10 MB goodput ÷ rate at 20 Mbit/s,
with what TCP arithmetic allows (setup and request RTTs, slow start from 10 segments, the
payload share of a frame: analysis/physics.py) and the measurement ÷ that model.

    .venv/bin/python bench/handshake_bench.py [--reps 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from quicbed.analysis.physics import tcp_download_s
from quicbed.experiments.executor import CLIENT_PKI, SERVER_NAME, served_testbed
from quicbed.paths import CACHE
from quicbed.servers import content
from quicbed.topology.calibrate import check_rtt
from quicbed.topology.net import server_address
from quicbed.topology.profiles import apply_overrides, load_profile

# label: (tool, options, fresh RTTs, resumed setup RTTs or None, server that resumes)
CLIENTS = {
    "tls1.2-h2": ("tls_perf", ["--tls", "1.2", "--http", "2"], 3, 2, "nginx"),
    "tls1.3-h2": ("tls_perf", ["--tls", "1.3", "--http", "2"], 2, 1, "nginx"),
    "quic-h3 (libcurl)": ("quic_perf", [], 1, None, None),  # libcurl offers no QUIC session
    "quic-h3 (ngtcp2)": ("quic_perf", ["--backend", "ngtcp2"], 1, 0, "caddy"),
}


def fetch(tb, address: str, tool: str, options: list[str], path: str, reps: int,  # noqa: ANN001
          extra: list[str] = ()) -> list[dict]:
    argv = [tool, "--url", f"https://{SERVER_NAME}/{path}", "--resolve",
            f"{SERVER_NAME}:443:{address}", "--cacert", f"{CLIENT_PKI}/ca.pem",
            "-n", str(reps), "--pause", "100", "--timeout", "60", *options, *extra]
    proc = tb.client.exec(argv, timeout=120 + reps * 10)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def bench(profile_name: str, overrides: dict[str, str], server: str, reps: int,
          backend: str = "auto") -> None:
    names = list(dict.fromkeys([server, "nginx", "caddy"]))
    profile = apply_overrides(load_profile(profile_name), overrides)
    root = CACHE / "content"
    content.ensure_content(root, {"web"})
    content.ensure_files(root, ["10MB"])
    with tempfile.TemporaryDirectory() as tmp:
        with served_testbed(profile, names, log_root=Path(tmp) / "logs",
                            pki_dir=Path(tmp) / "pki", content_dir=root, start=True,
                            backend=backend) as (tb, hosts):
            rtt = check_rtt(tb, 30).measured
            address_of = {n: server_address(tb.servers.index(hosts[n])) for n in names}
            address = address_of[server]
            print(f"\n{profile_name} {overrides or ''} via {tb.backend.name}, server {server}: "
                  f"configured RTT {profile.rtt_ms:g} ms, calibrated {rtt:.2f} ms, n={reps}")
            print(f"{'client':<20}{'conn/RTT':>9}{'theory':>7}{'error':>8}{'ttfb-conn':>10}"
                  f"{'resumed':>9}{'theory':>7}{'10MB ÷ rate':>12}{'model':>7}{'÷ model':>8}")
            for label, (tool, options, fresh, resumed, resumer) in CLIENTS.items():
                rows = [r for r in fetch(tb, address, tool, options, "web/index.html", reps)
                        if not r["error"]]
                conn = statistics.median(r["connection_time_ms"] for r in rows) / rtt
                gap = statistics.median(r["ttfb_ms"] - r["connection_time_ms"] for r in rows) / rtt
                res_text = "-"
                if resumer is not None:
                    again = [r for r in fetch(tb, address_of[resumer], tool, options,
                                              "web/index.html", reps, ["--resume"])
                             if not r["error"] and r["resumed"]]
                    if again:
                        res = statistics.median(r["ttfb_ms"] for r in again) / rtt - 1
                        res_text = f"{res:.3f}"
                big = [r for r in fetch(tb, address, tool, options, "cloud/10MB", 1)
                       if not r["error"]]
                goodput = big[0]["throughput_mbps"] / profile.down.rate_mbit if big else float("nan")
                model_text = "      -       -"
                if tool == "tls_perf":  # the TCP arithmetic: setup + request RTTs, slow start
                    size = content.CLOUD_SIZES["10MB"]
                    model_s = tcp_download_s(size, profile.down.rate_mbit, rtt, setup_rtts=fresh)
                    model = size * 8 / model_s / 1e6 / profile.down.rate_mbit
                    model_text = f"{model:>7.3f}{goodput / model:>8.3f}"
                print(f"{label:<20}{conn:>9.3f}{fresh:>7}{(conn / fresh - 1):>+8.1%}{gap:>10.2f}"
                      f"{res_text:>9}{resumed if resumed is not None else '-':>7}{goodput:>12.3f}"
                      f"{model_text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--server", default="nginx", help="server of the fresh connections")
    parser.add_argument("--backend", default="auto", help="auto, netem, uml or delayline")
    parser.add_argument("--rtts", nargs="+", type=float, default=[80, 200],
                        help="RTTs (ms) of the india link to measure at")
    args = parser.parse_args()
    for rtt in args.rtts:
        overrides = {} if rtt == 80 else {"delay_ms": f"{rtt / 2:g}"}
        bench("india", overrides, args.server, args.reps, args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
