"""Benchmark of the emulated link on this machine's backend (not a test: it prints figures).

For each rate: TCP goodput ÷ configured rate (down direction, saturating cubic flow), and the
RTT error under load: ping's median RTT while a paced UDP flow fills 90% of the link (no
standing queue), minus the configured RTT.

    make bench            # or: .venv/bin/python bench/link_bench.py [--profiles india ...]

`--rates 20 100 500 1000 --backends vm delayline`: the backends side by side on one link
(germany's 20 ms RTT, or `--rates-profile germany-lab`'s 6 ms; 1 % loss for the loss figure)
at each rate: bring-up time, TCP goodput ÷ the model (rate × 1448/1514), RTT error idle and
under a 90 % load, loss against the configured 1 %, the router's own CPU (its processes; the
host kernel's for netem) during the TCP flow and per Gbit/s of it, iperf3's own CPU, and the
host's contention (the share of the row's time a runnable task waited for a CPU, PSI).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time

from quicbed.hostload import cpu_wait_us, wait_share
from quicbed.topology.calibrate import (
    cpu_times,
    finish_iperf,
    goodput_floor,
    host_cpu_between,
    iperf,
    iperf_cpu,
    probe_datagrams,
    receiver_goodput_mbit,
    start_iperf,
)
from quicbed.topology.net import HostSpec, Testbed, TestbedConfig
from quicbed.topology.profiles import apply_overrides, load_profile

IDEAL = 1448 / 1514  # TCP payload share of a full frame: the best goodput ÷ rate can be


def bench_profile(name: str, image: str, seconds: int, backend: str) -> dict[str, float | str]:
    profile = load_profile(name)
    cfg = TestbedConfig(profile=profile, backend=backend, client=HostSpec(image), servers=(HostSpec(image),))
    with Testbed(cfg) as tb:
        rate = profile.down.rate_mbit
        before = cpu_times()
        result = iperf(tb, ["-t", str(seconds), "-O", "2", "-R"], timeout=seconds + 40)
        cpu = host_cpu_between(before, cpu_times())
        goodput = receiver_goodput_mbit(result, "down")
        retransmits = result["end"].get("sum_sent", {}).get("retransmits", -1)
        idle = tb.ping(count=40, interval=0.05)
        load_bps = 0.9 * rate * 1e6 * 1470 / 1512
        server, client = start_iperf(
            tb, 5202, ["-u", "-R", "-b", f"{load_bps:.0f}", "-l", "1470", "-t", "8"], timeout=60
        )
        loaded = tb.ping(count=80, interval=0.05)
        finish_iperf(server, client)
        return {
            "profile": name,
            "backend": tb.backend.name,
            "rate_mbit": rate,
            "rtt_ms": profile.rtt_ms,
            "goodput_mbit": goodput,
            "ratio": goodput / rate,
            "ratio_of_ideal": goodput / rate / IDEAL,
            "retransmits": retransmits,
            "cpu_busy": cpu.busy,
            "cpu_steal": cpu.steal,
            "verdict": "pass" if goodput / rate >= goodput_floor(rate) else "FAIL",
            "rtt_idle_ms": statistics.median(idle),
            "rtt_load_ms": statistics.median(loaded),
            "rtt_error_load_ms": statistics.median(loaded) - profile.rtt_ms,
            "rtt_p95_load_ms": sorted(loaded)[int(0.95 * len(loaded)) - 1],
        }


# The RTT's interquartile range per σ of one direction's jitter (tests/topology/
# test_delayline_path.py holds the physics; the tight figure lives here, beside the steal).
IQR_PER_SIGMA = {"normal": 1.349 * 2**0.5, "uniform": 4 * (1 - 2**-0.5)}


def bench_jitter(image: str, backend: str, sigma: float = 4.0) -> None:
    print(f"\njitter on india, σ {sigma:g} ms per direction, 2000 pings at 5 ms")
    print(
        f"{'table':<9}{'backend':<10}{'IQR':>7}{'expected':>10}{'÷':>7}{'median':>8}"
        f"{'2.5 %':>8}{'cpu':>6}{'steal':>6}"
    )
    for distribution, per_sigma in IQR_PER_SIGMA.items():
        profile = apply_overrides(
            load_profile("india"), {"jitter_ms": str(sigma), "jitter_distribution": distribution}
        )
        cfg = TestbedConfig(
            profile=profile, backend=backend, client=HostSpec(image), servers=(HostSpec(image),)
        )
        with Testbed(cfg) as tb:
            before = cpu_times()
            samples = tb.ping(count=2000, interval=0.005)
            cpu = host_cpu_between(before, cpu_times())
            name = tb.backend.name if tb.backend else "?"
        q = statistics.quantiles(samples, n=4)
        iqr, expected = q[2] - q[0], per_sigma * sigma
        print(
            f"{distribution:<9}{name:<10}{iqr:>7.2f}{expected:>10.2f}{iqr / expected:>7.3f}"
            f"{q[1]:>8.2f}{statistics.quantiles(samples, n=40)[0]:>8.2f}{cpu.busy:>6.0%}"
            f"{cpu.steal:>6.0%}"
        )
    print(
        "(÷: measured IQR ÷ the table's; within ±15 % for a faithful backend on an idle "
        "host: a user-space delay line keeps time only while it has the CPU, see steal)"
    )


LOSS_PCT = 1.0
LOSS_PACKETS = 5000


def process_cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) so far of these processes and their threads."""
    total = 0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def bench_rate(
    rate: float, backend: str, image: str, seconds: int, profile_name: str = "germany"
) -> dict[str, float | str]:
    overrides = {"rate_mbit": str(rate), "loss_pct": str(LOSS_PCT)}
    profile = apply_overrides(load_profile(profile_name), overrides)
    cfg = TestbedConfig(profile=profile, backend=backend, client=HostSpec(image), servers=(HostSpec(image),))
    started, wait_before = time.monotonic(), cpu_wait_us()
    with Testbed(cfg) as tb:
        bring_up = time.monotonic() - started
        assert tb.backend
        tb.apply_link(*tb.without_loss())
        idle = tb.ping(count=40, interval=0.05)
        pids, before = tb.backend.router_pids(), time.monotonic()
        cpu_before = process_cpu_s(pids)
        result = iperf(tb, ["-t", str(seconds), "-O", "2", "-R"], timeout=seconds + 40)
        router_cpu = (process_cpu_s(pids) - cpu_before) / (time.monotonic() - before)
        goodput = receiver_goodput_mbit(result, "down")
        sender_cpu, receiver_cpu = iperf_cpu(result, "down") or (math.nan, math.nan)
        load_bps = 0.9 * rate * 1e6 * 1470 / 1512
        server, client = start_iperf(
            tb, 5202, ["-u", "-R", "-b", f"{load_bps:.0f}", "-l", "1470", "-t", "8"], timeout=60
        )
        loaded = tb.ping(count=80, interval=0.05)
        finish_iperf(server, client)
        tb.apply_link(profile.down, profile.up)
        probe = probe_datagrams(tb, LOSS_PACKETS)
        lost = sum(LOSS_PACKETS - r["received"] + r["duplicates"] for r in probe.values())
        return {
            "backend": tb.backend.name,
            "rtt_ms": profile.rtt_ms,
            "rate_mbit": rate,
            "bring_up_s": bring_up,
            "ratio_of_model": goodput / (rate * IDEAL),
            "rtt_error_idle_ms": statistics.median(idle) - profile.rtt_ms,
            "rtt_error_load_ms": statistics.median(loaded) - profile.rtt_ms,
            "loss_pct": 100 * lost / (2 * LOSS_PACKETS),
            "router_cpu": router_cpu if pids else math.nan,
            "router_cpu_per_gbit": router_cpu / (goodput / 1000) if pids and goodput else math.nan,
            "iperf_cpu": (sender_cpu + receiver_cpu) / 100,
            "host_wait": wait_share(wait_before, cpu_wait_us(), time.monotonic() - started) or math.nan,
        }


