#!/usr/bin/env bash
# Prints the path of the llama-cpp-python source distribution (pinned below; about 75 MB),
# downloading it once into the pagoda cache. It vendors llama.cpp: `llama-cpp-build.sh` builds
# llama.cpp's tools from it and `chat-templates.sh` takes the real chat templates from it.
set -euo pipefail
version=0.3.36
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
sdist="$cache/tools/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
    mkdir -p "$cache/tools"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "llama-cpp-source: downloading llama-cpp-python==$version (source, about 75 MB)" >&2
    # pip prepares the metadata of a source distribution with its build backend.
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore scikit-build-core >&2
    python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python --no-build-isolation \
        --dest "$tmp" "llama-cpp-python==$version" >&2
    mv "$tmp/llama_cpp_python-$version.tar.gz" "$sdist"
fi
echo "$sdist"
