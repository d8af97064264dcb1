#!/usr/bin/env bash
# Prints the path of llama.cpp's `llama-perplexity`, building it once into the pagoda cache (a
# CPU build of that one target by scripts/llama-cpp-build.sh, a few minutes on two cores).
set -euo pipefail
exec "$(dirname "$0")/llama-cpp-build.sh" llama-perplexity llama-perplexity
