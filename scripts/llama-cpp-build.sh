#!/usr/bin/env bash
# Prints the path of llama.cpp's cmake target $1, building it once into the pagoda cache as
# `$2-<version>` from the llama.cpp vendored in the llama-cpp-python source distribution
# (scripts/llama-cpp-source.sh): a portable release build (not tuned to this CPU) without OpenMP
# or network code, llama.cpp's libraries and the C++ runtime linked in, stripped, configured
# with the cmake arguments after $2 too. `--cached NAME` prints the path only when NAME is
# built already (and fails otherwise). A Vulkan build keeps the shader features its glslc has
# (the build log's "... supported by glslc" lines) in `<binary>.features`. Needs a C++ compiler;
# installs the `cmake` Python package when no cmake is on PATH.
#
# The CPU tools the tests and reference scripts use (`cpu_tools` below) are built together: asked
# for one of them without cmake arguments, the build makes every one not yet cached, so that
# llama.cpp's libraries compile once on a fresh machine instead of once a tool.
set -euo pipefail
# The llama-cpp-python version llama-cpp-source.sh pins.
version=0.3.36
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
tools="$cache/tools"
if [ "$1" = --cached ]; then
    [ -x "$tools/$2-$version" ] && echo "$tools/$2-$version"
    exit
fi
target=$1 name=$2
shift 2
binary="$tools/$name-$version"
cpu_tools=(llama-quantize llama-gguf-split llama-tokenize llama-perplexity)
# The targets this build makes, each installed as `$tools/<target>-$version`.
targets=("$target")
if [ $# -eq 0 ] && [ "$name" = "$target" ] && [[ " ${cpu_tools[*]} " == *" $target "* ]]; then
    targets=()
    for tool in "${cpu_tools[@]}"; do
        [ -x "$tools/$tool-$version" ] || targets+=("$tool")
    done
fi
if [ ! -x "$binary" ]; then
    mkdir -p "$tools"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    if ! command -v cmake >/dev/null; then
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore cmake >&2
    fi
    sdist="$("$(dirname "$0")/llama-cpp-source.sh")"
    tar -xzf "$sdist" -C "$tmp"
    src="$tmp/$(basename "$sdist" .tar.gz)/vendor/llama.cpp"
    # Vulkan headers older than VK_EXT_layer_settings (Debian 12's 1.3.239): the Vulkan backend
    # creates its instance without configuring the validation layer (enabled only when asked).
    if [ -f /usr/include/vulkan/vulkan_core.h ] && ! grep -q VK_EXT_layer_settings /usr/include/vulkan/vulkan_core.h; then
        perl -0pi -e 's/    VkBool32 enable_best_practice = layer_settings;\n.*?layer_setting_info\(settings\);\n//s;
            s/layers, extensions, &layer_setting_info\);/layers, extensions);/' \
            "$src/ggml/src/ggml-vulkan/ggml-vulkan.cpp"
    fi
    echo "llama-cpp-build: building ${targets[*]}" >&2
    log="$tmp/build.log"
    if ! { cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF \
        -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" "$@" &&
        cmake --build "$tmp/build" --target "${targets[@]}" -j "$(nproc)"; } >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        exit 1
    fi
    # The Vulkan backend's shader features, which its build found in glslc, kept beside the binary.
    if grep "supported by glslc" "$log" >"$binary.features"; then
        cat "$binary.features" >&2
    else
        rm -f "$binary.features"
    fi
    if [ "${#targets[@]}" -eq 1 ]; then
        strip -o "$binary" "$tmp/build/bin/$target"
    else
        for tool in "${targets[@]}"; do
            strip -o "$tools/$tool-$version" "$tmp/build/bin/$tool"
        done
    fi
fi
echo "$binary"
