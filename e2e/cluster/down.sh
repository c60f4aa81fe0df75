#!/usr/bin/env bash
# Tear the cluster down and put the host back: pods removed through the
# kubelet (so CNI cleans up), daemons stopped by their pid files, mounts,
# interfaces and state removed, sysctls and netfilter restored.
# Safe to run when nothing is up. `down.sh --purge` also drops binaries/PKI.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
start=$SECONDS
owner="$(node_if_owner)"
if owned_by_other; then
  # The host belongs to another checkout's running cluster: stop only what our
  # pid files name, drop our state, and touch nothing shared.
  log "the running cluster belongs to ${owner:-another checkout}; leaving the host to it"
  for d in apiforward provisioner coredns kube-proxy kubelet containerd kube-controller-manager kube-scheduler kube-apiserver etcd; do
    stop_daemon "$d" 5
  done
  rm -rf "$RUN_DIR" "$CONF_DIR" "$SAVE_DIR"
  findmnt -rn -o TARGET | grep -qF "$E2E_CLUSTER_DIR/" || rm -rf "$DATA_DIR"
  exit 0
fi

# 1. Let the kubelet remove every pod while the control plane still answers:
#    stop the controllers first so nothing is recreated.
if is_running kubelet && is_running kube-apiserver && kubectl_admin get --raw /readyz >/dev/null 2>&1; then
  stop_daemon kube-controller-manager 5
  stop_daemon kube-scheduler 5
  log "deleting all pods"
  kubectl_admin delete pods --all --all-namespaces --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
  no_sandboxes() {
    [[ -z "$(ctr --address "$CTRD_SOCK" -n k8s.io tasks ls -q 2>/dev/null)" ]]
  }
  deadline=$((SECONDS + 60))
  until no_sandboxes || ((SECONDS > deadline)); do sleep 0.5; done
  no_sandboxes || log "some containers still run after 60s; killing them"
fi

# 2. Stop the daemons: first the loopback door host clients use, then node side first.
# The apiserver takes ~70s on TERM: KILL it.
stop_daemon apiforward 5
for d in provisioner coredns kube-proxy kubelet; do stop_daemon "$d" 10; done
if [[ -S $CTRD_SOCK ]] && is_running containerd; then
  for t in $(ctr --address "$CTRD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr --address "$CTRD_SOCK" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
  done
  sleep 1
fi
stop_daemon containerd 10
for d in kube-controller-manager kube-scheduler; do stop_daemon "$d" 5; done
stop_daemon kube-apiserver 0
stop_daemon etcd 10

# 3. Mounts under our directory (pod volumes, overlay snapshots, shm), deepest first.
if [[ -d $E2E_CLUSTER_DIR ]]; then
  { findmnt -rn -o TARGET | grep -F "$E2E_CLUSTER_DIR/" || true; } | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
fi

# 4. Interfaces: pod veths on our bridge, the bridge, the node interface.
if ip link show "$POD_BRIDGE" >/dev/null 2>&1 && [[ "$(cat "/sys/class/net/$POD_BRIDGE/ifalias")" == "$E2E_CLUSTER_DIR" ]]; then
  for v in $(ip -o link show master "$POD_BRIDGE" | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "$v" 2>/dev/null || true
  done
  ip link del "$POD_BRIDGE"
fi
ip link show "$NODE_IF" >/dev/null 2>&1 && ip link del "$NODE_IF"

# 5. Host state: sysctls, netfilter, netns, cgroups as before `up`.
rc=0
if [[ -d $SAVE_DIR ]]; then
  log "restoring host state"
  python3 "$CLUSTER_SCRIPTS/hoststate.py" restore "$SAVE_DIR" --cluster-dir "$E2E_CLUSTER_DIR" || rc=$?
  ((rc == 0)) && rm -rf "$SAVE_DIR" && log "host state restored"
fi

# 6. Cluster state (etcd, containerd root, pod data); binaries, PKI, logs stay.
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
