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
# Its scratch space is /run: a tmpfs on /tmp would hide a checkout there (a CI clone), and
# router_serve.sh beside this script with it.
mount -t tmpfs tmpfs /run
mount -t hostfs -o "$QUICBED_CTL" hostfs /mnt || fail "mount control dir $QUICBED_CTL"
mods=/usr/lib/uml/modules/$(uname -r)/kernel/net/sched
for m in sch_htb sch_tbf sch_netem; do insmod "$mods/$m.ko" || fail "insmod $m"; done
# shellcheck disable=SC2034 # router_serve.sh's
C=/mnt DEV0=vec0 DEV1=vec1
# shellcheck source=topology/router_serve.sh
. "$(dirname "$0")/router_serve.sh"
