#!/bin/bash
# init of the netem guest under QEMU (topology/guest.py), run after the initramfs
# (vm_initramfs.sh) has loaded Debian's modules (netem, htb, veth, bridge, the AQMs), mounted
# the host's / read-only as the root and the control directory on /mnt. The whole
# namespace-only topology runs inside with the `netem` backend, as on a laptop or cloud VM
# whose kernel has it; the guest runs the host's python, mnexec, ip, tc, iperf3 and ping.
# The kernel passes QUICBED_PYTHON (the interpreter with quicbed importable) and QUICBED_KEEP
# (the checkout and the venv, colon-separated) in the environment.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
fail() { echo "QUICBED-FAILED: $*"; echo o > /proc/sysrq-trigger; sleep 5; }
mount -t proc proc /proc || fail "mount proc"
mount -t sysfs sys /sys
# Mininet's shells need ptys; ip netns wants a writable /run; the rest of / is read-only.
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts || fail "mount devpts"
mount -t tmpfs tmpfs /run
# The checkout and the venv are the host's again where the tmpfs on /tmp hides them (a CI
# clone in /tmp): bound aside before, and back after.
IFS=: read -r -a keep <<< "$QUICBED_KEEP"
for i in "${!keep[@]}"; do
  if [[ ${keep[$i]} == /tmp/* ]]; then
    mkdir -p "/run/keep$i" && mount --bind "${keep[$i]}" "/run/keep$i" || fail "bind ${keep[$i]}"
  fi
done
mount -t tmpfs tmpfs /tmp
for i in "${!keep[@]}"; do
  if [[ ${keep[$i]} == /tmp/* ]]; then
    mkdir -p "${keep[$i]}" && mount --bind "/run/keep$i" "${keep[$i]}" || fail "mount ${keep[$i]}"
  fi
done
C=/mnt
[ -f "$C/job.json" ] || fail "no job in the control directory"
ip link set lo up
uname -r > "$C/kernel"
echo QUICBED-READY
export HOME=/tmp PYTHONDONTWRITEBYTECODE=1 QUICBED_STATE=/tmp/quicbed QUICBED_CACHE=/tmp/cache
"$QUICBED_PYTHON" -m quicbed.topology.guest inside "$C" > "$C/guest.log" 2>&1
echo $? > "$C/rc"
sync
echo o > /proc/sysrq-trigger
sleep 5
