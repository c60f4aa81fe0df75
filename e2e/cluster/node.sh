#!/usr/bin/env bash
# Lose a node, and bring it back (the suite's node-loss scenario):
#   node.sh stop NODE    stop its kubelet, kube-proxy, kube-router and containerd and unplug
#                        it from the lan: its pods keep running but nobody reaches them, as if
#                        the machine had died (the node turns NotReady; its pods stay Terminating)
#   node.sh start NODE   plug it back in and start its daemons again
#   node.sh freeze NODE CONTAINER_ID / thaw NODE CONTAINER_ID
#                        freeze (cgroup freezer, `ctr task pause`) or thaw one container of
#                        that node: the pod and its kubelet stay, the process stops answering
# NODE is a node name (bg-e2e-node2) or its index (2).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
usage() { die "usage: node.sh stop|start NODE (a name like $(node_name 1), or 1..$NODE_COUNT)"; }
[[ $# -eq 2 || ( $# -eq 3 && ( $1 == freeze || $1 == thaw ) ) ]] || usage
i="${2#"$NETNS_PREFIX-node"}"
[[ $i =~ ^[0-9]+$ ]] && ((i >= 1 && i <= NODE_COUNT)) || usage
n="$(node_name "$i")"
netns_exists "$n" || die "node $n is not up"
case $1 in
  stop)
    stop_daemon "node$i-kubelet" 0
    stop_daemon "node$i-kube-proxy" 0
    stop_daemon "node$i-kube-router" 0
    stop_daemon "node$i-containerd" 0
    ip -n "$LAN_NS" link set "node$i" down
    log "node $n lost: kubelet, kube-proxy, kube-router, containerd stopped, unplugged from the lan"
    ;;
  start)
    ip -n "$LAN_NS" link set "node$i" up
    start_containerd "$i"
    wait_for "node$i-containerd" 30 ctr --address "$(node_sock "$i")" version
    start_kubelet_and_wait "$i"
    start_kube_router "$i"
    log "node $n back: plugged in, containerd, kubelet, kube-proxy, kube-router started"
    ;;
  freeze | thaw)
    id="${3#containerd://}"
    [[ $id =~ ^[0-9a-f]{12,64}$ ]] || die "not a container id: $3"
    verb=pause
    [[ $1 == thaw ]] && verb=resume
    ctr --address "$(node_sock "$i")" -n k8s.io task "$verb" "$id"
    log "container ${id:0:12} on $n: $verb"
    ;;
  *) usage ;;
esac
