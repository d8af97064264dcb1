#!/usr/bin/env bash
# Issue 50's mixture-of-experts target on this machine's adapter (lavapipe in CI's containers):
# decode speed of a random Qwen3-30B-A3B-shaped model (`pagoda random-model --shape
# qwen3-30b-a3b`: 128 experts of 768 columns a layer, 8 a token) against a dense model of its
# active parameters (`qwen3-30b-a3b-dense`: the same attention, vocabulary and layers, one MLP of
# 8 x 768 = 6144 columns), both in the same weight type. The target is a ratio of at least 0.8:
# the experts no token chose cost nothing. A benchmark, not a test (times on shared machines
# vary: ROUNDS alternates the pair, REPEATS measures each several times); the models are written
# once into DIR.
#   LAYERS=4 DTYPE=q4_0 BATCH=1 ROUNDS=1 REPEATS=2 scripts/moe-bench.sh [DIR]
# LAYERS: how many of the 48 layers (the files hold every expert: about 0.34 GB a layer in q4_0;
# the 4-layer MoE model's run peaks near 6 GB of memory on lavapipe, the file mapped beside its
# copy in the device's buffers).
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
declare -A itl
for shape in qwen3-30b-a3b qwen3-30b-a3b-dense; do
    file=$dir/$shape-${layers}l-$dtype.gguf
    if [ ! -f "$file" ]; then
        "$bin" random-model --shape "$shape" --layers "$layers" --dtype "$dtype" --out "$file"
    fi
    "$bin" info --model "$file" | grep -E "experts:|parameters" || true
done
# ROUNDS alternations of the pair, so that both see the same load; each run loads its model once,
# warms the pipelines up with one workload and measures REPEATS more on the same engine
for round in $(seq "${ROUNDS:-1}"); do
    for shape in qwen3-30b-a3b qwen3-30b-a3b-dense; do
        counts=$(printf "$batch%.0s," $(seq $((1 + ${REPEATS:-2}))))
        reports=$("$bin" bench --executor wgpu --model "$dir/$shape-${layers}l-$dtype.gguf" \
            --num-requests "${counts%,}" --input-len 16 --output-len 32 --no-enable-prefix-caching --json)
        for report in $(tail -n +2 <<<"$reports" | tr -d ' '); do
            value=$(field itl_mean_s "$report")
            itl[$shape]="${itl[$shape]:-} $value"
            echo "$shape ($layers layers, $dtype, batch $batch, round $round): ITL $value s," \
                "$(awk -v i="$value" -v b="$batch" 'BEGIN { printf "%.3f", b / i }') tok/s, load $(cut -d' ' -f1 /proc/loadavg)"
        done
    done
done
mean() {
    awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; printf "%.6f", s / NF }' <<<"$1"
}
moe=$(mean "${itl[qwen3-30b-a3b]}") dense=$(mean "${itl[qwen3-30b-a3b-dense]}")
awk -v moe="$moe" -v dense="$dense" -v b="$batch" 'BEGIN {
    printf "mean ITL: MoE %.4f s (%.3f tok/s), dense %.4f s (%.3f tok/s)\n", moe, b / moe, dense, b / dense
    printf "MoE / dense decode tok/s: %.2f (target >= 0.8)\n", dense / moe
}'
