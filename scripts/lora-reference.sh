#!/usr/bin/env bash
# Regenerates tests/fixtures/lora/*.json (run when the tiny adapters or the tools change; not
# part of CI): adds a pinned `peft` to the reference virtual environment that
# scripts/family-reference.sh builds (run that first), writes the tiny adapters with
# scripts/tiny-adapters.py next to the tiny family models and computes the expected logits
# with transformers + peft, checking the GGUF adapters against llama.cpp's
# convert_lora_to_gguf.py from the llama-cpp-python source distribution.
#   scripts/lora-reference.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
venv="$cache/ref-venv"
if ! "$venv/bin/python" -c "import torch, transformers, gguf" 2>/dev/null; then
    echo "run scripts/family-reference.sh first (it builds $venv)" >&2
    exit 1
fi
if [ "$("$venv/bin/python" -c 'import peft; print(peft.__version__)' 2>/dev/null)" != "0.21.2" ]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check peft==0.21.2
fi
sdist="$(scripts/llama-cpp-source.sh)"
src="$cache/tools/src/$(basename "$sdist" .tar.gz)"
if [ ! -f "$src/vendor/llama.cpp/convert_lora_to_gguf.py" ]; then
    mkdir -p "$cache/tools/src"
    tar -xzf "$sdist" -C "$cache/tools/src"
fi
families="$("$venv/bin/python" scripts/tiny-families.py "$cache/families" --only llama,qwen2)"
"$venv/bin/python" scripts/make-lora-reference.py "$families" "$src/vendor/llama.cpp"
