#!/usr/bin/env python3
"""lm-evaluation-harness (the `lm_eval` package, pinned in scripts/setup.sh) against `pagoda
serve`: its `local-completions` model runs a loglikelihood task defined in a local YAML on a
local JSONL dataset (tests/lm_eval/, no hub download), tokenizing through pagoda's /tokenize
(found through /tokenizer_info, as lm-eval's remote tokenizer finds vLLM's) and scoring with
`echo: true, logprobs: 1` on /v1/completions. Each choice's loglikelihood must match the
reference (assets/lm-eval-reference.json: llama.cpp's tokens, the fp32 forward pass of
../shared/tools/np_llama.py) within 1e-3 per token, and lm-eval's accuracy must equal the
reference's.

Usage: tests/lm_eval_client.py PAGODA_BINARY [MODEL] (run with the Python that has lm_eval).
"""

import json
import os
import sys
import tempfile

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import lm_eval  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from pagoda_serve import serving  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def task_dir(tmp: str) -> str:
    """The task's YAML, its data file's path filled in, in a directory of its own."""
    data = os.path.join(HERE, "lm_eval", "capitals.jsonl")
    yaml = open(os.path.join(HERE, "lm_eval", "capitals.yaml")).read().replace("DATA_FILE", data)
    with open(os.path.join(tmp, "capitals.yaml"), "w") as f:
        f.write(yaml)
    return tmp


def main() -> None:
    reference = json.load(open(os.path.join(ROOT, "assets", "lm-eval-reference.json")))
    # An f32 KV cache: the reference is an fp32 forward pass (f16 keys and values move logprobs
    # by ~2e-3, more than the 1e-3 compared).
    with serving(sys.argv, ("--kv-cache-dtype", "f32")) as base, tempfile.TemporaryDirectory() as tmp:
        results = lm_eval.simple_evaluate(
            model="local-completions",
            model_args={
                "model": "smollm2",
                "base_url": f"{base}/v1/completions",
                "tokenizer_backend": "remote",
                "num_concurrent": 1,
                "max_retries": 1,
            },
            tasks=["pagoda_capitals"],
            task_manager=TaskManager(include_path=task_dir(tmp)),
            log_samples=True,
        )
    samples = results["samples"]["pagoda_capitals"]
    assert len(samples) == len(reference["docs"]), samples
    worst = 0.0
    for sample in samples:
        doc = reference["docs"][sample["doc_id"]]
        assert sample["doc"]["question"] == doc["question"]
        # resps: per choice, [[loglikelihood, is_greedy]].
        for resp, scored in zip(sample["resps"], doc["scored"], strict=True):
            loglikelihood = float(resp[0][0])
            tokens = len(scored["token_ids"]) - scored["context_len"]
            error = abs(loglikelihood - scored["loglikelihood"])
            worst = max(worst, error / tokens)
            assert error <= 1e-3 * tokens, (doc["question"], loglikelihood, scored)
    acc = results["results"]["pagoda_capitals"]["acc,none"]
    assert acc == reference["acc"], (acc, reference["acc"])
    print(f"lm-eval local-completions: acc {acc} as the reference's; worst error {worst:.2e} a token")


if __name__ == "__main__":
    main()
