#!/usr/bin/env bash
# Writes assets/smollm2-perplexity.json: what llama.cpp's own `llama-perplexity` (built from the
# pinned llama.cpp source by scripts/llama-perplexity.sh, CPU backend) prints for the default
# model on assets/perplexity.txt: the token count of the whole file, and for each context size
# below the chunks, the running PPL after each chunk and the final `PPL = X +/- Y`. Only these
# values are committed; tests/smollm2_perplexity.rs compares `pagoda perplexity` with them.
#
#     scripts/make-perplexity-reference.sh [MODEL.gguf]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
model="${1:-${PAGODA_MODEL_GGUF:-$("$root/scripts/fetch-model.sh")}}"
text="$root/assets/perplexity.txt"
bin="$("$root/scripts/llama-perplexity.sh")"
# -c ctx [--chunks N]: the short run the test repeats, and the whole file at 512.
runs=("128 2" "512 0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A context longer than the text makes llama-perplexity print how many tokens the text has.
"$bin" -m "$model" -f "$text" -c 65536 -t "$(nproc)" >"$tmp/count.log" 2>&1 || true
for run in "${runs[@]}"; do
    set -- $run
    chunks=()
    [ "$2" != 0 ] && chunks=(--chunks "$2")
    "$bin" -m "$model" -f "$text" -c "$1" "${chunks[@]}" -t "$(nproc)" >"$tmp/ppl-$1.log" 2>&1
done
python3 - "$tmp" "$model" "${runs[@]}" >"$root/assets/smollm2-perplexity.json" <<'PY'
import json, os, re, sys
tmp, model, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
count = open(os.path.join(tmp, "count.log")).read()
tokens = int(re.search(r"tokenizes to only (\d+) tokens", count).group(1))
out = {
    "model": os.path.basename(model),
    "file": "assets/perplexity.txt",
    "tool": "llama-perplexity (llama.cpp vendored in llama-cpp-python 0.3.36, CPU backend)",
    "num_tokens": tokens,
    "runs": [],
}
for run in runs:
    ctx, chunks = (int(x) for x in run.split())
    log = open(os.path.join(tmp, f"ppl-{ctx}.log")).read()
    final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
    running = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", log)]
    out["runs"].append({
        "ctx_size": ctx,
        "chunks": chunks or None,
        "ppl": float(final.group(1)),
        "ppl_error": float(final.group(2)),
        "running_ppl": running,
    })
print(json.dumps(out, indent=1))
PY
echo "wrote $root/assets/smollm2-perplexity.json" >&2
