#!/usr/bin/env bash
# Kernel cost report, no GPU needed: for each decode mat-vec variant the default model and a 7B
# shape run on an NVIDIA GPU, alone and in a batch of 8, the hot loop's instructions and bytes
# loaded per weight in the SPIR-V naga emits, beside the same counts for llama.cpp's Vulkan
# `mul_mat_vec` shaders compiled by glslc. It is how kernel work steers between GPU runs (issue 47).
#
#   scripts/kernel-cost.sh [--json] [--batches 1,8] [MODEL...]
#
# MODEL: a GGUF file, or SHAPE:TYPE for a `pagoda random-model` shape in one weight type (only
# its shapes are used; no weights are written). Default: the default model
# ($PAGODA_MODEL_GGUF, else scripts/fetch-model.sh's) and llama-2-7b in q4_k, q6_k, q8_0 and
# q4_0. Text by default; with --json one object a line: {"source": "pagoda" | "llama.cpp",
# "kernel", "weight_type" (ggml's lower-case names), ..., "instructions_per_weight",
# "bytes_per_weight"}. llama.cpp's q4_k, q6_k, q8_0 and q4_0 shaders are always compiled, with
# those of every other type a pagoda variant reads. --batches lists the decode batches (rows of
# x a step; default 1,8): each takes its own variants (the one-row GEMV at 1, the GEMV of 2, 4
# or 8 rows a workgroup from 2 up, every weight run decoded once for all its rows) and
# llama.cpp's shaders with as many activation columns (NUM_COLS, up to 8; their float path,
# where NVIDIA takes the integer q8_1 path for batches past one).
#
# What is compiled:
# - pagoda: examples/kernel_spirv.rs lists the variants pagoda's capability layer picks for a
#   decode step of each batch on an NVIDIA GPU under Vulkan (the K-split GEMV, subgroups of 32,
#   shader-f16) and writes naga's SPIR-V of each with the options wgpu's Vulkan backend passes.
# - llama.cpp: `mul_mat_vec_<type>_f32_f32_subgroup` from the llama.cpp that
#   scripts/llama-cpp-source.sh caches, compiled as its vulkan-shaders-gen.cpp does (glslc -O,
#   --target-env=vulkan1.2, the same defines), its specialization constants (BLOCK_SIZE,
#   NUM_ROWS, NUM_COLS) set to what ggml-vulkan.cpp sets on NVIDIA Turing or newer at each batch
#   for m <= 8192 and k >= 1024 (workgroups of four subgroups of 32; the report prints them),
#   frozen so that the row loops unroll.
# - both then go through `spirv-opt -O` (inlining, SSA, constant folding, the [[unroll]] loops
#   unrolled): the same optimizer on both sides, as a driver's compiler would see them.
#
# How it counts (scripts/spirv_hot_loop.py), the same way on both sides:
# - a loop is a structured loop of the entry point: an OpLoopMerge header and every block
#   reachable from it without passing its merge block. The hot loop is the innermost loop (no
#   other loop header inside) that loads the most weight bytes an iteration: the walk over a
#   row's blocks or super-blocks, not a tail loop or the partial-rows path.
# - instructions: every instruction of its blocks except OpLabel, OpLoopMerge,
#   OpSelectionMerge, OpPhi and debug lines; both sides of a branch count, as a warp whose lanes
#   diverge issues both. "moves" are the part that only moves data or forms addresses
#   (composite extract/construct/insert, vector shuffle, copy, bitcast, access chains).
# - bytes: the loaded type's size for every OpLoad from a storage buffer (weights,
#   activations, a fused norm's weight), as issued: a load repeated per row counts per row.
# - weights one iteration (one invocation) consumes: the activation values it loads (distinct
#   access chains) times the weight rows each activation multiplies (pagoda: the GEMV's
#   TN * GATES; llama.cpp: NUM_ROWS). Per weight = per iteration / that. Over several rows of x
#   (activation columns) the activations of every row count, so "per weight" is per weight and
#   row, a multiply-add: a weight's bytes, loaded once for the rows, drop with their number.
#
# Needs glslc and spirv-tools (installed here when missing, Debian's packages) and cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

json=()
batches=(--batches 1,8)
while (($#)); do
    case "$1" in
    --json) json=(--json) ;;
    --batches)
        batches=(--batches "$2")
        shift
        ;;
    *) break ;;
    esac
    shift
done
models=("$@")
if ((${#models[@]} == 0)); then
    models=("${PAGODA_MODEL_GGUF:-$(scripts/fetch-model.sh)}" llama-2-7b:q4_k llama-2-7b:q6_k llama-2-7b:q8_0
        llama-2-7b:q4_0)
fi

if ! command -v glslc >/dev/null || ! command -v spirv-opt >/dev/null || ! command -v spirv-dis >/dev/null; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    echo "kernel-cost: installing glslc and spirv-tools" >&2
    $sudo_cmd apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq glslc spirv-tools >/dev/null
fi

# llama.cpp's Vulkan sources, extracted once beside the cached source distribution.
sdist="$(scripts/llama-cpp-source.sh)"
llama="${sdist%.tar.gz}-ggml-vulkan"
if [ ! -f "$llama/ggml-vulkan.cpp" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    tar -xzf "$sdist" -C "$tmp" --wildcards '*/vendor/llama.cpp/ggml/src/ggml-vulkan/*'
    mkdir -p "$(dirname "$llama")"
    mv "$tmp"/*/vendor/llama.cpp/ggml/src/ggml-vulkan "$llama"
fi

example=$(cargo build --quiet --example kernel_spirv --message-format=json |
    python3 -c 'import json, sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])')
python3 scripts/kernel_cost.py --example "$example" --llama-dir "$llama" "${batches[@]}" "${json[@]}" "${models[@]}"
