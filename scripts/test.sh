#!/usr/bin/env bash
# The test entry point: installs what the tests need, then runs every check.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
export PAGODA_MODEL_GGUF="$(scripts/fetch-model.sh)"

# The visualizer's window test starts its own Xvfb and screenshots it with xwd.
if ! command -v Xvfb >/dev/null || ! command -v xwd >/dev/null; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq xvfb x11-apps >/dev/null
fi
export PAGODA_REQUIRE_XVFB=1

cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets

# The official openai Python package against `pagoda serve` on the default model.
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore openai
cargo build --bin pagoda
python3 tests/openai_client.py "${CARGO_TARGET_DIR:-target}/debug/pagoda"
