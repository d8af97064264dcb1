#!/usr/bin/env bash
# The test entry point: installs what the tests need, then runs every check.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
export PAGODA_MODEL_GGUF="$(scripts/fetch-model.sh)"

cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets
