//! A tiny random-weight Llama, deterministic from a seed, that tests write both as an HF
//! directory (config.json, model.safetensors, tokenizer.json, tokenizer_config.json) and
//! as a GGUF file (Q/K permuted for interleaved RoPE, matrices in a chosen dtype).

use std::borrow::Cow;
use std::path::Path;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use super::architecture::{MlpActivation, ModelConfig, RopeVariant, interleave_rope_rows};
use super::gguf::{GgufWriteError, GgufWriter, MetadataValue};
use super::safetensors::{SafetensorsError, serialize};
use super::tensor::TensorView;
use super::tokenizer::gpt2_byte_chars;
use crate::dtype::{DType, quantize};

/// ChatML, as SmolLM2 uses it.
pub const TINY_CHAT_TEMPLATE: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
const MERGES: [(&str, &str); 16] = [
    ("Ġ", "t"),
    ("h", "e"),
    ("Ġt", "he"),
    ("i", "n"),
    ("e", "r"),
    ("a", "n"),
    ("o", "n"),
    ("Ġ", "a"),
    ("Ġ", "s"),
    ("r", "e"),
    ("Ġ", "w"),
    ("o", "r"),
    ("e", "n"),
    ("Ġ", "c"),
    ("i", "s"),
    ("Ġ", "i"),
];

