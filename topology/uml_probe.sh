#!/bin/sh
# init (PID 1) of the UML boot probe (topology/backends/proof.py): the router kernel boots,
# loads the qdisc modules the router loads, takes a netem qdisc, answers and powers off.
# A kernel that panics at boot (ptrace on some CPUs) never gets here.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
fail() { echo "QUICBED-PROBE-FAILED: $*"; echo o > /proc/sysrq-trigger; sleep 5; }
mount -t proc proc /proc || fail "mount proc"
mods=/usr/lib/uml/modules/$(uname -r)/kernel/net/sched
for m in sch_htb sch_tbf sch_netem; do insmod "$mods/$m.ko" || fail "insmod $m"; done
ip link set lo up || fail "ip link"
tc qdisc add dev lo root netem delay 1ms || fail "tc qdisc add netem"
echo "QUICBED-PROBE-OK $(uname -r)"
echo o > /proc/sysrq-trigger
sleep 5
