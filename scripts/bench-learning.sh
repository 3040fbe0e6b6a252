#!/usr/bin/env bash
# The learning benchmark of issue "Learning that shows": two arms of
# `frognano run` with the same seed, settings and training budget, side by
# side on this machine (so both see the same load), one drawing each step's
# tasks at the frontier (FrontierEstimator), one uniformly from the same
# pool; both evaluated on the committed held-out set (repositories never
# trained on) at the start, after the warm start, every EVAL_EVERY steps and
# at the end. Prints each arm's curve, its paired end − start gain and the
# comparison of the arms (frognano runs compare).
#
# Usage: scripts/bench-learning.sh [BUDGET] [DATA_DIR]
#   BUDGET    training time of each arm, warm start included, held-out
#             evaluation excluded (default 60m)
#   DATA_DIR  store in which the training environments are registered and
#             the task pool is synthesized once (default
#             ~/.local/share/frognano-bench); each
#             arm runs on a copy of it (DATA_DIR-frontier, DATA_DIR-uniform)
# Needs bin/frognano (make build), containerd and the model (make model).
# Environment: FROGNANO (the binary, default bin/frognano), MODEL (default smollm2-135m),
# TRAIN_LAYERS (0: every layer; N: the top N, run --train-layers), LR (2e-5), WARM_LR (3e-4),
# PARALLEL (episodes at once, 16), SEED (1), GROUP (episodes per task, 4), TASKS_PER_STEP (4),
# EVAL_K (3), EVAL_HINTS (hint levels of the held-out tasks played, 3,4),
# EVAL_EVERY (5), POOL_H5 / POOL_H4 / POOL_H3 (tasks per training environment at hint
# levels 5, 4 and 3: 3, 6 and 3), WARM_TASKS (96), WARM_EPOCHS (2), EVAL_TASKS (36), ARMS
# ("frontier uniform": each arm is a sampler, frontier or uniform, optionally followed by
# -WEIGHTS, the weights its node's Sampler serves (node policy.quantization: f32, q8_0,
# q8_0-f32); "frontier frontier-q8_0" compares a float32 and a Q8_0 sampler), PREPARE_ONLY
# (set: register and synthesize only), MEMORY_LIMIT
# (each arm's node.memory_limit; default 80% of the machine shared by the arms, the rest left to what is not Go heap and to the sandboxes), SHARE_START
# (default 1: the start point is played once, before the arms, and read back by the arms
# that serve the default weights; an arm with -WEIGHTS plays its own, since a start point
# played on other weights measured another policy; empty: each arm plays its own),
# START_RUN (the start-point run to resume or reuse).
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${1:-60m}
data=${2:-${XDG_DATA_HOME:-$HOME/.local/share}/frognano-bench}
model=${MODEL:-smollm2-135m}
seed=${SEED:-1}
F="${FROGNANO:-./bin/frognano} --log-level warn"

# The training environments: the generalization suite's packages (never
# the held-out ones: frognano refuses those for training).
sources=(six==1.16.0 colorama==0.4.6 toolz==0.12.1 parse==1.20.1 funcy==2.0 tabulate==0.9.0
  cachetools==5.3.3 pathspec==0.12.1 humanize==4.9.0 boltons==24.0.0
  github.com/pmezard/go-difflib@v1.0.0 github.com/Masterminds/semver/v3@v3.2.1 github.com/hashicorp/go-version@v1.6.0)
envs=(six-1.16.0 colorama-0.4.6 toolz-0.12.1 parse-1.20.1 funcy-2.0 tabulate-0.9.0
  cachetools-5.3.3 pathspec-0.12.1 humanize-4.9.0 boltons-24.0.0
  go-difflib-v1.0.0 semver-v3.2.1 go-version-v1.6.0)

registered=$($F --data-dir "$data" env ls 2>/dev/null | awk 'NR > 1 {print $1}')
for i in "${!sources[@]}"; do
  grep -qx "${envs[$i]}" <<<"$registered" || $F --data-dir "$data" env add "${sources[$i]}"
done
# The held-out environments, registered once for the evaluation points
# only (no run trains on them or synthesizes from them).
heldout=(inflection==0.5.1 github.com/google/uuid@v1.6.0 isodate==0.6.1 wcwidth==0.2.6)
heldnames=(inflection-0.5.1 uuid-v1.6.0 isodate-0.6.1 wcwidth-0.2.6)
for i in "${!heldout[@]}"; do
  grep -qx "${heldnames[$i]}" <<<"$registered" || $F --data-dir "$data" env add "${heldout[$i]}"
done

# The pool: POOL_H4 tasks at hint level 4 and POOL_H3 at level 3 from each
# training environment, fixed seeds; skipped where the store has them.
# POOL_H5 tasks at level 5 are added where the store has none at that level
# (a store prepared before level 5 existed gains them).
have=$($F --data-dir "$data" tasks ls 2>/dev/null | awk 'NR > 1 {print $1}' || true)
for e in "${envs[@]}"; do
  n=$(grep -c "^$e\." <<<"$have" || true)
  if [ "$n" -eq 0 ]; then
    $F --data-dir "$data" synth --env "$e" --count "${POOL_H4:-6}" --hint-level 4 --seed 4401 --max-candidates 60 || echo "synthesis from $e failed: going on without it"
    $F --data-dir "$data" synth --env "$e" --count "${POOL_H3:-3}" --hint-level 3 --seed 3301 --max-candidates 40 || echo "synthesis from $e failed: going on without it"
  fi
