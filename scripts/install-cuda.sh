#!/usr/bin/env bash
# Installs the CUDA toolkit (nvcc, cudart, headers) that `make cuda` needs, from
# Debian bookworm's nvidia-cuda-toolkit (CUDA 11.8). That package lives in the
# non-free component, so the script first adds `contrib non-free` to the apt
# sources. It is idempotent and never fails the caller: on a machine where the
# toolkit cannot be installed (not Debian, no root, apt failure) it says why and
# exits 0, because the CPU backend is always built and the CUDA backend is
# optional. The toolkit needs no GPU; the driver (libcuda.so.1) is not installed
# here: it comes with the GPU machine.
set -uo pipefail

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }
skip() {
  echo "install-cuda: $* — not installing the CUDA toolkit (the CPU backend still builds)" >&2
  exit 0
}

if command -v nvcc >/dev/null 2>&1; then
  log "CUDA toolkit already installed: $(nvcc --version | tail -n 1)"
  exit 0
fi
if [ -x /usr/local/cuda/bin/nvcc ]; then
  log "NVIDIA's CUDA toolkit is in /usr/local/cuda: put /usr/local/cuda/bin on PATH for make cuda"
  exit 0
fi

[ -r /etc/os-release ] || skip "no /etc/os-release"
# shellcheck disable=SC1091
. /etc/os-release
[ "${ID:-}" = debian ] || skip "not Debian (ID=${ID:-unknown})"

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || skip "not root and no sudo"
  SUDO="sudo"
fi

# Add contrib and non-free to every Components line that lacks them, keeping
# what is there (main, non-free-firmware).
sources=/etc/apt/sources.list.d/debian.sources
if [ -f "$sources" ]; then
  for c in contrib non-free; do
    if grep -Eq '^Components:' "$sources" && grep -E '^Components:' "$sources" | grep -Evq "[[:space:]]$c([[:space:]]|\$)"; then
      log "adding $c to $sources"
      $SUDO sed -i -E "/^Components:/{/[[:space:]]$c([[:space:]]|\$)/!s/\$/ $c/}" "$sources" || skip "cannot edit $sources"
    fi
  done
elif [ -f /etc/apt/sources.list ]; then
  # Old one-line format: `deb URL SUITE main ...`.
  for c in contrib non-free; do
    $SUDO sed -i -E "/^deb(-src)?[[:space:]]/{/[[:space:]]$c([[:space:]]|\$)/!s/\$/ $c/}" /etc/apt/sources.list ||
      skip "cannot edit /etc/apt/sources.list"
  done
else
  skip "no apt sources found"
fi

log "apt-get update"
$SUDO apt-get update -qq || skip "apt-get update failed"
if ! apt-cache show nvidia-cuda-toolkit >/dev/null 2>&1; then
  skip "nvidia-cuda-toolkit is not available from the apt sources"
fi

# Without recommends: they add ~1 GB (Nsight tools, a JRE, docs) the build
# does not use. Measured on a 2-core Debian 12 VM: about 2.5 minutes,
# apt-get update and download included.
log "apt-get install nvidia-cuda-toolkit (large: about 4 GB installed)"
start=$(date +%s)
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nvidia-cuda-toolkit ||
  skip "apt-get install nvidia-cuda-toolkit failed"
log "CUDA toolkit installed in $(($(date +%s) - start))s: $(nvcc --version | tail -n 1)"
