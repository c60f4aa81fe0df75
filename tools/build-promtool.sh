#!/usr/bin/env bash
# Build Prometheus's promtool from the Go module proxy into e2e/.cluster/bin (or
# $E2E_CLUSTER_DIR/bin; next to helm and
# kube-apiserver, where the tests look for binaries); the chart's alerting rules are tested with
# it (`promtool check rules`, `promtool test rules`, tests/helm/test_rules.py). Cached: a second
# run with the same version does nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The prometheus/prometheus module's Go version of a Prometheus 3.x release (v3.N.M is v0.N00+M.0
# there); a version the proxy refuses can be overridden: PROMTOOL_VERSION=v0.315.1 make promtool.
PROMTOOL_VERSION="${PROMTOOL_VERSION:-v0.316.0}"
# the local cluster's binaries (e2e/cluster/lib.sh: $E2E_CLUSTER_DIR/bin), unless BIN_DIR says
BIN_DIR="${BIN_DIR:-${E2E_CLUSTER_DIR:-$ROOT/e2e/.cluster}/bin}"
STAMP="$BIN_DIR/.promtool-version"
LOG="${TMPDIR:-/tmp}/brokergroup-promtool-build.log"

if [[ -x $BIN_DIR/promtool && -f $STAMP && "$(<"$STAMP")" == "$PROMTOOL_VERSION" ]]; then
  echo "promtool $PROMTOOL_VERSION up to date in $BIN_DIR"
  exit 0
fi
command -v go >/dev/null || { echo "build-promtool: go is not installed" >&2; exit 1; }
mkdir -p "$BIN_DIR"
echo "building promtool $PROMTOOL_VERSION from the Go module proxy (cold: a few minutes; log in $LOG)"
if ! GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$BIN_DIR" nice -n 10 \
  go install -trimpath -ldflags "-s -w" \
  "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION" >"$LOG" 2>&1; then
  tail -20 "$LOG" >&2
  echo "build-promtool: go install promtool@$PROMTOOL_VERSION failed (see $LOG)" >&2
  exit 1
fi
echo "$PROMTOOL_VERSION" >"$STAMP"
echo "promtool $PROMTOOL_VERSION built into $BIN_DIR"
