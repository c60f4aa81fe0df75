#!/usr/bin/env bash
# Build the pinned Kubernetes binaries, CoreDNS, helm, kube-router and the pause binary
# from the Go module proxy into $BIN_DIR. Go's own caches stay at their
# defaults, so a rebuild after `rm -rf e2e/.cluster` takes a minute or two.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need go
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

K8S_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
STAMP="$BIN_DIR/.versions"
WANT="k8s=$K8S_VERSION coredns=$COREDNS_VERSION helm=$HELM_VERSION kube-router=$KUBE_ROUTER_VERSION pause=$(sha256sum "$CLUSTER_SCRIPTS/pause/main.go" | cut -c1-16)"

all_present() {
  local b
  for b in "${K8S_BINS[@]}" coredns helm kube-router pause; do [[ -x $BIN_DIR/$b ]] || return 1; done
  [[ -f $STAMP && "$(<"$STAMP")" == "$WANT" ]]
}

if [[ ${1:-} != --force ]] && all_present; then
  log "binaries up to date ($WANT)"
  exit 0
fi

mkdir -p "$BIN_DIR" "$E2E_CACHE_DIR"
NICE=(nice -n 10)
start=$SECONDS

# --- Kubernetes: a wrapper module that requires k8s.io/kubernetes and
# replaces each staging module (v0.0.0 in its go.mod) by its published tag.
minor_patch="${K8S_VERSION#v1.}"                 # 36.3
staging_version="v0.$minor_patch"
major=1 minor="${minor_patch%%.*}"
wrap="$E2E_CACHE_DIR/k8s-build-$K8S_VERSION"
mkdir -p "$wrap"
log "resolving k8s.io/kubernetes@$K8S_VERSION"
k8s_mod="$(cd "$wrap" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
[[ -f $k8s_mod ]] || die "could not download k8s.io/kubernetes@$K8S_VERSION from the Go module proxy"
{
  echo "module e2e.local/k8sbuild"
  echo
  echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$k8s_mod")"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "replace ("
  # Only staging modules that k8s.io/kubernetes requires (some, such as
  # sample-cli-plugin, are never published for a release).
  sed -n 's/^[[:space:]]*\(k8s\.io\/[a-z0-9-]*\) v0\.0\.0$/\1/p' "$k8s_mod" | sort -u |
    while read -r m; do echo "	$m => $m $staging_version"; done
  echo ")"
} >"$wrap/go.mod.new"
if ! cmp -s "$wrap/go.mod.new" "$wrap/go.mod.src" 2>/dev/null; then
  cp "$wrap/go.mod.new" "$wrap/go.mod"
  cp "$wrap/go.mod.new" "$wrap/go.mod.src"
  rm -f "$wrap/go.sum"
fi
cat >"$wrap/doc.go" <<'GO'
// Package k8sbuild only pins the Kubernetes module for building its commands.
package k8sbuild
GO

build_date="$(date -u -d "@$(stat -c %Y "$k8s_mod")" +%Y-%m-%dT%H:%M:%SZ)"
ver_pkgs=(k8s.io/component-base/version k8s.io/client-go/pkg/version)
ldflags="-s -w"
for p in "${ver_pkgs[@]}"; do
  ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$build_date"
done
pkgs=()
for b in "${K8S_BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
log "building ${K8S_BINS[*]} $K8S_VERSION (cold: 12-22 min on 2 cores; log in $wrap/build.log)"
(
  cd "$wrap"
  "${NICE[@]}" go mod download k8s.io/kubernetes
  "${NICE[@]}" go build -mod=mod -trimpath -ldflags "$ldflags" -o "$BIN_DIR/" "${pkgs[@]}"
) >"$wrap/build.log" 2>&1 || { tail -30 "$wrap/build.log" >&2; die "Kubernetes build failed (see $wrap/build.log)"; }
log "kubernetes built in $((SECONDS - start))s"

# --- CoreDNS and helm: plain `go install` with GOBIN pointed at our dir.
t=$SECONDS
GOBIN="$BIN_DIR" "${NICE[@]}" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION" \
  >"$E2E_CACHE_DIR/coredns-build.log" 2>&1 || { tail -20 "$E2E_CACHE_DIR/coredns-build.log" >&2; die "CoreDNS build failed"; }
log "coredns built in $((SECONDS - t))s"
t=$SECONDS
GOBIN="$BIN_DIR" "${NICE[@]}" go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >"$E2E_CACHE_DIR/helm-build.log" 2>&1 ||
  { tail -20 "$E2E_CACHE_DIR/helm-build.log" >&2; die "helm build failed"; }
log "helm built in $((SECONDS - t))s"
t=$SECONDS
GOBIN="$BIN_DIR" "${NICE[@]}" go install -trimpath \
  -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION" \
  "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION" \
  >"$E2E_CACHE_DIR/kube-router-build.log" 2>&1 ||
  { tail -20 "$E2E_CACHE_DIR/kube-router-build.log" >&2; die "kube-router build failed"; }
log "kube-router built in $((SECONDS - t))s"

# --- pause: our own tiny sandbox process (no image can be pulled here).
(cd "$CLUSTER_SCRIPTS/pause" && "${NICE[@]}" go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/pause" .) ||
  die "pause build failed"

echo "$WANT" >"$STAMP"
log "all binaries built in $((SECONDS - start))s: $("$BIN_DIR/kubectl" version --client 2>/dev/null | head -1)"
