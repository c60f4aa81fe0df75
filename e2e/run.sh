#!/usr/bin/env bash
# One full end-to-end run on the local cluster: up, images, pytest, down.
# The teardown always runs and must leave the host as it found it; its
# failure fails the run. E2E_KEEP=1 keeps the cluster for another look.
set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${E2E_PYTHON:-python3}"
export KUBECACHEDIR="$E2E_DIR/.cluster/kube-cache"  # keep kubectl's cache out of ~/.kube
t0=$SECONDS

teardown() {
  local rc=$?
  if [[ ${E2E_KEEP:-0} == 1 ]]; then
    echo "e2e: cluster kept; export KUBECONFIG=$E2E_DIR/.cluster/kubeconfig; make -f e2e/e2e.mk cluster-down when done"
    exit "$rc"
  fi
  local t=$SECONDS
  bash "$E2E_DIR/cluster/down.sh" || rc=1
  echo "e2e: teardown $((SECONDS - t))s; total $((SECONDS - t0))s"
  exit "$rc"
}
trap teardown EXIT

t=$SECONDS
E2E_LOAD_CACHED_IMAGES=0 bash "$E2E_DIR/cluster/up.sh"  # images.sh loads fresh ones
echo "e2e: bring-up $((SECONDS - t))s"
t=$SECONDS
bash "$E2E_DIR/cluster/images.sh" all
echo "e2e: images $((SECONDS - t))s"
t=$SECONDS
KUBECONFIG="$E2E_DIR/.cluster/kubeconfig" "$PYTHON" -m pytest "$E2E_DIR/tests" "$@"
echo "e2e: tests $((SECONDS - t))s"
