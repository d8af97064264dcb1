#!/usr/bin/env bash
# Prints a directory holding the default model requantized by llama.cpp's `llama-quantize`
# into the mixes people download (Q4_K_M, Q5_K_M, Q6_K, Q3_K_M, IQ4_XS, Q5_0, Q2_K), making any
# that are missing. tests/smollm2_mixes.rs reads them (PAGODA_MIX_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
dir="$cache/mixes"
mkdir -p "$dir"
base="$(scripts/fetch-model.sh)"
for mix in Q4_K_M Q5_K_M Q6_K Q3_K_M IQ4_XS Q5_0 Q2_K; do
    out="$dir/SmolLM2-135M-Instruct.$mix.gguf"
    if [ ! -f "$out" ]; then
        quantize="$(scripts/llama-quantize.sh)"
        "$quantize" --allow-requantize "$base" "$out.tmp" "$mix" >/dev/null 2>&1
        mv "$out.tmp" "$out"
    fi
done
echo "$dir"
