#!/usr/bin/env bash
# Make debian:<suite>-slim exist locally. Pulling is tried first (a user's laptop can);
# where no registry answers, debootstrap --variant=minbase builds it and docker import
# tags it, so the Dockerfiles keep ordinary FROM lines.
set -euo pipefail
suite=$1
tag="debian:${suite}-slim"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
if docker image inspect "$tag" >/dev/null 2>&1; then
  exit 0
fi
if timeout 20 docker pull -q "$tag" >/dev/null 2>&1; then
  exit 0
fi
root=$(mktemp -d /var/tmp/quicbed-debootstrap.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "images: no registry for $tag; building it with debootstrap (about a minute)"
debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.log" 2>&1 || {
  tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'CMD ["bash"]' - "$tag" >/dev/null
echo "images: $tag imported"
