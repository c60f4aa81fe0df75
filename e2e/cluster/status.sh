#!/usr/bin/env bash
# Which of the cluster's daemons run, and the node's view of itself.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
for d in etcd kube-apiserver apiforward kube-controller-manager kube-scheduler containerd kubelet kube-proxy coredns provisioner; do
  if is_running "$d"; then echo "$d: running (pid $(<"$(pid_file "$d")"))"; else echo "$d: stopped"; fi
done
if is_running kube-apiserver; then
  kubectl_admin get nodes -o wide
  echo "export KUBECONFIG=$KUBECONFIG_ADMIN"
fi
