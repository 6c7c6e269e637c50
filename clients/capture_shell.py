"""Shell lines that capture a tool's traffic inside a client container (its tcpdump) and check
the tool's row against the capture (wirecheck.py, in the client and browser images): the path
tests (tests/capture_shell.py judges what they print) and bench/browser_bench.py run them."""

from __future__ import annotations


def captured(command: str, iface: str, stem: str) -> str:
    """Run `command` while tcpdump writes port 443 on `iface` to STEM.pcap. tcpdump can take
    most of a second to set up its ring buffer: the command waits for "listening on"."""
    return (
        f"rm -f {stem}.pcap {stem}.keys {stem}.err && "
        f"(tcpdump --immediate-mode -B 131072 -Z root -i {iface} -w {stem}.pcap 'port 443' "
        f"2>{stem}.err & echo $! > {stem}.pid) && i=0 && "
        f"while ! grep -q listening {stem}.err && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); "
        f"done; {command}; sleep 0.3; kill $(cat {stem}.pid); sleep 0.3"
    )


def wirecheck(tool: str, iface: str, stem: str, *, false_start: bool = False) -> str:
    """The tool's row checked against a capture of its connection, decrypted by its key log
    (wirecheck.py --json prints the verdict as the last line). false_start: the tool is a
    browser that ends a TLS 1.2 handshake when its own Finished leaves (wirecheck.py)."""
    return (
        captured(f"{tool} --keylog {stem}.keys > {stem}.json", iface, stem)
        + f"; wirecheck.py --pcap {stem}.pcap --row {stem}.json --keylog {stem}.keys --json"
        + (" --false-start" if false_start else "")
    )
