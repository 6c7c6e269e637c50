"""A trial captured by hand as the capture contract lays it out (quicbed/rowschema.py
capture_dir): the tool run under tcpdump in the client container with --keylog, its pcap and
keys copied to trials/<id>/ of a run directory and its row appended to rows.jsonl. The path
tests of `quicbed explain` use it; so does making the unit fixtures (tests/fixtures/explain)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from capture_shell import captured

from quicbed import rowschema
from quicbed.clients.tools import tool_argv
from quicbed.topology.net import server_address

# label: (tool, options, protocol)
CLIENTS = {
    "tls1.2": ("tls_perf", {"tls": "1.2", "http": "2"}, "tls1.2"),
    "tls1.3": ("tls_perf", {"tls": "1.3", "http": "2"}, "tls1.3"),
    "quic-libcurl": ("quic_perf", {}, "quic"),
    "quic-ngtcp2": ("quic_perf", {"backend": "ngtcp2"}, "quic"),
}
STEM = "/tmp/explain"  # in the client container


def capture_trial(
    tb, hosts: dict, run_dir: Path, server: str, client: str, obj: str, calib_rtt_ms: float, trial: str
) -> dict:
    """Runs one connection of `client` to `server` fetching `obj`, captured; returns its row."""
    tool, options, protocol = CLIENTS[client]
    address = server_address(tb.servers.index(hosts[server]))
    argv = tool_argv(tool, obj, address, options=options, timeout_s=60, cpu=False)
    command = f"{shlex.join([*argv, '--keylog', f'{STEM}.keys'])} > {STEM}.json"
    proc = tb.client.exec(["sh", "-c", captured(command, "client-eth0", STEM) + f"; cat {STEM}.json"])
    tool_rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert tool_rows and tool_rows[0]["error"] == "", (proc.stderr[-500:], tool_rows)
    trial_id = f"c0/{server}/{client}/{obj.replace('/', '_')}/{trial}"
    cap = run_dir / rowschema.capture_dir(trial_id)
    cap.mkdir(parents=True, exist_ok=True)
    for src, name in ((f"{STEM}.pcap", "client.pcap"), (f"{STEM}.keys", "keys.log")):
        subprocess.run(["docker", "cp", f"{tb.client.container}:{src}", str(cap / name)], check=True)
    row = {
        **tool_rows[0],
        "run_id": run_dir.name,
        "trial_id": trial_id,
        "condition": "c0",
        "server": server,
        "client": client,
        "protocol": protocol,
        "object": obj,
        "calib_rtt_ms": calib_rtt_ms,
        "capture_files": [f"{rowschema.capture_dir(trial_id)}/{n}" for n in ("client.pcap", "keys.log")],
    }
    with (run_dir / rowschema.ROWS_FILE).open("a") as out:
        out.write(json.dumps(row) + "\n")
    return row
