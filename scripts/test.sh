#!/usr/bin/env bash
# The test entry point: installs what the tests need, then runs every check.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh --test
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
# Lavapipe's compiled shaders kept with the rest of the cache, so a CI machine that keeps
# ~/.cache/pagoda does not compile them again (Mesa checks each entry against the driver).
export MESA_SHADER_CACHE_DIR="${MESA_SHADER_CACHE_DIR:-$cache/mesa}"
# A clone that has never built (CI's fresh checkout) builds in the cache too, so that the next
# fresh clone on such a machine finds the dependencies compiled (15 minutes on two cores). A
# tree with its own target/, or a CARGO_TARGET_DIR of the caller's, is left as it is. Each
# checkout path adds its own copy of pagoda's test binaries: past 20 GiB the build starts over.
if [ -z "${CARGO_TARGET_DIR:-}" ] && [ ! -d target ]; then
    export CARGO_TARGET_DIR="$cache/target"
    if [ -d "$CARGO_TARGET_DIR" ] && [ "$(du -s -BG "$CARGO_TARGET_DIR" | cut -f1 | tr -d G)" -gt 20 ]; then
        rm -rf "$CARGO_TARGET_DIR"
    fi
fi
export PAGODA_MODEL_GGUF="$(scripts/fetch-model.sh)"
# Llama 2's SentencePiece vocabulary as a GGUF, and the default model in llama.cpp's mixes
# (the first run builds llama-quantize: a few minutes).
export PAGODA_SPM_GGUF="$(python3 scripts/llama2-vocab.py gguf)"
export PAGODA_MIX_DIR="$(scripts/make-mixes.sh)"
# The default model split by llama.cpp's `llama-gguf-split` into parts (the first run builds it).
export PAGODA_SPLIT_DIR="$(scripts/make-splits.sh)"
# Tiny random-weight models of each family (Llama 3, Qwen2/3, Mistral, Gemma 2/3, Phi-3, and the
# mixtures of experts Qwen3-MoE, Qwen2-MoE, Mixtral and gpt-oss; gpt-oss as HF only, f32 and
# MXFP4, its GGUF comes from the converter in scripts/family-reference.sh) as HF
# directories and as llama.cpp's converter writes them (tests/fixtures/families/).
export PAGODA_FAMILIES_DIR="$(python3 scripts/tiny-families.py)"
# Tiny LoRA adapters of two of them, in PEFT's format and as llama.cpp's LoRA GGUF
# (tests/fixtures/lora/).
python3 scripts/tiny-adapters.py "$PAGODA_FAMILIES_DIR" >/dev/null
# One of them quantized to Q8_0 by llama.cpp's quantizer.
"$(scripts/llama-quantize.sh)" "$PAGODA_FAMILIES_DIR/qwen3/qwen3.f32.gguf" \
    "$PAGODA_FAMILIES_DIR/qwen3/qwen3.q8_0.gguf" Q8_0 >/dev/null 2>&1
# The real chat templates llama.cpp tests with, from the same llama.cpp.
export PAGODA_CHAT_TEMPLATES="$(scripts/chat-templates.sh)"
# The visualizer's window test starts its own Xvfb, and the KV-event test its Python
# subscriber; here neither may skip.
export PAGODA_REQUIRE_XVFB=1
export PAGODA_REQUIRE_PYTHON=1
# scripts/test-long.sh sets PAGODA_TEST_LONG=1: the full versions of the passes CI cuts short
# below (each says what it leaves to the long run), and PAGODA_SPEC_EXACTNESS=all.
long="${PAGODA_TEST_LONG:-}"

cargo fmt --all --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets

# A short fuzz pass with another seed than cargo test's own (scripts/fuzz.sh 1000000 for
# the long run).
if [ -n "$long" ]; then scripts/fuzz.sh 1000000 --seed 1; else scripts/fuzz.sh 3000 --seed 1; fi

# A short soak on each executor (cargo test ran 5 s on the simulated model; scripts/soak.sh
# without arguments is the long one): 64 clients for 20 s on the simulated model, 8 for
# 10 s on the default model (lavapipe is slow).
if [ -n "$long" ]; then scripts/soak.sh; else scripts/soak.sh 20 10 8; fi

# The kernel suite again under each forced fallback: no shader-f16, no subgroups, neither,
# WebGPU's default limits, and the discrete-GPU kernels (the SmolLM2 parity test builds these
# configurations itself).
for features in f16 subgroup f16,subgroup; do
    PAGODA_DISABLE_FEATURES="$features" cargo test --test kernels_reference
