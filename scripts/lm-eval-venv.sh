#!/usr/bin/env bash
# Prints the path of a Python that has lm-evaluation-harness (the `lm_eval` package, pinned below)
# with what its `local-completions` model needs, installing it once into a virtual environment
# in the pagoda cache (its dependencies are many; they stay out of the system Python).
set -euo pipefail
version=0.4.13
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
venv="$cache/lm-eval-venv"
if ! "$venv/bin/python" -c "import lm_eval, aiohttp, tenacity, requests" 2>/dev/null ||
    [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("lm_eval"))')" != "$version" ]; then
    echo "lm-eval-venv: installing lm-eval==$version into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "lm-eval==$version" aiohttp tenacity requests >&2
fi
echo "$venv/bin/python"
