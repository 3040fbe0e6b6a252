#!/usr/bin/env bash
# One-shot check of the CUDA backend on a machine with an NVIDIA GPU: the
# forward and gradient conformance suites, the randomized GPU-vs-CPU sweeps
# of every forward and backward operation and the bf16 products (with the
# GPU required, so nothing passes by skipping), a compute-sanitizer memcheck
# of both conformance suites where the tool exists, the benchmarks (forward,
# and the backward at SmolLM2 shapes for T=512), and a summary. Sized to
# finish in about four minutes on an H200, under nine at the timeouts.
#
#   kernels/cuda/gpucheck.sh prepare   on a build machine with Go and nvcc:
#                                      builds kernels/cuda/cuda.test to carry
#   kernels/cuda/gpucheck.sh           on the GPU machine
#
# On the GPU machine it builds the test binary itself when Go and nvcc are
# there, and otherwise runs a cuda.test prepared elsewhere (GPU machines
# often have no Go). The binary links the CUDA runtime statically and uses
# the CPU twin's pure-Go matrix product (-tags purego), so it needs only the
# driver's libcuda.so.1 and the C and C++ runtimes. Logs go to $OUT (where
# set) or /tmp/gpucheck.
set -uo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
out=${OUT:-/tmp/gpucheck}
mkdir -p "$out"

log() { printf '\n=== %s\n' "$*"; }

build() {
  log "building libfrognano_cuda.a and cuda.test"
  make -s -C "$root/kernels/cuda" &&
    (cd "$root" && go test -tags 'cuda purego' -c -o kernels/cuda/cuda.test ./kernels/cuda/)
}

if [ "${1:-}" = prepare ]; then
  build || exit 1
  ls -l cuda.test
  exit 0
fi

start=$(date +%s)
log "machine"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader
else
  echo "nvidia-smi not found"
fi

if command -v go >/dev/null 2>&1 && command -v nvcc >/dev/null 2>&1; then
  build || { echo "gpucheck: build failed"; exit 1; }
elif [ -x cuda.test ]; then
  log "no Go/nvcc here: running the prepared $(pwd)/cuda.test"
else
  echo "gpucheck: need Go and nvcc, or a cuda.test from 'gpucheck.sh prepare'" >&2
  exit 1
fi

log "tests (FROGNANO_REQUIRE_CUDA=1)"
FROGNANO_REQUIRE_CUDA=1 timeout 270 ./cuda.test -test.v -test.count=1 -test.timeout 260s 2>&1 | tee "$out/test.log"
test_rc=${PIPESTATUS[0]}

san_rc=skipped
if command -v compute-sanitizer >/dev/null 2>&1; then
  log "compute-sanitizer memcheck, conformance suites"
  FROGNANO_REQUIRE_CUDA=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 \
    ./cuda.test -test.run 'TestConformance|TestGradConformance$' -test.count=1 >"$out/memcheck.log" 2>&1
  san_rc=$?
  tail -n 5 "$out/memcheck.log"
fi

log "benchmarks"
FROGNANO_REQUIRE_CUDA=1 timeout 150 ./cuda.test -test.run '^$' -test.bench . -test.benchtime 200x \
  -test.timeout 145s 2>&1 | tee "$out/bench.log"
bench_rc=${PIPESTATUS[0]}

log "summary ($(($(date +%s) - start)) s)"
pass=$(grep -c -- '--- PASS' "$out/test.log")
fail=$(grep -c -- '--- FAIL' "$out/test.log")
skip=$(grep -c -- '--- SKIP' "$out/test.log")
echo "tests: exit $test_rc; $pass passed, $fail failed, $skip skipped (subtests included)"
grep -- '--- FAIL' "$out/test.log" | head -n 30
grep -E 'worst \|gpu-cpu\|' "$out/test.log" | sed 's/^ *//' | head -n 40
echo "memcheck: exit $san_rc (0 clean, 3 errors found; log $out/memcheck.log)"
echo "benchmarks: exit $bench_rc"
grep -E '^Benchmark' "$out/bench.log" | awk '{ line = $1; for (i = 3; i < NF; i += 2) line = line "  " $i " " $(i + 1); print line }'
[ "$test_rc" = 0 ] && [ "$bench_rc" = 0 ] && { [ "$san_rc" = 0 ] || [ "$san_rc" = skipped ]; }
