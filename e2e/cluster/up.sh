#!/usr/bin/env bash
# Bring up the single-node cluster: node address, etcd, control plane,
# containerd, kubelet, kube-proxy, CoreDNS and the volume provisioner.
# Idempotent: whatever already runs is left as it is.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
need ip ss nft iptables containerd runc ctr openssl curl python3 setsid findmnt
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl coredns pause; do
  [[ -x $BIN_DIR/$b ]] || die "$BIN_DIR/$b missing; run: make -f e2e/e2e.mk cluster-build (and cluster-deps)"
done
# Unix socket paths are limited to 107 bytes.
((${#CTRD_SOCK} + 6 <= 107)) || die "checkout path too long for containerd's socket ($CTRD_SOCK); set E2E_CLUSTER_DIR to a shorter directory"
[[ -d /usr/lib/cni && -x /usr/lib/cni/bridge ]] || die "CNI plugins missing in /usr/lib/cni (Debian containernetworking-plugins)"

owner="$(node_if_owner)"
if owned_by_other; then
  die "another local cluster runs on this machine (state dir: ${owner:-unknown, an older checkout}); one per machine: stop it there, or use it with KUBECONFIG=<its state dir>/kubeconfig"
fi

DAEMONS=(etcd kube-apiserver apiforward kube-controller-manager kube-scheduler containerd kubelet kube-proxy coredns provisioner)
running=0
for d in "${DAEMONS[@]}"; do is_running "$d" && running=$((running + 1)); done
if ((running == ${#DAEMONS[@]})) && kubectl_admin get --raw /readyz >/dev/null 2>&1; then
  log "cluster already up; export KUBECONFIG=$KUBECONFIG_ADMIN"
  exit 0
fi
if ((running == 0)) && [[ -d $DATA_DIR || -d $SAVE_DIR ]]; then
  # Left by a run whose processes died (a session ended): put the host back first.
  log "cleaning up state left by an earlier run"
  bash "$CLUSTER_SCRIPTS/down.sh"
fi

start=$SECONDS
if ((running == 0)); then
  for port in "127.0.0.1:$ETCD_CLIENT_PORT" "127.0.0.1:$ETCD_PEER_PORT" "$NODE_IP:$APISERVER_PORT"; do
    if ss -Hltn "src $port" | grep -q .; then die "$port is already in use by another program"; fi
  done
fi
bash "$CLUSTER_SCRIPTS/pki.sh"
mkdir -p "$RUN_DIR" "$LOG_DIR" "$DATA_DIR" "$CONF_DIR"

# --- host state: saved once per cluster life, restored by down.sh.
if [[ ! -f $SAVE_DIR/sysctl.json ]]; then
  log "saving host state (sysctls, netfilter, netns) to $SAVE_DIR"
  python3 "$CLUSTER_SCRIPTS/hoststate.py" save "$SAVE_DIR"
fi

# --- node address: a port-less bridge of our own, so nothing depends on the uplink.
# Both get our state dir as alias, so `down` (ours or another checkout's) can
# tell whose they are. The CNI bridge plugin adopts the existing pod bridge.
for link in "$NODE_IF" "$POD_BRIDGE"; do
  if ! ip link show "$link" >/dev/null 2>&1; then
    log "creating interface $link"
    ip link add "$link" type bridge
    ip link set "$link" addrgenmode none 2>/dev/null || true
  fi
  ip link set "$link" alias "$E2E_CLUSTER_DIR"
done
ip addr replace "$NODE_IP/32" dev "$NODE_IF"
ip link set "$NODE_IF" up
# Pod packets routed to the node address and to ClusterIPs need forwarding
# on the pod bridge (the CNI bridge plugin would set it too).
sysctl -qw net.ipv4.ip_forward=1

P=$PKI_DIR
# --- etcd: loopback only, client-cert authenticated.
start_daemon etcd "$BIN_DIR/etcd" --name e2e --data-dir "$DATA_DIR/etcd" \
  --listen-client-urls "https://127.0.0.1:$ETCD_CLIENT_PORT" \
  --advertise-client-urls "https://127.0.0.1:$ETCD_CLIENT_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
  --cert-file "$P/etcd-server.crt" --key-file "$P/etcd-server.key" \
  --client-cert-auth --trusted-ca-file "$P/ca.crt" \
  --unsafe-no-fsync --log-level warn
etcd_ok() {
  curl -sf --cacert "$P/ca.crt" --cert "$P/apiserver-etcd-client.crt" --key "$P/apiserver-etcd-client.key" \
    "https://127.0.0.1:$ETCD_CLIENT_PORT/health" | grep -q '"health":"true"'
}
wait_for etcd 60 etcd_ok

# --- kube-apiserver on the node address only.
start_daemon kube-apiserver "$BIN_DIR/kube-apiserver" \
  --advertise-address "$NODE_IP" --bind-address "$NODE_IP" --secure-port "$APISERVER_PORT" \
  --etcd-servers "https://127.0.0.1:$ETCD_CLIENT_PORT" --etcd-cafile "$P/ca.crt" \
  --etcd-certfile "$P/apiserver-etcd-client.crt" --etcd-keyfile "$P/apiserver-etcd-client.key" \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --client-ca-file "$P/ca.crt" --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" \
  --kubelet-client-certificate "$P/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$P/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$P/ca.crt" \
  --kubelet-preferred-address-types InternalIP,Hostname \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --service-account-issuer "https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
  --service-account-key-file "$P/sa.pub" --service-account-signing-key-file "$P/sa.key" \
  --allow-privileged=true --profiling=false --v=1
# Host clients reach it through 127.0.0.1 only (see apiforward.py): the exported kubeconfig
# must never name the node address, which leaves the machine with the cluster.
start_daemon apiforward python3 "$CLUSTER_SCRIPTS/apiforward.py" \
  --listen "127.0.0.1:$APISERVER_PORT" --target "$NODE_IP:$APISERVER_PORT" --state-dir "$E2E_CLUSTER_DIR"
wait_for kube-apiserver 120 kubectl_admin get --raw /readyz

start_daemon kube-controller-manager "$BIN_DIR/kube-controller-manager" \
  --kubeconfig "$P/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$P/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$P/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false \
  --service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" \
  --use-service-account-credentials=true \
  --cluster-signing-cert-file "$P/ca.crt" --cluster-signing-key-file "$P/ca.key" \
  --service-cluster-ip-range "$SERVICE_CIDR" --allocate-node-cidrs=false \
  --profiling=false --v=1
start_daemon kube-scheduler "$BIN_DIR/kube-scheduler" \
  --kubeconfig "$P/scheduler.kubeconfig" \
  --authentication-kubeconfig "$P/scheduler.kubeconfig" \
  --authorization-kubeconfig "$P/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false --profiling=false --v=1

# --- RBAC for our host-side helpers, storage class.
kubectl_admin apply -f "$CLUSTER_SCRIPTS/manifests/bootstrap.yaml" >/dev/null

# --- containerd with its own root/state/socket and our CNI config.

mkdir -p "$CONF_DIR/cni" "$RUN_DIR/containerd" "$DATA_DIR/containerd"
cat >"$CONF_DIR/cni/10-bg-e2e.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "bg-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$POD_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$DATA_DIR/cni-ipam",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "$SERVICE_CIDR"}, {"dst": "$NODE_IP/32"}]
      }
    },
    {"type": "loopback"}
  ]
}
JSON
cat >"$CONF_DIR/containerd.toml" <<TOML
version = 2
root = "$DATA_DIR/containerd"
state = "$RUN_DIR/containerd/state"
[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = "$CTRD_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$DATA_DIR/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "$RUN_DIR/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$CONF_DIR/cni"
    max_conf_num = 1
TOML
start_daemon containerd containerd --config "$CONF_DIR/containerd.toml" --log-level warn
wait_for containerd 30 ctr --address "$CTRD_SOCK" version

# The sandbox image: our pause binary as a one-layer image.
bash "$CLUSTER_SCRIPTS/images.sh" pause

# --- kubelet.
mkdir -p "$DATA_DIR/kubelet" "$DATA_DIR/pod-logs"
echo "nameserver $NODE_IP" >"$CONF_DIR/resolv.conf"
cat >"$CONF_DIR/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $P/kubelet.crt
tlsPrivateKeyFile: $P/kubelet.key
containerRuntimeEndpoint: unix://$CTRD_SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: [$NODE_IP]
clusterDomain: $CLUSTER_DOMAIN
resolvConf: $CONF_DIR/resolv.conf
podLogsDir: $DATA_DIR/pod-logs
evictionHard: {memory.available: "100Mi", nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
YAML
start_daemon kubelet "$BIN_DIR/kubelet" --config "$CONF_DIR/kubelet.yaml" \
  --kubeconfig "$P/kubelet.kubeconfig" --root-dir "$DATA_DIR/kubelet" --cert-dir "$DATA_DIR/kubelet/pki" \
  --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v=1

# --- kube-proxy (nftables) leaving conntrack sysctls alone.
cat >"$CONF_DIR/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $P/kube-proxy.kubeconfig}
mode: nftables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$NODE_IP/32"]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
start_daemon kube-proxy "$BIN_DIR/kube-proxy" --config "$CONF_DIR/kube-proxy.yaml" --v=1

# --- CoreDNS on the node address, answering only for the cluster's zones.
cat >"$CONF_DIR/Corefile" <<COREFILE
$CLUSTER_DOMAIN:$DNS_PORT in-addr.arpa:$DNS_PORT ip6.arpa:$DNS_PORT {
    bind $NODE_IP
    errors
    ready 127.0.0.1:18181
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $P/coredns.kubeconfig brokergroup-e2e
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
}
COREFILE
start_daemon coredns "$BIN_DIR/coredns" -conf "$CONF_DIR/Corefile"

# --- volume provisioner for the default StorageClass.
start_daemon provisioner python3 "$CLUSTER_SCRIPTS/provisioner.py" \
  --server "https://$NODE_IP:$APISERVER_PORT" --pki-dir "$P" --volumes-dir "$DATA_DIR/volumes" --node "$NODE_NAME"

node_ready() {
  kubectl_admin get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}
wait_for "kubelet (node $NODE_NAME Ready)" 120 node_ready
wait_for "kube-proxy healthz" 60 curl -sf http://127.0.0.1:10256/healthz
wait_for "coredns ready" 60 curl -sf http://127.0.0.1:18181/ready
wait_for "kube-controller-manager (default service account)" 60 kubectl_admin -n default get serviceaccount default

# Locally built images (if `make images` ran before) load into the fresh containerd.
if [[ ${E2E_LOAD_CACHED_IMAGES:-1} == 1 ]]; then
  bash "$CLUSTER_SCRIPTS/images.sh" load-cached
fi

log "cluster up in $((SECONDS - start))s; export KUBECONFIG=$KUBECONFIG_ADMIN"
