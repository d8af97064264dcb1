#!/usr/bin/env bash
# Prints the path of llama.cpp's `llama-batched-bench` with its Vulkan backend, building it once
# into the pagoda cache (scripts/llama-cpp-build.sh; stripped, about 6 MB with xz, and a GPU
# machine needs only the Vulkan loader for it). It is the baseline `scripts/gpu-bench.sh` runs
# beside pagoda on a GPU machine. Building needs Debian's `glslc`, `libvulkan-dev` and
# `spirv-headers`; about 7 minutes on two cores. The shaders are compiled with the glslc at hand:
# Debian 12's has no cooperative matrices and no integer dot products, so the build runs
# llama.cpp's scalar Vulkan kernels, the ones it uses on GPUs without those extensions.
set -euo pipefail
build="$(dirname "$0")/llama-cpp-build.sh"
name=llama-batched-bench-vulkan
if ! "$build" --cached "$name"; then
    missing=()
    command -v glslc >/dev/null || missing+=(glslc)
    [ -f /usr/include/vulkan/vulkan.h ] || missing+=(libvulkan-dev)
    [ -d /usr/share/cmake/SPIRV-Headers ] || missing+=(spirv-headers)
    if ((${#missing[@]})); then
        echo "llama-cpp-vulkan: needs ${missing[*]} (apt-get install ${missing[*]})" >&2
        exit 1
    fi
    "$build" llama-batched-bench "$name" -DGGML_VULKAN=ON
fi
