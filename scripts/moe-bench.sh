#!/usr/bin/env bash
# Issue 50's mixture-of-experts target on this machine's adapter (lavapipe in CI's containers):
# decode speed of a random Qwen3-30B-A3B-shaped model (`pagoda random-model --shape
# qwen3-30b-a3b`: 128 experts of 768 columns a layer, 8 a token) against a dense model of its
# active parameters (`qwen3-30b-a3b-dense`: the same attention, vocabulary and layers, one MLP of
# 8 x 768 = 6144 columns), both in the same weight type. The target is a ratio of at least 0.8:
# the experts no token chose cost nothing. A benchmark, not a test (times on shared machines
# vary); the models are written once into DIR.
#   LAYERS=4 DTYPE=q4_0 BATCH=1 scripts/moe-bench.sh [DIR]
# LAYERS: how many of the 48 layers (the files hold every expert: about 0.17 GB a layer in q4_0).
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${LAYERS:-4} dtype=${DTYPE:-q4_0} batch=${BATCH:-1}
dir=${1:-${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}/moe-bench}
mkdir -p "$dir"
cargo build --quiet --bin pagoda
bin=target/debug/pagoda
field() {
    sed -E "s/.*\"$1\": *([-0-9.eE+]+).*/\1/" <<<"$2"
}
declare -A tps
for shape in qwen3-30b-a3b qwen3-30b-a3b-dense; do
    file=$dir/$shape-${layers}l-$dtype.gguf
    if [ ! -f "$file" ]; then
        "$bin" random-model --shape "$shape" --layers "$layers" --dtype "$dtype" --out "$file"
    fi
    "$bin" info --model "$file" | grep -E "experts:|parameters" || true
    # a warm-up run compiles the pipelines; the second is the measurement
    for run in warm-up measured; do
        report=$("$bin" bench --executor wgpu --model "$file" --num-requests "$batch" --input-len 16 \
            --output-len 32 --no-enable-prefix-caching --json)
    done
    itl=$(field itl_mean_s "$report")
    tps[$shape]=$(awk -v itl="$itl" -v b="$batch" 'BEGIN { printf "%.2f", b / itl }')
    echo "$shape ($layers layers, $dtype, batch $batch): ITL $itl s, ${tps[$shape]} tok/s"
done
awk -v moe="${tps[qwen3-30b-a3b]}" -v dense="${tps[qwen3-30b-a3b-dense]}" \
    'BEGIN { printf "MoE / dense decode tok/s: %.2f (target >= 0.8)\n", moe / dense }'
