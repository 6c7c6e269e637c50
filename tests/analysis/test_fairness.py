"""Per-flow accounting from a pcap, and Jain's index (analysis/fairness.py), on captures
written here byte by byte; the classification of a trial's packets (experiments/cross.py)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import figure_data
import numpy as np
import pytest

from quicbed.analysis import fairness
from quicbed.experiments import cross

CLIENT, SERVER = "10.77.1.10", "10.77.2.10"


def _ipv4(src: str, dst: str, proto: int, sport: int, dport: int, total: int) -> bytes:
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        total,
        0,
        0,
        64,
        proto,
        0,
        bytes(map(int, src.split("."))),
        bytes(map(int, dst.split("."))),
    )
    return header + struct.pack("!HH", sport, dport)  # a snaplen-cut packet: headers only


def write_pcap(path: Path, packets: list[tuple[float, bytes]], linktype: int = 1, nano: bool = False) -> None:
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack("<IHHiIII", magic, 2, 4, 0, 0, 128, linktype)]
    for ts, ip in packets:
        if linktype == fairness.LINKTYPE_ETHERNET:
            frame = b"\x02" * 12 + b"\x08\x00" + ip
        else:
            frame = b"\x00" * 14 + b"\x08\x00" + ip
        frac = round((ts % 1) * (1e9 if nano else 1e6))
        out.append(struct.pack("<IIII", int(ts), frac, len(frame), len(frame) + 1000) + frame)
    path.write_bytes(b"".join(out))


def test_read_pcap_keeps_ip_length_and_ports(tmp_path: Path) -> None:
    arp = b"\x00" * 28
    write_pcap(
        tmp_path / "a.pcap",
        [
            (100.25, _ipv4(SERVER, CLIENT, fairness.UDP, 443, 20001, 1252)),
            (100.5, arp),  # not IPv4 after the frame header: skipped
        ],
    )
    (packet,) = list(fairness.read_pcap(tmp_path / "a.pcap"))
    assert packet == fairness.Packet(100.25, SERVER, CLIENT, fairness.UDP, 443, 20001, 1252)


@pytest.mark.parametrize("linktype, nano", [(fairness.LINKTYPE_LINUX_SLL, False), (1, True)])
def test_read_pcap_cooked_frames_and_nanoseconds(tmp_path: Path, linktype: int, nano: bool) -> None:
    packet = _ipv4(SERVER, CLIENT, fairness.TCP, 5301, 40000, 1500)
    write_pcap(tmp_path / "b.pcap", [(7.125, packet)], linktype, nano)
    (packet,) = list(fairness.read_pcap(tmp_path / "b.pcap"))
    assert packet.ts == pytest.approx(7.125) and packet.sport == 5301 and packet.length == 1500


def test_read_pcap_refuses_other_files(tmp_path: Path) -> None:
    (tmp_path / "c.pcap").write_bytes(b"not a capture at all, but long enough")
    with pytest.raises(fairness.PcapError, match="not a pcap file"):
        list(fairness.read_pcap(tmp_path / "c.pcap"))


def test_window_rates_count_only_the_window() -> None:
    flows = {"a": fairness.FlowSeries([0.0, 0.5, 1.0, 2.0], [1000, 1000, 1000, 1000])}
    # [0.5, 1.0]: two packets, 16 kbit over 0.5 s
    assert fairness.window_rates(flows, 0.5, 1.0) == {"a": pytest.approx(0.032)}
    assert flows["a"].mbit() == pytest.approx(4000 * 8 / 2.0 / 1e6)
    with pytest.raises(ValueError):
        fairness.window_rates(flows, 1.0, 1.0)


def test_jain_index() -> None:
    assert fairness.jain_index([5.0, 5.0]) == pytest.approx(1.0)
    assert fairness.jain_index([10.0, 0.0]) == pytest.approx(0.5)
    assert fairness.jain_index([3.0, 1.0]) == pytest.approx(16 / 20)
    assert fairness.jain_index([]) is None and fairness.jain_index([0.0, 0.0]) is None


def _traffic(flows: tuple[cross.CrossFlow, ...]) -> cross.CrossTraffic:
    ends = cross.Endpoints(
        client_popen=list,
        server_popen=list,
        server_pid=0,
        server_address=SERVER,
        client_address=CLIENT,
        client_pid=0,
        client_intf="eth0",
        sidecar="side",
        url="https://server.quicbed/cloud/",
        resolve="server.quicbed:443:" + SERVER,
        cacert="/ca.pem",
    )
    return cross.CrossTraffic(flows, ends, "200MB")


def test_classify_tells_the_trial_from_each_cross_flow() -> None:
    flows = (
        cross.CrossFlow("x0", "bulk", "tcp", "down", 0, 10, "cubic"),
        cross.CrossFlow("x1", "bulk", "quic", "down", 0, 10),
        cross.CrossFlow("x2", "bulk", "tcp", "up", 0, 10, "bbr"),
    )
    traffic = _traffic(flows)

    def name(src: str, dst: str, proto: int, sport: int, dport: int) -> str | None:
        return traffic.classify(fairness.Packet(0, src, dst, proto, sport, dport, 1500))

    assert name(SERVER, CLIENT, fairness.TCP, cross.IPERF_PORT, 45000) == "x0"
    assert name(SERVER, CLIENT, fairness.UDP, 443, cross.SIDECAR_PORTS + cross.PORT_SPAN) == "x1"
    assert name(SERVER, CLIENT, fairness.UDP, 443, cross.SIDECAR_PORTS) == "trial"  # x0's range is TCP's
    assert name(CLIENT, SERVER, fairness.TCP, 45001, cross.IPERF_PORT + 2) == "x2"
    assert name(SERVER, CLIENT, fairness.TCP, 443, 45002) == "trial"
    assert name(SERVER, CLIENT, fairness.TCP, cross.IPERF_PORT + 2, 45001) is None  # x2's acks
    assert name(CLIENT, SERVER, fairness.UDP, 45003, 443) is None  # the trial's own acks


def test_account_shares_over_the_trials_window(tmp_path: Path) -> None:
    """A trial at 6 Mbit/s beside a TCP flow at 2 and a QUIC flow at 2, for 1 s: Jain's
    index over the three down flows, the trial's share 0.6; an up flow is listed, not shared."""
    flows = (
        cross.CrossFlow("x0", "bulk", "tcp", "down", 0, 1, "cubic"),
        cross.CrossFlow("x1", "bulk", "quic", "down", 0, 1),
        cross.CrossFlow("x2", "bulk", "tcp", "up", 0, 1, "cubic"),
    )
    traffic = _traffic(flows)
    traffic.t0 = 1000.0
    packets = []
    for k in range(101):  # every 10 ms over [1000, 1001]
        t = 1000.0 + k / 100
        packets.append((t, _ipv4(SERVER, CLIENT, fairness.TCP, 443, 45000, 7500)))
        packets.append((t, _ipv4(SERVER, CLIENT, fairness.TCP, cross.IPERF_PORT, 45001, 2500)))
        packets.append(
            (t, _ipv4(SERVER, CLIENT, fairness.UDP, 443, cross.SIDECAR_PORTS + cross.PORT_SPAN, 2500))
        )
        packets.append((t, _ipv4(CLIENT, SERVER, fairness.TCP, 45002, cross.IPERF_PORT + 2, 5000)))
    write_pcap(tmp_path / "t.pcap", packets)
    traffic.pcap = tmp_path / "t.pcap"
    row = traffic.account()
    assert row["trial_share"] == pytest.approx(0.6)
    assert row["jain_index"] == pytest.approx((6 + 2 + 2) ** 2 / (3 * (36 + 4 + 4)), abs=1e-4)
    assert row["trial_mbit"] == pytest.approx(6.06, abs=0.01)  # 101 packets in the 1 s window
    listed = {f["flow"]: f for f in json.loads(row["cross_flows"])}
    assert listed["x2"]["mbit_in_trial"] == pytest.approx(4.04, abs=0.01)
    assert listed["x0"]["started_s"] == 0.0 and listed["x0"]["ended_s"] == 1.0
    assert (tmp_path / "t.pcap").exists()  # the trial's own capture is kept


