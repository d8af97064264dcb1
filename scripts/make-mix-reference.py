#!/usr/bin/env python3
"""Writes assets/smollm2-mixes-greedy.json: for each llama.cpp mix of the default model
(scripts/make-mixes.sh), the fp32 reference's greedy continuation of the fixture prompts
(32 tokens) with the top-1 minus top-2 logit margin of every step, the mix file's sha256,
and for the first tensor of each quantized type the sha256 of its f32 values as
`gguf.quants.dequantize` gives them (real blocks for the bit-exactness test).

The reference is ../shared/tools/np_llama.py (numpy over `gguf.quants.dequantize`d weights).
Run when the mixes or the prompts change; tests/smollm2_mixes.rs reads the output.
Usage: scripts/make-mix-reference.py MIX_DIR [NP_LLAMA_PY]"""
import hashlib
import importlib.util
import json
import pathlib
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

ROOT = pathlib.Path(__file__).resolve().parent.parent
MIXES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "IQ4_XS", "Q5_0", "Q2_K"]
TOKENS = 32


def load_np_llama(path):
    spec = importlib.util.spec_from_file_location("np_llama", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.NpLlama


def greedy_with_margins(model, prompt_ids):
    model.reset()
    logits = model.forward(prompt_ids)[-1]
    out, margins = [], []
    for _ in range(TOKENS):
        top2 = np.sort(logits.astype(np.float64))[-2:]
        margins.append(float(top2[1] - top2[0]))
        token = int(np.argmax(logits))
        out.append(token)
        if token == model.eos:
            break
        logits = model.forward([token])[-1]
    return out, margins


def dequantized_hashes(path):
    """sha256 of the dequantized f32 values of the first tensor of each quantized type."""
    hashes = {}
    for tensor in GGUFReader(str(path)).tensors:
        name = tensor.tensor_type.name.lower()
        if name in ("f32", "f16", "bf16") or name in hashes:
            continue
        values = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        hashes[name] = {"tensor": tensor.name, "sha256": hashlib.sha256(values.tobytes()).hexdigest()}
    return hashes


def main():
    mix_dir = pathlib.Path(sys.argv[1])
    np_llama = sys.argv[2] if len(sys.argv) > 2 else ROOT.parent / "shared" / "tools" / "np_llama.py"
    NpLlama = load_np_llama(np_llama)
    fixture = json.loads((ROOT / "assets" / "smollm2-135m-instruct-q4_1.json").read_text())
    prompts = [(case["id"], case["prompt_ids"]) for case in fixture["greedy_fp32"]]
    result = {"tokens": TOKENS, "mixes": {}}
    for mix in MIXES:
        path = mix_dir / f"SmolLM2-135M-Instruct.{mix}.gguf"
        model = NpLlama(str(path))
        cases = []
        for case_id, prompt_ids in prompts:
            generated, margins = greedy_with_margins(model, prompt_ids)
            cases.append({"id": case_id, "prompt_ids": prompt_ids, "generated_ids": generated,
                          "step_margins": margins})
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        result["mixes"][mix] = {"sha256": sha, "dequantized": dequantized_hashes(path), "cases": cases}
        print(f"{mix}: smallest margin {min(min(c['step_margins']) for c in cases):.4g}", file=sys.stderr)
    out = ROOT / "assets" / "smollm2-mixes-greedy.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