done
PAGODA_WEBGPU_LIMITS=1 cargo test --test kernels_reference
# Norms fused into every linear tile (lavapipe fuses them into one-row tiles only), so the
# sequential kernels' subgroups sum the scales of 4 and 8 rows too. The tests of kernels no norm
# is fused into (attention, sampling, embedding, element-wise, scatter) ran above unchanged by
# it; the long run runs them again anyway.
# `--skip` for each name in CI; nothing in the long run.
ci_skip() { [ -n "$long" ] || printf -- '--skip\n%s\n' "$@"; }
mapfile -t no_norm < <(ci_skip attention wide_heads long_contexts contexts_past top_k \
    embedding elementwise scatter_rows)
PAGODA_NORM=fused cargo test --test kernels_reference -- "${no_norm[@]}"
# And with the kernels a discrete GPU gets: K-split linear layers, split-KV attention. CI skips
# the sampling, embedding, element-wise and scatter kernels (no other version to reach) and the
# two subgroup tests, which choose these strategies themselves and so ran exactly so above.
mapfile -t no_split < <(ci_skip top_k embedding elementwise scatter_rows the_subgroup_tree \
    the_subgroup_attention_kernel)
PAGODA_LINEAR=ksplit PAGODA_ATTENTION=split-kv cargo test --test kernels_reference -- "${no_split[@]}"
# The model families through the kernels GPUs get, K-split linears and flash attention (their
# sliding windows, soft caps, Q/K norms, gated activations and experts, gpt-oss's sinks, the
# GEMV's subgroup tree, flash's groups of a KV head's query heads): every prompt's logits
# against transformers (the prefill GEMM) and the batch/chunk/preemption invariance (decode
# GEMV rows bit-equal to those prefill rows). Skipped here, run above in the default
# configuration: the greedy continuations (argmax of logits these two tests pin down) and the
# tests that reach no kernel (templates, converter files, tokenizers, refusals). CI's pass
# also leaves to the default one what only the GGUF's metadata decides (Gemma 2's attention
# scale, Mistral's missing window) and reads each family from its HF directory only (the GGUFs' weight types reach these kernels in kernels_reference above,
# their layouts in the default pass), and not llama-rope-parameters (Llama's weights, another
# config layout) nor qwen2-moe (Qwen3-MoE's routed experts plus a shared expert, a gated MLP
# and a one-row linear as every family has: nothing these kernels do differently, and minutes
# on lavapipe), nor the families whose every kernel feature another family here reaches
# (Qwen2's Q/K/V biases: gpt-oss's; Mistral's window: Gemma 2's and gpt-oss's; Phi-3's and
# LongRoPE's rotations: host-side tables, the same kernels; Mixtral's experts and the dense layers
# between Qwen3-MoE's expert layers: Qwen3-MoE's and every dense family's);
# the long run reads all, and runs the pass again with split-KV attention (GPUs whose
# subgroups have fewer than 8 lanes; CI reaches split-KV in kernels_reference above).
# (and gpt-oss's MXFP4 checkpoint: its MXFP4 linears reach these kernels in kernels_reference)
# The single-family tests follow the same rule: CI leaves out those that read a GGUF (Gemma 3's
# layer pattern, gpt-oss's GGUF, llama-quantize's Q8_0 Qwen3) and those of the families skipped
# above (Mistral's window, Phi-3's LongRoPE); the long run keeps them.
mapfile -t gguf_only < <(ci_skip gemma2_gguf_is_the_hf_model mistral_gguf_without_its_window \
    gpt_oss_mxfp4_checkpoint gemma3_gguf_with_its_own_layer_pattern gpt_oss_gguf_matches \
    qwen3_q8_0_from_llama_quantize mistral_slides_its_window phi3_longrope_matches)
formats=hf repeats=llama-rope-parameters,qwen2-moe,qwen2,mistral,phi3,phi3-longrope,mixtral,qwen3-moe-dense-layers
attentions=flash
if [ -n "$long" ]; then formats=hf,f32,f16 repeats= attentions="flash split-kv"; fi
for attention in $attentions; do
    PAGODA_FAMILY_FORMATS="$formats" PAGODA_FAMILY_SKIP="$repeats" \
        PAGODA_LINEAR=ksplit PAGODA_ATTENTION="$attention" \
        cargo test --test model_families -- \
        --skip continues_greedily --skip renders_its_chat_template --skip the_gguf_files_are \
        --skip each_family_vocabulary --skip phi3_gguf_strips_whitespace --skip does_not_run_is_refused \
        "${gguf_only[@]}"