def print_rates(rows: list[dict[str, float | str]]) -> None:
    print(f"\nlink backends side by side (each rate; loss set to {LOSS_PCT:g} % for the loss figure)")
    print(
        f"{'backend':<10}{'rtt':>5}{'rate':>6}{'bring-up':>10}{'÷model':>8}{'err idle':>10}{'err load':>10}"
        f"{'loss %':>8}{'router cpu':>12}{'per Gbit/s':>12}{'iperf3':>8}{'host wait':>11}"
    )
    for r in rows:
        print(
            f"{r['backend']:<10}{r['rtt_ms']:>5g}{r['rate_mbit']:>6g}{r['bring_up_s']:>9.1f}s"
            f"{r['ratio_of_model']:>8.3f}{r['rtt_error_idle_ms']:>+10.2f}{r['rtt_error_load_ms']:>+10.2f}"
            f"{r['loss_pct']:>8.2f}{r['router_cpu']:>12.0%}{r['router_cpu_per_gbit']:>12.2f}"
            f"{r['iperf_cpu']:>8.0%}{r['host_wait']:>11.0%}"
        )
    print(
        "(÷model: TCP goodput ÷ (rate × 1448/1514); err: median ping RTT − configured, idle and"
        " under a 90 % UDP load; router cpu: its processes' CPU during the TCP flow, of one core,"
        " and in cores per Gbit/s of goodput; iperf3: both ends' own CPU; host wait: the share of"
        " the row's time a runnable task waited for a CPU, /proc/pressure/cpu)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profiles", nargs="+", default=["india", "germany", "germany-lab"])
    parser.add_argument("--image", default="debian:trixie-slim")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument(
        "--backend", default="auto", help="auto, or a link backend by name (quicbed doctor lists them)"
    )
    parser.add_argument("--rates", nargs="+", type=float, help="the side-by-side table at these rates")
    parser.add_argument("--backends", nargs="+", default=["vm", "delayline"], help="with --rates")
    parser.add_argument(
        "--rates-profile", default="germany", help="with --rates: the path (germany-lab: 6 ms)"
    )
    parser.add_argument(
        "--jitter", action="store_true", help="only the jitter tables' IQR (normal, uniform) on india"
    )
    args = parser.parse_args()
    if args.jitter:
        bench_jitter(args.image, args.backend)
        return 0
    if args.rates:
        print_rates(
            [
                bench_rate(r, b, args.image, args.seconds, args.rates_profile)
                for r in args.rates
                for b in args.backends
            ]
        )
        return 0
    rows = [bench_profile(p, args.image, args.seconds, args.backend) for p in args.profiles]
    kernel = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    print(f"\nlink benchmark, kernel {kernel}, backend {args.backend}")
    print(
        f"{'profile':<12}{'backend':<10}{'rate':>6}{'rtt':>6}{'goodput':>9}{'÷rate':>7}"
        f"{'÷ideal':>8}{'retx':>6}{'rtt idle':>10}{'rtt load':>10}{'err load':>10}"
        f"{'p95 load':>10}{'cpu':>6}{'steal':>6}  calibration"
    )
    for r in rows:
        print(
            f"{r['profile']:<12}{r['backend']:<10}{r['rate_mbit']:>6g}{r['rtt_ms']:>6g}"
            f"{r['goodput_mbit']:>9.1f}"
            f"{r['ratio']:>7.3f}{r['ratio_of_ideal']:>8.3f}{r['retransmits']:>6}"
            f"{r['rtt_idle_ms']:>10.2f}{r['rtt_load_ms']:>10.2f}{r['rtt_error_load_ms']:>+10.2f}"
            f"{r['rtt_p95_load_ms']:>10.2f}{r['cpu_busy']:>6.0%}{r['cpu_steal']:>6.0%}"
            f"  {r['verdict']}"
        )
    print(
        f"(÷ideal: goodput ÷ (rate × {IDEAL:.3f}), the TCP payload share of a 1514-byte frame;"
        " cpu/steal: the host's CPU during the TCP flow; calibration: the goodput floor"
        " `quicbed calibrate` applies, 0.94 of the rate up to 100 Mbit/s, 0.90 above)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
