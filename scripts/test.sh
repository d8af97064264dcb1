#!/usr/bin/env bash
# The test entry point: installs what the tests need, then runs every check.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh --test
export PAGODA_MODEL_GGUF="$(scripts/fetch-model.sh)"
# The visualizer's window test starts its own Xvfb; here it must not skip.
export PAGODA_REQUIRE_XVFB=1

cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets

# The official openai Python package against `pagoda serve` on the default model.
cargo build --bin pagoda
python3 tests/openai_client.py "${CARGO_TARGET_DIR:-target}/debug/pagoda"
