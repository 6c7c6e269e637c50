#!/bin/bash
# init of the QEMU router (topology/backends/vm.py), run after its initramfs (vm_initramfs.sh)
# has loaded the qdisc modules, mounted the host's / read-only as the root and the control
# directory on /mnt. Runs the host's ip and tc on Debian's kernel: eth0 faces the clients'
# LAN, eth1 the servers' (the order of QEMU's NICs).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
fail() { echo "QUICBED-FAILED: $*"; echo o > /proc/sysrq-trigger; sleep 5; }
mount -t proc proc /proc || fail "mount proc"
mount -t sysfs sys /sys
# Its scratch space is /run: a tmpfs on /tmp would hide a checkout there (a CI clone), and
# router_serve.sh beside this script with it.
mount -t tmpfs tmpfs /run
[ -f /mnt/net.conf ] || fail "no control directory on /mnt"
# shellcheck disable=SC2034 # router_serve.sh's
C=/mnt DEV0=eth0 DEV1=eth1
# shellcheck source=topology/router_serve.sh
. "$(dirname "$0")/router_serve.sh"
