#!/usr/bin/env bash
# Build the testbed's images: images/build.sh [SERVER|CLIENT|tools|client|browser|all|on-demand|actionlint]...
# (actionlint: not an image; the workflow linter make test uses, built like Caddy's binary)
#
# A server's or client's image is named by its descriptor, servers/<name>/server.yaml,
# clients/<name>/client.yaml or a stack's stacks/<name>/{client,server}.yaml (or one in a
# directory of $QUICBED_SERVER_DIRS or $QUICBED_CLIENT_DIRS): `image:` plus the version of
# versions.env's `version_key:` (or a literal `version:`). Its `dockerfile:` is built here; a descriptor without one names a
# prebuilt image (a user's own), which is only checked to exist. The descriptors are read by
# the code that checks them (python -m quicbed.servers list), never parsed here.
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

# What to build comes from the descriptors, as the code reads them: `python -m quicbed.servers
# list` and `python -m quicbed.clients list` print `name<TAB>image<TAB>dockerfile<TAB>on-demand`
# (`-`: a prebuilt image; an image `all` builds), the shipped ones and those of
# $QUICBED_SERVER_DIRS / $QUICBED_CLIENT_DIRS. An on-demand image (a stack compiled from source,
# minutes on 2 cores) is left out of `all`: the run or test that needs it builds it by name.
# A server is built under its name; a client image under its Dockerfile's directory
# (images/client -> client, images/browser -> browser), which every tool of that image shares; a tool's name builds it too.
py="$repo/.venv/bin/python"
declare -A tag_by=() dockerfile_by=() on_demand_by=()
server_list=() client_list=()

load_descriptors() {
  local kind name image df demand target out
  if [[ ! -x "$py" ]]; then
    echo "images: no $py: make venv first (the descriptors are read by python -m quicbed.servers list)" >&2
    exit 2
  fi
  for kind in servers clients; do
    out=$("$py" -m "quicbed.$kind" list) || exit 2  # it said why, in one line
    while IFS=$'\t' read -r name image df demand; do
      [[ -z "$name" ]] && continue
      [[ "$df" == - ]] && df=""
      if [[ "$kind" == servers ]]; then
        tag_by[$name]=$image
        dockerfile_by[$name]=$df
        on_demand_by[$name]=$demand
        server_list+=("$name")
        continue
      fi
      if [[ " ${server_list[*]} " != *" $name "* ]]; then
        tag_by[$name]=$image
        dockerfile_by[$name]=$df
        on_demand_by[$name]=$demand
      fi
      target=$name
      [[ -n "$df" ]] && target=$(basename "$(dirname "$df")")
      # A stack with a client and a server of one name (stacks/aioquic): the client image is keyed
      # client:<name>, and the name builds both (the targets loop at the end).
      if [[ " ${server_list[*]} " == *" $target "* ]]; then target=client:$target; fi
      if [[ -z "${tag_by[$target]+x}" || "$target" == "$name" ]]; then
        tag_by[$target]=$image
        dockerfile_by[$target]=$df
        on_demand_by[$target]=$demand
        client_list+=("$target")
      fi
    done <<<"$out"
  done
}
load_descriptors

# Every described server's name: the shipped ones, then those of $QUICBED_SERVER_DIRS.
server_names() {
  printf '%s\n' "${server_list[@]}"
}

# name -> image tag
tag_of() {
  if [[ "$1" == tools ]]; then echo "quicbed/tools:dev"; return 0; fi
  if [[ -z "${tag_by[$1]+x}" ]]; then
    echo "images: unknown image '$1' ($(server_names | paste -sd, - | sed 's/,/, /g'), tools, client, browser, all, on-demand)" >&2
    return 1
  fi
  echo "${tag_by[$1]}"
}

