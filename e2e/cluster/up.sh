#!/usr/bin/env bash
# Bring up the multi-node cluster inside network namespaces of its own:
#   bg-e2e-lan    a bridge joining the others (no address)
#   bg-e2e-cp     etcd, kube-apiserver, controller-manager, scheduler, CoreDNS, provisioner
#   bg-e2e-nodeN  containerd, kubelet, kube-proxy, kube-router (NetworkPolicy) and the node's pods
# The host gets no address, link or rule of the cluster: only "unreachable" routes for the
# cluster's ranges while it runs, and a forwarder on 127.0.0.1 for host clients.
# Idempotent: whatever already runs is left as it is.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
need ip ss nft iptables containerd runc ctr openssl curl python3 setsid nsenter findmnt
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl coredns pause; do
  [[ -x $BIN_DIR/$b ]] || die "$BIN_DIR/$b missing; run: make -f e2e/e2e.mk cluster-build (and cluster-deps)"
done
# Unix socket paths are limited to 107 bytes.
sock="$(node_sock "$NODE_COUNT")"
((${#sock} + 6 <= 107)) || die "checkout path too long for containerd's socket ($sock); set E2E_CLUSTER_DIR to a shorter directory"
[[ -d /usr/lib/cni && -x /usr/lib/cni/bridge ]] || die "CNI plugins missing in /usr/lib/cni (Debian containernetworking-plugins)"
((NODE_COUNT >= 1 && NODE_COUNT <= 9)) || die "E2E_NODES must be 1..9"

if owned_by_other; then
  die "another local cluster runs on this machine (state dir: $(cluster_owner)); one per machine: stop it there, or use it with KUBECONFIG=<its state dir>/kubeconfig"
fi

CP_DAEMONS=(etcd kube-apiserver kube-controller-manager kube-scheduler coredns provisioner apiforward)
NODE_DAEMONS=(containerd kubelet kube-proxy kube-router)
all_daemons() {
  local i d
  printf '%s\n' "${CP_DAEMONS[@]}"
  for i in $(node_indexes); do for d in "${NODE_DAEMONS[@]}"; do echo "node$i-$d"; done; done
}
running=0 total=0
for d in $(all_daemons); do
  total=$((total + 1))
  is_running "$d" && running=$((running + 1))
done
if ((running == total)) && kubectl_admin get --raw /readyz >/dev/null 2>&1; then
  log "cluster already up; export KUBECONFIG=$KUBECONFIG_ADMIN"
  exit 0
fi
if ((running == 0)) && [[ -d $DATA_DIR || -d $SAVE_DIR ]] || { ((running == 0)) && netns_exists "$LAN_NS"; }; then
  # Left by a run whose processes died (a session ended): put the host back first.
  log "cleaning up state left by an earlier run"
  bash "$CLUSTER_SCRIPTS/down.sh"
fi

start=$SECONDS
if ((running == 0)) && ss -Hltn "src 127.0.0.1:$APISERVER_PORT" | grep -q .; then
  die "127.0.0.1:$APISERVER_PORT (host clients' door to the apiserver) is already in use by another program"
fi
bash "$CLUSTER_SCRIPTS/pki.sh"
mkdir -p "$RUN_DIR" "$LOG_DIR" "$DATA_DIR" "$CONF_DIR"

# --- host state: saved once per cluster life, restored by down.sh.
if [[ ! -f $SAVE_DIR/sysctl.json ]]; then
  log "saving host state (sysctls, netfilter, netns, routes, mounts) to $SAVE_DIR"
  python3 "$CLUSTER_SCRIPTS/hoststate.py" save "$SAVE_DIR"
fi

# --- the network: namespaces, the lan bridge, one veth pair per member.
# Links are made inside the namespaces (ip -n), so none ever exists on the host.
# ns_sysctl NS KEY=VALUE... : net.* sysctls are per namespace; the host's stay as they are.
ns_sysctl() { local ns=$1; shift; in_ns "$ns" sysctl -qw "$@"; }
make_ns() {
  local ns=$1
  netns_exists "$ns" || ip netns add "$ns"
  ip -n "$ns" link set lo up
}
# join NS IFNAME_ON_LAN ADDRESS : a veth pair, eth0 in NS (with ADDRESS/24), the other end on br0.
join() {
  local ns=$1 port=$2 addr=$3
  if ! ip -n "$LAN_NS" link show "$port" >/dev/null 2>&1; then
    ip -n "$LAN_NS" link add "$port" type veth peer name eth0 netns "$ns"
  fi
  ip -n "$LAN_NS" link set "$port" master "$LAN_BRIDGE" up
  ip -n "$ns" addr replace "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
}
log "network namespaces: $(all_netns | tr '\n' ' ')"
make_ns "$LAN_NS"
if ! ip -n "$LAN_NS" link show "$LAN_BRIDGE" >/dev/null 2>&1; then
  ip -n "$LAN_NS" link add "$LAN_BRIDGE" type bridge
fi
ip -n "$LAN_NS" link set "$LAN_BRIDGE" alias "$E2E_CLUSTER_DIR" up
make_ns "$CP_NS"
join "$CP_NS" cp "$CP_IP"
for i in $(node_indexes); do
  n="$(node_name "$i")"
  make_ns "$n"
  join "$n" "node$i" "$(node_ip "$i")"
  ns_sysctl "$n" net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0
  # Routes to the other nodes' pods; Services through the control plane (kube-proxy
  # rewrites them first; the route only lets the node's own sockets start). No default route.
  for j in $(node_indexes); do
    ((j == i)) || ip -n "$n" route replace "$(node_pod_cidr "$j")" via "$(node_ip "$j")"
  done
  ip -n "$n" route replace "$SERVICE_CIDR" via "$CP_IP"
  # The control plane answers pods (DNS, the apiserver) and reaches them (tests' helpers).
  ip -n "$CP_NS" route replace "$(node_pod_cidr "$i")" via "$(node_ip "$i")"
done
# --- the host: every range of the cluster unreachable, so a stray packet fails here.
for r in "${CLUSTER_RANGES[@]}"; do
  ip route replace unreachable "$r" proto "$HOST_ROUTE_PROTO"
done

P=$PKI_DIR
# --- etcd: the control plane's loopback only, client-cert authenticated.
start_daemon etcd "$CP_NS" "$BIN_DIR/etcd" --name e2e --data-dir "$DATA_DIR/etcd" \
  --listen-client-urls "https://127.0.0.1:$ETCD_CLIENT_PORT" \
  --advertise-client-urls "https://127.0.0.1:$ETCD_CLIENT_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
  --cert-file "$P/etcd-server.crt" --key-file "$P/etcd-server.key" \
  --client-cert-auth --trusted-ca-file "$P/ca.crt" \
  --unsafe-no-fsync --log-level warn
etcd_ok() {
  in_ns "$CP_NS" curl -sf --cacert "$P/ca.crt" --cert "$P/apiserver-etcd-client.crt" --key "$P/apiserver-etcd-client.key" \
    "https://127.0.0.1:$ETCD_CLIENT_PORT/health" | grep -q '"health":"true"'
}
wait_for etcd 60 etcd_ok

# --- kube-apiserver: every address of the control plane's namespace (its loopback and
# the lan). Tolerations of 15 s for not-ready/unreachable nodes, so a lost node's pods are
# marked for deletion within a test's patience (the default is 5 minutes).
start_daemon kube-apiserver "$CP_NS" "$BIN_DIR/kube-apiserver" \
  --advertise-address "$CP_IP" --bind-address 0.0.0.0 --secure-port "$APISERVER_PORT" \
  --etcd-servers "https://127.0.0.1:$ETCD_CLIENT_PORT" --etcd-cafile "$P/ca.crt" \
  --etcd-certfile "$P/apiserver-etcd-client.crt" --etcd-keyfile "$P/apiserver-etcd-client.key" \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --client-ca-file "$P/ca.crt" --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" \
  --kubelet-client-certificate "$P/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$P/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$P/ca.crt" \
  --kubelet-preferred-address-types InternalIP,Hostname \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --default-not-ready-toleration-seconds 15 --default-unreachable-toleration-seconds 15 \
  --service-account-issuer "https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
  --service-account-key-file "$P/sa.pub" --service-account-signing-key-file "$P/sa.key" \
  --allow-privileged=true --profiling=false --v=1
# Host clients reach it through 127.0.0.1 only: a forwarder that enters the control
# plane's namespace (netforward.py). The exported kubeconfig names 127.0.0.1.
start_daemon apiforward "" python3 "$CLUSTER_SCRIPTS/netforward.py" \
  --listen "127.0.0.1:$APISERVER_PORT" --netns "$(netns_path "$CP_NS")" \
  --target "127.0.0.1:$APISERVER_PORT" --state-dir "$E2E_CLUSTER_DIR"
wait_for kube-apiserver 120 kubectl_admin get --raw /readyz

# Node health from the kubelets' leases: NotReady 20 s after a kubelet stops.
start_daemon kube-controller-manager "$CP_NS" "$BIN_DIR/kube-controller-manager" \
  --kubeconfig "$P/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$P/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$P/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false \
  --service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" \
  --use-service-account-credentials=true \
  --cluster-signing-cert-file "$P/ca.crt" --cluster-signing-key-file "$P/ca.key" \
  --service-cluster-ip-range "$SERVICE_CIDR" --allocate-node-cidrs=false \
  --node-monitor-period 2s --node-monitor-grace-period 20s \
  --profiling=false --v=1
start_daemon kube-scheduler "$CP_NS" "$BIN_DIR/kube-scheduler" \
  --kubeconfig "$P/scheduler.kubeconfig" \
  --authentication-kubeconfig "$P/scheduler.kubeconfig" \
  --authorization-kubeconfig "$P/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false --profiling=false --v=1

# --- RBAC for our helpers, storage class.
kubectl_admin apply -f "$CLUSTER_SCRIPTS/manifests/bootstrap.yaml" >/dev/null

# --- CoreDNS on the control plane's lan address, answering only for the cluster's zones.
cat >"$CONF_DIR/Corefile" <<COREFILE
$CLUSTER_DOMAIN:$DNS_PORT in-addr.arpa:$DNS_PORT ip6.arpa:$DNS_PORT {
    bind $CP_IP
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
start_daemon coredns "$CP_NS" "$BIN_DIR/coredns" -conf "$CONF_DIR/Corefile"

# --- volume provisioner for the default StorageClass (a directory per claim, on the node
# the scheduler chose).
start_daemon provisioner "$CP_NS" python3 "$CLUSTER_SCRIPTS/provisioner.py" \
  --server "https://127.0.0.1:$APISERVER_PORT" --pki-dir "$P" --volumes-dir "$DATA_DIR/volumes"

# --- the nodes: containerd, kubelet, kube-proxy, each in its node's namespace.
echo "nameserver $CP_IP" >"$CONF_DIR/resolv.conf"
start_node() {
  local i=$1 n ip cidr nd nc
  n="$(node_name "$i")" ip="$(node_ip "$i")" cidr="$(node_pod_cidr "$i")"
  nd="$DATA_DIR/node$i" nc="$CONF_DIR/node$i"
  mkdir -p "$nc/cni" "$RUN_DIR/node$i" "$nd/containerd" "$nd/kubelet" "$nd/pod-logs"
  # The pods' bridge lives in the node's namespace; pods get a default route to it, and
  # the namespace itself has none beyond the cluster's ranges.
  cat >"$nc/cni/10-$CNI_NETWORK.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "isDefaultGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$nd/cni-ipam",
        "ranges": [[{"subnet": "$cidr"}]]
      }
    },
    {"type": "loopback"}
  ]
}
JSON
  cat >"$nc/containerd.toml" <<TOML
version = 2
root = "$nd/containerd"
state = "$RUN_DIR/node$i/state"
[grpc]
  address = "$(node_sock "$i")"
[ttrpc]
  address = "$(node_sock "$i").ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$nd/containerd-opt"
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
        Root = "$RUN_DIR/node$i/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$nc/cni"
    max_conf_num = 1
TOML
  start_containerd "$i"

  # Each kubelet has a cgroup root of its own (they would otherwise share /kubepods and
  # remove each other's pods as orphans). Status every 4 s; the lease decides NotReady.
  cat >"$nc/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $P/kubelet-$n.crt
tlsPrivateKeyFile: $P/kubelet-$n.key
containerRuntimeEndpoint: unix://$(node_sock "$i")
cgroupDriver: cgroupfs
cgroupRoot: /$n
failCgroupV1: false
failSwapOn: false
clusterDNS: [$CP_IP]
clusterDomain: $CLUSTER_DOMAIN
resolvConf: $CONF_DIR/resolv.conf
podLogsDir: $nd/pod-logs
nodeStatusUpdateFrequency: 4s
nodeLeaseDurationSeconds: 10
evictionHard: {memory.available: "100Mi", nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
YAML
  cat >"$nc/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $P/kube-proxy.kubeconfig}
mode: nftables
clusterCIDR: $CLUSTER_CIDR
hostnameOverride: $n
bindAddress: $ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$ip/32"]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
}
for i in $(node_indexes); do start_node "$i"; done
for i in $(node_indexes); do
  wait_for "node$i-containerd" 30 ctr --address "$(node_sock "$i")" version
done
# The sandbox image (our pause binary) into every node's containerd.
bash "$CLUSTER_SCRIPTS/images.sh" pause
for i in $(node_indexes); do start_kubelet_and_wait "$i"; done

nodes_ready() {
  local want=$NODE_COUNT got
  got="$(kubectl_admin get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -cx True)"
  ((got == want))
}
wait_for "kubelet ($NODE_COUNT nodes Ready)" 180 nodes_ready
for i in $(node_indexes); do start_kube_router "$i"; done
for i in $(node_indexes); do
  wait_for "node$i-kube-proxy healthz" 60 in_ns "$(node_name "$i")" curl -sf http://127.0.0.1:10256/healthz
  wait_for "node$i-kube-router healthz" 90 in_ns "$(node_name "$i")" curl -sf "http://127.0.0.1:$KUBE_ROUTER_HEALTH_PORT/healthz"
done
wait_for "coredns ready" 60 in_ns "$CP_NS" curl -sf http://127.0.0.1:18181/ready
wait_for "kube-controller-manager (default service account)" 60 kubectl_admin -n default get serviceaccount default

# Locally built images (if `make images` ran before) load into the fresh containerds.
if [[ ${E2E_LOAD_CACHED_IMAGES:-1} == 1 ]]; then
  bash "$CLUSTER_SCRIPTS/images.sh" load-cached
fi

log "cluster up in $((SECONDS - start))s ($NODE_COUNT nodes); export KUBECONFIG=$KUBECONFIG_ADMIN"
