#!/usr/bin/env python3
"""Writes assets/lm-eval-reference.json: the local lm-evaluation-harness task of
tests/lm_eval/ (capitals.yaml on capitals.jsonl) scored from reference logprobs, without pagoda.
Each (question, choice) pair is split into context and continuation tokens as lm-eval's
`_encode_pair` splits them (the whole string and the context tokenized by llama.cpp's
`llama-tokenize`, the continuation the whole's tokens after the context's), and the
continuation's loglikelihood is the sum of its tokens' logprobs from the fp32 forward pass of
../shared/tools/np_llama.py on the dequantized default model. The task's accuracy (`acc`: the
choice of largest loglikelihood is the answer) follows. tests/lm_eval_client.py compares
lm-eval's run against `pagoda serve` with these values.

    python3 scripts/make-lm-eval-reference.py --model "$PAGODA_MODEL_GGUF"
"""
import argparse
import ast
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "..", "shared", "tools"))
from np_llama import NpLlama  # noqa: E402


def tokenize(tool, model, text):
    out = subprocess.run([tool, "-m", model, "-p", text, "--ids", "--log-disable", "--no-bos"],
                         check=True, capture_output=True, text=True).stdout
    return ast.literal_eval(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get("PAGODA_MODEL_GGUF"))
    a = ap.parse_args()
    tool = subprocess.run([os.path.join(HERE, "llama-cpp-build.sh"), "llama-tokenize", "llama-tokenize"],
                          check=True, capture_output=True, text=True).stdout.strip()
    model = NpLlama(a.model)
    docs = [json.loads(line) for line in open(os.path.join(ROOT, "tests", "lm_eval", "capitals.jsonl"))]
    out, correct = [], 0
    for doc in docs:
        context = doc["question"]
        context_ids = tokenize(tool, a.model, context)
        scored = []
        for choice in doc["choices"]:
            whole = tokenize(tool, a.model, context + " " + choice)
            assert whole[:len(context_ids)] == context_ids, (context, choice)
            model.reset()
            logits = model.forward(whole).astype(np.float64)
            m = logits.max(axis=-1, keepdims=True)
            logprobs = logits - (m + np.log(np.exp(logits - m).sum(axis=-1, keepdims=True)))
            continuation = range(len(context_ids), len(whole))
            ll = sum(float(logprobs[j - 1][whole[j]]) for j in continuation)
            scored.append({"token_ids": whole, "context_len": len(context_ids), "loglikelihood": round(ll, 6)})
        best = max(range(len(scored)), key=lambda i: scored[i]["loglikelihood"])
        correct += best == doc["answer"]
        out.append({**doc, "scored": scored})
    path = os.path.join(ROOT, "assets", "lm-eval-reference.json")
    with open(path, "w") as f:
        json.dump({"source": "np_llama.py fp32 forward on the dequantized SmolLM2-135M-Instruct Q4_1, "
                             "llama.cpp's llama-tokenize",
                   "acc": correct / len(docs), "docs": out}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
