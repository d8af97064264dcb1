#!/usr/bin/env python3
"""Writes tests/fixtures/families/<name>.json: what Hugging Face transformers (fp32, eager
attention) and llama.cpp's convert_hf_to_gguf.py make of the tiny models that
scripts/tiny-families.py writes. Not run in CI: run scripts/family-reference.sh (which builds
the reference virtual environment with torch, transformers 5 and gguf) when the fixtures change.

  make-family-reference.py FAMILIES_DIR LLAMA_CPP_DIR LLAMA_TOKENIZE [--only NAME,...]
                           [--quantize LLAMA_QUANTIZE]

FAMILIES_DIR holds the directories tiny-families.py wrote (with their GGUF files);
LLAMA_CPP_DIR is the llama.cpp of the llama-cpp-python source distribution (its
convert_hf_to_gguf.py is run on each directory, and its output must be byte-identical to the
GGUF tiny-families.py wrote; where a family adds metadata the converter does not write, its
gguf-py's gguf_new_metadata adds it to the converter's output first). LLAMA_TOKENIZE is that
llama.cpp's `llama-tokenize`, which records llama.cpp's ids of every text from the GGUF.
"""
import hashlib
import importlib.util
import json
import math
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "families"

spec = importlib.util.spec_from_file_location("tiny_families", ROOT / "scripts" / "tiny-families.py")
tf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tf)

SHORT = "The capital of France is"
LONG = ("In a small village at the edge of the forest, there lived an old clockmaker who repaired every clock "
        "in town. One winter morning, a stranger arrived with a broken pocket watch that ticked backwards, and "
        "asked him to fix it before midnight.")
SYSTEM = {"role": "system", "content": "You are a concise assistant."}
GREEDY_TOKENS = 32
TOP_K = 8

# Texts that show how a tokenizer treats the whitespace around its special tokens, per
# tokenizer: Phi-3's strip what follows them, except <unk>, <s> and <|endoftext|> (llama.cpp by
# the model's name, transformers by tokenizer.json's rstrip flags).
WHITESPACE_PROBES = {
    "phi3": ["<|system|>\n  Be brief.<|end|>\n<|user|>\r\n\tHi</s>\n<s>\nx<|endoftext|>\ny<unk> z"
             "<|placeholder1|>  w<|assistant|>\n"],
}

# the end-of-turn token each family's template closes an assistant turn with
END_OF_TURN = {"llama3": "<|eot_id|>", "qwen2.5": "<|im_end|>", "qwen3": "<|im_end|>", "mistral": "</s>",
               "phi3": "<|end|>", "gemma2": "<end_of_turn>", "gemma3": "<end_of_turn>", "gptoss": "<|end|>"}

# the date strftime_now gives templates that print today's (gpt-oss's harmony template), so that
# renderings are reproducible; tests render with the same fixed clock
FIXED_NOW = (2026, 1, 15, 12, 0, 0)

# llama-quantize's arguments for the MXFP4 GGUF of a family whose experts lie on the MXFP4 grid:
# experts to MXFP4, everything else left in F32
MXFP4_ARGS = ["--tensor-type", "attn=f32", "--output-tensor-type", "f32", "--token-embedding-type", "f32"]

