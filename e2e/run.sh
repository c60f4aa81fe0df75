#!/usr/bin/env bash
# One full end-to-end run on the local cluster: up, images, pytest, down, then a check that
# the host is as it was before (e2e/hostcheck). The teardown always runs and must leave the
# host as it found it; its failure fails the run. E2E_KEEP=1 keeps the cluster for another look.
set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${E2E_PYTHON:-python3}"
export KUBECACHEDIR="$E2E_DIR/.cluster/kube-cache"  # keep kubectl's cache out of ~/.kube
HOST_BEFORE="$E2E_DIR/.cache/host-before.json"
t0=$SECONDS

teardown() {
  local rc=$?
  if [[ -n ${watcher:-} ]]; then kill "$watcher" 2>/dev/null || true; fi
  if [[ ${E2E_KEEP:-0} == 1 ]]; then
    echo "e2e: cluster kept; export KUBECONFIG=$E2E_DIR/.cluster/kubeconfig; make -f e2e/e2e.mk cluster-down when done"
    exit "$rc"
  fi
  local t=$SECONDS
  bash "$E2E_DIR/cluster/down.sh" || rc=1
  echo "e2e: teardown $((SECONDS - t))s"
  if [[ -f $HOST_BEFORE ]]; then
    E2E_HOST_BEFORE="$HOST_BEFORE" "$PYTHON" -m pytest -q -p no:cacheprovider "$E2E_DIR/hostcheck" || rc=1
  fi
  echo "e2e: total $((SECONDS - t0))s"
  exit "$rc"
}

# A clean host to compare against: whatever of this checkout's cluster is left goes first.
bash "$E2E_DIR/cluster/down.sh"
python3 "$E2E_DIR/cluster/hoststate.py" snapshot "$HOST_BEFORE"
trap teardown EXIT

t=$SECONDS
E2E_LOAD_CACHED_IMAGES=0 bash "$E2E_DIR/cluster/up.sh"  # images.sh loads fresh ones
echo "e2e: bring-up $((SECONDS - t))s"
bash "$E2E_DIR/cluster/status.sh" >&2 || true
USAGE=(python3 "$E2E_DIR/cluster/usage.py" --cluster-dir "$E2E_DIR/.cluster")
"${USAGE[@]}" --save "$E2E_DIR/.cache/usage-up.json" || true
t=$SECONDS
bash "$E2E_DIR/cluster/images.sh" all
echo "e2e: images $((SECONDS - t))s"
t=$SECONDS
# The suite's helpers that need the pod network (the operator run from the source tree)
# run in the control plane's namespace; node-loss scenarios use node.sh. Every node runs
# kube-router's firewall, so the network_policy tests run here too (docs/e2e.md).
"${USAGE[@]}" --watch "$E2E_DIR/.cache/usage-peak.json" &
watcher=$!
KUBECONFIG="$E2E_DIR/.cluster/kubeconfig" \
  E2E_POD_NETWORK_NETNS=/run/netns/bg-e2e-cp \
  E2E_NODE_CTL="bash $E2E_DIR/cluster/node.sh" \
  "$PYTHON" -m pytest --durations=10 "$E2E_DIR/tests" "$@" || rc=$?
echo "e2e: tests $((SECONDS - t))s"
kill "$watcher" 2>/dev/null || true
wait "$watcher" 2>/dev/null || true
echo "e2e: what the cluster cost (avg CPU % of one core, since bring-up):"
"${USAGE[@]}" --since "$E2E_DIR/.cache/usage-up.json" || true
"${USAGE[@]}" --peak "$E2E_DIR/.cache/usage-peak.json" || true
exit "${rc:-0}"
