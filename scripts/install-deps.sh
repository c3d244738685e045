#!/usr/bin/env bash
# Installs what tandem and its tests need on a fresh Debian machine, skipping what is present:
# kubectl is expected on the machine; containerd, runc, the CNI plugins and busybox-static come from
# Debian's packages (the Linux node's CRI runtime and the project's own OCI images use them), and
# nftables for the service proxy.
set -euo pipefail

need=()
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ] || need+=(containernetworking-plugins)
[ -x /bin/busybox ] || command -v busybox >/dev/null 2>&1 || need+=(busybox-static)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v nft >/dev/null 2>&1 || need+=(nftables)
# openssl: the end-to-end tests make a person's key and CSR as the Kubernetes documentation does.
command -v openssl >/dev/null 2>&1 || need+=(openssl)

if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

command -v kubectl >/dev/null 2>&1 || { echo "install-deps: kubectl is required on PATH" >&2; exit 1; }
command -v cargo-nextest >/dev/null 2>&1 || cargo nextest --version >/dev/null 2>&1 || cargo install --locked cargo-nextest