ABOUT = (
    "Expected values from Hugging Face transformers (fp32 on CPU, attn_implementation='eager') for a tiny "
    "random-weight model that scripts/tiny-families.py writes deterministically (numpy default_rng, fixed seed). "
    "All weights lie on the bfloat16 grid with no f16 subnormals, so the f32 safetensors, a bf16 copy and the "
    "F16 GGUF hold exactly the same numbers and this one f32 reference applies to all of them. "
    "logits: per prompt position, `argmax`, the top-8 ids and values, the logits at 8 fixed ids "
    "(`fixed_ids`), `mean` and `mean_square` (sum of squares / vocab, over the whole vocab_size row, padding ids "
    "included) and `logsumexp`. Tolerance: an f32 implementation (f32 activations and KV cache) differs from "
    "this CPU reference only by summation order, about 1e-5 relative, so compare every stored value with "
    "atol 1e-3 (logits here are of order 1-20), mean_square and logsumexp with rtol 1e-4. Activations or KV "
    "in f16/bf16 need about 2e-2 absolute (compare argmax only where the stored top-1/top-2 gap exceeds "
    "0.05). Q8_0 weights change the model: compare those with about 0.1 absolute and a top-1 check where the "
    "gap exceeds 0.5. `greedy` is 32 greedy tokens (argmax, no sampling, no stop) decoded one by one with "
    "transformers' KV cache after prefilling the prompt; greedy_margin is the top-1/top-2 gap at each step. "
    "`chat` holds apply_chat_template renderings (tokenize=False) and their ids (the rendered text encoded "
    "without adding special tokens, as apply_chat_template(tokenize=True) does). `gguf` is what llama.cpp's "
    "convert_hf_to_gguf.py wrote: sha256 per outtype, every metadata key and value except the token arrays "
    "(only their length and sha256 of their JSON), and every tensor's name, type and shape (ggml order: "
    "ne0 first); where the GGUF carries metadata the converter does not write, `edited_sha256` is that of the "
    "converter's output with it added as `edit` says (the GGUF the tests read). `ids_llama_cpp` (chat texts, "
    "prompts) are llama.cpp's ids of the same text from the F32 GGUF (`llama-tokenize`, special tokens parsed, "
    "BOS where the prompt adds special tokens and the model wants one); `tokenize` holds probes of the "
    "whitespace around special tokens with transformers' ids (`ids`, no special tokens added) and llama.cpp's."
)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def r(x):
    return float(f"{float(x):.7g}")


def summarize(logits, fixed_ids):
    """logits: [positions, vocab] float32 tensor."""
    rows = []
    l64 = logits.double()
    top = torch.topk(logits, TOP_K, dim=-1)
    for p in range(logits.shape[0]):
        rows.append({
            "argmax": int(torch.argmax(logits[p])),
            "top_ids": [int(i) for i in top.indices[p]],
            "top_values": [r(v) for v in top.values[p]],
            "fixed": [r(logits[p, i]) for i in fixed_ids],
            "mean": r(l64[p].mean()),
            "mean_square": r((l64[p] ** 2).mean()),
            "logsumexp": r(torch.logsumexp(l64[p], dim=-1)),
        })
    return rows


@torch.no_grad()
def greedy(model, ids, n):
    out = model(input_ids=torch.tensor([ids]), use_cache=True)
    cache = out.past_key_values
    logits = out.logits[0, -1]
    tokens, margins = [], []
    for _ in range(n):
        top = torch.topk(logits, 2)
        tokens.append(int(top.indices[0]))
        margins.append(r(top.values[0] - top.values[1]))
        out = model(input_ids=torch.tensor([[tokens[-1]]]), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits = out.logits[0, -1]
    return tokens, margins


def conversations(kind):
    system = [] if kind == "gemma2" else [SYSTEM]  # Gemma 2's template rejects a system turn
    return [
        {"messages": [{"role": "user", "content": "Hello! Who are you?"}], "add_generation_prompt": True},
        {"messages": system + [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
                               {"role": "user", "content": "And 3+3?"}], "add_generation_prompt": True},
        {"messages": system + [{"role": "user", "content": "Name a color."}, {"role": "assistant", "content": "Blue."}],
         "add_generation_prompt": False},
    ]


def gguf_dump(path):
    import gguf

    reader = gguf.GGUFReader(str(path))
    meta = {}
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue
        types = [gguf.GGUFValueType(t).name for t in field.types]
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            values = [field.contents(i) for i in range(len(field.data))]
            if field.name in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                              "tokenizer.ggml.merges"):
                blob = json.dumps(values, ensure_ascii=False).encode("utf-8")
                meta[field.name] = {"type": types, "length": len(values), "sha256_of_json": hashlib.sha256(blob).hexdigest(),
                                    "first": values[:4]}
                continue
            meta[field.name] = {"type": types, "value": [r(v) if isinstance(v, float) else v for v in values]}
        else:
            value = field.contents()
            meta[field.name] = {"type": types, "value": r(value) if isinstance(value, float) else value}
    tensors = [{"name": t.name, "type": t.tensor_type.name, "shape": [int(n) for n in t.shape]} for t in reader.tensors]
    return meta, tensors


