#!/usr/bin/env bash
# A door from the host to a Service of the running cluster, for a person at the host:
#   forward.sh NAMESPACE/SERVICE PORT [LOCAL_PORT]
# listens on 127.0.0.1:LOCAL_PORT (default PORT) and forwards into node 1's network namespace,
# where kube-proxy sends it on to the Service's pods. Like the apiserver's door it is a
# process of the cluster's: `down` stops it first, and it can reach nothing but the cluster.
# (`kubectl port-forward svc/...` works too: it tunnels through the apiserver's door.)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
[[ $# -ge 2 && $1 == */* ]] || die "usage: forward.sh NAMESPACE/SERVICE PORT [LOCAL_PORT]"
ns=${1%%/*} svc=${1#*/} port=$2 local_port=${3:-$2}
ip="$(kubectl_admin -n "$ns" get service "$svc" -o jsonpath='{.spec.clusterIP}')"
[[ $ip =~ ^[0-9.]+$ ]] || die "service $ns/$svc has no cluster IP ($ip)"
name="forward-$local_port"
start_daemon "$name" "" python3 "$CLUSTER_SCRIPTS/netforward.py" \
  --listen "127.0.0.1:$local_port" --netns "$(netns_path "$(node_name 1)")" \
  --target "$ip:$port" --state-dir "$E2E_CLUSTER_DIR"
log "127.0.0.1:$local_port -> $ns/$svc ($ip:$port); stopped by cluster-down, or: kill \$(cat $(pid_file "$name"))"