def test_fairness_table_has_shares_with_cis_per_protocol() -> None:
    import pandas as pd

    from quicbed.analysis.tables import fairness_table

    flow = {"flow": "x0", "protocol": "tcp", "cc": "cubic", "sender_cc": "cubic", "direction": "down"}
    flows = json.dumps([flow])
    rows = pd.DataFrame(
        [
            {
                "profile": "p",
                "server": "caddy",
                "protocol": proto,
                "trial_share": share,
                "jain_index": 0.9,
                "trial_mbit": 5.0,
                "cross_mbit": 5.0,
                "cross_flows": flows,
            }  # fmt: skip
            for proto, shares in (("quic", (0.6, 0.62, 0.64)), ("tls1.3", (0.5, 0.5, 0.5)))
            for share in shares
        ]
    )
    table = fairness_table(rows)
    assert list(table["protocol"]) == ["QUIC", "TLS 1.3"]
    assert table.iloc[0]["trial's share"] == "0.62 [0.60, 0.64]"
    assert table.iloc[0]["against"] == "x0 tcp cubic down" and table.iloc[0]["n"] == "3"
    assert fairness_table(rows.drop(columns=["trial_share"])).empty


def test_throughput_and_cpu_against_a_swept_rate(tmp_path: Path) -> None:
    """Seed 003's figures come from a rate sweep of one profile; two profiles at their own
    rates are not one."""
    import pandas as pd

    from quicbed.analysis.figures import cloud_against_rate

    def rows(profile_of_rate: dict[float, str]) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {"workload": "cloud", "profile": profile, "server": "caddy", "protocol": proto}
                | {"rate_down_mbit": rate, "throughput_mbps": rate * 0.9, "transfer_cpu_pct": rate / 10}
                for rate, profile in profile_of_rate.items()
                for proto in ("quic", "tls1.3")
                for _ in range(3)
            ]
        )

    rates = (50.0, 100.0, 500.0)
    with figure_data.captured() as drawn:
        (figure,) = cloud_against_rate(rows(dict.fromkeys(rates, "fast")), tmp_path, "cloud")
    assert figure.png == tmp_path / "cloud_against_rate.png" and figure.png.is_file()
    # What it plots: per metric one line per protocol, a point per rate at the rows' median
    # (three equal rows: the value itself), so each line spans the input from 50 to 500.
    throughput, cpu = figure_data.panels(drawn["cloud_against_rate"])
    for ax, of_rate in ((throughput, lambda r: r * 0.9), (cpu, lambda r: r / 10)):
        lines = figure_data.series(ax)
        assert sorted(lines) == ["QUIC (n=3)", "TLS 1.3 (n=3)"], lines
        for points in lines.values():
            np.testing.assert_allclose(points, [[r, of_rate(r)] for r in rates])
    assert cloud_against_rate(rows({20.0: "india", 500.0: "germany"}), tmp_path / "two", "cloud") == []