def convert(llama_cpp, hf_dir, outtype, out_path):
    subprocess.run([sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(hf_dir), "--outtype", outtype,
                    "--outfile", str(out_path)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def converter_refusal(llama_cpp, hf_dir, out_path):
    """The last line the converter prints when it refuses hf_dir (a family without a GGUF), or
    None when it writes a file after all."""
    run = subprocess.run([sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(hf_dir), "--outtype", "f32",
                          "--outfile", str(out_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return None if run.returncode == 0 else run.stderr.strip().splitlines()[-1]


def add_metadata(llama_cpp, src, dst, arch, family):
    """dst = src plus the metadata tiny-families.py adds after the converter's keys, written by
    the converter's own gguf-py (gguf_new_metadata's copy_with_new_metadata)."""
    key = f"{arch}.attention.sliding_window_pattern"
    code = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import gguf\n"
        "from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata\n"
        "reader = gguf.GGUFReader(sys.argv[2], 'r')\n"
        "arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()\n"
        "writer = gguf.GGUFWriter(sys.argv[3], arch=arch, endianess=reader.endianess)\n"
        "alignment = reader.get_field(gguf.Keys.General.ALIGNMENT)\n"
        "if alignment is not None:\n"
        "    writer.data_alignment = alignment.contents()\n"
        "new = {sys.argv[4]: MetadataDetails(gguf.GGUFValueType.ARRAY, json.loads(sys.argv[5]))}\n"
        "copy_with_new_metadata(reader, writer, new, [])\n"
    )
    pattern = json.dumps(family["gguf_sliding_window_pattern"])
    subprocess.run([sys.executable, "-c", code, str(llama_cpp / "gguf-py"), str(src), str(dst), key, pattern],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return f"gguf-py gguf_new_metadata.copy_with_new_metadata: {key} = {pattern} added after the converter's keys"


def mxfp4_lossless(f32_path, mx_path):
    """Whether every tensor of the quantized GGUF, dequantized by gguf-py, equals the F32 one."""
    import gguf

    f32 = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(f32_path)).tensors}
    for t in gguf.GGUFReader(str(mx_path)).tensors:
        want = f32[t.name]
        got = np.array(t.data) if t.tensor_type == gguf.GGMLQuantizationType.F32 else gguf.quants.dequantize(t.data, t.tensor_type)
        if not np.array_equal(got.reshape(want.shape), want):
            return False
    return True


def llama_cpp_ids(llama_tokenize, gguf_path, text, add_bos):
    """llama.cpp's ids of text from the GGUF (special tokens parsed; BOS as the model wants it
    when add_bos)."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        f.write(text)
    try:
        args = [llama_tokenize, "-m", str(gguf_path), "-f", f.name, "--ids", "--no-escape", "--log-disable"]
        if not add_bos:
            args.append("--no-bos")
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    finally:
        pathlib.Path(f.name).unlink()
    return json.loads(out.strip().splitlines()[-1])


def check_templates(llama_cpp):
    """The templates tiny-families.py carries are the real texts."""
    templates = llama_cpp / "models" / "templates"
    for text, name in ((tf.QWEN25_TEMPLATE, "Qwen-Qwen2.5-7B-Instruct.jinja"), (tf.GEMMA2_TEMPLATE, "google-gemma-2-2b-it.jinja"),
                       (tf.PHI35_TEMPLATE, "microsoft-Phi-3.5-mini-instruct.jinja")):
        real = (templates / name).read_text(encoding="utf-8")
        assert text == real or text == real.rstrip("\n"), f"template differs from {name}"
    real = (templates / "openai-gpt-oss-120b.jinja").read_text(encoding="utf-8")
    assert tf.gpt_oss_template() == real, "gpt-oss template differs from openai-gpt-oss-120b.jinja"
    source = (llama_cpp / "tests" / "test-chat-template.cpp").read_text(encoding="utf-8")
    marker = "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)"
    after = source[source.index(marker):]
    literal = after[after.index('/* .template_str= */ "') + len('/* .template_str= */ "'):]
    literal = literal[:literal.index('",\n')]
    assert tf.MISTRAL_TEMPLATE == literal.encode("utf-8").decode("unicode_escape"), "Mistral template differs"


def main(argv):
    import argparse

    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from tokenizers import Tokenizer

    parser = argparse.ArgumentParser()
    parser.add_argument("families")
    parser.add_argument("llama_cpp")
    parser.add_argument("llama_tokenize")
    parser.add_argument("--only", default="")
    parser.add_argument("--quantize", default="")
    args = parser.parse_args(argv)
    families = pathlib.Path(args.families)
    llama_cpp = pathlib.Path(args.llama_cpp)
    check_templates(llama_cpp)
    torch.manual_seed(0)
    torch.set_num_threads(2)
    import datetime as _dt

    from transformers.utils import chat_template_utils

    class FixedClock(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(*FIXED_NOW, tzinfo=tz)

    chat_template_utils.datetime = FixedClock
    OUT.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.only.split(",") if n] or list(tf.FAMILIES)
    import gguf
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
                "llama_cpp_python_sdist": "0.3.36", "npm_tokenizers": tf.NPM_VERSION}
    failures = []
    for name in names:
        family = tf.FAMILIES[name]
        hf_dir = families / name
        kind = family["tokenizer"]
        tokenizer = AutoTokenizer.from_pretrained(hf_dir)
        raw = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
        config = family["config"]
        vocab = config["vocab_size"]
        fixed_ids = [int(i) for i in np.linspace(0, vocab - 1, 8).round()]
        convs = conversations(kind)
        chat = []
        for conv in convs:
            text = tokenizer.apply_chat_template(conv["messages"], tokenize=False, add_generation_prompt=conv["add_generation_prompt"])
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            entry = dict(conv, text=text, ids=ids)
            raw_ids = raw.encode(text, add_special_tokens=False).ids
            if raw_ids != ids:
                entry["ids_tokenizers_json"] = raw_ids
            chat.append(entry)
        prompts = []
        for label, text, special in (("short", SHORT, True), ("long", LONG, True), ("chat", chat[1]["text"], False)):
            ids = tokenizer(text, add_special_tokens=special)["input_ids"]
            raw_ids = raw.encode(text, add_special_tokens=special).ids
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0].float()
            tokens, margins = greedy(model, ids, GREEDY_TOKENS)
            prompt = {"name": label, "text": text, "add_special_tokens": special, "ids": ids,
                      "logits": summarize(logits, fixed_ids), "greedy": tokens, "greedy_margin": margins}
            if raw_ids != ids:
                prompt["ids_tokenizers_json"] = raw_ids
            prompts.append(prompt)
        eot = END_OF_TURN[kind]
        tokens_info = {
            "eos_token": tokenizer.eos_token, "eos_token_id": tokenizer.eos_token_id,
            "bos_token": tokenizer.bos_token, "bos_token_id": tokenizer.bos_token_id,
            "end_of_turn": eot, "end_of_turn_id": tokenizer.convert_tokens_to_ids(eot),
            "config_eos_token_id": config.get("eos_token_id"),
            "generation_config_eos_token_id": model.generation_config.eos_token_id,
        }
        gguf_info = {}
        tokenize = []
        with tempfile.TemporaryDirectory() as tmp:
            if not family.get("gguf", True):
                refusal = converter_refusal(llama_cpp, hf_dir, pathlib.Path(tmp) / f"{name}.f32.gguf")
                gguf_info["converter_refused"] = refusal
                if refusal is None:
                    failures.append(f"{name}: the converter wrote a GGUF the family says it refuses")
            for outtype in ("f32", "f16") if family.get("gguf", True) else ():
                converted = pathlib.Path(tmp) / f"{name}.{outtype}.gguf"
                convert(llama_cpp, hf_dir, outtype, converted)
                entry = {"converter_sha256": sha256_file(converted)}
                if "gguf_sliding_window_pattern" in family:
                    edited = pathlib.Path(tmp) / f"{name}.{outtype}.edited.gguf"
                    entry["edit"] = add_metadata(llama_cpp, converted, edited, tf.GGUF_ARCH[config["model_type"]], family)
                    entry["edited_sha256"] = sha256_file(edited)
                    converted = edited
                entry["size"] = converted.stat().st_size
                ours = hf_dir / f"{name}.{outtype}.gguf"
                if ours.is_file():
                    entry["tiny_families_sha256"] = sha256_file(ours)
                    entry["byte_identical"] = entry["tiny_families_sha256"] == sha256_file(converted)
                    if not entry["byte_identical"]:
                        failures.append(f"{name}.{outtype}.gguf")
                if outtype == "f32":
                    meta, tensors = gguf_dump(converted)
                    gguf_info["metadata"] = meta
                    gguf_info["tensors"] = tensors
                    # llama.cpp's ids of every text, from this GGUF
                    for entry_with_text in chat:
                        entry_with_text["ids_llama_cpp"] = llama_cpp_ids(args.llama_tokenize, converted, entry_with_text["text"], False)
                    for prompt in prompts:
                        prompt["ids_llama_cpp"] = llama_cpp_ids(args.llama_tokenize, converted, prompt["text"], prompt["add_special_tokens"])
                    for text in WHITESPACE_PROBES.get(kind, []):
                        tokenize.append({"text": text, "ids": tokenizer(text, add_special_tokens=False)["input_ids"],
                                         "ids_llama_cpp": llama_cpp_ids(args.llama_tokenize, converted, text, False)})
                else:
                    gguf_info["f16_tensor_types"] = {t["name"]: t["type"] for t in gguf_dump(converted)[1]}
                gguf_info[outtype] = entry
                if name in tf.CONVERTER_ONLY:
                    # no writer of its own in tiny-families.py: the converter's file is the test's
                    (hf_dir / f"{name}.{outtype}.gguf").write_bytes(converted.read_bytes())
                if outtype == "f32" and args.quantize and name in tf.CONVERTER_ONLY:
                    mx = pathlib.Path(tmp) / f"{name}.mxfp4.gguf"
                    subprocess.run([args.quantize, *MXFP4_ARGS, str(converted), str(mx), "MXFP4_MOE"], check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    gguf_info["mxfp4_from_f32"] = {
                        "sha256": sha256_file(mx), "size": mx.stat().st_size,
                        "tool": "llama-quantize (llama-cpp-python 0.3.36 source) F32 -> MXFP4_MOE " + " ".join(MXFP4_ARGS),
                        "tensor_types": {t["name"]: t["type"] for t in gguf_dump(mx)[1] if t["type"] != "F32"},
                        "lossless": mxfp4_lossless(converted, mx),
                    }
                    if not gguf_info["mxfp4_from_f32"]["lossless"]:
                        failures.append(f"{name}.mxfp4.gguf (dequantized experts differ from the f32 ones)")
                    (hf_dir / f"{name}.mxfp4.gguf").write_bytes(mx.read_bytes())
                if outtype == "f32" and args.quantize and name == "qwen3":
                    q8 = pathlib.Path(tmp) / f"{name}.q8_0.gguf"
                    subprocess.run([args.quantize, str(converted), str(q8), "Q8_0"], check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    gguf_info["q8_0_from_f32"] = {"sha256": sha256_file(q8), "size": q8.stat().st_size,
                                                  "tool": "llama-quantize (llama-cpp-python 0.3.36 source) F32 -> Q8_0"}
        fixture = {
            "about": ABOUT,
            "family": name,
            "family_about": family["about"],
            "versions": versions,
            "seed": family["seed"],
            "config": config,
            "config_transformers": json.loads(AutoConfig.from_pretrained(hf_dir).to_json_string(use_diff=False)),
            "tokens": tokens_info,
            "fixed_ids": fixed_ids,
            "prompts": prompts,
            "chat": chat,
            "gguf": gguf_info,
        }
        if "strftime_now" in (tokenizer.chat_template or ""):
            fixture["strftime_now_fixed"] = "%04d-%02d-%02dT%02d:%02d:%02d" % FIXED_NOW
        if tokenize:
            fixture["tokenize"] = tokenize
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(fixture, ensure_ascii=False, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"wrote {path} ({path.stat().st_size // 1024} KB)", flush=True)
    if failures:
        sys.exit("GGUF files not as the converter writes them: " + ", ".join(failures))


if __name__ == "__main__":
    main(sys.argv[1:])
