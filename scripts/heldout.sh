#!/usr/bin/env bash
# Makes the held-out set (actors/evaluate/heldout.jsonl) once: registers the
# held-out environments in a store of their own and synthesizes tasks from
# each at hint levels 4, 3 and 1 with fixed seeds, then exports them. The
# set is committed, so every machine measures the same tasks; run this only
# to make a new set (and say so: figures on two sets do not compare).
# Usage: scripts/heldout.sh [DATA_DIR]   (needs bin/frognano: make build)
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-$(mktemp -d /tmp/frognano-heldout.XXXXXX)}
F="./bin/frognano --data-dir $data"
for s in inflection==0.5.1 github.com/google/uuid@v1.6.0 isodate==0.6.1 wcwidth==0.2.6; do
  $F env add "$s"
done
for e in inflection-0.5.1 uuid-v1.6.0 isodate-0.6.1 wcwidth-0.2.6; do
  for hl in 4:5 3:4 1:3; do # hint level : tasks
    h=${hl%%:*} n=${hl##*:}
    $F synth --env "$e" --count "$n" --hint-level "$h" --seed $((20261201 + h)) --max-candidates 150
  done
done
$F tasks export > actors/evaluate/heldout.jsonl
wc -l actors/evaluate/heldout.jsonl