def test_a_web_flows_fetches_are_counted_from_curls_lines() -> None:
    lines = [
        json.dumps({"exitcode": 0, "response_code": 200, "time_total": 0.1}),
        json.dumps({"exitcode": 0, "response_code": 200, "time_total": 0.3}),
        json.dumps({"exitcode": 0, "response_code": 404, "time_total": 0.1}),
        json.dumps({"exitcode": 28, "response_code": 0, "time_total": 20}),
        "",
    ]
    assert cross._fetches("\n".join(lines)) == {
        "fetches": 4,
        "fetches_failed": 2,
        "fetch_ms_median": 200.0,
        "fetch_ms_max": 300.0,
    }
    assert cross._fetches("") == {
        "fetches": 0,
        "fetches_failed": 0,
        "fetch_ms_median": None,
        "fetch_ms_max": None,
    }


def test_timeline_bins_each_flow_and_the_figure_draws_it(tmp_path: Path) -> None:
    import pandas as pd

    from quicbed.analysis.figures import cross_timelines

    series = {
        "x0": fairness.FlowSeries([10.1, 10.2, 10.6], [1000, 1000, 1000]),
        "trial": fairness.FlowSeries([9.9, 10.0, 10.3], [500, 500, 500]),  # 9.9: before t0
    }
    line = cross.timeline(series, t0=10.0, bin_s=0.25)
    assert list(line["mbit"]) == ["trial", "x0"]  # the trial first
    assert line["t_s"] == [0.0, 0.25, 0.5]
    assert line["mbit"]["x0"] == [0.064, 0.0, 0.032]  # 2000 B in the first 250 ms
    assert line["mbit"]["trial"] == [0.016, 0.016, 0.0]
    (tmp_path / "t.json").write_text(json.dumps(line))
    rows = pd.DataFrame(
        [
            {
                "profile": "p",
                "server": "caddy",
                "protocol": "quic",
                "trial_share": 0.4,
                "cross_trace_path": str(tmp_path / "t.json"),
                "rate_down_mbit": 10.0,
            }
        ]  # fmt: skip
    )
    with figure_data.captured() as drawn:
        (figure,) = cross_timelines(rows, tmp_path / "figures")
    assert figure.png.is_file() and figure.section == "fairness"
    # Every flow of the trace is a line over its bins, at the binned rates (the link's rate
    # is an unlabelled guide, not a series).
    (ax,) = figure_data.panels(drawn["cross_timelines"])
    lines = figure_data.series(ax)
    assert list(lines) == ["trial (QUIC)", "x0"], lines
    np.testing.assert_allclose(lines["trial (QUIC)"], np.c_[line["t_s"], line["mbit"]["trial"]])
    np.testing.assert_allclose(lines["x0"], np.c_[line["t_s"], line["mbit"]["x0"]])
    assert cross_timelines(rows.assign(cross_trace_path=str(tmp_path / "missing.json")), tmp_path) == []
