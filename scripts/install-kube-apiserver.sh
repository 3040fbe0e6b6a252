#!/usr/bin/env bash
# Builds kube-apiserver from the Kubernetes module on the Go module proxy,
# for deploy's test that stores every manifest in a real API server
# (deploy/apiserver_test.go). Kubernetes ships no Debian package and its
# release binaries are not on the registries this project may use; the
# module k8s.io/kubernetes is, checked by the Go checksum database. Its
# go.mod points the k8s.io/* staging modules at ./staging, which the module
# zip leaves out: they are published as modules of their own (k8s.io/api
# v0.31.4 for Kubernetes v1.31.4, …), so the build uses those instead.
# Quick when the pinned version is installed already.
set -euo pipefail

version=v1.31.4
staging=v0.31.4
dir=/usr/local/lib/frognano
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if grep -qx "kube-apiserver $version" "$dir/kube-apiserver.VERSION" 2>/dev/null && [ -x "$dir/kube-apiserver" ]; then
  exit 0
fi
printf '\033[1m==> %s\033[0m\n' "kube-apiserver $version (built from k8s.io/kubernetes, a few minutes)"
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
export GOWORK=off GOFLAGS=-mod=mod
src=$(cd "$tmp" && GOFLAGS= go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
if [ -z "$src" ] || [ ! -d "$src" ]; then
  echo "install-kube-apiserver: go mod download k8s.io/kubernetes@$version gave no directory" >&2
  exit 1
fi
cp -r "$src" "$tmp/kubernetes"
chmod -R u+w "$tmp/kubernetes"
cd "$tmp/kubernetes"
rm -rf vendor go.work go.work.sum
for m in $(sed -n 's#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' go.mod); do
  go mod edit -dropreplace="$m" -replace="$m=$m@$staging"
done
go build -trimpath -o "$tmp/kube-apiserver" ./cmd/kube-apiserver
$SUDO install -D -m 0755 "$tmp/kube-apiserver" "$dir/kube-apiserver"
echo "kube-apiserver $version" | $SUDO tee "$dir/kube-apiserver.VERSION" >/dev/null
