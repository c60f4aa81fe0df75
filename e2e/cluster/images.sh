#!/usr/bin/env bash
# Build the project's images with podman from a locally made Debian base and
# load them into the cluster's containerd. No registry is used: the base comes
# from debootstrap against the machine's own apt mirror, Python dependencies
# come from wheels fetched on the host.
#
#   images.sh [all]      base + broker + operator, then load into containerd
#   images.sh base       the debootstrap base image only
#   images.sh build      broker + operator images (saved as tarballs)
#   images.sh load       import the saved tarballs into every node's containerd
#   images.sh load-cached  same, silently skipping missing tarballs (used by up.sh)
#   images.sh pause      the sandbox image from our pause binary, into every node
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BASE_IMAGE_LOCAL="localhost/brokergroup-e2e/debian-python:bookworm"
IMG_DIR="$E2E_CACHE_DIR/images"
WHEELS="$E2E_CACHE_DIR/wheels"
PODMAN_DIR="$E2E_CACHE_DIR/podman"
# Fully qualified names, so containerd stores exactly the name a pod spec's
# short name (brokergroup/habroker:dev) normalizes to.
qualify() { [[ $1 == */*/* || $1 == localhost/* ]] && echo "$1" || echo "docker.io/$1"; }

podman_() {
  mkdir -p "$PODMAN_DIR" "$CONF_DIR"
  # This VM refuses raised rlimits and crun needs cgroup v2: see notes.
  [[ -f $CONF_DIR/containers.conf ]] || printf '[containers]\ndefault_ulimits = []\n' >"$CONF_DIR/containers.conf"
  CONTAINERS_CONF="$CONF_DIR/containers.conf" podman \
    --root "$PODMAN_DIR/storage" --runroot "$PODMAN_DIR/run" --tmpdir "$PODMAN_DIR/tmp" \
    --storage-driver overlay --runtime runc --runtime-flag "root=$PODMAN_DIR/runc" --cgroup-manager cgroupfs --events-backend none "$@"
}

# ctr_ NODE_INDEX ARGS... : ctr against that node's containerd (its socket is a file on the
# host's filesystem, so no namespace needs entering).
ctr_() { local i=$1; shift; ctr --address "$(node_sock "$i")" -n k8s.io "$@"; }
containerd_up() {
  local i
  for i in $(node_indexes); do
    [[ -S $(node_sock "$i") ]] && ctr --address "$(node_sock "$i")" version >/dev/null 2>&1 || return 1
  done
}
# on_nodes FUNCTION ARGS... : FUNCTION NODE_INDEX ARGS... on every node at once.
on_nodes() {
  local fn=$1 i rc=0 pids=()
  shift
  for i in $(node_indexes); do
    "$fn" "$i" "$@" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  return $rc
}

# The first bookworm mirror from the machine's apt sources (deb822 or one-line).
apt_mirror() {
  local f url=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    url="$(awk '/^URIs:/{u=$2} /^Suites:/{ if ($0 ~ /bookworm( |$)/ && u != "") {print u; exit} }' "$f")"
    [[ -n $url ]] && break
  done
  if [[ -z $url ]]; then
    url="$(awk '$1=="deb" && $3=="bookworm" {print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)"
  fi
  [[ -n $url ]] || die "no bookworm mirror found in the apt sources"
  echo "$url"
}

build_base() {
  need podman debootstrap
  if podman_ image exists "$BASE_IMAGE_LOCAL"; then
    log "base image $BASE_IMAGE_LOCAL present"
    return 0
  fi
  local tarball="$E2E_CACHE_DIR/base-bookworm-python.tar" rootfs
  if [[ ! -f $tarball ]]; then
    rootfs="$E2E_CACHE_DIR/base-rootfs"
    rm -rf "$rootfs"
    log "debootstrap bookworm (python3) from $(apt_mirror) (about a minute)"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
      bookworm "$rootfs" "$(apt_mirror)" >"$E2E_CACHE_DIR/debootstrap.log" 2>&1 ||
      { tail -20 "$E2E_CACHE_DIR/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  podman_ import -q --change 'CMD ["/bin/bash"]' "$tarball" "$BASE_IMAGE_LOCAL" >/dev/null
  log "base image $BASE_IMAGE_LOCAL imported"
}

# Wheels for the project and its dependencies (and the build backend), so
# `pip install --no-index --find-links` works inside a build with no network.
fetch_wheels() {
  need python3
  mkdir -p "$WHEELS"
  local build_reqs
  build_reqs="$(python3 - "$REPO_ROOT/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f).get("build-system", {}).get("requires", [])))
PY
)"
  log "fetching wheels into $WHEELS"
  if [[ -n $build_reqs ]]; then
    mapfile -t reqs <<<"$build_reqs"
    python3 -m pip download -q --only-binary=:all: -d "$WHEELS" "${reqs[@]}"
  fi
  python3 -m pip wheel -q -w "$WHEELS" "${REPO_ROOT}[operator]"
}

# build_one DOCKERFILE IMAGE PACKAGE (PACKAGE: the project's wheel from fetch_wheels, built on
# this host where a C compiler is, so the image gets the compiled record codec)
build_one() {
  local dockerfile=$1 image tar package=$3
  image="$(qualify "$2")"
  tar="$IMG_DIR/$(basename "$(dirname "$dockerfile")").tar"
  [[ -f $REPO_ROOT/$dockerfile ]] || die "$dockerfile not found"
  log "building $image from $dockerfile"
  podman_ build --network none --layers -f "$REPO_ROOT/$dockerfile" \
    --build-arg "BASE_IMAGE=$BASE_IMAGE_LOCAL" \
    --build-arg "PIP_INSTALL_OPTS=--no-index --find-links=/wheels" --build-arg "PACKAGE=$package" \
    -v "$WHEELS:/wheels:ro" -t "$image" "$REPO_ROOT" >"$IMG_DIR/$(basename "$tar" .tar).build.log" 2>&1 ||
    { tail -30 "$IMG_DIR/$(basename "$tar" .tar).build.log" >&2; die "building $image failed"; }
  rm -f "$tar"
  podman_ save -q --format docker-archive -o "$tar" "$image"
}

build_images() {
  need podman
  mkdir -p "$IMG_DIR"
  fetch_wheels
  build_one broker_image/Dockerfile "$BROKER_IMAGE" brokergroup
  build_one operator/Dockerfile "$OPERATOR_IMAGE" "brokergroup[operator]"
}

import_all() {
  local i=$1 tar
  shift
  for tar in "$@"; do ctr_ "$i" images import "$tar" >/dev/null; done
}

load_images() {
  local strict=$1 tar tars=()
  if ! containerd_up; then
    [[ $strict == yes ]] && die "the cluster's containerd is not running: make -f e2e/e2e.mk cluster-up"
    return 0
  fi
  for tar in "$IMG_DIR"/*.tar; do
    [[ -f $tar ]] && tars+=("$tar")
  done
  if [[ $strict == yes && ${#tars[@]} -eq 0 ]]; then die "no image tarballs in $IMG_DIR: run images.sh build"; fi
  ((${#tars[@]} == 0)) && return 0
  on_nodes import_all "${tars[@]}" || die "loading images into the nodes failed"
  log "loaded ${#tars[@]} image(s) into $NODE_COUNT nodes: $(ctr_ 1 images ls -q | grep -v '^sha256:' | grep -v pause | tr '\n' ' ')"
}

pause_on() {
  local i=$1 tar=$2
  ctr_ "$i" images ls -q | grep -qxF "$PAUSE_IMAGE" && return 0
  ctr_ "$i" images import "$tar" >/dev/null
}

pause_image() {
  containerd_up || die "containerd is not running"
  need podman
  local tar="$E2E_CACHE_DIR/pause-image.tar" tmp
  if [[ ! -f $tar || $BIN_DIR/pause -nt $tar ]]; then
    tmp="$(mktemp -d)"
    install -m 755 "$BIN_DIR/pause" "$tmp/pause"
    tar -C "$tmp" --numeric-owner --owner=0 --group=0 -cf "$tmp/rootfs.tar" pause
    podman_ import -q --change 'ENTRYPOINT ["/pause"]' "$tmp/rootfs.tar" "$PAUSE_IMAGE" >/dev/null
    rm -f "$tar"
    podman_ save -q --format docker-archive -o "$tar" "$PAUSE_IMAGE"
    rm -rf "$tmp"
  fi
  on_nodes pause_on "$tar" || die "loading the sandbox image failed"
  log "sandbox image $PAUSE_IMAGE loaded into $NODE_COUNT nodes"
}

case "${1:-all}" in
  all) build_base; build_images; load_images no ;;
  base) build_base ;;
  build) build_base; build_images ;;
  load) load_images yes ;;
  load-cached) load_images no ;;
  pause) pause_image ;;
  *) die "usage: images.sh [all|base|build|load|load-cached|pause]" ;;
esac
