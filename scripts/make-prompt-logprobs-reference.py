#!/usr/bin/env python3
"""Writes assets/smollm2-prompt-logprobs.json: fp32 reference prompt logprobs of the default
model (SmolLM2-135M-Instruct Q4_1, dequantized) for a few `greedy_fp32` fixture prompts, from
../shared/tools/np_llama.py's forward pass. For each prompt position after the first: the
prompt token's logprob and rank, and the top 3 (id, logprob). Only these values are committed.

    python3 scripts/make-prompt-logprobs-reference.py --model "$PAGODA_MODEL_GGUF"
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "..", "shared", "tools"))
from np_llama import NpLlama  # noqa: E402

CASES = ["A1", "A5", "A7"]
TOP = 3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get("PAGODA_MODEL_GGUF"))
    a = ap.parse_args()
    fixture = json.load(open(os.path.join(ROOT, "assets", "smollm2-135m-instruct-q4_1.json")))
    prompts = {e["id"]: e["prompt_ids"] for e in fixture["greedy_fp32"]}
    model = NpLlama(a.model)
    out = []
    for case in CASES:
        ids = prompts[case]
        model.reset()
        logits = model.forward(ids).astype(np.float64)
        m = logits.max(axis=-1, keepdims=True)
        logprobs = logits - (m + np.log(np.exp(logits - m).sum(axis=-1, keepdims=True)))
        positions = []
        for j in range(1, len(ids)):
            row = logprobs[j - 1]
            token = ids[j]
            order = np.argsort(-row, kind="stable")[:TOP]
            positions.append({
                "token_id": token,
                "logprob": round(float(row[token]), 6),
                "rank": int((row > row[token]).sum()) + 1,
                "top": [[int(i), round(float(row[i]), 6)] for i in order],
            })
        out.append({"id": case, "prompt_ids": ids, "positions": positions})
    path = os.path.join(ROOT, "assets", "smollm2-prompt-logprobs.json")
    with open(path, "w") as f:
        json.dump({"source": "np_llama.py fp32 forward on the dequantized SmolLM2-135M-Instruct Q4_1",
                   "top": TOP, "cases": out}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
