#!/usr/bin/env bash
# Builds the Kubernetes control plane and kubelet from the Kubernetes module
# on the Go module proxy, and CoreDNS from its module, for deploy's tests:
# one stores every manifest in a real kube-apiserver
# (deploy/apiserver_test.go), the other runs the manifests' pods on a
# one-machine Kubernetes (deploy/kubernetes_test.go). Kubernetes ships no
# Debian package and its release binaries are not on the registries this
# project may use; the modules k8s.io/kubernetes and github.com/coredns/coredns
# are, checked by the Go checksum database. Kubernetes' go.mod points the
# k8s.io/* staging modules at ./staging, which the module zip leaves out: they
# are published as modules of their own (k8s.io/api v0.31.4 for Kubernetes
# v1.31.4, …), so the build uses those instead. The pods' pause program (the
# sandbox image's only process) is Kubernetes' own build/pause/linux/pause.c,
# compiled statically with gcc. Quick when the pinned versions are installed
# already.
set -euo pipefail

version=v1.31.4
staging=v0.31.4
coredns=v1.11.3
bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
want="kubernetes $version ${bins[*]} pause coredns $coredns"
dir=/usr/local/lib/frognano
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

installed=1
for b in "${bins[@]}" pause coredns; do
  [ -x "$dir/$b" ] || installed=0
done
if [ "$installed" = 1 ] && grep -qxF "$want" "$dir/kubernetes.VERSION" 2>/dev/null; then
  exit 0
fi
printf '\033[1m==> %s\033[0m\n' "Kubernetes $version (${bins[*]}) and CoreDNS $coredns, built from their modules (several minutes)"
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
export GOWORK=off GOFLAGS=-mod=mod
moddir() {
  local d
  d=$(cd "$tmp" && GOFLAGS= go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  if [ -z "$d" ] || [ ! -d "$d" ]; then
    echo "install-kubernetes: go mod download $1 gave no directory" >&2
    exit 1
  fi
  echo "$d"
}

src=$(moddir "k8s.io/kubernetes@$version")
cp -r "$src" "$tmp/kubernetes"
chmod -R u+w "$tmp/kubernetes"
(
  cd "$tmp/kubernetes"
  rm -rf vendor go.work go.work.sum
  for m in $(sed -n 's#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' go.mod); do
    go mod edit -dropreplace="$m" -replace="$m=$m@$staging"
  done
  mkdir -p "$tmp/bin"
  pkgs=()
  for b in "${bins[@]}"; do pkgs+=("./cmd/$b"); done
  go build -trimpath -o "$tmp/bin/" "${pkgs[@]}"
  gcc -Os -Wall -static -DVERSION="$version" -o "$tmp/bin/pause" build/pause/linux/pause.c
)

src=$(moddir "github.com/coredns/coredns@$coredns")
cp -r "$src" "$tmp/coredns"
chmod -R u+w "$tmp/coredns"
(cd "$tmp/coredns" && go build -trimpath -o "$tmp/bin/coredns" .)

for b in "${bins[@]}" pause coredns; do
  $SUDO install -D -m 0755 "$tmp/bin/$b" "$dir/$b"
done
$SUDO rm -f "$dir/kube-apiserver.VERSION"
echo "$want" | $SUDO tee "$dir/kubernetes.VERSION" >/dev/null
