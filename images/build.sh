#!/usr/bin/env bash
# Build the testbed's images: images/build.sh [caddy|nginx|caddy-debian|tools|client|all]...
#
# Each image is skipped when its tag already carries the label quicbed.inputs=<hash>, where
# the hash covers the Dockerfile, every file it COPYs/ADDs from the context, and the pinned
# versions it declares as ARGs. A built image is also saved to
# $QUICBED_CACHE/images/<name>-<hash>.tar and loaded from there when the engine lost the tag,
# so the cache directory survives an engine reset (QUICBED_SAVE_IMAGES=0 skips the save).
#
# The build context is assembled from exactly those COPY/ADD sources (paths relative to the
# repository root), so nothing else of the checkout (.venv, results, .git) is sent to dockerd.
# COPY/ADD must use the plain form (no JSON array) for the sources to be found.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
cache=${QUICBED_CACHE:-/var/cache/quicbed}/images
# The legacy builder uses the local debian:*-slim images; BuildKit in Docker 20.10 may try
# a registry for FROM lines, and none is reachable here.
export DOCKER_BUILDKIT=0

declare -A versions=()
while IFS='=' read -r key value; do
  [[ -z "$key" || "$key" == \#* ]] && continue
  versions[$key]=$value
done <"$repo/versions.env"

# name -> image tag
tag_of() {
  case $1 in
    caddy) echo "quicbed/caddy:${versions[CADDY_VERSION]}" ;;
    nginx) echo "quicbed/nginx:${versions[NGINX_VERSION]}" ;;
    caddy-debian) echo "quicbed/caddy-debian:${versions[CADDY_DEBIAN_VERSION]:-2.6.2}" ;;
    client) echo "quicbed/client:dev" ;;
    tools) echo "quicbed/tools:dev" ;;
    *) echo "images: unknown image '$1' (caddy, nginx, caddy-debian, tools, client, all)" >&2; return 1 ;;
  esac
}

# Join continuation lines, then print the context sources of every COPY/ADD without --from.
copy_sources() {
  sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' "$1" | awk '
    toupper($1) == "COPY" || toupper($1) == "ADD" {
      from = 0; n = 0
      for (i = 2; i <= NF; i++) {
        if ($i ~ /^--from/) from = 1
        else if ($i ~ /^--/) continue
        else args[++n] = $i
      }
      if (!from) for (i = 1; i < n; i++) print args[i]
    }'
}

# Versions the Dockerfile declares as ARG and versions.env defines, as --build-arg pairs.
build_args() {
  local arg
  for arg in $(awk 'toupper($1) == "ARG" { split($2, a, "="); print a[1] }' "$1" | sort -u); do
    if [[ -n "${versions[$arg]+x}" ]]; then
      printf '%s\n' "--build-arg" "$arg=${versions[$arg]}"
    fi
  done
}

# Every file that goes into the context, relative to the repository root, sorted.
context_files() {
  local df=$1 src
  echo "${df#"$repo"/}"
  while read -r src; do
    # $src unquoted on purpose: COPY sources may be globs.
    # shellcheck disable=SC2086
    (cd "$repo" && find $src -type f ! -path '*/__pycache__/*' ! -name '*.pyc')
  done < <(copy_sources "$df")
}

# prebuilt/ binaries are left out: they are a function of the versions (build args) hashed here,
# so an image stays current even when the binary cache is gone.
inputs_hash() {
  local df=$1
  {
    (cd "$repo" && context_files "$df" | grep -v '/prebuilt/' | sort -u | xargs -d '\n' sha256sum)
    build_args "$df"
  } | sha256sum | cut -c1-16
}

