#!/bin/bash
# frognano's Q8_0 sampler against llama.cpp at Q8_0, side by side (issue 16):
# decode tokens/s at batch 1 and 16 and prefill tokens/s (128 tokens), for
# smollm2-135m and qwen2.5-coder-0.5b. The two engines take turns, ROUNDS
# rounds (the first engine alternates), so load from other processes weighs
# on both alike; each figure is its best round (best sample).
#
#   scripts/bench-llamacpp.sh LLAMA_BENCH_DIR [WORKDIR]
#
# LLAMA_BENCH_DIR holds llama.cpp's llama-bench, llama-batched-bench and
# llama-quantize (a CPU build: cmake -DCMAKE_BUILD_TYPE=Release
# -DGGML_NATIVE=ON, targets llama-bench llama-batched-bench llama-quantize).
# The Q8_0 GGUFs are made once in WORKDIR from the model store's GGUFs with
# `llama-quantize --allow-requantize IN OUT Q8_0`; frognano's q8_0 sampler
# quantizes its float32 (dequantized) weights to Q8_0 when it loads, so the
# two run the same tensor type on weights that are not bit-identical.
#
# What each side runs, per model and round:
#   llama.cpp  llama-bench -m Q8_0.gguf -t T -p 128 -n 32 -b 2048 -ub 512 -r 2 -o jsonl
#                prefill 128 (pp128) and decode at batch 1 (tg32, from an empty context)
#              llama-batched-bench -m Q8_0.gguf -t T -tb T -c 2048 -npp 32 -ntg 32 -npl 1,16 --output-format jsonl
#                decode at batch 1 and 16: 1 or 16 sequences of 32 prompt tokens, then
#                32 steps decoding all of them together (S_TG)
#   frognano   frognano bench quant --model NAME --types q8_0 --speed-only --rounds 2
#                --decode 32 --prefill 128 --json
#                decode at batch 1 and 16 (32 prompt tokens, then 32 steps) and a 128-token prefill
#
# Environment: ROUNDS (3), THREADS (2; llama.cpp's -t and frognano's
# GOMAXPROCS), MODELS ("smollm2-135m qwen2.5-coder-0.5b"), FROGNANO (a
# frognano binary; default: go build of this tree into WORKDIR),
# FROGNANO_MODELS (the model store).
set -euo pipefail
llama=$(realpath "${1:?usage: $0 LLAMA_BENCH_DIR [WORKDIR]}")
work=${2:-$(mktemp -d /tmp/bench-llamacpp.XXXXXX)}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
models=${MODELS:-"smollm2-135m qwen2.5-coder-0.5b"}
store=${FROGNANO_MODELS:-${XDG_DATA_HOME:-$HOME/.local/share}/frognano/models}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
work=$(realpath "$work")
for t in llama-bench llama-batched-bench llama-quantize; do
	[ -x "$llama/$t" ] || { echo "no $llama/$t" >&2; exit 1; }
done
fn=${FROGNANO:-}
if [ -z "$fn" ]; then
	fn=$work/frognano
	(cd "$repo" && go build -o "$fn" ./cmd/frognano)
fi

load() { cut -d' ' -f1-3 /proc/loadavg; }
res=$work/results.tsv # model engine measure round tokens/s
: >"$res"

for m in $models; do
	f=$(jq -r .file "$store/$m/manifest.json")
	q=$work/$m.Q8_0.gguf
	if [ ! -s "$q" ]; then
		echo "quantizing $store/$m/$f to $q" >&2
		"$llama/llama-quantize" --allow-requantize "$store/$m/$f" "$q" Q8_0 >"$work/$m.quantize.log" 2>&1
	fi
done

llamacpp() { # MODEL ROUND
	local m=$1 r=$2 q=$work/$1.Q8_0.gguf o=$work/$1.llama.$2
	"$llama/llama-bench" -m "$q" -t "$threads" -p 128 -n 32 -b 2048 -ub 512 -r 2 -o jsonl >"$o.bench.jsonl" 2>"$o.bench.err"
	"$llama/llama-batched-bench" -m "$q" -t "$threads" -tb "$threads" -c 2048 -npp 32 -ntg 32 -npl 1,16 --output-format jsonl >"$o.batched.out" 2>&1
	jq -r --arg m "$m" --arg r "$r" 'select(.n_prompt == 128 and .n_gen == 0) | [$m, "llama.cpp", "prefill 128", $r, (.samples_ts | max)] | @tsv' "$o.bench.jsonl" >>"$res"
	jq -r --arg m "$m" --arg r "$r" 'select(.n_prompt == 0 and .n_gen == 32) | [$m, "llama.cpp", "decode b=1 (tg32)", $r, (.samples_ts | max)] | @tsv' "$o.bench.jsonl" >>"$res"
	grep '^{' "$o.batched.out" | jq -r --arg m "$m" --arg r "$r" '[$m, "llama.cpp", "decode b=\(.pl)", $r, .speed_tg] | @tsv' >>"$res"
}

frognano() { # MODEL ROUND
	local m=$1 r=$2 o=$work/$1.frognano.$2
	GOMAXPROCS=$threads "$fn" bench quant --model "$m" --types q8_0 --speed-only --rounds 2 --decode 32 --prefill 128 --json >"$o.json" 2>"$o.err"
	jq -r --arg m "$m" --arg r "$r" '.Speeds[0] |
		([$m, "frognano", "prefill 128", $r, .PrefillTokens] | @tsv),
		([$m, "frognano", "decode b=1", $r, .Decode1] | @tsv),
		([$m, "frognano", "decode b=1 (tg32)", $r, .Decode1] | @tsv),
		([$m, "frognano", "decode b=16", $r, .Decode16] | @tsv)' "$o.json" >>"$res"
}

start=$(load)
echo "== $(date -u +%FT%TZ) llama.cpp $llama, frognano $fn, $rounds rounds, $threads threads; load average at start $start" | tee "$work/table.md"
for r in $(seq 1 "$rounds"); do
	for m in $models; do
		echo "round $r $m (load $(load))" >&2
		if [ $((r % 2)) = 1 ]; then
			llamacpp "$m" "$r"
			frognano "$m" "$r"
		else
			frognano "$m" "$r"
			llamacpp "$m" "$r"
		fi
		grep -P "^$m\t.*\t$r\t" "$res" | sort -k3 >&2
	done
done
end=$(load)

{
	echo "load average at start $start, at end $end; best of $rounds rounds"
	echo
	echo "| model | measure | llama.cpp Q8_0 tok/s | frognano q8_0 tok/s | frognano / llama.cpp |"
	echo "|---|---|---|---|---|"
	awk -F'\t' -v models="$models" '
		{ k = $1 SUBSEP $3 SUBSEP $2; if (!(k in best) || $5 > best[k]) best[k] = $5 }
		END {
			n = split(models, ms, " ")
			split("prefill 128|decode b=1 (tg32)|decode b=1|decode b=16", meas, "|")
			for (i = 1; i <= n; i++) for (j = 1; j <= 4; j++) {
				l = best[ms[i] SUBSEP meas[j] SUBSEP "llama.cpp"]; f = best[ms[i] SUBSEP meas[j] SUBSEP "frognano"]
				printf "| %s | %s | %.1f | %.1f | %.2f |\n", ms[i], meas[j], l, f, (l > 0 ? f / l : 0)
			}
		}' "$res"
} | tee -a "$work/table.md"
echo "raw figures: $res; table: $work/table.md" >&2
