#!/usr/bin/env python3
"""Expected logits of the tiny LoRA adapters (scripts/tiny-adapters.py) from transformers +
peft, written to tests/fixtures/lora/<family>.json (values only).

  make-lora-reference.py FAMILIES_DIR LLAMA_CPP_DIR

For every family and adapter: the logits summary (as tests/fixtures/families/ has it) at every
position of the family fixture's prompts, and 16 greedy tokens, from the base model in fp32
with the PEFT adapter applied (`PeftModel.from_pretrained`); and for each adapter a GGUF can
carry, checks that llama.cpp's convert_lora_to_gguf.py writes byte-identically the GGUF that
scripts/tiny-adapters.py wrote (its sha256 recorded).
"""
import hashlib
import importlib.util
import json
import pathlib
import subprocess
import sys
import tempfile

import torch
import transformers
import peft
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("family_reference", ROOT / "scripts" / "make-family-reference.py")
family_reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(family_reference)
spec = importlib.util.spec_from_file_location("tiny_adapters", ROOT / "scripts" / "tiny-adapters.py")
tiny_adapters = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tiny_adapters)

GREEDY_TOKENS = 16
ABOUT = (
    "Expected values from Hugging Face transformers + peft (fp32 on CPU, attn_implementation='eager') for "
    "the tiny random LoRA adapters scripts/tiny-adapters.py writes (numpy default_rng, fixed seed per "
    "adapter) on the tiny family model of the same name. `adapters.<name>.config` is the adapter's "
    "adapter_config.json fields that matter; `prompts` are the family fixture's prompts (ids), each with "
    "`logits` summarized as in tests/fixtures/families/ (argmax, top-8 ids and values, the logits at "
    "`fixed_ids`, mean, mean_square, logsumexp) at every position and `greedy`, 16 greedy tokens with "
    "their top-1/top-2 margins, of PeftModel.from_pretrained(base, adapter). Compare with atol 1e-3. "
    "`gguf_sha256` is the sha256 of what llama.cpp's convert_lora_to_gguf.py --outtype f32 wrote for "
    "the adapter (absent where a GGUF cannot carry it: rsLoRA or alpha_pattern); scripts/tiny-adapters.py "
    "writes the same bytes."
)


def sha256(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def main(argv):
    families, llama_cpp = pathlib.Path(argv[1]), pathlib.Path(argv[2])
    subprocess.run([sys.executable, str(ROOT / "scripts" / "tiny-adapters.py"), str(families)], check=True,
                   stdout=subprocess.DEVNULL)
    torch.manual_seed(0)
    for family in tiny_adapters.FAMILY_NAMES:
        base_fixture = json.loads((ROOT / "tests" / "fixtures" / "families" / f"{family}.json").read_text())
        fixed_ids = base_fixture["fixed_ids"]
        prompts = [{"name": p["name"], "ids": p["ids"]} for p in base_fixture["prompts"]]
        out = {"about": ABOUT, "family": family,
               "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                            "peft": peft.__version__},
               "fixed_ids": fixed_ids, "adapters": {}}
        for name, adapter in tiny_adapters.ADAPTERS.items():
            adapter_dir = families / family / "lora" / name
            base = AutoModelForCausalLM.from_pretrained(families / family, torch_dtype=torch.float32,
                                                        attn_implementation="eager")
            model = peft.PeftModel.from_pretrained(base, adapter_dir).eval()
            entry = {"config": {k: v for k, v in json.loads((adapter_dir / "adapter_config.json").read_text()).items()
                                if k in ("r", "lora_alpha", "target_modules", "use_rslora", "rank_pattern",
                                         "alpha_pattern")},
                     "prompts": []}
            for prompt in prompts:
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([prompt["ids"]])).logits[0].float()
                tokens, margins = family_reference.greedy(model, prompt["ids"], GREEDY_TOKENS)
                entry["prompts"].append({"name": prompt["name"], "ids": prompt["ids"],
                                         "logits": family_reference.summarize(logits, fixed_ids),
                                         "greedy": tokens, "greedy_margin": margins})
            if tiny_adapters.gguf_able(adapter):
                with tempfile.TemporaryDirectory() as tmp:
                    converted = pathlib.Path(tmp) / f"{name}.gguf"
                    subprocess.run([sys.executable, str(llama_cpp / "convert_lora_to_gguf.py"), "--base",
                                    str(families / family), "--outtype", "f32", "--outfile", str(converted),
                                    str(adapter_dir)], check=True, capture_output=True)
                    written = families / family / "lora" / f"{name}.f32.gguf"
                    if sha256(converted) != sha256(written):
                        sys.exit(f"{family}/{name}: the converter's GGUF differs from scripts/tiny-adapters.py's")
                    entry["gguf_sha256"] = sha256(converted)
            out["adapters"][name] = entry
        path = ROOT / "tests" / "fixtures" / "lora" / f"{family}.json"
        path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
        print(path)


if __name__ == "__main__":
    main(sys.argv)
