#!/usr/bin/env bash
# Prints the path of llama.cpp's `llama-batched-bench` with its Vulkan backend, building it once
# into the pagoda cache (scripts/llama-cpp-build.sh; stripped, and a GPU machine needs only the
# Vulkan loader for it). It is the baseline `scripts/gpu-bench.sh` runs beside pagoda on a GPU
# machine, so it is llama.cpp at its best there: its shaders are compiled with the glslc that
# scripts/glslc-build.sh builds (or $GLSLC), which has cooperative matrices (GL_KHR_cooperative_matrix,
# GL_NV_cooperative_matrix2) and integer dot products (GL_EXT_integer_dot_product), so llama.cpp
# builds its coopmat, coopmat2 and integer-dot kernels and picks among them per GPU as it does
# everywhere. The build fails when that glslc lacks any of the three. The features its build found
# are kept beside the binary (`<path>.features`). Building needs `libvulkan-dev` and
# `spirv-headers` (Debian's), and Vulkan headers newer than Debian 12's (fetched below); about 30
# minutes on two cores, besides glslc's first build.
set -euo pipefail
build="$(dirname "$0")/llama-cpp-build.sh"
# The name says how the shaders were built: an older build with Debian's glslc, which ran only
# llama.cpp's scalar kernels, is not reused.
name=llama-batched-bench-vulkan-coopmat
"$build" --cached "$name" && exit
missing=()
[ -f /usr/include/vulkan/vulkan.h ] || missing+=(libvulkan-dev)
[ -d /usr/share/cmake/SPIRV-Headers ] || missing+=(spirv-headers)
if ((${#missing[@]})); then
    echo "llama-cpp-vulkan: needs ${missing[*]} (apt-get install ${missing[*]})" >&2
    exit 1
fi
glslc=${GLSLC:-$("$(dirname "$0")/glslc-build.sh")}
for extension in GL_KHR_cooperative_matrix GL_NV_cooperative_matrix2 GL_EXT_integer_dot_product; do
    if ! printf '#version 460\n#extension %s : require\nvoid main() {}\n' "$extension" |
        "$glslc" -fshader-stage=compute --target-env=vulkan1.3 -o /dev/null - 2>/dev/null; then
        echo "llama-cpp-vulkan: $glslc has no $extension" >&2
        exit 1
    fi
done
# The Vulkan headers: llama.cpp declares its cooperative-matrix paths only where they define
# VK_KHR_cooperative_matrix and VK_NV_cooperative_matrix2, which Debian 12's (1.3.239) do not. Then
# the headers of Debian 13's libvulkan-dev (plain headers, no glibc to match) are unpacked once
# into the cache: apt downloads the package with a private state, from the system's own Debian
# source entry with its suite set to trixie.
include=/usr/include
if ! grep -q "define VK_NV_cooperative_matrix2 1" "$include/vulkan/vulkan_core.h"; then
    cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
    include="$cache/tools/vulkan-headers-trixie/usr/include"
    if [ ! -f "$include/vulkan/vulkan_core.h" ]; then
        apt=$(mktemp -d)
        mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources"
        awk 'BEGIN { RS = ""; ORS = "\n\n" } /Suites: bookworm/ { sub(/Suites: [^\n]*/, "Suites: trixie"); print; exit }' \
            /etc/apt/sources.list.d/debian.sources >"$apt/sources/trixie.sources"
        options=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$apt/sources"
            -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache" -o APT::Sandbox::User=root)
        apt-get "${options[@]}" update -qq >&2
        (cd "$apt" && apt-get "${options[@]}" download libvulkan-dev >&2)
        dpkg -x "$apt"/libvulkan-dev_*.deb "$cache/tools/vulkan-headers-trixie"
        rm -rf "$apt"
    fi
fi
binary=$("$build" llama-batched-bench "$name" -DGGML_VULKAN=ON -DVulkan_GLSLC_EXECUTABLE="$glslc" \
    -DVulkan_INCLUDE_DIR="$include")
for extension in GL_KHR_cooperative_matrix GL_NV_cooperative_matrix2 GL_EXT_integer_dot_product; do
    grep -q "^-- $extension supported by glslc" "$binary.features" ||
        echo "llama-cpp-vulkan: warning: llama.cpp's build did not find $extension in $glslc" >&2
done
echo "$binary"
