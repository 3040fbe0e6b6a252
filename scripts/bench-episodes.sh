#!/bin/bash
# Episodes per CPU-hour of `frognano run`, two builds side by side (issue 16's
# "before vs after"): the same store (the default environment, six, with make
# run's tasks at hint levels 4 and 3, synthesized once by the OLD build), the
# same seed and settings, 6 GRPO steps of 2 tasks x 4 episodes, no warm start, no
# held-out evaluation; each arm on a copy of that store, in the order
# old, new, new with a Q8_0 sampler (the best Q8_0 kernels this CPU has),
# new with a Q8_0 sampler on the AVX2 kernels (FROGNANO_Q8=avx2: what the
# newer kernels add, side by side), old, new.
#
# CPU is the run process's user+sys time (/usr/bin/time) plus its sandboxes':
# every sandbox lives in the cgroup of the containerd namespace this script
# gives the runs (cgroup v1 cpuacct or v2 cpu.stat), which nothing else uses,
# so other work on the machine does not enter the figure (it still slows it).
#
#   scripts/bench-episodes.sh OLD_BINARY NEW_BINARY [WORKDIR]
#
# e.g. build the old one from a worktree: git worktree add /tmp/old 89d11e8^ &&
# (cd /tmp/old && go build -o /tmp/fn-old ./cmd/frognano)
set -euo pipefail
old=$(realpath "${1:?usage: $0 OLD_BINARY NEW_BINARY [WORKDIR]}")
new=$(realpath "${2:?usage: $0 OLD_BINARY NEW_BINARY [WORKDIR]}")
work=${3:-$(mktemp -d /tmp/bench-episodes.XXXXXX)}
steps=${STEPS:-6}
ns=${NAMESPACE:-fnbenchepisodes}
mkdir -p "$work"
cd "$work"
printf 'containerd:\n  namespace: %s\n' "$ns" > cfg.yaml
export FROGNANO_CONFIG=$work/cfg.yaml

usage_ns() { # the namespace's CPU nanoseconds so far
	if [ -r /sys/fs/cgroup/cpuacct/$ns/cpuacct.usage ]; then
		cat /sys/fs/cgroup/cpuacct/$ns/cpuacct.usage
	elif [ -r /sys/fs/cgroup/$ns/cpu.stat ]; then
		echo $(( $(awk '/^usage_usec/ {print $2}' /sys/fs/cgroup/$ns/cpu.stat) * 1000 ))
	else
		echo 0
	fi
}

measure() { # NAME BINARY DATA_DIR ARGS...
	local name=$1 bin=$2 dir=$3
	shift 3
	local u0 u1 rc=0
	u0=$(usage_ns)
	/usr/bin/time -f '%U %S %e' -o "$name.time" "$bin" --data-dir "$dir" run "$@" >"$name.out" 2>"$name.err" || rc=$?
	u1=$(usage_ns)
	read -r us ss es <"$name.time"
	local episodes
	episodes=$(grep -oE 'step\(s\): [0-9]+ task group\(s\), [0-9]+ episodes' "$name.out" | grep -oE '[0-9]+ episodes' | grep -oE '[0-9]+' || echo 0)
	awk -v n="$name" -v rc="$rc" -v us="$us" -v ss="$ss" -v es="$es" -v u0="$u0" -v u1="$u1" -v ep="$episodes" 'BEGIN {
		proc = us + ss; sb = (u1 - u0) / 1e9; cpu = proc + sb
		printf "%-8s rc=%s episodes=%d wall=%.0fs process_cpu=%.1fs sandbox_cpu=%.1fs cpu_per_episode=%.2fs episodes_per_cpu_hour=%.0f\n", n, rc, ep, es, proc, sb, (ep ? cpu / ep : 0), (cpu ? ep * 3600 / cpu : 0)
	}' | tee -a results.txt
}

common=(--seed 1 --tasks 0 --steps "$steps" --warm-start-epochs 0 --eval-tasks 0)
echo "== $(date -u +%FT%TZ) old=$old new=$new load=$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a results.txt
if [ ! -d prep/db ]; then
	measure prep "$old" "$work/prep" --seed 1 --tasks 6 --hint-levels 4,3 --steps 0 --warm-start-epochs 0 --eval-tasks 0
fi
for arm in ${ARMS:-old new new-q8 new-q8-avx2 old2 new2}; do
	rm -rf "d-$arm"
	cp -a prep "d-$arm"
	case $arm in
	old-q8*) FROGNANO_POLICY_QUANTIZATION=q8_0 measure "$arm" "$old" "$work/d-$arm" "${common[@]}" ;;
	old*) measure "$arm" "$old" "$work/d-$arm" "${common[@]}" ;;
	new-q8-avx2*) FROGNANO_POLICY_QUANTIZATION=q8_0 FROGNANO_Q8=avx2 measure "$arm" "$new" "$work/d-$arm" "${common[@]}" ;;
	new-q8*) FROGNANO_POLICY_QUANTIZATION=q8_0 measure "$arm" "$new" "$work/d-$arm" "${common[@]}" ;;
	new*) measure "$arm" "$new" "$work/d-$arm" "${common[@]}" ;;
	esac
	rm -rf "d-$arm"
done
echo "results: $work/results.txt"