/// Why the tiny model could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TinyModelError {
    /// Writing a file failed.
    #[error("cannot write the tiny model: {0}")]
    Io(#[from] std::io::Error),
    /// Serializing safetensors failed.
    #[error(transparent)]
    Safetensors(#[from] SafetensorsError),
    /// A tensor does not fit the GGUF dtype asked for.
    #[error(transparent)]
    Gguf(#[from] GgufWriteError),
}

/// Sizes of the tiny model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TinyDims {
    /// Residual width (a multiple of 32 so rows quantize).
    pub hidden_size: usize,
    /// Feed-forward width (a multiple of 32).
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads.
    pub num_key_value_heads: usize,
    /// Separate LM head or tied to the embedding.
    pub tie_word_embeddings: bool,
    /// Q/K/V projections with biases (as Qwen2 has them).
    pub attention_bias: bool,
}

impl Default for TinyDims {
    fn default() -> Self {
        Self {
            hidden_size: 64,
            intermediate_size: 96,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            tie_word_embeddings: true,
            attention_bias: false,
        }
    }
}

/// One weight in HF naming and layout (row-major, Q/K rows in half-split order).
#[derive(Debug, Clone)]
pub struct TinyTensor {
    /// HF name (`model.layers.0.self_attn.q_proj.weight`).
    pub name: String,
    /// Row-major shape.
    pub shape: Vec<usize>,
    /// Values.
    pub values: Vec<f32>,
}

/// The tiny model in memory.
#[derive(Debug, Clone)]
pub struct TinyLlama {
    /// Its config as read back from the HF directory.
    pub config: ModelConfig,
    /// Its weights in HF naming.
    pub tensors: Vec<TinyTensor>,
    vocab: Vec<String>,
    merges: Vec<String>,
}

impl TinyLlama {
    /// The default-size model for `seed`.
    pub fn new(seed: u64) -> Self {
        Self::with_dims(seed, TinyDims::default())
    }

    /// A model of `dims` with weights drawn from `seed`.
    pub fn with_dims(seed: u64, dims: TinyDims) -> Self {
        let byte_chars = gpt2_byte_chars();
        let mut vocab: Vec<String> = SPECIAL_TOKENS.iter().map(|s| s.to_string()).collect();
        vocab.extend(byte_chars.iter().map(|c| c.to_string()));
        vocab.extend(MERGES.iter().map(|(a, b)| format!("{a}{b}")));
        let merges = MERGES.iter().map(|(a, b)| format!("{a} {b}")).collect();
        let head_dim = dims.hidden_size / dims.num_attention_heads;
        let config = ModelConfig {
            architecture: "llama".into(),
            vocab_size: vocab.len(),
            hidden_size: dims.hidden_size,
            intermediate_size: dims.intermediate_size,
            num_hidden_layers: dims.num_hidden_layers,
            num_attention_heads: dims.num_attention_heads,
            num_key_value_heads: dims.num_key_value_heads,
            head_dim,
            rms_norm_eps: 1e-5,
            rope_theta: 10000.0,
            rope_scaling: None,
            rope_variant: RopeVariant::HalfSplit,
            max_position_embeddings: 512,
            tie_word_embeddings: dims.tie_word_embeddings,
            fused_projections: false,
            attention_bias: dims.attention_bias,
            qk_norm: false,
            layer_windows: vec![None; dims.num_hidden_layers],
            mlp_activation: MlpActivation::Silu,
            norm_weight_plus_one: false,
            embedding_scale: None,
            sandwich_norms: false,
            attention_scale: 1.0 / (head_dim as f32).sqrt(),
            attn_logit_softcap: None,
            final_logit_softcap: None,
            local_rope_theta: None,
            bos_token_id: Some(1),
            eos_token_ids: vec![2],
            moe: None,
            moe_layers: vec![false; dims.num_hidden_layers],
            o_bias: false,
            attention_sinks: false,
            swiglu_limit: None,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut matrix = |name: String, rows: usize, cols: usize| {
            let scale = 2.0 / (cols as f32).sqrt();
            let values = (0..rows * cols).map(|_| (rng.random::<f32>() - 0.5) * scale).collect();
            TinyTensor { name, shape: vec![rows, cols], values }
        };
        let (h, ff, vocab_size) = (config.hidden_size, config.intermediate_size, config.vocab_size);
        let mut tensors = vec![matrix("model.embed_tokens.weight".into(), vocab_size, h)];
        for l in 0..config.num_hidden_layers {
            let p = format!("model.layers.{l}.");
            tensors.push(matrix(format!("{p}self_attn.q_proj.weight"), config.q_size(), h));
            tensors.push(matrix(format!("{p}self_attn.k_proj.weight"), config.kv_size(), h));
            tensors.push(matrix(format!("{p}self_attn.v_proj.weight"), config.kv_size(), h));
            tensors.push(matrix(format!("{p}self_attn.o_proj.weight"), h, config.q_size()));
            tensors.push(matrix(format!("{p}mlp.gate_proj.weight"), ff, h));
            tensors.push(matrix(format!("{p}mlp.up_proj.weight"), ff, h));
            tensors.push(matrix(format!("{p}mlp.down_proj.weight"), h, ff));
        }
        if !config.tie_word_embeddings {
            tensors.push(matrix("lm_head.weight".into(), vocab_size, h));
        }
        let mut norm = |name: String| {
            let values = (0..h).map(|_| 1.0 + (rng.random::<f32>() - 0.5) * 0.2).collect();
            TinyTensor { name, shape: vec![h], values }
        };
        for l in 0..config.num_hidden_layers {
            tensors.push(norm(format!("model.layers.{l}.input_layernorm.weight")));
            tensors.push(norm(format!("model.layers.{l}.post_attention_layernorm.weight")));
        }
        tensors.push(norm("model.norm.weight".into()));
        if config.attention_bias {
            for l in 0..config.num_hidden_layers {
                for (proj, n) in [("q", config.q_size()), ("k", config.kv_size()), ("v", config.kv_size())] {
                    let values = (0..n).map(|_| rng.random::<f32>() - 0.5).collect();
                    let name = format!("model.layers.{l}.self_attn.{proj}_proj.bias");
                    tensors.push(TinyTensor { name, shape: vec![n], values });
                }
            }
        }
        Self { config, tensors, vocab, merges }
    }

    /// Write config.json, generation_config.json, model.safetensors (f32), tokenizer.json and
    /// tokenizer_config.json into `dir`.
    pub fn write_hf_dir(&self, dir: &Path) -> Result<(), TinyModelError> {
        std::fs::create_dir_all(dir)?;
        let c = &self.config;
        let config = json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": c.vocab_size, "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
            "num_hidden_layers": c.num_hidden_layers, "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads, "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta,
            "max_position_embeddings": c.max_position_embeddings, "tie_word_embeddings": c.tie_word_embeddings,
            "attention_bias": c.attention_bias,
            "bos_token_id": c.bos_token_id, "eos_token_id": c.eos_token_ids[0], "torch_dtype": "float32",
        });
        write_json(&dir.join("config.json"), &config)?;
        write_json(&dir.join("generation_config.json"), &json!({"bos_token_id": 1, "eos_token_id": 2}))?;
        let bytes: Vec<Vec<u8>> =
            self.tensors.iter().map(|t| bytemuck::cast_slice(&t.values).to_vec()).collect();
        let views: Vec<(String, TensorView<'_>)> = self
            .tensors
            .iter()
            .zip(&bytes)
            .map(|(t, b)| {
                (t.name.clone(), TensorView { dtype: DType::F32, shape: Cow::Borrowed(&t.shape), data: b })
            })
            .collect();
        std::fs::write(dir.join("model.safetensors"), serialize(&views)?)?;
        write_json(&dir.join("tokenizer.json"), &self.tokenizer_json())?;
        let tokenizer_config = json!({
            "add_bos_token": false, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
            "chat_template": TINY_CHAT_TEMPLATE,
        });
        write_json(&dir.join("tokenizer_config.json"), &tokenizer_config)?;
        Ok(())
    }

    /// Write the model as GGUF v3: matrices in `matrix_dtype`, norms in f32, Q/K rows
    /// permuted for interleaved RoPE as llama.cpp's converter does.
    pub fn write_gguf(&self, path: &Path, matrix_dtype: DType) -> Result<(), TinyModelError> {
        let c = &self.config;
        let mut w = GgufWriter::new();
        let u32v = |v: usize| MetadataValue::U32(v as u32);
        w.metadata("general.architecture", MetadataValue::String("llama".into()))
            .metadata("general.name", MetadataValue::String("pagoda tiny llama".into()))
            .metadata("general.alignment", MetadataValue::U32(32))
            .metadata("llama.context_length", u32v(c.max_position_embeddings))
            .metadata("llama.embedding_length", u32v(c.hidden_size))
            .metadata("llama.feed_forward_length", u32v(c.intermediate_size))
            .metadata("llama.block_count", u32v(c.num_hidden_layers))
            .metadata("llama.attention.head_count", u32v(c.num_attention_heads))
            .metadata("llama.attention.head_count_kv", u32v(c.num_key_value_heads))
            .metadata("llama.attention.layer_norm_rms_epsilon", MetadataValue::F32(c.rms_norm_eps))
            .metadata("llama.rope.freq_base", MetadataValue::F32(c.rope_theta))
            .metadata("llama.rope.dimension_count", u32v(c.head_dim))
            .metadata("llama.vocab_size", u32v(c.vocab_size))
            .metadata("tokenizer.ggml.model", MetadataValue::String("gpt2".into()))
            .metadata("tokenizer.ggml.pre", MetadataValue::String("smollm".into()))
            .metadata("tokenizer.ggml.tokens", MetadataValue::strings(&self.vocab))
            .metadata(
                "tokenizer.ggml.token_type",
                MetadataValue::i32s(
                    (0..self.vocab.len()).map(|i| if i < SPECIAL_TOKENS.len() { 3 } else { 1 }),
                ),
            )
            .metadata("tokenizer.ggml.merges", MetadataValue::strings(&self.merges))
            .metadata("tokenizer.ggml.bos_token_id", MetadataValue::U32(1))
            .metadata("tokenizer.ggml.eos_token_id", MetadataValue::U32(2))
            .metadata("tokenizer.ggml.add_bos_token", MetadataValue::Bool(false))
            .metadata("tokenizer.chat_template", MetadataValue::String(TINY_CHAT_TEMPLATE.into()));
        for t in &self.tensors {
            let name = gguf_name(&t.name);
            let values = if t.name.ends_with("q_proj.weight") || t.name.ends_with("q_proj.bias") {
                interleave_rope_rows(&t.values, c.num_attention_heads, c.head_dim).expect("whole heads")
            } else if t.name.ends_with("k_proj.weight") || t.name.ends_with("k_proj.bias") {
                interleave_rope_rows(&t.values, c.num_key_value_heads, c.head_dim).expect("whole heads")
            } else {
                t.values.clone()
            };
            let dtype = if t.shape.len() == 2 { matrix_dtype } else { DType::F32 };
            w.tensor(&name, dtype, &t.shape, quantize(dtype, &values))?;
        }
        w.write(path)?;
        Ok(())
    }

    fn tokenizer_json(&self) -> serde_json::Value {
        let vocab: serde_json::Map<String, serde_json::Value> =
            self.vocab.iter().enumerate().map(|(i, t)| (t.clone(), json!(i))).collect();
        let added: Vec<_> = SPECIAL_TOKENS
            .iter()
            .enumerate()
            .map(|(id, t)| {
                json!({"id": id, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                       "normalized": false, "special": true})
            })
            .collect();
        json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": added, "normalizer": null,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": true},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]},
            "post_processor": null,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": self.merges},
        })
    }
}

