#!/usr/bin/env bash
# Runs every fuzz target, or the ones named, for RUNS executions each and prints one
# summary line per target (executions, panics, hangs, runaway allocations):
#   scripts/fuzz.sh [RUNS] [--seed S] [TARGET...]
# Targets: gguf, gguf-tokenizer, hf, chat, server. Seeds include the default model's
# metadata and chat template when it is on disk. Fails when any target failed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-100000}"
shift || true
if [[ -z "${PAGODA_MODEL_GGUF:-}" ]]; then
    PAGODA_MODEL_GGUF="$(scripts/fetch-model.sh)"
    export PAGODA_MODEL_GGUF
fi
cargo test --test fuzz -- --runs "$runs" "$@"
