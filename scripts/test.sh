#!/usr/bin/env bash
# The test entry point: installs what the tests need, then runs every check.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
export PAGODA_MODEL_GGUF="$(scripts/fetch-model.sh)"

cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets

# The official openai Python package against `pagoda serve` on the default model.
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore openai
cargo build --bin pagoda
python3 tests/openai_client.py "${CARGO_TARGET_DIR:-target}/debug/pagoda"
