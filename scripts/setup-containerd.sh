#!/usr/bin/env bash
# Makes sure containerd and runc are installed (Debian's packages) and that a
# containerd daemon answers on its socket, starting one when none runs. Also
# installs debootstrap, which builds the sandboxes' base image (images are
# never pulled).
# Idempotent; CI runs it as root before the sandbox tests.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
SOCK=${FROGNANO_CONTAINERD_ADDRESS:-/run/containerd/containerd.sock}

missing=()
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if $SUDO ctr --address "$SOCK" version >/dev/null 2>&1; then
  echo "containerd is running at $SOCK"
  exit 0
fi

# No init system manages containerd here (containers, CI): start it ourselves.
if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
  $SUDO systemctl start containerd || true
fi
if ! $SUDO ctr --address "$SOCK" version >/dev/null 2>&1; then
  $SUDO mkdir -p /var/log
  $SUDO sh -c "nohup containerd --address '$SOCK' >/var/log/frognano-containerd.log 2>&1 &"
fi
# A first start on a slow CI machine loads plugins for a while: wait up to 30s.
for _ in $(seq 1 300); do
  if $SUDO ctr --address "$SOCK" version >/dev/null 2>&1; then
    echo "containerd started at $SOCK"
    exit 0
  fi
  sleep 0.1
done
echo "containerd did not come up at $SOCK; see /var/log/frognano-containerd.log" >&2
tail -n 20 /var/log/frognano-containerd.log >&2 || true
exit 1
