#!/usr/bin/env bash
# Regenerates tests/fixtures/families/*.json (run when the tiny models or the tools change;
# not part of CI). Builds the reference virtual environment once under the pagoda cache
# (torch, transformers 5, gguf, sentencepiece, pinned below; torch pulls about 3 GB of CUDA
# libraries), writes the tiny models with scripts/tiny-families.py into the cache, and runs
# scripts/make-family-reference.py on them with llama.cpp's converter from the
# llama-cpp-python source distribution (scripts/llama-cpp-source.sh) and its `llama-tokenize`
# (built once with scripts/llama-cpp-build.sh).
#   scripts/family-reference.sh [--only NAME,...] [--quantize]
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
venv="$cache/ref-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, transformers, gguf, sentencepiece, accelerate" 2>/dev/null; then
    python3 -m venv "$venv"
    # accelerate: transformers' MXFP4 reader (scripts/make-mxfp4-reference.py) needs it
    "$venv/bin/pip" install --quiet --disable-pip-version-check torch==2.11.0 transformers==5.24.0 gguf==0.19.0 \
        safetensors==0.8.0 sentencepiece==0.2.3 "protobuf==4.25.9" numpy==2.4.6 jinja2==3.1.6 tokenizers==0.23.3 \
        accelerate==1.16.0
fi
sdist="$(scripts/llama-cpp-source.sh)"
src="$cache/tools/src/$(basename "$sdist" .tar.gz)"
if [ ! -f "$src/vendor/llama.cpp/convert_hf_to_gguf.py" ]; then
    mkdir -p "$cache/tools/src"
    tar -xzf "$sdist" -C "$cache/tools/src"
fi
only=()
quantize=()
while [ $# -gt 0 ]; do
    case "$1" in
        --only) only=(--only "$2"); shift 2 ;;
        --quantize) quantize=(--quantize "$(scripts/llama-quantize.sh)"); shift ;;
        *) echo "usage: $0 [--only NAME,...] [--quantize]" >&2; exit 2 ;;
    esac
done
tokenize="$(scripts/llama-cpp-build.sh llama-tokenize llama-tokenize)"
families="$("$venv/bin/python" scripts/tiny-families.py "$cache/families" "${only[@]}")"
"$venv/bin/python" scripts/make-family-reference.py "$families" "$src/vendor/llama.cpp" "$tokenize" \
    "${only[@]}" "${quantize[@]}"
# gpt-oss's MXFP4 checkpoint (tests/fixtures/families/gpt-oss-mxfp4.json), whenever gpt-oss is made
if [ ${#only[@]} -eq 0 ] || [[ ",${only[1]}," == *,gpt-oss,* ]]; then
    "$venv/bin/python" scripts/make-mxfp4-reference.py "$families" "$src/vendor/llama.cpp"
fi
