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
# `spirv-headers` (Debian's); about 20 minutes on two cores, besides glslc's first build.
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
binary=$("$build" llama-batched-bench "$name" -DGGML_VULKAN=ON -DVulkan_GLSLC_EXECUTABLE="$glslc")
for extension in GL_KHR_cooperative_matrix GL_NV_cooperative_matrix2 GL_EXT_integer_dot_product; do
    grep -q "^-- $extension supported by glslc" "$binary.features" ||
        echo "llama-cpp-vulkan: warning: llama.cpp's build did not find $extension in $glslc" >&2
done
echo "$binary"
