# Sourced by the routers' inits (uml_router.sh, vm_router.sh) once their kernel has its
# modules and the control directory is mounted on $C: bring the two LAN interfaces
# ($DEV0, $DEV1) up with the addresses in $C/net.conf, forward, say ready, then serve commands.
# The host writes a script to $C/cmd; this loop runs it and answers with out and rc.
# shellcheck shell=bash
. "$C/net.conf" || fail "read net.conf"
ip link set lo up
ip link set "$DEV0" up && ip addr add "$VEC0_ADDR" dev "$DEV0" || fail "$DEV0"
ip link set "$DEV1" up && ip addr add "$VEC1_ADDR" dev "$DEV1" || fail "$DEV1"
for dev in "$DEV0" "$DEV1"; do ethtool -K "$dev" gso off tso off gro off >/dev/null 2>&1; done
echo 1 > /proc/sys/net/ipv4/ip_forward
for conf in all "$DEV0" "$DEV1"; do echo 0 > "/proc/sys/net/ipv4/conf/$conf/send_redirects"; done
uname -r > "$C/ready"
echo QUICBED-READY
# Wait with bash's read timeout on a fifo that never speaks: polling without a fork every
# tick, which on UML is slow enough to delay netem's timers.
mkfifo /run/tick && exec 3<>/run/tick
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