# name -> its Dockerfile (absolute); nothing for a descriptor that names none (prebuilt).
dockerfile_of() {
  if [[ "$1" == tools ]]; then echo "$here/tools/Dockerfile"; return 0; fi
  if [[ -n "${dockerfile_by[$1]:-}" ]]; then echo "$repo/${dockerfile_by[$1]}"; fi
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
  while read -r arg; do
    if [[ -n "${versions[$arg]+x}" ]]; then
      printf '%s\n' "--build-arg" "$arg=${versions[$arg]}"
    fi
  done < <(awk 'toupper($1) == "ARG" { split($2, a, "="); print a[1] }' "$1" | sort -u)
}

# Every file that goes into the context, relative to the repository root, sorted.
context_files() {
  local df=$1 src
  echo "${df#"$repo"/}"
  while read -r src; do
    # $src unquoted on purpose: COPY sources may be globs.
    # A prebuilt/ source (vendored crates) may not exist yet: it is filled later and not hashed.
    # shellcheck disable=SC2086
    (cd "$repo" && find $src -type f ! -path '*/__pycache__/*' ! -name '*.pyc' 2>/dev/null)
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

# The host's Go (Debian's, or one under /usr/local/go), or nothing.
host_go() {
  if ! command -v go && [[ -x /usr/local/go/bin/go ]]; then
    echo /usr/local/go/bin/go
  fi
  return 0
}

# run_go GOCACHE COMMAND...: COMMAND (the host's Go) at the pinned toolchain, static and
# trimmed, with its module and build caches under GOCACHE, which one build at a time may write
# (both lanes of `all` build Go).
run_go() {
  local gocache=$1
  shift
  flock "$gocache/.lock" env GOTOOLCHAIN="${versions[CADDY_GO_TOOLCHAIN]}" CGO_ENABLED=0 \
    GOFLAGS="-trimpath -buildvcs=false" GOPATH="$gocache" GOMODCACHE="$gocache/mod" GOCACHE="$gocache/build" "$@"
}

# A Go program built once per version into $QUICBED_CACHE/bin/<name>-<version>:
# go_build NAME PACKAGE VERSION. With the host's Go (and GOTOOLCHAIN, the pinned Go release
# from the Go proxy); with none, in a throwaway trixie container (Debian's Go bootstraps the
# same GOTOOLCHAIN) unless NAME has an in-image build of its own (caddy). Prints nothing on
# success; returns 1 when there is no way to build it here.
go_build() {
  local name=$1 package=$2 ver=$3 bindir gocache go tmp
  bindir=$(dirname "$cache")/bin
  gocache=$(dirname "$cache")/go
  [[ -x "$bindir/$name-$ver" ]] && return 0
  go=$(host_go)
  mkdir -p "$bindir" "$gocache"
  tmp=$(mktemp -d "$bindir/.$name-build.XXXXXX")
  if [[ -n "$go" ]]; then
    echo "images: building $name $ver with the host's Go, toolchain ${versions[CADDY_GO_TOOLCHAIN]}" >&2
    run_go "$gocache" env GOBIN="$tmp" "$go" install "$package@$ver"
  elif [[ "$name" == caddy ]]; then
    rmdir "$tmp"
    echo "images: no Go on the host; Caddy $ver is built inside the image" >&2
    return 1
  else
    echo "images: no Go on the host; building $name $ver in a trixie container" >&2
    "$here/base.sh" trixie
    docker run --rm -v "$tmp:/out" -e GOTOOLCHAIN="${versions[CADDY_GO_TOOLCHAIN]}" \
      -e CGO_ENABLED=0 -e GOFLAGS=-trimpath -e GOBIN=/out -e PKG="$package@$ver" \
      debian:trixie-slim sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends golang-go ca-certificates git >/dev/null && go install "$PKG" && chown -R '"$(id -u)"' /out'
  fi
  mv "$tmp/$name" "$bindir/$name-$ver"
  rmdir "$tmp"
  # The compile cache (~1 GB) only speeds up rebuilding this version, which is cached as a
  # binary now; the module cache stays for the next version.
  flock "$gocache/.lock" rm -rf "$gocache/build"
}

# Caddy's binary for its image (images/caddy/prebuilt/), built by go_build when the host has
# Go, else left to the Dockerfile's own Go stage. QUICBED_CADDY_BUILD=container forces that.
prebuild_caddy() {
  local ver=${versions[CADDY_VERSION]} dest="$here/caddy/prebuilt/caddy"
  rm -f "$dest"
  [[ "${QUICBED_CADDY_BUILD:-host}" == container ]] && return 0
  go_build caddy github.com/caddyserver/caddy/v2/cmd/caddy "$ver" || return 0
  cp "$(dirname "$cache")/bin/caddy-$ver" "$dest"
}

# actionlint (make test lints the GitHub Actions workflows in docs/ with it): a host tool,
# not an image; $QUICBED_CACHE/bin/actionlint-<ACTIONLINT_VERSION>.
build_actionlint() {
  go_build actionlint github.com/rhysd/actionlint/cmd/actionlint "${versions[ACTIONLINT_VERSION]}"
  echo "images: actionlint at $(dirname "$cache")/bin/actionlint-${versions[ACTIONLINT_VERSION]}"
}

# A client image's Python wheels, hash-pinned in a requirements.txt, fetched by the host's pip
# into $QUICBED_CACHE/wheels and copied to the image's prebuilt/wheels: pip inside
# `docker build` cannot verify TLS here (an egress proxy that only the host trusts). The
# Dockerfile installs them offline (--no-index --require-hashes) for its CPython 3.13.
# A client image whose Dockerfile's directory holds a requirements.txt (stacks/aioquic): that
# file; one whose Dockerfile COPYs a requirements.txt from elsewhere (images/browser takes
# clients/browser's): that one.
wheel_requirements() {
  local name=$1 dir
  dir=$(dirname "$(dockerfile_of "$name")")
  if [[ -f "$dir/requirements.txt" ]]; then
    echo "$dir/requirements.txt $dir/prebuilt/wheels"
    return 0
  fi
  # A Dockerfile that COPYs another image's requirements.txt (the aioquic server takes the
  # aioquic client's pins: one pin, one set of hashes): those wheels, in its own prebuilt/.
  local req
  req=$(copy_sources "$(dockerfile_of "$name")" | grep '/requirements\.txt$' | head -1 || true)
  [[ -n "$req" ]] && echo "$repo/$req $dir/prebuilt/wheels"
  return 0
}

prebuild_wheels() {
  local req=$1 dest=$2 wheels
  local -a pip
  wheels=$(dirname "$cache")/wheels
  rm -rf "$dest"
  mkdir -p "$dest" "$wheels"
  [[ -f "$req" ]] || return 0
  if [[ -x "$repo/.venv/bin/python" ]]; then pip=("$repo/.venv/bin/python" -m pip); else pip=(python3 -m pip); fi
  local -a target=(--require-hashes --no-deps --only-binary=:all: --implementation cp
    --python-version 3.13 --abi cp313 --abi abi3 --abi none
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -r "$req")
  # From the cache when it holds them (pip checks every hash either way), else from the index.
  # Under the cache's lock: `all` may fill it for two images at once (the aioquic pair).
  if ! flock "$wheels/.lock" "${pip[@]}" download -q --no-index --find-links "$wheels" "${target[@]}" -d "$dest" 2>/dev/null; then
    echo "images: downloading the wheels of ${req#"$repo"/}"
    flock "$wheels/.lock" "${pip[@]}" download -q "${target[@]}" -d "$wheels"
    flock "$wheels/.lock" "${pip[@]}" download -q --no-index --find-links "$wheels" "${target[@]}" -d "$dest"
  fi
}

# A client image whose Dockerfile's directory holds a go.mod (stacks/quicgo): its main
# package, compiled with the host's Go (toolchain CADDY_GO_TOOLCHAIN, modules from the Go
# proxy, pinned by its go.sum) once per source into $QUICBED_CACHE/bin/<dir>_perf-<hash>, and
# copied to the directory's prebuilt/<dir>_perf for the Dockerfile to COPY. Its sources are
# COPYed into the image too, so the image's input hash follows them.
prebuild_go_client() {
  local name=$1 dir bin hash go
  dir=$(dirname "$(dockerfile_of "$name")")
  [[ -f "$dir/go.mod" ]] || return 0
  bin=$(basename "$dir")_perf
  hash=$(cd "$dir" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-16)
  local bindir gocache
  bindir=$(dirname "$cache")/bin
  gocache=$(dirname "$cache")/go
  if [[ ! -x "$bindir/$bin-$hash" ]]; then
    go=$(host_go)
    if [[ -z "$go" ]]; then
      echo "images: $name needs Go on the host (make deps) to compile $bin" >&2
      return 1
    fi
    echo "images: building $bin ($hash) with the host's Go, toolchain ${versions[CADDY_GO_TOOLCHAIN]}" >&2
    mkdir -p "$bindir" "$gocache"
    (cd "$dir" && run_go "$gocache" "$go" build -o "$bindir/.$bin-$hash.tmp" .)
    mv "$bindir/.$bin-$hash.tmp" "$bindir/$bin-$hash"
  fi
  mkdir -p "$dir/prebuilt"
  cp "$bindir/$bin-$hash" "$dir/prebuilt/$bin"
  go_prebuilt="$dir/prebuilt/$bin"
}

# An image whose Dockerfile's directory holds a Cargo.lock (a Rust stack): every crates.io
# package it names, fetched by the host (vendor_crates.py, into $QUICBED_CACHE/crates, each
# checked against the lock's sha256) and unpacked into the directory's prebuilt/vendor, which
# the Dockerfile COPYs and builds from offline (cargo build --offline --locked), for the same
# reason as the wheels: cargo inside `docker build` cannot verify TLS here.
prebuild_crates() {
  local name=$1 dir
  dir=$(dirname "$(dockerfile_of "$name")")
  [[ -f "$dir/Cargo.lock" ]] || return 0
  rm -rf "$dir/prebuilt/vendor"
  "$py" "$here/vendor_crates.py" "$dir/Cargo.lock" "$dir/prebuilt/vendor" "$(dirname "$cache")/crates" >&2
  crates_prebuilt="$dir/prebuilt/vendor"
}

label_of() {
  docker image inspect -f '{{ index .Config.Labels "quicbed.inputs" }}' "$1" 2>/dev/null || true
}

build_one() {
  local name=$1 df tag hash tar start
  tag=$(tag_of "$name")
  df=$(dockerfile_of "$name")
  if [[ -z "$df" ]]; then
    # A prebuilt image (a user's own): nothing to build, but it must be there.
    if docker image inspect "$tag" >/dev/null 2>&1; then
      echo "images: $tag present (prebuilt: $name's descriptor names no dockerfile)"
      return 0
    fi
    echo "images: $tag not found: $name's descriptor names no" \
      "dockerfile, so build, pull or tag that image yourself (e.g. docker tag IMAGE $tag)" >&2
    return 1
  fi
  if [[ ! -f "$df" ]]; then
    echo "images: $df missing" >&2
    return 1
  fi
  hash=$(inputs_hash "$df")
  tar="$cache/${name/:/-}-$hash.tar"
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
  local wheel_req
  wheel_req=$(wheel_requirements "$name")
  # shellcheck disable=SC2086  # two words: the requirements file and the wheels' directory
  [[ -n "$wheel_req" ]] && prebuild_wheels $wheel_req
  go_prebuilt="" crates_prebuilt=""
  prebuild_go_client "$name"
  prebuild_crates "$name"
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
    [[ -n "$wheel_req" ]] && rm -rf "${wheel_req#* }"
    [[ -n "$go_prebuilt" ]] && rm -f "$go_prebuilt"
    [[ -n "$crates_prebuilt" ]] && rm -rf "$crates_prebuilt"
    echo "images: building $tag failed (full log: $log)" >&2
    return 1
  fi
  rm -f "$log"
  if [[ "$name" == caddy ]]; then rm -f "$here/caddy/prebuilt/caddy"; fi
  if [[ -n "$wheel_req" ]]; then rm -rf "${wheel_req#* }"; fi
  if [[ -n "$go_prebuilt" ]]; then rm -f "$go_prebuilt"; fi
  if [[ -n "$crates_prebuilt" ]]; then rm -rf "$crates_prebuilt"; fi
  mkdir -p "$cache"
  # Exactly <name>-<16 hex>.tar: "caddy-*" would also match caddy-debian's tar.
  rm -f "$cache/${name/:/-}"-????????????????.tar
  if [[ "${QUICBED_SAVE_IMAGES:-1}" == 0 ]]; then
    echo "images: built $tag in $((SECONDS - start)) s (not saved: QUICBED_SAVE_IMAGES=0)"
    return 0
  fi
  docker save -o "$tar.tmp" "$tag" && mv "$tar.tmp" "$tar"
  echo "images: built $tag in $((SECONDS - start)) s; saved to $tar"
}

# `all`'s step: every image but an on-demand one that is not built yet (one that is, is kept
# current like the others).
build_all_one() {
  local name=$1
  if [[ "${on_demand_by[$name]:-}" == on-demand ]] && ! docker image inspect "$(tag_of "$name")" >/dev/null 2>&1; then
    echo "images: $(tag_of "$name") is built on demand (by the run or test that needs it, or images/build.sh $name)"
    return 0
  fi
  build_one "$name"
}

# Each client image once (tools of one image share it), a prebuilt one only checked; an image
# a server shares (quicbed/quiche) is the servers' lane's.
build_all_clients() {
  local name tag
  local -A done_tags=()
  for name in $(server_names); do done_tags[$(tag_of "$name")]=1; done
  for name in "${client_list[@]}"; do
    tag=$(tag_of "$name")
    [[ -n "${done_tags[$tag]+x}" ]] && continue
    done_tags[$tag]=1
    build_all_one "$name"
  done
}

# `all`: the Debian bases first, both suites at once (debootstrap mostly waits on the mirror),
# then two lanes at once, the servers' images (and tools) and the clients'. A build waits on
# apt downloads, dockerd and the save as much as on a core, so on 2 cores the lanes overlap:
# a fresh set-up's images took 550 s in one lane. The caches both lanes write (Go's, the
# wheels') are taken under a lock (go_build, prebuild_go_client, prebuild_wheels).
build_all() {
  local suite
  local -a pids=()
  for suite in ${versions[DEBIAN_BASE_SUITES]:-bookworm trixie}; do
    "$here/base.sh" "$suite" &
    pids+=($!)
  done
  wait_all "${pids[@]}" || return 1
  pids=()
  (for name in $(server_names); do build_all_one "$name"; done; build_one tools) &
  pids+=($!)
  build_all_clients &
  pids+=($!)
  wait_all "${pids[@]}"
}

# `on-demand`: every image `all` leaves to the run or test that needs it (the stacks compiled
# from source), each tag once. `make test` builds them before pytest starts, so no timed test
# pays minutes of compiling in its set-up.
build_on_demand() {
  local name tag
  local -A done_tags=()
  for name in "${server_list[@]}" "${client_list[@]}"; do
    [[ "${on_demand_by[$name]:-}" == on-demand ]] || continue
    tag=$(tag_of "$name")
    [[ -n "${done_tags[$tag]+x}" ]] && continue
    done_tags[$tag]=1
    build_one "$name"
  done
}

# wait_all PID...: waits for every one; fails when any of them failed.
wait_all() {
  local pid rc=0
  for pid; do wait "$pid" || rc=1; done
  return $rc
}

targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(all)
for target in "${targets[@]}"; do
  if [[ "$target" == actionlint ]]; then
    build_actionlint
  elif [[ "$target" == all ]]; then
    build_all
  elif [[ "$target" == on-demand ]]; then
    build_on_demand
  else
    if [[ -n "${tag_by[client:$target]+x}" ]]; then
      build_one "$target"
      build_one "client:$target"
      continue
    fi
    tag_of "$target" >/dev/null
    build_one "$target"
  fi
done
