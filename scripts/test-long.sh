#!/usr/bin/env bash
# The long run: scripts/test.sh with the full versions of what CI cuts short (hours on
# lavapipe). The fuzzer's million cases and the long soak; every kernel test under each forced
# configuration; the model families through the GPU kernels from all three formats, with the
# GGUF-metadata tests, with flash and with split-KV attention; the chunked-submission pass whole; speculative decoding's exactness over
# every family and every mix (PAGODA_SPEC_EXACTNESS=all); the whole sweeps of the tests that read
# PAGODA_TEST_LONG themselves (tests/kernels_gemv_rows.rs: every batch of the GEMV over several rows).
set -euo pipefail
cd "$(dirname "$0")/.."
PAGODA_TEST_LONG=1 PAGODA_SPEC_EXACTNESS=all exec scripts/test.sh "$@"
