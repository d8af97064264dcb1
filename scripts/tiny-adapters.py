#!/usr/bin/env python3
"""Tiny random LoRA adapters for the tiny family models, in PEFT's format and as the LoRA GGUF
llama.cpp's convert_lora_to_gguf.py makes of them.

  scripts/tiny-adapters.py FAMILIES_DIR

writes FAMILIES_DIR/<family>/lora/<adapter>/ (adapter_config.json, adapter_model.safetensors)
for every adapter below, and FAMILIES_DIR/<family>/lora/<adapter>.f32.gguf for those a GGUF
can carry (one alpha for the whole adapter: no rsLoRA, no alpha_pattern). Prints FAMILIES_DIR.

Deterministic: A and B come from numpy's default_rng with a fixed seed per adapter and lie on
the bfloat16 grid. Needs numpy, `gguf` and `safetensors` (no torch, so CI can run it);
scripts/make-lora-reference.py (run when fixtures change) computes the expected logits in
tests/fixtures/lora/ with transformers + peft and checks that the GGUF files written here are
byte-identical to the converter's output.
"""
import json
import pathlib
import sys

import numpy as np

SEVEN = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# Adapters per family: rank, alpha, targets and PEFT's optional fields.
ADAPTERS = {
    "sql": {"seed": 5401, "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]},
    "chat": {"seed": 5402, "r": 8, "lora_alpha": 16, "target_modules": SEVEN},
    "math": {"seed": 5403, "r": 4, "lora_alpha": 4, "target_modules": ["gate_proj", "up_proj", "down_proj"],
             "rank_pattern": {"down_proj": 2}},
    "code": {"seed": 5404, "r": 8, "lora_alpha": 8, "target_modules": ["k_proj", "o_proj", "up_proj", "down_proj"],
             "use_rslora": True, "rank_pattern": {"up_proj": 4}, "alpha_pattern": {"o_proj": 4}},
}
FAMILY_NAMES = ["llama", "qwen2"]
GGUF_ARCH = {"llama": "llama", "qwen2": "qwen2"}


def bf16_grid(x):
    """Rounds f32 values to bfloat16 (nearest even)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32)


def module_shapes(cfg):
    """HF module name (without `model.`) -> (out, in) for every LoRA target of one layer."""
    hidden, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or hidden // heads
    ff = cfg["intermediate_size"]
    return {
        "self_attn.q_proj": (heads * head_dim, hidden),
        "self_attn.k_proj": (kv * head_dim, hidden),
        "self_attn.v_proj": (kv * head_dim, hidden),
        "self_attn.o_proj": (hidden, heads * head_dim),
        "mlp.gate_proj": (ff, hidden),
        "mlp.up_proj": (ff, hidden),
        "mlp.down_proj": (hidden, ff),
    }


def rank_of(spec, module):
    return spec.get("rank_pattern", {}).get(module.split(".")[-1], spec["r"])


def make_adapter(cfg, spec):
    """PEFT tensor name -> f32 array, drawn in sorted-name order from default_rng(seed)."""
    rng = np.random.default_rng(spec["seed"])
    out = {}
    for layer in range(cfg["num_hidden_layers"]):
        for module, (n_out, n_in) in module_shapes(cfg).items():
            if module.split(".")[-1] not in spec["target_modules"]:
                continue
            r = rank_of(spec, module)
            prefix = f"base_model.model.model.layers.{layer}.{module}"
            out[f"{prefix}.lora_A.weight"] = bf16_grid(rng.normal(0, 0.25, (r, n_in)))
            out[f"{prefix}.lora_B.weight"] = bf16_grid(rng.normal(0, 0.25, (n_out, r)))
    return out


def adapter_config(family_dir, spec):
    config = {
        "alpha_pattern": spec.get("alpha_pattern", {}),
        "base_model_name_or_path": str(family_dir),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "lora_alpha": spec["lora_alpha"],
        "lora_dropout": 0.0,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": spec["r"],
        "rank_pattern": spec.get("rank_pattern", {}),
        "target_modules": spec["target_modules"],
        "task_type": "CAUSAL_LM",
        "use_dora": False,
        "use_rslora": spec.get("use_rslora", False),
    }
    return config


def gguf_able(spec):
    return not spec.get("use_rslora") and not spec.get("alpha_pattern")


def _permute(w, n_head):
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(family, cfg, spec, tensors, lora_dir, path):
    """Writes the adapter as convert_lora_to_gguf.py --outtype f32 does (same bytes)."""
    import gguf

    arch = GGUF_ARCH[family]
    writer = gguf.GGUFWriter(path=None, arch=arch)
    tensor_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg["num_hidden_layers"])
    bases = sorted({name.replace(".lora_A.weight", "").replace(".lora_B.weight", "") for name in tensors})
    for base in sorted(bases):
        a, b = tensors[f"{base}.lora_A.weight"], tensors[f"{base}.lora_B.weight"]
        hf = base.replace("base_model.model.", "") + ".weight"
        if arch == "llama" and hf.endswith("q_proj.weight"):
            b = _permute(b, cfg["num_attention_heads"])
        elif arch == "llama" and hf.endswith("k_proj.weight"):
            b = _permute(b, cfg["num_key_value_heads"])
        new = tensor_map.get_name(key=hf, try_suffixes=(".weight",))
        assert new is not None, hf
        for suffix, data in ((".lora_a", a), (".lora_b", b)):
            writer.add_tensor(new + suffix, np.ascontiguousarray(data, dtype=np.float32),
                              raw_dtype=gguf.GGMLQuantizationType.F32)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    total_params = writer.get_total_parameter_count()
    metadata = gguf.Metadata.load(None, lora_dir, None, total_params[0])
    metadata.set_gguf_meta_model(writer)
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(spec["lora_alpha"]))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.write_header_to_file(path=path)
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv):
    from safetensors.numpy import save_file

    families = pathlib.Path(argv[1] if len(argv) > 1 else "")
    for family in FAMILY_NAMES:
        family_dir = families / family
        cfg = json.loads((family_dir / "config.json").read_text())
        for name, spec in ADAPTERS.items():
            out = family_dir / "lora" / name
            out.mkdir(parents=True, exist_ok=True)
            tensors = make_adapter(cfg, spec)
            (out / "adapter_config.json").write_text(json.dumps(adapter_config(family_dir, spec), indent=2) + "\n")
            save_file(tensors, str(out / "adapter_model.safetensors"))
            if gguf_able(spec):
                write_gguf(family, cfg, spec, tensors, out, family_dir / "lora" / f"{name}.f32.gguf")
    print(families)


if __name__ == "__main__":
    main(sys.argv)