done
if [ "${POOL_H5:-3}" -gt 0 ] && ! $F --data-dir "$data" tasks ls 2>/dev/null | awk 'NR > 1 && $6 == 5 {n++} END {exit !n}'; then
  for e in "${envs[@]}"; do
    $F --data-dir "$data" synth --env "$e" --count "${POOL_H5:-3}" --hint-level 5 --seed 5501 --max-candidates 40 || echo "synthesis from $e at level 5 failed: going on without it"
  done
fi
$F --data-dir "$data" tasks ls | tail -n +2 | wc -l | xargs echo "tasks in the pool:"
[ -n "${PREPARE_ONLY:-}" ] && exit 0

warm=$(IFS=,; echo "${envs[*]}")
stamp=$(date +%Y%m%d-%H%M)
# The start point: the base model on the held-out selection, the same
# policy, tasks and episode seeds for every arm, so it is played once here,
# in the shared store, by a run of no steps; each arm reads its episodes
# back (run --start-from) rather than playing them again side by side.
# START_RUN names a start-point run to use instead of a new one: one that
# was killed is resumed (its stored episodes are read back), one that ended
# is only read.
start="${START_RUN:-bench-start-$stamp}"
arms=(${ARMS:-frontier uniform})
for arm in "${arms[@]}"; do
  case "$arm" in
  frontier | uniform | frontier-?* | uniform-?*) ;;
  *) echo "arm $arm: want frontier or uniform, optionally followed by -WEIGHTS (frontier-q8_0)" >&2; exit 2 ;;
  esac
done
plain=$(printf '%s\n' "${arms[@]}" | grep -cvx '.*-.*' || true)
if [ -n "${SHARE_START-1}" ] && [ "${EVAL_TASKS:-36}" -gt 0 ] && [ "$plain" -gt 0 ]; then
  $F --data-dir "$data" run --run "$start" --model "$model" --seed "$seed" --env six==1.16.0 --tasks 0 --steps 0 \
    --tasks-per-step "${TASKS_PER_STEP:-4}" --group "${GROUP:-4}" --lr "${LR:-2e-5}" --parallel "${PARALLEL:-16}" \
    --train-layers "${TRAIN_LAYERS:-0}" --eval-tasks "${EVAL_TASKS:-36}" --eval-k "${EVAL_K:-3}" --eval-hints "${EVAL_HINTS:-3,4}" >>"/tmp/$start.log" 2>&1 ||
    { echo "the start point failed: see /tmp/$start.log" >&2; exit 1; }
  grep "held-out (start" "/tmp/$start.log" | tail -n 1 || { echo "the start point was not measured: see /tmp/$start.log" >&2; exit 1; }
  startflag=(--start-from "$start")
else
  startflag=()
fi
# Each arm's heap is kept under a fixed share of the machine
# (node.memory_limit): the default limit follows a process's live heap up to
# 85% of the machine, which two processes together overrun (two
# Qwen2.5-Coder-0.5B arms left 1 GB free of 24 GB).
share=$((80 / ${#arms[@]}))
pids=()
for arm in "${arms[@]}"; do
  d="$data-$arm"
  sampler=${arm%%-*}
  weights=${arm#"$sampler"}
  weights=${weights#-}
  armstart=("${startflag[@]}")
  [ -z "$weights" ] || armstart=()
  # Never replace a store a process still has open (an arm of an earlier
  # benchmark still closing): its Badger would go on writing into the copy.
  if [ -d "$d/db" ] && ! flock -n "$d/db" true 2>/dev/null; then
    echo "$d is in use by another process: stop it first" >&2
    exit 1
  fi
  rm -rf "$d"
  cp -a --sparse=always "$data" "$d"
  (
    FROGNANO_POLICY_QUANTIZATION="${weights:-f32}" FROGNANO_NODE_MEMORY_LIMIT="${MEMORY_LIMIT:-$share%}" \
      $F --data-dir "$d" run --run "bench-$arm-$stamp" --model "$model" --seed "$seed" --sampler "$sampler" \
      --env six==1.16.0 --tasks 0 --budget "$budget" --steps 1000 \
      --tasks-per-step "${TASKS_PER_STEP:-4}" --group "${GROUP:-4}" --lr "${LR:-2e-5}" --parallel "${PARALLEL:-16}" --train-layers "${TRAIN_LAYERS:-0}" \
      --warm-start-epochs "${WARM_EPOCHS:-2}" --warm-start-tasks "${WARM_TASKS:-96}" --warm-start-batch 8 --warm-start-envs "$warm" \
      --warm-start-lr "${WARM_LR:-3e-4}" \
      --eval-tasks "${EVAL_TASKS:-36}" --eval-k "${EVAL_K:-3}" --eval-hints "${EVAL_HINTS:-3,4}" --eval-every "${EVAL_EVERY:-5}" \
      "${armstart[@]}"
    $F --data-dir "$d" runs show "bench-$arm-$stamp" --json "/tmp/bench-$arm-$stamp.json" >/dev/null
  ) >"/tmp/bench-$arm-$stamp.log" 2>&1 &
  pids+=($!)
  echo "arm $arm: run bench-$arm-$stamp in $d, log /tmp/bench-$arm-$stamp.log"
done
for p in "${pids[@]}"; do wait "$p" || echo "an arm failed: see its log"; done
for arm in "${arms[@]}"; do
  echo "== $arm"
  tail -n 40 "/tmp/bench-$arm-$stamp.log"
done
if [ "${#arms[@]}" -eq 2 ]; then
  $F runs compare "/tmp/bench-${arms[0]}-$stamp.json" "/tmp/bench-${arms[1]}-$stamp.json"
fi
