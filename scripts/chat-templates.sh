#!/usr/bin/env bash
# Prints a directory holding the real chat templates llama.cpp tests with (models/templates/
# *.jinja of the llama.cpp that llama-cpp-source.sh fetches), extracting them once.
# tests/model_chat_templates.rs reads them (PAGODA_CHAT_TEMPLATES).
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
sdist="$(scripts/llama-cpp-source.sh)"
dir="$cache/chat-templates-$(basename "$sdist" .tar.gz)"
if [ ! -d "$dir" ]; then
    tmp=$(mktemp -d "$cache/chat-templates.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    tar -xzf "$sdist" -C "$tmp" --wildcards '*/vendor/llama.cpp/models/templates/*.jinja'
    mkdir "$tmp/templates"
    mv "$tmp"/*/vendor/llama.cpp/models/templates/*.jinja "$tmp/templates/"
    mv "$tmp/templates" "$dir"
fi
echo "$dir"
