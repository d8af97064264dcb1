#!/usr/bin/env bash
# Prints the path of a glslc that has cooperative matrices (GL_KHR_cooperative_matrix and NVIDIA's
# GL_NV_cooperative_matrix2) and integer dot products (GL_EXT_integer_dot_product), building it
# once into the pagoda cache. Debian 12's glslc (shaderc 2023.2) has neither, and Debian 13's
# package needs a newer glibc, so this builds shaderc's glslc from the sources that the Rust crate
# `shaderc-sys` (pinned below) vendors in its crate archive: shaderc 2025.3 with the glslang
# (15.3), SPIRV-Tools and SPIRV-Headers revisions it pins. cargo fetches the crate (`cargo vendor`
# of a throwaway project that depends on it); cmake and make build the `glslc_exe` target alone
# (no tests, no other executables). About an hour on two cores shared with other builds (65
# minutes here at nice 19); set JOBS for the parallelism
# (default: every core). `--cached` prints the path only when it is built already (and fails
# otherwise). Needs a C++ compiler and python3; installs the `cmake` Python package when no cmake
# is on PATH. scripts/llama-cpp-vulkan.sh builds llama.cpp's Vulkan shaders with it.
set -euo pipefail
# The shaderc-sys version whose vendored shaderc this builds.
version=0.10.1
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
binary="$cache/tools/glslc-shaderc-sys-$version"
if [ "${1:-}" = --cached ]; then
    [ -x "$binary" ] && echo "$binary"
    exit
fi
if [ ! -x "$binary" ]; then
    mkdir -p "$cache/tools"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    if ! command -v cmake >/dev/null; then
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore cmake >&2
    fi
    echo "glslc-build: fetching shaderc-sys $version's sources through cargo (about 15 MB)" >&2
    mkdir -p "$tmp/fetch/src"
    cat >"$tmp/fetch/Cargo.toml" <<EOF
[package]
name = "glslc-sources"
version = "0.0.0"
edition = "2021"

[dependencies]
shaderc-sys = "=$version"
EOF
    : >"$tmp/fetch/src/lib.rs"
    cargo vendor --quiet --versioned-dirs --manifest-path "$tmp/fetch/Cargo.toml" "$tmp/vendor" >/dev/null
    src="$tmp/vendor/shaderc-sys-$version/build"
    [ -d "$src/shaderc/glslc" ] || { echo "glslc-build: shaderc-sys $version carries no glslc/" >&2; exit 1; }
    echo "glslc-build: building glslc (shaderc $(sed -n 's/^v\([0-9.]*\)$/\1/p' "$src/shaderc/CHANGES" | head -1)," \
        "glslang $(sed -n 's/^## \([0-9.]*\) .*/\1/p' "$src/glslang/CHANGES.md" | head -1))" >&2
    log="$tmp/build.log"
    # The crate's top-level CMakeLists.txt adds SPIRV-Headers, SPIRV-Tools, glslang and shaderc.
    if ! { cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DSHADERC_SKIP_TESTS=ON \
        -DSHADERC_SKIP_EXAMPLES=ON -DSHADERC_SKIP_COPYRIGHT_CHECK=ON -DSPIRV_SKIP_EXECUTABLES=ON \
        -DSPIRV_SKIP_TESTS=ON -DSPIRV_WERROR=OFF -DENABLE_GLSLANG_BINARIES=OFF -DENABLE_SPVREMAPPER=OFF \
        -DGLSLANG_TESTS=OFF -DENABLE_OPT=ON &&
        cmake --build "$tmp/build" --target glslc_exe -j "${JOBS:-$(nproc)}"; } >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        exit 1
    fi
    strip -o "$binary.tmp" "$tmp/build/shaderc/glslc/glslc"
    mv "$binary.tmp" "$binary"
fi
echo "$binary"
