#!/bin/bash
# init (PID 1) of the User-Mode Linux router, used where the host kernel has no sch_netem.
# Its root is the host's / through hostfs (read-only), so it runs the host's ip and tc.
# The kernel passes QUICBED_CTL (a host directory) in the environment: net.conf is read from
# it, "ready" and command results are written back to it. Commands arrive as files: the host
# writes cmd, this loop runs it and answers with out and rc.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
fail() { echo "QUICBED-FAILED: $*"; echo o > /proc/sysrq-trigger; sleep 5; }
mount -t proc proc /proc || fail "mount proc"
mount -t sysfs sys /sys
mount -t tmpfs tmpfs /tmp
mount -t hostfs -o "$QUICBED_CTL" hostfs /mnt || fail "mount control dir $QUICBED_CTL"
C=/mnt
mods=/usr/lib/uml/modules/$(uname -r)/kernel/net/sched
for m in sch_htb sch_tbf sch_netem; do insmod "$mods/$m.ko" || fail "insmod $m"; done
. "$C/net.conf" || fail "read net.conf"
ip link set lo up
ip link set vec0 up && ip addr add "$VEC0_ADDR" dev vec0 || fail "vec0"
ip link set vec1 up && ip addr add "$VEC1_ADDR" dev vec1 || fail "vec1"
for dev in vec0 vec1; do ethtool -K "$dev" gso off tso off gro off >/dev/null 2>&1; done
echo 1 > /proc/sys/net/ipv4/ip_forward
echo 0 > /proc/sys/net/ipv4/conf/all/send_redirects
echo 0 > /proc/sys/net/ipv4/conf/vec0/send_redirects
echo 0 > /proc/sys/net/ipv4/conf/vec1/send_redirects
uname -r > "$C/ready"
echo QUICBED-READY
# Wait with bash's read timeout on a fifo that never speaks: polling without a fork every
# tick, which on UML is slow enough to delay netem's timers.
mkfifo /tmp/tick && exec 3<>/tmp/tick
while :; do
  if [ -f "$C/cmd" ]; then
    sh "$C/cmd" > "$C/out.tmp" 2>&1
    echo $? > "$C/rc.tmp"
    rm -f "$C/cmd"
    mv "$C/out.tmp" "$C/out"
    mv "$C/rc.tmp" "$C/rc"
  fi
  read -r -t 0.05 -u 3 _
done
