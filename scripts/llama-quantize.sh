#!/usr/bin/env bash
# Prints the path of llama.cpp's `llama-quantize`, building it once into the pagoda cache from
# the llama.cpp vendored in the llama-cpp-python source distribution (pinned below; a CPU
# build of that one target, a few minutes on two cores). Needs a C++ compiler; installs the
# `cmake` Python package when no cmake is on PATH.
set -euo pipefail
version=0.3.36
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
tools="$cache/tools"
binary="$tools/llama-quantize-$version"
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
    echo "llama-quantize: building (a few minutes)" >&2
    log="$tmp/build.log"
    if ! { cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DBUILD_SHARED_LIBS=OFF && cmake --build "$tmp/build" --target llama-quantize -j "$(nproc)"; } >"$log" 2>&1
    then
        tail -n 40 "$log" >&2
        exit 1
    fi
    cp "$tmp/build/bin/llama-quantize" "$binary"
fi
echo "$binary"
