#!/usr/bin/env bash
# Tear the cluster down and put the host back: the host's forwarders first (so no host client
# reaches anything more), pods removed through the kubelets, daemons stopped by their pid
# files, mounts, network namespaces and the host's unreachable routes removed, sysctls
# restored. Fails if the host differs from before `up` in anything of the cluster's.
# Safe to run when nothing is up. `down.sh --purge` also drops binaries/PKI.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
start=$SECONDS
stop_forwarders() {
  local f
  for f in "$RUN_DIR"/apiforward.pid "$RUN_DIR"/forward-*.pid; do
    [[ -f $f ]] && stop_daemon "$(basename "$f" .pid)" 5
  done
  return 0
}
node_daemons_stop() {
  local i
  for i in $(node_indexes_any); do
    stop_daemon "node$i-kube-router" 10
    stop_daemon "node$i-kube-proxy" 10
    stop_daemon "node$i-kubelet" 10
  done
}
# Nodes of this cluster, whatever E2E_NODES says now: those with pid files or state.
node_indexes_any() {
  local f i
  {
    node_indexes
    for f in "$RUN_DIR"/node*-*.pid; do [[ -f $f ]] && basename "$f" | sed -n 's/^node\([0-9]*\)-.*/\1/p'; done
    for f in "$DATA_DIR"/node*; do [[ -d $f ]] && basename "$f" | sed -n 's/^node\([0-9]*\)$/\1/p'; done
  } | sort -un
}

if owned_by_other; then
  # The host belongs to another checkout's running cluster: stop only what our
  # pid files name, drop our state, and touch nothing shared.
  log "the running cluster belongs to $(cluster_owner); leaving the host to it"
  stop_forwarders
  for f in "$RUN_DIR"/*.pid; do [[ -f $f ]] && stop_daemon "$(basename "$f" .pid)" 5; done
  rm -rf "$RUN_DIR" "$CONF_DIR" "$SAVE_DIR"
  findmnt -rn -o TARGET | grep -qF "$E2E_CLUSTER_DIR/" || rm -rf "$DATA_DIR"
  exit 0
fi

# 1. The host's doors into the cluster close first.
stop_forwarders

# 2. Let the kubelets remove every pod while the control plane still answers:
#    stop the controllers first so nothing is recreated.
ctr_tasks() { ctr --address "$(node_sock "$1")" -n k8s.io tasks ls -q 2>/dev/null; }
no_tasks() {
  local i
  for i in $(node_indexes_any); do
    [[ -S $(node_sock "$i") ]] && [[ -n "$(ctr_tasks "$i")" ]] && return 1
  done
  return 0
}
if is_running kube-apiserver && kubectl_admin get --raw /readyz >/dev/null 2>&1; then
  stop_daemon kube-controller-manager 5
  stop_daemon kube-scheduler 5
  log "deleting all pods"
  kubectl_admin delete pods --all --all-namespaces --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
  deadline=$((SECONDS + 60))
  until no_tasks || ((SECONDS > deadline)); do sleep 0.5; done
  no_tasks || log "some containers still run after 60s; killing them"
fi

# 3. Node side: kube-proxy and kubelet, then what containerd still runs, then containerd.
node_daemons_stop
for i in $(node_indexes_any); do
  if [[ -S $(node_sock "$i") ]] && is_running "node$i-containerd"; then
    for t in $(ctr_tasks "$i"); do
      ctr --address "$(node_sock "$i")" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
    done
  fi
done
sleep 1
for i in $(node_indexes_any); do stop_daemon "node$i-containerd" 10; done
# Whatever of ours outlived containerd: shims serving our sockets, processes in our nodes'
# cgroups. Each is ours by our state dir on its command line or our cgroup root.
python3 "$CLUSTER_SCRIPTS/hoststate.py" kill-leftovers --cluster-dir "$E2E_CLUSTER_DIR" --cgroup-prefix "/$NETNS_PREFIX-node" || true

# 4. The control plane. The apiserver takes ~70s on TERM: KILL it.
for d in provisioner coredns kube-controller-manager kube-scheduler; do stop_daemon "$d" 5; done
stop_daemon kube-apiserver 0
stop_daemon etcd 10
for f in "$RUN_DIR"/*.pid; do [[ -f $f ]] && stop_daemon "$(basename "$f" .pid)" 5; done

# 5. Mounts under our directory (pod volumes, overlay snapshots, shm), deepest first.
if [[ -d $E2E_CLUSTER_DIR ]]; then
  { findmnt -rn -o TARGET | grep -F "$E2E_CLUSTER_DIR/" || true; } | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
fi

# 6. The network: our namespaces (their links and rules go with them), then the host's
#    unreachable routes for the cluster's ranges.
for ns in $(ip netns list | awk '{print $1}' | grep "^$NETNS_PREFIX-" || true); do
  ip netns del "$ns" 2>/dev/null || log "could not delete network namespace $ns"
done
for r in "${CLUSTER_RANGES[@]}"; do
  ip route del unreachable "$r" proto "$HOST_ROUTE_PROTO" 2>/dev/null || true
done

# 7. Host state: sysctls, pod network namespaces, host paths, cgroups as before `up`.
rc=0
if [[ -d $SAVE_DIR ]]; then
  log "restoring host state"
  python3 "$CLUSTER_SCRIPTS/hoststate.py" restore "$SAVE_DIR" --cluster-dir "$E2E_CLUSTER_DIR" || rc=$?
  ((rc == 0)) && rm -rf "$SAVE_DIR" && log "host state restored"
fi

# 8. Cluster state (etcd, containerd roots, pod data); binaries, PKI, logs stay.
# Never rm -r through a mount that survived: it could lead out of our directory.
if findmnt -rn -o TARGET | grep -qF "$E2E_CLUSTER_DIR/"; then
  die "mounts remain under $E2E_CLUSTER_DIR (findmnt | grep $E2E_CLUSTER_DIR); state kept"
fi
rm -rf "$RUN_DIR" "$DATA_DIR" "$CONF_DIR"
if [[ ${1:-} == --purge ]]; then
  rm -rf "$E2E_CLUSTER_DIR"
fi
((rc == 0)) || die "host state differs from before up (see messages above; $SAVE_DIR kept)"
log "cluster down in $((SECONDS - start))s"