fn write_json(path: &Path, v: &serde_json::Value) -> std::io::Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(v).map_err(std::io::Error::other)?)
}

/// The GGUF name of an HF Llama tensor name.
fn gguf_name(hf: &str) -> String {
    let fixed = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = fixed.iter().find(|(h, _)| *h == hf) {
        return (*g).to_owned();
    }
    let rest = hf.strip_prefix("model.layers.").unwrap_or(hf);
    let (layer, suffix) = rest.split_once('.').unwrap_or(("0", rest));
    let suffix = match suffix {
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.q_proj.bias" => "attn_q.bias",
        "self_attn.k_proj.bias" => "attn_k.bias",
        "self_attn.v_proj.bias" => "attn_v.bias",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        other => other,
    };
    format!("blk.{layer}.{suffix}")
}

/// One sequence of `tokens` prefilled alone in one step, with the logits of every position
/// read back (K/V in an f32 cache of `block_size`-token blocks): what parity tests compare.
pub fn prefill_logits(
    ctx: &crate::gpu::GpuContext,
    model: &super::llama::LlamaModel,
    tokens: &[u32],
    block_size: usize,
    top_k: usize,
) -> Result<super::llama::ForwardOutput, super::llama::LlamaError> {
    use super::llama::{ForwardBatch, Workspace, WorkspaceLimits};
    use crate::gpu::{KvCacheShape, KvPrecision};
    let c = model.config();
    let (t, blocks) = (tokens.len(), tokens.len().div_ceil(block_size));
    let limits =
        WorkspaceLimits { max_tokens: t, max_seqs: t, max_logits_rows: t, max_blocks_per_seq: blocks };
    let ws = Workspace::new(ctx, model, limits)?;
    let shape = KvCacheShape {
        num_layers: c.num_hidden_layers,
        num_blocks: blocks + 1,
        block_size,
        num_kv_heads: c.num_key_value_heads,
        head_dim: c.head_dim,
    };
    let cache = ctx.kv_cache(shape, KvPrecision::F32)?;
    let batch = ForwardBatch {
        input_ids: tokens.to_vec(),
        positions: (0..t as u32).collect(),
        slot_mapping: (0..t as u32).map(|p| p + block_size as u32).collect(),
        query_start_loc: vec![0, t as u32],
        seq_lens: vec![t as u32],
        block_table: (1..=blocks as u32).collect(),
        logits_indices: (0..t as u32).collect(),
    };
    model.forward(ctx, &ws, &cache, &batch, top_k, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_weights() {
        assert_eq!(TinyLlama::new(7).tensors[3].values, TinyLlama::new(7).tensors[3].values);
        assert_ne!(TinyLlama::new(7).tensors[3].values, TinyLlama::new(8).tensors[3].values);
    }
}