# Caddy's binary, built by the host's Go when there is one (cached per version in
# $QUICBED_CACHE/bin), else left to the Dockerfile's own Go stage.
# QUICBED_CADDY_BUILD=container forces the in-image build.
prebuild_caddy() {
  local ver=${versions[CADDY_VERSION]} bindir gocache go tmp
  local dest="$here/caddy/prebuilt/caddy"
  bindir=$(dirname "$cache")/bin
  gocache=$(dirname "$cache")/go
  rm -f "$dest"
  [[ "${QUICBED_CADDY_BUILD:-host}" == container ]] && return 0
  if [[ ! -x "$bindir/caddy-$ver" ]]; then
    go=$(command -v go || true)
    [[ -z "$go" && -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go
    if [[ -z "$go" ]]; then
      echo "images: no Go on the host; Caddy $ver is built inside the image"
      return 0
    fi
    echo "images: building caddy $ver with the host's Go, toolchain ${versions[CADDY_GO_TOOLCHAIN]} (about 3 min)"
    mkdir -p "$bindir" "$gocache"
    tmp=$(mktemp -d "$bindir/.caddy-build.XXXXXX")
    env GOTOOLCHAIN="${versions[CADDY_GO_TOOLCHAIN]}" CGO_ENABLED=0 GOFLAGS=-trimpath \
      GOPATH="$gocache" GOMODCACHE="$gocache/mod" GOCACHE="$gocache/build" GOBIN="$tmp" \
      "$go" install "github.com/caddyserver/caddy/v2/cmd/caddy@$ver"
    mv "$tmp/caddy" "$bindir/caddy-$ver"
    rmdir "$tmp"
    # The compile cache (~1 GB) only speeds up rebuilding this version, which is cached as
    # a binary now; the module cache stays for the next version.
    rm -rf "$gocache/build"
  fi
  cp "$bindir/caddy-$ver" "$dest"
}

label_of() {
  docker image inspect -f '{{ index .Config.Labels "quicbed.inputs" }}' "$1" 2>/dev/null || true
}

build_one() {
  local name=$1 df="$here/$1/Dockerfile" tag hash tar start
  tag=$(tag_of "$name")
  if [[ ! -f "$df" ]]; then
    if [[ "$name" == client ]]; then
      echo "images: $df does not exist yet; skipping client"
      return 0
    fi
    echo "images: $df missing" >&2
    return 1
  fi
  hash=$(inputs_hash "$df")
  tar="$cache/$name-$hash.tar"
  if [[ "$(label_of "$tag")" == "$hash" ]]; then
    echo "images: $tag up to date ($hash)"
    return 0
  fi
  if [[ -f "$tar" ]]; then
    docker load -q -i "$tar" >/dev/null || rm -f "$tar"  # a cut-off save: rebuild below
    if [[ "$(label_of "$tag")" == "$hash" ]]; then
      echo "images: $tag loaded from $tar"
      return 0
    fi
  fi
  local suite
  for suite in ${versions[DEBIAN_BASE_SUITES]:-bookworm trixie}; do
    "$here/base.sh" "$suite"
  done
  if [[ "$name" == caddy ]]; then prebuild_caddy; fi
  echo "images: building $tag ($hash)"
  start=$SECONDS
  local -a args
  mapfile -t args < <(build_args "$df")
  # The context is a tar of exactly the files the Dockerfile uses, streamed to dockerd.
  # --force-rm: the legacy builder would otherwise keep a failed step's container.
  local log
  log=$(mktemp /tmp/quicbed-build-"$name".XXXXXX)
  if ! (cd "$repo" && context_files "$df" | sort -u | tar -c --no-recursion -T - -f -) \
    | docker build --force-rm "${args[@]}" --label "quicbed.inputs=$hash" \
        -f "${df#"$repo"/}" -t "$tag" - >"$log" 2>&1; then
    tail -40 "$log" >&2
    rm -f "$here/caddy/prebuilt/caddy"
    echo "images: building $tag failed (full log: $log)" >&2
    return 1
  fi
  rm -f "$log"
  if [[ "$name" == caddy ]]; then rm -f "$here/caddy/prebuilt/caddy"; fi
  mkdir -p "$cache"
  # Exactly <name>-<16 hex>.tar: "caddy-*" would also match caddy-debian's tar.
  rm -f "$cache/$name"-????????????????.tar
  if [[ "${QUICBED_SAVE_IMAGES:-1}" == 0 ]]; then
    echo "images: built $tag in $((SECONDS - start)) s (not saved: QUICBED_SAVE_IMAGES=0)"
    return 0
  fi
  docker save -o "$tar.tmp" "$tag" && mv "$tar.tmp" "$tar"
  echo "images: built $tag in $((SECONDS - start)) s; saved to $tar"
}

targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(all)
for target in "${targets[@]}"; do
  if [[ "$target" == all ]]; then
    for name in caddy nginx caddy-debian tools client; do
      if [[ -f "$here/$name/Dockerfile" ]]; then build_one "$name"; fi
    done
  else
    tag_of "$target" >/dev/null
    build_one "$target"
  fi
done
