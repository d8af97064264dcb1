#!/usr/bin/env python3
"""Writes tests/fixtures/families/gpt-oss-mxfp4.json: what transformers and llama.cpp's
convert_hf_to_gguf.py make of the tiny gpt-oss's MXFP4 checkpoint (FAMILIES_DIR/gpt-oss/mxfp4,
written by scripts/tiny-families.py in the hub checkpoint's form: `mlp.experts.*_blocks` and
`_scales`, quantization_config quant_method mxfp4). Not run in CI: scripts/family-reference.sh
runs it with the reference virtual environment.

  make-mxfp4-reference.py FAMILIES_DIR LLAMA_CPP_DIR

Records (1) that transformers (Mxfp4Config(dequantize=True), on the CPU) reads the checkpoint
back to exactly the f32 model's experts, and its logits of the gpt-oss fixture's prompts equal
the f32 model's; (2) the MXFP4 tensors llama.cpp's converter repacks the checkpoint into
(`blk.N.ffn_{gate,up,down}_exps.weight`, ggml's block layout): type, shape, sha256 of their
bytes, and that gguf-py dequantizes them to the f32 model's experts.
"""
import hashlib
import importlib.util
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "families" / "gpt-oss-mxfp4.json"

spec = importlib.util.spec_from_file_location("tiny_families", ROOT / "scripts" / "tiny-families.py")
tf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tf)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


@torch.no_grad()
def main(argv):
    import gguf
    import transformers
    from transformers import AutoModelForCausalLM, Mxfp4Config

    families, llama_cpp = pathlib.Path(argv[0]), pathlib.Path(argv[1])
    hf_dir = families / "gpt-oss"
    mx_dir = hf_dir / "mxfp4"
    torch.set_num_threads(2)
    f32 = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    mx = AutoModelForCausalLM.from_pretrained(mx_dir, dtype=torch.float32, attn_implementation="eager",
                                              quantization_config=Mxfp4Config(dequantize=True)).eval()
    want = dict(f32.named_parameters())
    experts_equal = all(torch.equal(p, want[n]) for n, p in mx.named_parameters())
    fixture = json.loads((ROOT / "tests" / "fixtures" / "families" / "gpt-oss.json").read_text(encoding="utf-8"))
    worst = 0.0
    for prompt in fixture["prompts"]:
        ids = torch.tensor([prompt["ids"]])
        worst = max(worst, float((mx(input_ids=ids).logits - f32(input_ids=ids).logits).abs().max()))

    family = tf.FAMILIES["gpt-oss"]
    weights = tf.make_weights("gpt-oss", family)
    ff = family["config"]["intermediate_size"]
    tensors = []
    with tempfile.TemporaryDirectory() as tmp:
        converted = pathlib.Path(tmp) / "gpt-oss-mxfp4.gguf"
        subprocess.run([sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(mx_dir), "--outtype", "f32",
                        "--outfile", str(converted)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        converter_sha256 = sha256(converted.read_bytes())
        for t in gguf.GGUFReader(str(converted)).tensors:
            if not t.name.endswith("_exps.weight"):
                continue
            layer, part = int(t.name.split(".")[1]), t.name.split(".")[2]
            hf = f"model.layers.{layer}.mlp.experts."
            # the f32 model's expert as [experts, out, in]
            if part == "ffn_down_exps":
                expected = np.swapaxes(weights[hf + "down_proj"], 1, 2)
            else:
                gate_up = np.swapaxes(weights[hf + "gate_up_proj"], 1, 2)
                expected = gate_up[:, 0::2] if part == "ffn_gate_exps" else gate_up[:, 1::2]
            got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(expected.shape)
            tensors.append({
                "name": t.name, "type": t.tensor_type.name, "shape": [int(n) for n in t.shape],
                "sha256": sha256(np.ascontiguousarray(t.data).tobytes()),
                "dequantized_equal_f32": bool(np.array_equal(got, expected)),
            })
    assert len(tensors) == 3 * family["config"]["num_hidden_layers"] and ff % 32 == 0
    ok = experts_equal and worst == 0.0 and all(t["dequantized_equal_f32"] and t["type"] == "MXFP4" for t in tensors)
    result = {
        "about": "The tiny gpt-oss (tests/fixtures/families/gpt-oss.json) as an MXFP4 checkpoint in the hub's form "
                 "(scripts/tiny-families.py writes FAMILIES_DIR/gpt-oss/mxfp4: experts as `_blocks`/`_scales`, "
                 "quantization_config quant_method mxfp4; transformers' own MXFP4 quantizer needs Triton kernels "
                 "and a GPU, so tiny-families.py packs the experts, which lie exactly on the MXFP4 grid). "
                 "`transformers`: Mxfp4Config(dequantize=True) on the CPU reads it back to exactly the f32 model's "
                 "parameters, and its logits of the gpt-oss fixture's prompts differ from the f32 model's by "
                 "`max_logit_difference` (0: the f32 fixture is this checkpoint's reference). `converter`: "
                 "llama.cpp's convert_hf_to_gguf.py --outtype f32 on it repacks each layer's experts into ggml's "
                 "MXFP4 blocks; each tensor's type, ggml shape, sha256 of its bytes (one expert after another, "
                 "each row's blocks of 17 bytes) and whether gguf-py dequantizes it to the f32 experts.",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "llama_cpp_python_sdist": "0.3.36"},
        "quantization_config": tf.GPT_OSS_MXFP4_CONFIG,
        "transformers": {"parameters_equal_f32": experts_equal, "max_logit_difference": worst},
        "converter": {"sha256": converter_sha256, "tensors": tensors},
    }
    OUT.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")
    if not ok:
        sys.exit("the MXFP4 checkpoint is not read as the f32 model: see " + str(OUT))


if __name__ == "__main__":
    main(sys.argv[1:])
