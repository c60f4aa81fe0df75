#!/usr/bin/env bash
# Generate the cluster CA, one client certificate per component (so RBAC sees
# each as its own user), serving certificates, the service-account key pair
# and the kubeconfigs. Existing files are kept: rerunning changes nothing.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need openssl

# Certificates name the layout's addresses: made for another layout (the earlier
# single-node one), they are made anew.
LAYOUT="netns-v1 nodes=$NODE_COUNT lan=$LAN_CIDR"
if [[ -d $PKI_DIR && "$(cat "$PKI_DIR/.layout" 2>/dev/null)" != "$LAYOUT" ]]; then
  log "PKI made for another cluster layout: making it anew"
  rm -rf "$PKI_DIR"
fi
mkdir -p "$PKI_DIR"
chmod 700 "$PKI_DIR"
cd "$PKI_DIR"
umask 077

if [[ ! -f ca.crt ]]; then
  log "generating cluster CA"
  openssl ecparam -name prime256v1 -genkey -noout -out ca.key
  openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=brokergroup-e2e-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out ca.crt 2>/dev/null
fi

# cert NAME SUBJECT EXT_USAGE [SANS]
cert() {
  local name=$1 subj=$2 usage=$3 sans=${4:-}
  [[ -f $name.crt && -f $name.key ]] && return 0
  openssl ecparam -name prime256v1 -genkey -noout -out "$name.key"
  openssl req -new -key "$name.key" -subj "$subj" -out "$name.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n $sans ]] && echo "subjectAltName=$sans"
  } >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
    -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

svc_names="DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN"
cert apiserver "/CN=kube-apiserver" serverAuth \
  "$svc_names,DNS:localhost,IP:127.0.0.1,IP:$CP_IP,IP:$KUBERNETES_SVC_IP"
cert etcd-server "/CN=e2e-etcd" serverAuth "IP:127.0.0.1,DNS:localhost"
cert apiserver-etcd-client "/CN=kube-apiserver-etcd-client" clientAuth
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=brokergroup-e2e-admin" clientAuth
cert controller-manager "/CN=system:kube-controller-manager" clientAuth
cert scheduler "/CN=system:kube-scheduler" clientAuth
cert kube-proxy "/CN=system:kube-proxy" clientAuth
for i in $(node_indexes); do
  n="$(node_name "$i")"
  cert "kubelet-client-$n" "/O=system:nodes/CN=system:node:$n" clientAuth
  cert "kubelet-$n" "/CN=$n" serverAuth "DNS:$n,IP:$(node_ip "$i")"
done
cert coredns "/CN=system:e2e:coredns" clientAuth
cert provisioner "/CN=system:e2e:provisioner" clientAuth
cert kube-router "/CN=system:e2e:kube-router" clientAuth

if [[ ! -f sa.key ]]; then
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
fi

# kubeconfig FILE USER CERT SERVER_IP : embed the CA and client cert. The control plane's
# own components use its loopback; nodes use its address on the lan.
kubeconfig() {
  local file=$1 user=$2 crt=$3 ip=$4
  [[ -f $file ]] && return 0
  cat >"$file" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: brokergroup-e2e
  cluster:
    server: https://$ip:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 ca.crt)
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$crt.crt")
    client-key-data: $(base64 -w0 "$crt.key")
contexts:
- name: brokergroup-e2e
  context: {cluster: brokergroup-e2e, user: $user}
current-context: brokergroup-e2e
KCFG
}
kubeconfig controller-manager.kubeconfig system:kube-controller-manager controller-manager 127.0.0.1
kubeconfig scheduler.kubeconfig system:kube-scheduler scheduler 127.0.0.1
kubeconfig coredns.kubeconfig system:e2e:coredns coredns 127.0.0.1
kubeconfig provisioner.kubeconfig system:e2e:provisioner provisioner 127.0.0.1
kubeconfig kube-proxy.kubeconfig system:kube-proxy kube-proxy "$CP_IP"
kubeconfig kube-router.kubeconfig system:e2e:kube-router kube-router "$CP_IP"
for i in $(node_indexes); do
  n="$(node_name "$i")"
  kubeconfig "kubelet-$n.kubeconfig" "system:node:$n" "kubelet-client-$n" "$CP_IP"
done
# The admin's names loopback: inside the control plane's namespace that is the apiserver
# itself, on the host the forwarder (netforward.py) into that namespace.
kubeconfig admin.kubeconfig brokergroup-e2e-admin admin 127.0.0.1
echo "$LAYOUT" >.layout
umask 022
install -m 600 admin.kubeconfig "$KUBECONFIG_ADMIN"
log "PKI and kubeconfigs ready in $PKI_DIR"
