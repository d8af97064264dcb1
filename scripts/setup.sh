#!/usr/bin/env bash
# Installs what pagoda needs on a fresh Debian/Ubuntu machine: a Vulkan driver when the
# machine has none (Mesa's lavapipe runs on the CPU) and the default model.
set -euo pipefail
cd "$(dirname "$0")/.."

have_vulkan() {
    ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json >/dev/null 2>&1 \
        && ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1'
}

if ! have_vulkan; then
    echo "setup: no Vulkan driver found; installing Mesa's (lavapipe runs on the CPU)"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
fi

scripts/fetch-model.sh >/dev/null
