#!/usr/bin/env bash
# Generate the cluster CA, one client certificate per component (so RBAC sees
# each as its own user), serving certificates, the service-account key pair
# and the kubeconfigs. Existing files are kept: rerunning changes nothing.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need openssl

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
  "$svc_names,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP,IP:$KUBERNETES_SVC_IP"
cert etcd-server "/CN=e2e-etcd" serverAuth "IP:127.0.0.1,DNS:localhost"
cert apiserver-etcd-client "/CN=kube-apiserver-etcd-client" clientAuth
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=brokergroup-e2e-admin" clientAuth
cert controller-manager "/CN=system:kube-controller-manager" clientAuth
cert scheduler "/CN=system:kube-scheduler" clientAuth
cert kube-proxy "/CN=system:kube-proxy" clientAuth
cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
cert kubelet "/CN=$NODE_NAME" serverAuth "DNS:$NODE_NAME,IP:$NODE_IP"
cert coredns "/CN=system:e2e:coredns" clientAuth
cert provisioner "/CN=system:e2e:provisioner" clientAuth

if [[ ! -f sa.key ]]; then
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
fi

# kubeconfig FILE USER CERT : embed the CA and client cert, point at the node address.
kubeconfig() {
  local file=$1 user=$2 crt=$3
  [[ -f $file ]] && return 0
  cat >"$file" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: brokergroup-e2e
  cluster:
    server: https://$NODE_IP:$APISERVER_PORT
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
kubeconfig controller-manager.kubeconfig system:kube-controller-manager controller-manager
kubeconfig scheduler.kubeconfig system:kube-scheduler scheduler
kubeconfig kube-proxy.kubeconfig system:kube-proxy kube-proxy
kubeconfig kubelet.kubeconfig "system:node:$NODE_NAME" kubelet-client
kubeconfig coredns.kubeconfig system:e2e:coredns coredns
kubeconfig provisioner.kubeconfig system:e2e:provisioner provisioner
kubeconfig admin.kubeconfig brokergroup-e2e-admin admin
umask 022
install -m 600 admin.kubeconfig "$KUBECONFIG_ADMIN"
# The exported kubeconfig names loopback (apiforward.py), never the node address.
sed -i "s#server: https://$NODE_IP:$APISERVER_PORT#server: https://127.0.0.1:$APISERVER_PORT#" "$KUBECONFIG_ADMIN"
log "PKI and kubeconfigs ready in $PKI_DIR"
