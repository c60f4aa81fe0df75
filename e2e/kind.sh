#!/usr/bin/env bash
# The end-to-end suite on kind, for machines with a Docker engine:
# create a multi-node kind cluster (e2e/kind-config.yaml: a control plane and three workers
# in three zones), build and load the same images, run the same pytest suite, delete the
# cluster (KIND_KEEP=1 keeps it). Extra args go to pytest.
#   e2e/kind.sh node stop|start NODE   lose a node and bring it back (docker stop/start of its
#                                      container; the suite's E2E_NODE_CTL on kind)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ ${1:-} == node ]]; then
  [[ $# -eq 3 && $2 =~ ^(stop|start)$ ]] || { echo "usage: kind.sh node stop|start NODE" >&2; exit 2; }
  docker "$2" "$3" >/dev/null
  exit 0
fi
CLUSTER="${KIND_CLUSTER:-brokergroup-e2e}"
BROKER_IMAGE="${BROKER_IMAGE:-brokergroup/habroker:dev}"
OPERATOR_IMAGE="${OPERATOR_IMAGE:-brokergroup/operator:dev}"
PYTHON="${E2E_PYTHON:-python3}"
for c in kind docker kubectl helm; do
  command -v "$c" >/dev/null || { echo "kind.sh: '$c' is required" >&2; exit 1; }
done

created=0
if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --config e2e/kind-config.yaml --wait 300s
  created=1
fi
cleanup() {
  if [[ $created == 1 && ${KIND_KEEP:-0} != 1 ]]; then kind delete cluster --name "$CLUSTER"; fi
}
trap cleanup EXIT

docker build -f broker_image/Dockerfile -t "$BROKER_IMAGE" .
docker build -f operator/Dockerfile -t "$OPERATOR_IMAGE" .
kind load docker-image --name "$CLUSTER" "$BROKER_IMAGE" "$OPERATOR_IMAGE"

kubeconfig="$(mktemp)"
kind get kubeconfig --name "$CLUSTER" >"$kubeconfig"
KUBECONFIG="$kubeconfig" BROKER_IMAGE="$BROKER_IMAGE" OPERATOR_IMAGE="$OPERATOR_IMAGE" \
  E2E_NODE_CTL="bash $PWD/e2e/kind.sh node" \
  "$PYTHON" -m pytest e2e/tests "$@"
