#!/usr/bin/env bash
# Which of the cluster's daemons run (and in which network namespace), and the nodes.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
show() {
  local d=$1 where=$2
  if is_running "$d"; then echo "$d: running (pid $(<"$(pid_file "$d")"), $where)"; else echo "$d: stopped"; fi
}
show apiforward "host, 127.0.0.1:$APISERVER_PORT -> $CP_NS"
for d in etcd kube-apiserver kube-controller-manager kube-scheduler coredns provisioner; do show "$d" "$CP_NS"; done
for i in $(node_indexes); do
  for d in containerd kubelet kube-proxy kube-router; do show "node$i-$d" "$(node_name "$i")"; done
done
if is_running kube-apiserver; then
  kubectl_admin get nodes -L topology.kubernetes.io/zone -o wide
  echo "export KUBECONFIG=$KUBECONFIG_ADMIN"
fi
