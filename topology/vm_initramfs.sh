#!/bin/busybox sh
# shellcheck shell=dash
# /init of the QEMU router's initramfs (topology/backends/vmimage.py builds it): load the
# modules the router needs (virtio, 9p, the qdiscs; in load order), mount the host's / read-only
# over virtio-9p as the root, the control directory (when QEMU shares one) on /mnt, and hand
# over to QUICBED_INIT (kernel command line), which then runs the host's bash, ip and tc.
B=/bin/busybox
fail() { echo "QUICBED-PROBE-FAILED: $*"; $B poweroff -f; }
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
for m in /modules/*.ko; do $B insmod "$m" || fail "insmod ${m##*/}"; done
$B mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose hostroot /newroot \
  || fail "mount the host's root over 9p"
if $B grep -qw ctl /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag 2>/dev/null; then
  # No cache: the host writes commands into it while the guest polls.
  $B mount -t 9p -o trans=virtio,version=9p2000.L ctl /newroot/mnt || fail "mount the control directory"
fi
$B mount --move /dev /newroot/dev || fail "move /dev"
$B umount /proc /sys
exec $B switch_root /newroot "$QUICBED_INIT"
