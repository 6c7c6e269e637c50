#!/bin/bash
# init (PID 1) of the netem guest (topology/guest.py): a User-Mode Linux kernel that has the
# sch_netem this host lacks, in which the whole namespace-only topology runs with the `netem`
# backend, as on a laptop or cloud VM whose kernel has it. Root is the host's / through hostfs
# (read-only), so the guest runs the host's python, mnexec, ip, tc, iperf3 and ping.
# The kernel passes QUICBED_CTL (a host directory: job.json in; guest.log, calibration.json
# and rc out) and QUICBED_PYTHON (the interpreter with quicbed importable) in the environment.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
fail() { echo "QUICBED-FAILED: $*"; echo o > /proc/sysrq-trigger; sleep 5; }
mount -t proc proc /proc || fail "mount proc"
mount -t sysfs sys /sys
# Mininet's shells need ptys; ip netns wants a writable /run; the rest of / is read-only.
# The kernel mounts devtmpfs on /dev itself (CONFIG_DEVTMPFS_MOUNT); mount it where it did not.
[[ $(</proc/mounts) == *" /dev devtmpfs "* ]] || mount -t devtmpfs dev /dev || fail "mount devtmpfs"
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts || fail "mount devpts"
mount -t tmpfs tmpfs /tmp
# The checkout and the venv (QUICBED_KEEP, colon-separated) are the host's again where that
# tmpfs hid them: a clone in /tmp, as CI makes one.
IFS=: read -r -a keep <<< "$QUICBED_KEEP"
for dir in "${keep[@]}"; do
  if [[ $dir == /tmp/* ]]; then
    mkdir -p "$dir" && mount -r -t hostfs -o "$dir" hostfs "$dir" || fail "mount $dir"
  fi
done
mount -t tmpfs tmpfs /run
mount -t hostfs -o "$QUICBED_CTL" hostfs /mnt || fail "mount control dir $QUICBED_CTL"
C=/mnt
# veth, bridge and the qdiscs (netem; the AQMs a link's `aqm` names) are modules in Debian's UML
# kernel; insmod in dependency order
# (modprobe would look in /lib/modules, where the host keeps its own kernel's).
mods=/usr/lib/uml/modules/$(uname -r)/kernel
for m in lib/crc-ccitt net/ipv6/ipv6 net/llc/llc net/802/stp net/bridge/bridge \
         drivers/net/veth net/sched/sch_htb net/sched/sch_tbf net/sched/sch_netem \
         net/sched/sch_fq_codel net/sched/sch_codel net/sched/sch_cake net/sched/sch_pie \
         net/sched/sch_fq; do
  insmod "$mods/$m.ko" || fail "insmod $m"
done
ip link set lo up
uname -r > "$C/kernel"
echo QUICBED-READY
export HOME=/tmp PYTHONDONTWRITEBYTECODE=1 QUICBED_STATE=/tmp/quicbed QUICBED_CACHE=/tmp/cache
"$QUICBED_PYTHON" -m quicbed.topology.guest inside "$C" > "$C/guest.log" 2>&1
echo $? > "$C/rc"
sync
echo o > /proc/sysrq-trigger
sleep 5
