#!/usr/bin/env bash
# Prints a directory holding the default model split by llama.cpp's `llama-gguf-split` (built
# once by scripts/llama-cpp-build.sh), making any split that is missing: its 272 tensors 100 a
# part (by100/, 3 parts), 120 a part (by120/, 3 parts), and 100 a part after a first part of
# metadata only (`--no-tensor-first-split`: by100-meta/, 4 parts). tests/model_split_gguf.rs
# reads them (PAGODA_SPLIT_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
dir="$cache/splits"
base="$(scripts/fetch-model.sh)"
for variant in by100 by120 by100-meta; do
    out="$dir/$variant"
    [ -d "$out" ] && continue
    case $variant in
    by100) args=(--split-max-tensors 100) ;;
    by120) args=(--split-max-tensors 120) ;;
    by100-meta) args=(--split-max-tensors 100 --no-tensor-first-split) ;;
    esac
    split="$(scripts/llama-cpp-build.sh llama-gguf-split llama-gguf-split)"
    rm -rf "$out.tmp"
    mkdir -p "$out.tmp"
    if ! log="$("$split" --split "${args[@]}" "$base" "$out.tmp/$(basename "$base" .gguf)" 2>&1)"; then
        echo "$log" >&2
        exit 1
    fi
    mv "$out.tmp" "$out"
done
echo "$dir"
