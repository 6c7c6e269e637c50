#!/bin/sh
# init of the QEMU router's boot probe (topology/backends/proof.py), run after its initramfs:
# the kernel booted, its modules loaded and the host's / is mounted; take a netem qdisc,
# answer with the kernel and its uptime (the guest's boot time), power off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
fail() { echo "QUICBED-PROBE-FAILED: $*"; echo o > /proc/sysrq-trigger; sleep 5; }
mount -t proc proc /proc || fail "mount proc"
ip link set lo up || fail "ip link"
tc qdisc add dev lo root netem delay 1ms || fail "tc qdisc add netem"
echo "QUICBED-PROBE-OK $(uname -r) $(cut -d' ' -f1 /proc/uptime)"
echo o > /proc/sysrq-trigger
sleep 5
