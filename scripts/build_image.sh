#!/usr/bin/env bash
# Builds a Dockerfile target here (`make image`): starts dockerd if needed,
# makes the local bases once (no registry is reachable), builds, reports size.
#
#   scripts/build_image.sh [TARGET [TAG]]      defaults: image tfx-tpu-trainer:latest
#   scripts/build_image.sh --start-dockerd     starts dockerd if needed, only
#
# Where the Dockerfile's bases (python:3.10.13-slim-bookworm, Beam's SDK
# image) can be pulled, it builds on them, as plain `docker build` does.
# Where they cannot (BASES=auto, the default; BASES=local forces it), the two
# bases are made locally and passed as build arguments (docs/guide/kubeflow.md,
# "Building the image where nothing can be pulled"):
#
#   PYTHON_IMAGE    a Debian bookworm minbase (debootstrap, Debian's packages)
#                   with this machine's CPython 3.10 at /usr/local, where
#                   python:3.10-slim has it; tagged $LOCAL_PYTHON_IMAGE.
#   BEAM_SDK_IMAGE  /opt/apache/beam/boot only: scripts/beam_boot.py, a
#                   Python re-implementation of Beam's Go boot
#                   (sdks/python/container/boot.go), standing in for it
#                   because Beam's SDK image cannot be pulled here and its Go
#                   boot cannot be built without Go module sources. With it
#                   the image runs as a Beam SDK harness (DOCKER environment,
#                   worker pool); Kubeflow steps do not use it (their command
#                   replaces the entrypoint). Tagged $LOCAL_BEAM_SDK_IMAGE,
#                   labelled with the script's sha256 (remade when it
#                   changes).
#
# Environment: PYTHON_PREFIX (CPython 3.10 to copy in; default: the base
# prefix of .venv/bin/python, else of the 3.10 `make env` finds),
# DEBIAN_MIRROR, DOCKERD_LOG,
# DOCKERD_STORAGE_DRIVER (default: overlay2 where it mounts, else vfs),
# REBUILD_BASE=1 (remake the bases). The host's pip settings (index URLs,
# trusted hosts, CA bundle) are passed as build arguments; file:// indexes
# and find-links are left out (the build cannot see the host's disk).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=${1:-image}
TAG=${2:-tfx-tpu-trainer:latest}
LOCAL_PYTHON_IMAGE=${LOCAL_PYTHON_IMAGE:-tfx-tpu-trainer-local/python:3.10-slim-bookworm}
LOCAL_BEAM_SDK_IMAGE=${LOCAL_BEAM_SDK_IMAGE:-tfx-tpu-trainer-local/beam-sdk:2.59.0}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/tfx-tpu-trainer-dockerd.log}
BEAM_VERSION=$(sed -n 's/^apache-beam==\([0-9.]*\).*/\1/p' requirements.lock)
# Runtime libraries of CPython's extension modules (python:3.10-slim's set).
BASE_PACKAGES=ca-certificates,netbase,tzdata,libssl3,libffi8,libsqlite3-0,\
libbz2-1.0,liblzma5,libreadline8,libncursesw6,zlib1g,libuuid1,libexpat1,\
libtirpc3,libnsl2,libgdbm6

fail() { echo "build_image.sh: $*" >&2; exit 1; }
log() { echo "[build_image] $*" >&2; }

# overlay2 where an overlay mount works on Docker's disk, else vfs (which
# stores every layer, and every container's root, as a full copy).
storage_driver() {
  local probe
  mkdir -p /var/lib/docker
  probe=$(mktemp -d /var/lib/docker/overlay-probe.XXXXXX)
  mkdir "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
  if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
      "$probe/merged" 2> /dev/null; then
    umount "$probe/merged"
    echo overlay2
  else
    echo vfs
  fi
  rm -rf "$probe"
}

ensure_dockerd() {
  command -v docker > /dev/null \
    || fail "no docker CLI on PATH: install Docker (Debian: apt-get install -y docker.io)."
  if docker info > /dev/null 2>&1; then return; fi
  command -v dockerd > /dev/null \
    || fail "the Docker daemon is not running and dockerd is not installed: apt-get install -y docker.io, or start Docker."
  [ "$(id -u)" = 0 ] \
    || fail "the Docker daemon is not running; starting dockerd needs root (or start Docker yourself)."
  local driver=${DOCKERD_STORAGE_DRIVER:-}
  [ -n "$driver" ] || driver=$(storage_driver)
  log "starting dockerd ($driver storage, no iptables, no bridge; log: $DOCKERD_LOG)"
  nohup dockerd --storage-driver="$driver" --iptables=false --bridge=none \
    > "$DOCKERD_LOG" 2>&1 &
  for _ in $(seq 120); do
    if docker info > /dev/null 2>&1; then return; fi
    kill -0 $! 2> /dev/null || break
    sleep 1
  done
  tail -20 "$DOCKERD_LOG" >&2 || true
  fail "dockerd did not start (log above, in $DOCKERD_LOG)."
}