done
# Steps submitted in chunks as they are recorded, as GPUs submit them (lavapipe takes one
# command buffer a step), with the flash attention GPUs get: the default model's parity with the
# fp32 reference and RECOMPUTE's bits. CI leaves out the f16 KV cache's continuations and the
# prefix cache's count (neither submits otherwise than the f32 runs these keep); the long run
# keeps them.
mapfile -t same_submits < <(ci_skip with_f16_kv a_shared_system_prompt)
PAGODA_SUBMIT=chunked PAGODA_ATTENTION=flash \
    cargo test --test smollm2_greedy --test smollm2_recompute -- "${same_submits[@]}"

# The official openai Python package against `pagoda serve` on the default model: the binary
# (with the test fixtures) and the C ABI's library as the test run built them. `--all-targets`
# keeps the dev-dependencies in the feature resolution; without them num-traits loses
# proptest's `libm`, and naga, wgpu, egui and what depends on them compile again.
cargo build --workspace --all-targets --features pagoda/testing
python3 tests/openai_client.py "${CARGO_TARGET_DIR:-target}/debug/pagoda"
# Structured outputs and tool calls through it: 200 schema-constrained replies validated by
# the jsonschema package, regex/choice/grammar replies, tool call round trips.
python3 tests/openai_structured.py "${CARGO_TARGET_DIR:-target}/debug/pagoda"
# Reasoning output (`--reasoning-parser qwen3`) read by the client as `reasoning_content`.
python3 tests/openai_reasoning.py "${CARGO_TARGET_DIR:-target}/debug/pagoda"
# `--speculative-config` (n-gram) through it: the same greedy replies as without, proposals
# accepted on /metrics, an unknown field refused by name.
python3 tests/openai_speculative.py "${CARGO_TARGET_DIR:-target}/debug/pagoda"
# LoRA serving (`--enable-lora`, two tiny adapters and the base): replies differ per adapter and
# equal their runs alone when batched, vllm:lora_requests_info names both adapters while they
# run, runtime load/unload (about 25 s on lavapipe).
python3 tests/openai_lora.py "${CARGO_TARGET_DIR:-target}/debug/pagoda"
# vLLM's metric names through prometheus_client's parser.
python3 tests/prometheus_metrics.py "${CARGO_TARGET_DIR:-target}/debug/pagoda"
# lm-evaluation-harness's local-completions model on a local loglikelihood task: each choice's
# loglikelihood and the accuracy against the reference's (tests/lm_eval_client.py).
"$(scripts/lm-eval-venv.sh)" tests/lm_eval_client.py "${CARGO_TARGET_DIR:-target}/debug/pagoda"

# The book: the visualizer's screenshot rendered by that binary, `mdbook build docs` with no
# warning (its links and anchors are checked by tests/docs_links.rs, its reference pages by
# tests/docs_reference.rs).
scripts/book.sh "${CARGO_TARGET_DIR:-target}/debug/pagoda"
# Every shell block of the README and the book, against the default model (a few minutes on
# lavapipe); blocks that need a GPU, the network, a display or a release build say so.
python3 scripts/doc-snippets.py "${CARGO_TARGET_DIR:-target}/debug/pagoda"

# The C ABI: header current, C and C++ examples and misuse tests under AddressSanitizer,
# the library without default features.
scripts/test-capi.sh

# The kernel cost report (no GPU) on the default model: a row for each of its decode mat-vec
# variants alone and in a batch of 8 (its Q4_1 layers and its Q8_0 LM head) and for llama.cpp's
# shaders of those types and of Q4_K, Q6_K, Q8_0 and Q4_0, every count positive; a few seconds
# once built.
scripts/kernel-cost.sh --json "$PAGODA_MODEL_GGUF" | python3 -c '
import json, sys
rows = [json.loads(line) for line in sys.stdin]
ours = [r for r in rows if r["source"] == "pagoda"]
theirs = {r["weight_type"] for r in rows if r["source"] == "llama.cpp"}
assert {r["weight_type"] for r in ours} == {"q4_1", "q8_0"}, ours
assert len(ours) >= 4, [r["kernel"] for r in ours]
assert theirs == {"q4_1", "q8_0", "q4_k", "q6_k", "q4_0"}, theirs
for r in rows:
    assert r["weights_per_iteration"] > 0 and r["instructions_per_weight"] > 0, r
    assert r["bytes_per_weight"] > r["weight_bytes_per_weight"] > 0, r
print(f"kernel-cost: {len(ours)} pagoda variants, {len(theirs)} llama.cpp shaders counted")
'
