#!/usr/bin/env bash
# The soak: 64 concurrent clients against `pagoda serve` on 127.0.0.1 (streaming and not,
# n > 1, stop strings, seeded sampling, streams dropped mid-way), then every request that
# was not dropped checked against the library alone, no request or KV block left, finished
# + aborted = sequences sent, and resident memory within ±10% after warm-up.
#   scripts/soak.sh                     10 minutes on the simulated model, 2 on the default model
#   scripts/soak.sh SIM WGPU [CLIENTS]  other durations in seconds (0 skips one), and fewer
#                                       clients on the default model (CPU-only CI)
set -euo pipefail
cd "$(dirname "$0")/.."

sim="${1:-600}"
wgpu="${2:-120}"
clients="${3:-64}"
if [[ "$sim" != 0 ]]; then
    cargo test --test soak -- --duration "$sim" --executor sim
fi
if [[ "$wgpu" != 0 ]]; then
    if [[ -z "${PAGODA_MODEL_GGUF:-}" ]]; then
        PAGODA_MODEL_GGUF="$(scripts/fetch-model.sh)"
        export PAGODA_MODEL_GGUF
    fi
    cargo test --test soak -- --duration "$wgpu" --executor wgpu --clients "$clients"
fi