have_image() { docker image inspect "$1" > /dev/null 2>&1; }

# shellcheck source=python310.sh
source scripts/python310.sh

# The install prefix of .venv's CPython 3.10, else of the one `make env`
# would find (scripts/python310.sh): a fresh clone has no .venv yet.
python_prefix() {
  if [ -n "${PYTHON_PREFIX:-}" ]; then echo "$PYTHON_PREFIX"; return; fi
  local python
  python=.venv/bin/python
  python310_works "$python" || python=$(find_python310) \
    || fail "no CPython 3.10 to copy into the base (tried .venv/bin/python, \$PYTHON310, python3.10, pyenv's versions, /usr/local/bin, /usr/bin): set PYTHON_PREFIX to a CPython 3.10 install prefix."
  "$python" -c 'import sys; print(sys.base_prefix)'
}

# A debootstrap target: what it left mounted (proc, sys) first.
remove_root() {
  local mount
  for mount in $(awk -v r="$1/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do
    umount "$mount" || umount -l "$mount"
  done
  rm -rf --one-file-system "$1" "$1.log"
}

make_python_base() {
  local prefix root
  prefix=$(python_prefix)
  [ -x "$prefix/bin/python3.10" ] \
    || fail "PYTHON_PREFIX=$prefix has no bin/python3.10."
  command -v debootstrap > /dev/null \
    || fail "the base $LOCAL_PYTHON_IMAGE is missing and debootstrap is not installed: apt-get install -y debootstrap."
  [ "$(id -u)" = 0 ] || fail "making the base $LOCAL_PYTHON_IMAGE (debootstrap) needs root."
  root=$(mktemp -d /var/tmp/tfx-tpu-trainer-base.XXXXXX)
  trap 'remove_root "$root"; trap - RETURN' RETURN
  log "debootstrap bookworm minbase into $root"
  debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$root" \
    "$DEBIAN_MIRROR" > "$root.log" 2>&1 \
    || { tail -20 "$root.log" >&2; fail "debootstrap failed (log above)."; }
  rm -f "$root.log"
  log "CPython from $prefix into /usr/local"
  # As python:3.10-slim: no tests, no idle/tkinter, pip and setuptools only;
  # nothing this machine wrote into site-packages (.pth files).
  tar -C "$prefix" -c \
      --exclude=./lib/python3.10/test --exclude=./lib/python3.10/idlelib \
      --exclude=./lib/python3.10/tkinter --exclude='__pycache__' \
      --exclude='./lib/python3.10/site-packages/*.pth' \
      --exclude='./bin/pip*' --exclude='./bin/idle*' --exclude='./bin/2to3*' \
      . | tar -C "$root/usr/local" -x
  # Built with --prefix=/usr/local, as far as building extensions goes:
  # sysconfig's recorded paths (headers, flags) name the host's prefix.
  grep -rlIF "$prefix" "$root/usr/local/lib/python3.10/_sysconfigdata"*.py \
      "$root/usr/local/lib/python3.10/config-3.10"* "$root/usr/local/bin" \
      "$root/usr/local/lib/pkgconfig" 2> /dev/null \
    | xargs -r sed -i "s|$prefix|/usr/local|g"
  # The copied python's RUNPATH names the host's prefix; /usr/local/lib is in
  # the loader's default path once the cache knows it.
  chroot "$root" ldconfig
  chroot "$root" /usr/local/bin/python3 -c 'import ssl, sqlite3, lzma, bz2, ctypes, zlib, uuid'
  # The host's CA bundle: TLS on this machine's network may be terminated by
  # a proxy whose CA only the host trusts. (A bundle of public certificates.)
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  fi
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  log "importing as $LOCAL_PYTHON_IMAGE"
  tar -C "$root" -c --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* . \
    | docker import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "ENV PYTHON_VERSION=$("$prefix/bin/python3.10" -c 'import platform; print(platform.python_version())')" \
    --change 'CMD ["python3"]' \
    - "$LOCAL_PYTHON_IMAGE" > /dev/null
}

# Beam's boot is a Go program: with no Go module source here, the base holds
# the boot re-implemented in Python (scripts/beam_boot.py, run by the image's
# python). Only for images built on this local base.
BEAM_BOOT=scripts/beam_boot.py
beam_boot_sha() { sha256sum "$BEAM_BOOT" | cut -c1-64; }

beam_base_current() {
  have_image "$LOCAL_BEAM_SDK_IMAGE" && [ "$(docker image inspect --format \
    '{{index .Config.Labels "tfx-tpu-trainer.beam-boot-sha256"}}' \
    "$LOCAL_BEAM_SDK_IMAGE" 2> /dev/null)" = "$(beam_boot_sha)" ]
}

make_beam_base() {
  local context
  context=$(mktemp -d /var/tmp/tfx-tpu-trainer-beam.XXXXXX)
  trap 'rm -rf "$context"; trap - RETURN' RETURN
  mkdir -p "$context/opt/apache/beam"
  install -m 755 "$BEAM_BOOT" "$context/opt/apache/beam/boot"
  log "Beam SDK base $LOCAL_BEAM_SDK_IMAGE: boot from $BEAM_BOOT (Beam's image cannot be pulled)"
  tar -C "$context" -c opt | docker import \
    --change "LABEL tfx-tpu-trainer.beam-boot-sha256=$(beam_boot_sha)" \
    - "$LOCAL_BEAM_SDK_IMAGE" > /dev/null
}

# Whether the Dockerfile's own bases are here or can be pulled.
real_bases_available() {
  local image
  for image in python:3.10.13-slim-bookworm "apache/beam_python3.10_sdk:$BEAM_VERSION"; do
    have_image "$image" || docker pull -q "$image" > /dev/null 2>&1 || return 1
  done
}

ensure_bases() {
  if [ "${REBUILD_BASE:-0}" = 1 ] || ! have_image "$LOCAL_PYTHON_IMAGE"; then
    make_python_base
  fi
  if [ "${REBUILD_BASE:-0}" = 1 ] || ! beam_base_current; then
    make_beam_base
  fi
}

# The host's pip configuration, as build arguments pip reads (PIP_*).
pip_build_args() {
  local python key value
  python=$(python_prefix)/bin/python3.10
  for key in index-url extra-index-url trusted-host cert; do
    value=$(printenv "PIP_$(echo "$key" | tr a-z- A-Z_)" || true)
    if [ -z "$value" ]; then
      value=$("$python" -m pip config get "global.$key" 2> /dev/null || true)
    fi
    # Local indexes are on the host's disk, out of the build's reach.
    value=$(echo "$value" | tr ' ' '\n' | grep -v '^file:' | tr '\n' ' ' | sed 's/ *$//')
    [ -n "$value" ] && echo "--build-arg=PIP_$(echo "$key" | tr a-z- A-Z_)=$value"
  done
  true
}

main() {
  ensure_dockerd
  [ "$TARGET" = --start-dockerd ] && return
  local start use_local=0 args=()
  case "${BASES:-auto}" in
    real) ;;
    local) use_local=1 ;;
    auto) real_bases_available || use_local=1 ;;
    *) fail "BASES=$BASES: use auto, local or real." ;;
  esac
  if [ "$use_local" = 1 ]; then
    log "building on local bases (the Dockerfile's cannot be pulled here, or BASES=local)"
    ensure_bases
    args+=(--build-arg "PYTHON_IMAGE=$LOCAL_PYTHON_IMAGE"
           --build-arg "BEAM_SDK_IMAGE=$LOCAL_BEAM_SDK_IMAGE")
  fi
  mapfile -t -O "${#args[@]}" args < <(pip_build_args)
  start=$(date +%s)
  log "docker build --target $TARGET -t $TAG (host network): ${args[*]}"
  docker build --force-rm --network host --target "$TARGET" -t "$TAG" \
    "${args[@]}" .
  log "built $TAG in $(( $(date +%s) - start ))s: $(docker image inspect \
    --format '{{.Size}}' "$TAG" | awk '{printf "%.2f GB", $1 / 1e9}'), \
$(docker history -q "$TAG" | wc -l) layers"
  if [ -d /var/lib/docker/vfs ]; then
    log "vfs storage: $(du -sh /var/lib/docker/vfs 2> /dev/null | cut -f1)"
  fi
}

main
