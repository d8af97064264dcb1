//! The architecture of a Llama-family model, from HF `config.json` or from GGUF metadata.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::gguf::{GgufError, GgufFile};
use super::layer_pattern::{InvalidPattern, gguf_sliding_layers, period_flags, windows};
use super::moe::{MoeConfig, MoeConfigError, hf_expert_layers};

/// How rotary embeddings pair the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeVariant {
    /// Adjacent pairs `(2i, 2i + 1)`: GGUF llama files store Q/K permuted for this.
    Interleaved,
    /// Halves `(i, i + head_dim / 2)`: HF safetensors ("NeoX style").
    HalfSplit,
}

/// The rows of a Q or K projection `[heads * head_dim, ..]` (or its bias), each `values.len() /
/// (heads * head_dim)` values long, reordered from half-split RoPE order (row `s * head_dim / 2
/// + i` of a head) to interleaved order (row `2 * i + s`), as llama.cpp's converter stores Llama
/// files. Whole rows move, so any row-wise format (quantized blocks included) can be reordered
/// as stored bytes. `None` when the values do not split into that many rows of even heads.
pub fn interleave_rope_rows<T: Copy>(values: &[T], heads: usize, head_dim: usize) -> Option<Vec<T>> {
    let rows = heads * head_dim;
    if rows == 0 || !head_dim.is_multiple_of(2) || !values.len().is_multiple_of(rows) {
        return None;
    }
    let row_len = values.len() / rows;
    let half = head_dim / 2;
    let mut out = Vec::with_capacity(values.len());
    for h in 0..heads {
        for i in 0..half {
            for s in 0..2 {
                let src = (h * head_dim + s * half + i) * row_len;
                out.extend_from_slice(&values[src..src + row_len]);
            }
        }
    }
    Some(out)
}

/// Rotary frequency scaling.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Positions divided by `factor`.
    Linear {
        /// Scale factor.
        factor: f32,
    },
    /// Llama 3.1 style: low frequencies divided by `factor`, high ones kept, smooth between.
    Llama3 {
        /// Scale factor for low frequencies.
        factor: f32,
        /// Wavelength bound (in units of the original context) of the low band.
        low_freq_factor: f32,
        /// Wavelength bound of the high band.
        high_freq_factor: f32,
        /// Context length the model was trained with.
        original_max_position_embeddings: usize,
    },
    /// Phi-3's LongRoPE: per-frequency divisors, `short_factor` for contexts up to the
    /// original one and `long_factor` beyond it (chosen once per engine by its
    /// `max_model_len`, as llama.cpp chooses by its context size, so a token's rotation never
    /// depends on its batch), and scores scaled by `attention_factor²` (cos and sin scaled by
    /// `attention_factor`).
    LongRope {
        /// Divisors for contexts up to `original_max_position_embeddings`.
        short_factor: Vec<f32>,
        /// Divisors beyond it.
        long_factor: Vec<f32>,
        /// Context length the model was first trained with.
        original_max_position_embeddings: usize,
        /// Scale of cos and sin.
        attention_factor: f32,
    },
    /// YaRN (gpt-oss): each frequency blended between itself (extrapolated, the fast ones)
    /// and itself divided by `factor` (interpolated, the slow ones) along a linear ramp over
    /// the dimensions whose rotations in the original context fall between `beta_fast` and
    /// `beta_slow`, and scores scaled by `attention_factor²` (cos and sin scaled by
    /// `attention_factor`), as transformers' `_compute_yarn_parameters` does.
    Yarn {
        /// Context extension factor.
        factor: f32,
        /// Context length the model was first trained with.
        original_max_position_embeddings: usize,
        /// Rotations bounding the ramp's extrapolated end.
        beta_fast: f32,
        /// Rotations bounding the ramp's interpolated end.
        beta_slow: f32,
        /// The ramp's bounds rounded outwards to whole dimensions (transformers' default;
        /// gpt-oss's config says `false`).
        truncate: bool,
        /// Scale of cos and sin.
        attention_factor: f32,
    },
}

/// The activation of the gated MLP: `down(act(gate(x)) * up(x))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlpActivation {
    /// SiLU (SwiGLU): Llama, Mistral, Qwen.
    Silu,
    /// PyTorch's tanh-approximated GELU (GeGLU): Gemma.
    GeluTanh,
}

/// What sets each family apart from Llama before its config says more — the one table to
/// read for "what makes Gemma 2 different":
///
/// | family  | differs from Llama by |
/// |---------|-----------------------|
/// | llama   | — |
/// | mistral | a sliding window on every layer (`sliding_window`) |
/// | qwen2   | Q/K/V biases; a `sliding_window` it does not use (`use_sliding_window: false`) |
/// | qwen3   | per-head RMSNorm of q and k before RoPE |
/// | qwen3_moe | Qwen3 with a mixture of experts for every MLP ([`MoeConfig`]) |
/// | qwen2_moe | Qwen2 with a mixture of experts for every MLP and a sigmoid-gated shared expert beside them |
/// | mixtral | Mistral with a mixture of experts for every MLP, no sliding window |
/// | gemma2  | `(1 + w)` norms, embeddings × √hidden, GELU-tanh MLP, norms after attention and MLP, soft-capped attention scores and final logits, `query_pre_attn_scalar`, sliding window on even layers, tied head |
/// | gemma3  | Gemma 2 without soft-capping, with q/k norms, a local RoPE base on sliding layers, 5 sliding layers to 1 full (or the file's own pattern) |
/// | phi3    | fused `qkv_proj` and `gate_up_proj`; LongRoPE short/long factors on the long-context models |
/// | gpt_oss | experts with biases (top-k then softmax, clamped SwiGLU), attention sinks, Q/K/V/O biases, sliding window on even layers, YaRN |
#[derive(Debug, Clone, Copy)]
struct FamilyTraits {
    fused: bool,
    attention_bias: bool,
    qk_norm: bool,
    gemma: bool,
    /// Layer `i` slides when `(i + 1) % pattern != 0`; `None`: every layer, if a window is set.
    /// A default: a config's `layer_types` or `sliding_window_pattern`, or a GGUF file's
    /// `{arch}.attention.sliding_window_pattern`, takes its place.
    sliding_pattern: Option<usize>,
}

fn traits(architecture: &str) -> FamilyTraits {
    let llama = FamilyTraits {
        fused: false,
        attention_bias: false,
        qk_norm: false,
        gemma: false,
        sliding_pattern: None,
    };
    match architecture {
        "qwen2" | "qwen2_moe" | "qwen2moe" => FamilyTraits { attention_bias: true, ..llama },
        "qwen3" | "qwen3moe" | "qwen3_moe" => FamilyTraits { qk_norm: true, ..llama },
        "phi3" => FamilyTraits { fused: true, ..llama },
        "gpt_oss" | "gpt-oss" => FamilyTraits { attention_bias: true, sliding_pattern: Some(2), ..llama },
        "gemma2" => FamilyTraits { gemma: true, sliding_pattern: Some(2), ..llama },
        "gemma3" | "gemma3_text" => {
            FamilyTraits { qk_norm: true, gemma: true, sliding_pattern: Some(6), ..llama }
        }
        _ => llama,
    }
}

/// A Llama-family decoder's architecture and special token ids.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Architecture name (`llama`, `qwen2`, `mistral`).
    pub architecture: String,
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
    /// Residual stream width.
    pub hidden_size: usize,
    /// Width of the SwiGLU feed-forward.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA when fewer than query heads).
    pub num_key_value_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// RoPE base.
    pub rope_theta: f32,
    /// RoPE frequency scaling, if any.
    pub rope_scaling: Option<RopeScaling>,
    /// How RoPE pairs dimensions, which depends on the file format.
    pub rope_variant: RopeVariant,
    /// Longest context the model was trained for.
    pub max_position_embeddings: usize,
    /// The LM head reuses the token embedding.
    pub tie_word_embeddings: bool,
    /// Q/K/V are one stored matrix (`qkv_proj`) and gate/up another (`gate_up_proj`), cut
    /// into their parts at load (Phi-3).
    pub fused_projections: bool,
    /// Q/K/V projections carry a bias (Qwen2).
    pub attention_bias: bool,
    /// Queries and keys are RMS-normed per head before RoPE (Qwen3's `q_norm`, `k_norm`).
    pub qk_norm: bool,
    /// Per layer, the sliding window of its attention (keys a query sees, itself included);
    /// `None` for full attention. Mistral slides on every layer.
    pub layer_windows: Vec<Option<usize>>,
    /// The MLP's gate activation.
    pub mlp_activation: MlpActivation,
    /// RMSNorm weights are stored as `w` for `x̂ · (1 + w)` (Gemma's HF files; llama.cpp's
    /// converter adds the 1 into GGUF files).
    pub norm_weight_plus_one: bool,
    /// Embeddings are multiplied by this (Gemma: √hidden).
    pub embedding_scale: Option<f32>,
    /// Norms after attention and after the MLP too, before each residual add (Gemma 2/3).
    pub sandwich_norms: bool,
    /// Attention scores are `q·k` times this (`1/√head_dim`, or Gemma's
    /// `1/√query_pre_attn_scalar`).
    pub attention_scale: f32,
    /// Attention scores soft-capped to `c·tanh(s/c)` (Gemma 2).
    pub attn_logit_softcap: Option<f32>,
    /// Final logits soft-capped the same way (Gemma 2).
    pub final_logit_softcap: Option<f32>,
    /// RoPE base of the sliding-window layers when it differs from `rope_theta` (Gemma 3).
    pub local_rope_theta: Option<f32>,
    /// Beginning-of-sequence token.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence tokens (the first is the model's main EOS).
    pub eos_token_ids: Vec<u32>,
    /// The mixture of experts of the layers that have one (Qwen3-MoE, Mixtral); `None`: dense.
    pub moe: Option<MoeConfig>,
    /// Per layer, whether its MLP is `moe` (all of a GGUF file's, llama.cpp's rule); the others
    /// are gated MLPs of `intermediate_size` (Qwen's `mlp_only_layers`, `decoder_sparse_step`).
    pub moe_layers: Vec<bool>,
    /// The attention output projection carries a bias (gpt-oss).
    pub o_bias: bool,
    /// Each attention head has a learned sink logit in its softmax's denominator (gpt-oss).
    pub attention_sinks: bool,
    /// gpt-oss's clamped SwiGLU of the experts, `(clamp(up, ±limit) + 1) · g · σ(1.702 g)` with
    /// `g = min(gate, limit)`, and biases on every expert projection and the router; `None`:
    /// the plain gated MLP.
    pub swiglu_limit: Option<f32>,
}

/// Why a model config could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file is not valid JSON.
    #[error("{path} is not valid JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// A required field is absent.
    #[error("model config is missing field {0:?}")]
    MissingField(String),
    /// A field has a value of the wrong type or out of range.
    #[error("model config field {field:?} is invalid: {reason}")]
    InvalidField {
        /// The field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A field that changes the model's math in a way pagoda does not implement (refused
    /// rather than ignored: ignoring it would generate wrong tokens silently).
    #[error("model config field {field:?} is not supported: {reason}")]
    Unsupported {
        /// The field.
        field: String,
        /// What it asks for.
        reason: String,
    },
    /// An architecture pagoda does not run.
    #[error(
        "unsupported architecture {0:?} (supported: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma2, gemma3, phi3, gpt_oss)"
    )]
    UnsupportedArchitecture(String),
    /// Reading GGUF metadata failed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

impl From<MoeConfigError> for ConfigError {
    fn from(e: MoeConfigError) -> Self {
        match e {
            MoeConfigError::MissingField(field) => Self::MissingField(field),
            MoeConfigError::InvalidField { field, reason } => Self::InvalidField { field, reason },
            MoeConfigError::Gguf(e) => Self::Gguf(e),
        }
    }
}

impl From<InvalidPattern> for ConfigError {
    fn from(InvalidPattern { key, reason }: InvalidPattern) -> Self {
        Self::InvalidField { field: key, reason }
    }
}

const SUPPORTED: [&str; 15] = [
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen2moe",
    "qwen3",
    "qwen3_moe",
    "qwen3moe",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi3",
    "gpt_oss",
    "gpt-oss",
];

impl ModelConfig {
    /// The experts of layer `layer`'s MLP; `None` for a dense one.
    pub fn layer_moe(&self, layer: usize) -> Option<&MoeConfig> {
        self.moe.as_ref().filter(|_| self.moe_layers.get(layer).copied().unwrap_or(false))
    }

    /// `max_model_len` capped at the context the model was trained for.
    pub fn cap_model_len(&self, max_model_len: usize) -> usize {
        max_model_len.min(self.max_position_embeddings.max(1))
    }

    /// Read `config.json` (and `generation_config.json` if present) from an HF model directory.
    pub fn from_hf_dir(dir: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let dir = dir.as_ref();
        let config = read_json(&dir.join("config.json"))?;
        let generation_path = dir.join("generation_config.json");
        let generation = if generation_path.exists() { Some(read_json(&generation_path)?) } else { None };
        Self::from_hf_json(&config, generation.as_ref())
    }

    /// Build from parsed HF `config.json` and optional `generation_config.json`.
    pub fn from_hf_json(config: &Value, generation: Option<&Value>) -> Result<Self, ConfigError> {
        let f = Fields(config);
        let architecture = match f.opt_str("model_type")? {
            Some(t) => t.to_owned(),
            None => return Err(ConfigError::MissingField("model_type".into())),
        };
        if !SUPPORTED.contains(&architecture.as_str()) {
            return Err(ConfigError::UnsupportedArchitecture(architecture));
        }
        let hidden_size = f.usize("hidden_size")?;
        let num_attention_heads = f.usize("num_attention_heads")?;
        let num_key_value_heads = f.opt_usize("num_key_value_heads")?.unwrap_or(num_attention_heads);
        let head_dim = match f.opt_usize("head_dim")? {
            Some(d) => d,
            None => divide(hidden_size, num_attention_heads, "hidden_size")?,
        };
        let eos_from = |v: &Value| ids_of(v.get("eos_token_id"), "eos_token_id");
        let mut eos_token_ids = eos_from(config)?;
        if let Some(g) = generation {
            let from_generation = eos_from(g)?;
            if !from_generation.is_empty() {
                eos_token_ids = from_generation;
            }
        }
        let bos_token_id = ids_of(config.get("bos_token_id"), "bos_token_id")?.first().copied();
        refuse_unsupported_math(config)?;
        refuse_quantization(config, &architecture)?;
        let family = traits(&architecture);
        let num_hidden_layers = layer_count(f.usize("num_hidden_layers")?, "num_hidden_layers")?;
        let sliding_pattern = f.opt_usize("sliding_window_pattern")?.or(family.sliding_pattern);
        let rope_theta = hf_rope_theta(config)?;
        let rope_scaling = hf_rope_scaling(rope_settings(config), config)?;
        let attention_scale = match f.opt_f32("query_pre_attn_scalar")? {
            Some(scalar) if family.gemma => (f64::from(scalar)).powf(-0.5) as f32,
            _ => 1.0 / (head_dim as f32).sqrt(),
        } * rope_score_scale(rope_scaling.as_ref());
        let gpt_oss = architecture == "gpt_oss";
        let moe_layers = hf_expert_layers(&architecture, config, num_hidden_layers)?;
        let config = Self {
            vocab_size: f.usize("vocab_size")?,
            hidden_size,
            intermediate_size: f.usize("intermediate_size")?,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: f.f32("rms_norm_eps")?,
            rope_theta,
            rope_scaling,
            rope_variant: RopeVariant::HalfSplit,
            max_position_embeddings: f.usize("max_position_embeddings")?,
            tie_word_embeddings: f.opt_bool("tie_word_embeddings")?.unwrap_or(family.gemma),
            fused_projections: family.fused,
            // Qwen2-MoE's config names its Q/K/V biases `qkv_bias` (transformers 5; always on before)
            attention_bias: f
                .opt_bool("attention_bias")?
                .or(f.opt_bool("qkv_bias")?)
                .unwrap_or(family.attention_bias),
            qk_norm: family.qk_norm,
            layer_windows: hf_layer_windows(config, num_hidden_layers, sliding_pattern)?,
            mlp_activation: hf_mlp_activation(config)?,
            norm_weight_plus_one: family.gemma,
            embedding_scale: family.gemma.then(|| (hidden_size as f64).sqrt() as f32),
            sandwich_norms: family.gemma,
            attention_scale,
            attn_logit_softcap: f.opt_f32("attn_logit_softcapping")?,
            final_logit_softcap: f.opt_f32("final_logit_softcapping")?,
            local_rope_theta: hf_local_rope_theta(config)?,
            bos_token_id,
            eos_token_ids,
            moe: match moe_layers.contains(&true) {
                true => MoeConfig::from_hf(&architecture, config)?,
                false => None,
            },
            moe_layers,
            o_bias: gpt_oss,
            attention_sinks: gpt_oss,
            swiglu_limit: if gpt_oss { Some(hf_swiglu_limit(config)?) } else { None },
            architecture,
        };
        config.validate()?;
        Ok(config)
    }

    /// Build from a GGUF file's metadata (and, for tied embeddings, its tensor list).
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self, ConfigError> {
        let architecture =
            gguf.get_str("general.architecture")?.ok_or_else(|| missing("general.architecture"))?;
        if !SUPPORTED.contains(&architecture) {
            return Err(ConfigError::UnsupportedArchitecture(architecture.to_owned()));
        }
        let key = |k: &str| format!("{architecture}.{k}");
        let family = traits(architecture);
        let int = |k: &str| -> Result<Option<usize>, ConfigError> {
            match gguf.get_int(k)? {
                None => Ok(None),
                Some(v) => usize::try_from(v).map(Some).map_err(|_| ConfigError::InvalidField {
                    field: k.to_owned(),
                    reason: format!("{v} is negative"),
                }),
            }
        };
        let req = |k: &str| int(k)?.ok_or_else(|| missing(k));
        let num_hidden_layers = layer_count(req(&key("block_count"))?, &key("block_count"))?;
        let hidden_size = req(&key("embedding_length"))?;
        let num_attention_heads = req(&key("attention.head_count"))?;
        let head_dim = match int(&key("attention.key_length"))? {
            Some(d) => d,
            None => divide(hidden_size, num_attention_heads, &key("embedding_length"))?,
        };
        let vocab_size = match int(&key("vocab_size"))? {
            Some(v) => v,
            None => match gguf.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()) {
                Some(tokens) => tokens.len(),
                None => return Err(missing(&key("vocab_size"))),
            },
        };
        let rope_scaling = match gguf.get_str(&key("rope.scaling.type"))? {
            None if gguf.has_tensor("rope_factors_long.weight") => {
                let factors = |name: &str| -> Result<Vec<f32>, ConfigError> {
                    gguf.tensor(name).map(|t| t.to_f32()).map_err(ConfigError::Gguf)
                };
                let original = req(&key("rope.scaling.original_context_length"))?;
                let attention_factor = match gguf.get_float(&key("rope.scaling.attn_factor"))? {
                    Some(factor) => factor as f32,
                    None => longrope_attention_factor(req(&key("context_length"))?, original),
                };
                Some(RopeScaling::LongRope {
                    short_factor: factors("rope_factors_short.weight")?,
                    long_factor: factors("rope_factors_long.weight")?,
                    original_max_position_embeddings: original,
                    attention_factor,
                })
            }
            None | Some("none") => None,
            Some("linear") => Some(RopeScaling::Linear {
                factor: gguf
                    .get_float(&key("rope.scaling.factor"))?
                    .ok_or_else(|| missing(&key("rope.scaling.factor")))? as f32,
            }),
            Some("yarn") => {
                let float = |k: &str| -> Result<Option<f32>, ConfigError> {
                    Ok(gguf.get_float(&key(k))?.map(|v| v as f32))
                };
                let factor =
                    float("rope.scaling.factor")?.ok_or_else(|| missing(&key("rope.scaling.factor")))?;
                Some(yarn(
                    factor,
                    req(&key("rope.scaling.original_context_length"))?,
                    float("rope.scaling.yarn_beta_fast")?,
                    float("rope.scaling.yarn_beta_slow")?,
                    // llama.cpp's converter writes no `truncate`; gpt-oss's own config says false
                    architecture != "gpt-oss",
                    float("rope.scaling.attn_factor")?,
                )?)
            }
            Some(other) => {
                return Err(ConfigError::InvalidField {
                    field: key("rope.scaling.type"),
                    reason: format!("unsupported rope scaling {other:?}"),
                });
            }
        };
        let attention_scale = 1.0 / (head_dim as f32).sqrt() * rope_score_scale(rope_scaling.as_ref());
        let gpt_oss = architecture == "gpt-oss";
        let token_id = |k: &str| -> Result<Option<u32>, ConfigError> {
            int(k)?
                .map(|v| {
                    u32::try_from(v).map_err(|_| ConfigError::InvalidField {
                        field: k.into(),
                        reason: "too large".into(),
                    })
                })
                .transpose()
        };
        let intermediate_size = req(&key("feed_forward_length"))?;
        let moe = MoeConfig::from_gguf(architecture, gguf, intermediate_size)?;
        let config = Self {
            architecture: architecture.to_owned(),
            vocab_size,
            hidden_size,
            intermediate_size,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads: int(&key("attention.head_count_kv"))?.unwrap_or(num_attention_heads),
            head_dim,
            rms_norm_eps: gguf
                .get_float(&key("attention.layer_norm_rms_epsilon"))?
                .ok_or_else(|| missing(&key("attention.layer_norm_rms_epsilon")))?
                as f32,
            rope_theta: gguf.get_float(&key("rope.freq_base"))?.unwrap_or(10000.0) as f32,
            rope_scaling,
            rope_variant: if matches!(
                architecture,
                "qwen2" | "qwen2moe" | "qwen3" | "qwen3moe" | "gemma2" | "gemma3" | "phi3" | "gpt-oss"
            ) {
                RopeVariant::HalfSplit
            } else {
                RopeVariant::Interleaved
            },
            max_position_embeddings: req(&key("context_length"))?,
            tie_word_embeddings: !gguf.has_tensor("output.weight"),
            fused_projections: family.fused,
            attention_bias: gguf.has_tensor("blk.0.attn_q.bias"),
            qk_norm: gguf.has_tensor("blk.0.attn_q_norm.weight"),
            layer_windows: windows(
                int(&key("attention.sliding_window"))?.filter(|&w| w > 0),
                &gguf_sliding_layers(gguf, architecture, num_hidden_layers, family.sliding_pattern)?,
            ),
            mlp_activation: if family.gemma { MlpActivation::GeluTanh } else { MlpActivation::Silu },
            norm_weight_plus_one: false,
            embedding_scale: family.gemma.then(|| (hidden_size as f64).sqrt() as f32),
            sandwich_norms: family.gemma,
            attention_scale,
            attn_logit_softcap: gguf.get_float(&key("attn_logit_softcapping"))?.map(|c| c as f32),
            final_logit_softcap: gguf.get_float(&key("final_logit_softcapping"))?.map(|c| c as f32),
            local_rope_theta: gguf.get_float(&key("rope.freq_base_swa"))?.map(|t| t as f32),
            bos_token_id: token_id("tokenizer.ggml.bos_token_id")?,
            eos_token_ids: token_id("tokenizer.ggml.eos_token_id")?.into_iter().collect(),
            moe,
            moe_layers: vec![moe.is_some(); num_hidden_layers],
            o_bias: gguf.has_tensor("blk.0.attn_output.bias"),
            attention_sinks: gguf.has_tensor("blk.0.attn_sinks.weight"),
            // llama.cpp's limit for gpt-oss (its GGUF carries none)
            swiglu_limit: gpt_oss.then_some(GPT_OSS_SWIGLU_LIMIT),
        };
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let nonzero = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
        ];
        for (field, v) in nonzero {
            if v == 0 {
                return Err(ConfigError::InvalidField {
                    field: field.into(),
                    reason: "must be positive".into(),
                });
            }
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return Err(ConfigError::InvalidField {
                field: "num_key_value_heads".into(),
                reason: format!(
                    "{} does not divide {} query heads",
                    self.num_key_value_heads, self.num_attention_heads
                ),
            });
        }
        if self.layer_windows.len() != self.num_hidden_layers || self.layer_windows.contains(&Some(0)) {
            return Err(ConfigError::InvalidField {
                field: "sliding_window".into(),
                reason: format!("{:?} is not one positive window per layer", self.layer_windows),
            });
        }
        let positive = |v: f32| v.is_finite() && v > 0.0;
        let caps =
            [self.attn_logit_softcap, self.final_logit_softcap, self.embedding_scale, self.local_rope_theta];
        if !positive(self.attention_scale) || caps.iter().flatten().any(|&v| !positive(v)) {
            return Err(ConfigError::InvalidField {
                field: "query_pre_attn_scalar / softcapping / rope".into(),
                reason: "scales, caps and RoPE bases must be positive".into(),
            });
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(ConfigError::InvalidField {
                field: "head_dim".into(),
                reason: "RoPE needs an even head_dim".into(),
            });
        }
        Ok(())
    }

    /// The window every layer slides, when they all slide the same one (Mistral): what lets
    /// the KV cache manager free the blocks behind it. `None` when any layer attends fully.
    pub fn uniform_sliding_window(&self) -> Option<usize> {
        let first = *self.layer_windows.first()?;
        self.layer_windows.iter().all(|&w| w == first).then_some(first).flatten()
    }

    /// Query heads per key/value head.
    pub fn gqa_group_size(&self) -> usize {
        self.num_attention_heads / self.num_key_value_heads
    }

    /// Width of the concatenated query heads.
    pub fn q_size(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// Width of the concatenated key (or value) heads.
    pub fn kv_size(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }
}

/// Most decoder layers a config may declare (the largest open models have under 200): a
/// corrupt count is an error before anything is allocated per layer.
const MAX_LAYERS: usize = 4096;

fn layer_count(n: usize, field: &str) -> Result<usize, ConfigError> {
    if n > MAX_LAYERS {
        return Err(ConfigError::InvalidField {
            field: field.into(),
            reason: format!("{n} layers; at most {MAX_LAYERS}"),
        });
    }
    Ok(n)
}

fn missing(field: &str) -> ConfigError {
    ConfigError::MissingField(field.to_owned())
}

fn out_of_range(field: &str, reason: String) -> ConfigError {
    ConfigError::InvalidField { field: field.to_owned(), reason }
}

fn divide(a: usize, b: usize, field: &str) -> Result<usize, ConfigError> {
    if b == 0 || !a.is_multiple_of(b) {
        return Err(ConfigError::InvalidField {
            field: field.into(),
            reason: format!("{a} is not divisible by {b} heads"),
        });
    }
    Ok(a / b)
}

fn read_json(path: &Path) -> Result<Value, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: path.to_owned(), source })?;
    serde_json::from_str(&text).map_err(|source| ConfigError::Json { path: path.to_owned(), source })
}

fn ids_of(v: Option<&Value>, field: &str) -> Result<Vec<u32>, ConfigError> {
    let one = |v: &Value| {
        v.as_u64().and_then(|id| u32::try_from(id).ok()).ok_or_else(|| ConfigError::InvalidField {
            field: field.into(),
            reason: format!("{v} is not a token id"),
        })
    };
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().map(one).collect(),
        Some(v) => Ok(vec![one(v)?]),
    }
}

/// Each layer's sliding window: transformers 5's `layer_types` (`"sliding_attention"` or
/// `"full_attention"`) when present, else `sliding_window` on the layers the family's pattern
/// slides (every layer when it has none) unless `use_sliding_window` is false (Qwen2 writes a
/// window it does not use).
fn hf_layer_windows(
    config: &Value,
    num_layers: usize,
    sliding_pattern: Option<usize>,
) -> Result<Vec<Option<usize>>, ConfigError> {
    let f = Fields(config);
    let used = f.opt_bool("use_sliding_window")? != Some(false);
    let window = f.opt_usize("sliding_window")?.filter(|_| used);
    let Some(types) = config.get("layer_types").filter(|v| !v.is_null()) else {
        return Ok(windows(window, &period_flags(num_layers, sliding_pattern)));
    };
    let types =
        types.as_array().filter(|t| t.len() == num_layers).ok_or_else(|| ConfigError::InvalidField {
            field: "layer_types".into(),
            reason: format!("not a list of {num_layers} layer types"),
        })?;
    types
        .iter()
        .map(|t| match (t.as_str(), f.opt_usize("sliding_window")?) {
            (Some("full_attention"), _) => Ok(None),
            (Some("sliding_attention"), Some(w)) => Ok(Some(w)),
            (Some("sliding_attention"), None) => Err(missing("sliding_window")),
            _ => Err(ConfigError::Unsupported {
                field: "layer_types".into(),
                reason: format!("layer type {t}"),
            }),
        })
        .collect()
}

/// The gated MLP's activation from `hidden_activation` (Gemma) or `hidden_act`; SiLU when
/// neither is set (transformers' Llama default). Anything else is refused.
fn hf_mlp_activation(config: &Value) -> Result<MlpActivation, ConfigError> {
    let f = Fields(config);
    let (field, name) = match f.opt_str("hidden_activation")? {
        Some(name) => ("hidden_activation", name),
        None => ("hidden_act", f.opt_str("hidden_act")?.unwrap_or("silu")),
    };
    match name {
        "silu" | "swish" => Ok(MlpActivation::Silu),
        "gelu_pytorch_tanh" => Ok(MlpActivation::GeluTanh),
        other => {
            Err(ConfigError::Unsupported { field: field.into(), reason: format!("activation {other:?}") })
        }
    }
}

/// The RoPE base of sliding layers: Gemma 3's `rope_local_base_freq` (transformers 4) or
/// `rope_parameters.sliding_attention.rope_theta` (transformers 5).
fn hf_local_rope_theta(config: &Value) -> Result<Option<f32>, ConfigError> {
    if let Some(sliding) = config.get("rope_parameters").and_then(|p| p.get("sliding_attention")) {
        return Fields(sliding)
            .opt_f32("rope_theta")
            .map_err(|e| prefix(e, "rope_parameters.sliding_attention."));
    }
    Fields(config).opt_f32("rope_local_base_freq")
}

/// Where a config keeps its RoPE settings: transformers 5 writes `rope_parameters` (with
/// `rope_theta` and the scaling inside; per layer type for Gemma 3, whose full-attention
/// layers' set this is), transformers 4 `rope_scaling` beside a top-level `rope_theta`.
fn rope_settings(config: &Value) -> Option<&Value> {
    match config.get("rope_parameters").filter(|v| !v.is_null()) {
        Some(parameters) => Some(parameters.get("full_attention").unwrap_or(parameters)),
        None => config.get("rope_scaling"),
    }
}

/// The RoPE base: `rope_parameters.rope_theta` (the full-attention layers' set when they are
/// per layer type, as Gemma 3's are), else the top-level `rope_theta`, else transformers'
/// default for these families (10000). Per-layer-type sets for other layer types are refused.
fn hf_rope_theta(config: &Value) -> Result<f32, ConfigError> {
    let parameters = config.get("rope_parameters").filter(|v| !v.is_null()).and(rope_settings(config));
    if let Some(parameters @ Value::Object(map)) = parameters {
        if map.values().any(Value::is_object) {
            return Err(ConfigError::Unsupported {
                field: "rope_parameters".into(),
                reason: "RoPE parameters per layer type other than full_attention / sliding_attention".into(),
            });
        }
        if let Some(theta) =
            Fields(parameters).opt_f32("rope_theta").map_err(|e| prefix(e, "rope_parameters."))?
        {
            return Ok(theta);
        }
    }
    Ok(Fields(config).opt_f32("rope_theta")?.unwrap_or(10000.0))
}

/// Refuses a `quantization_config` pagoda does not read: all but gpt-oss's `mxfp4` (its experts
/// in MXFP4 blocks, read by [`super::gpt_oss`]). GPTQ, AWQ, FP8 and the rest would otherwise
/// fail later on their tensors' types, or not at all.
fn refuse_quantization(config: &Value, architecture: &str) -> Result<(), ConfigError> {
    let Some(q) = config.get("quantization_config").filter(|v| !v.is_null()) else { return Ok(()) };
    match q.get("quant_method").and_then(Value::as_str) {
        Some("mxfp4") if architecture == "gpt_oss" => Ok(()),
        method => Err(ConfigError::Unsupported {
            field: "quantization_config".into(),
            reason: format!(
                "{} weights (pagoda reads MXFP4 gpt-oss checkpoints; other quantized models load as GGUF)",
                method.unwrap_or("unnamed")
            ),
        }),
    }
}

/// Refuses the fields that change the math of a Llama-family decoder in ways the forward pass
/// does not implement (MLP biases, partial rotary embeddings): a model that needs them must
/// not run as if they were absent. (An unknown activation is refused where it is read.)
fn refuse_unsupported_math(config: &Value) -> Result<(), ConfigError> {
    let f = Fields(config);
    let unsupported =
        |field: &str, reason: String| Err(ConfigError::Unsupported { field: field.into(), reason });
    if f.opt_bool("mlp_bias")? == Some(true) {
        return unsupported("mlp_bias", "biases in the MLP".into());
    }
    if let Some(factor) = f.opt_f32("partial_rotary_factor")?
        && factor != 1.0
    {
        return unsupported("partial_rotary_factor", format!("RoPE on {factor} of each head"));
    }
    Ok(())
}

/// How much LongRoPE's or YaRN's scaled cos and sin scale the attention scores:
/// `attention_factor²`.
fn rope_score_scale(scaling: Option<&RopeScaling>) -> f32 {
    match scaling {
        Some(RopeScaling::LongRope { attention_factor, .. } | RopeScaling::Yarn { attention_factor, .. }) => {
            attention_factor * attention_factor
        }
        _ => 1.0,
    }
}

/// gpt-oss's SwiGLU limit when its config gives none (transformers' and llama.cpp's 7).
const GPT_OSS_SWIGLU_LIMIT: f32 = 7.0;

/// gpt-oss's `swiglu_limit` (7 when absent); its `swiglu_alpha` must be the 1.702 the kernel
/// uses.
fn hf_swiglu_limit(config: &Value) -> Result<f32, ConfigError> {
    let f = Fields(config);
    if let Some(alpha) = f.opt_f32("swiglu_alpha")?
        && alpha != 1.702
    {
        return Err(ConfigError::Unsupported {
            field: "swiglu_alpha".into(),
            reason: format!("{alpha} (1.702 runs)"),
        });
    }
    let limit = f.opt_f32("swiglu_limit")?.unwrap_or(GPT_OSS_SWIGLU_LIMIT);
    if !(limit.is_finite() && limit > 0.0) {
        return Err(out_of_range("swiglu_limit", format!("{limit} is not a positive number")));
    }
    Ok(limit)
}

/// YaRN's settings, the defaults transformers gives the absent ones (beta 32 and 1, the
/// attention factor `0.1 ln(factor) + 1`).
fn yarn(
    factor: f32,
    original_max_position_embeddings: usize,
    beta_fast: Option<f32>,
    beta_slow: Option<f32>,
    truncate: bool,
    attention_factor: Option<f32>,
) -> Result<RopeScaling, ConfigError> {
    if !(factor.is_finite() && factor > 0.0) {
        return Err(out_of_range("rope_scaling.factor", format!("{factor} is not a positive number")));
    }
    if original_max_position_embeddings == 0 {
        return Err(out_of_range(
            "rope_scaling.original_max_position_embeddings",
            "0 is not positive".into(),
        ));
    }
    let (beta_fast, beta_slow) = (beta_fast.unwrap_or(32.0), beta_slow.unwrap_or(1.0));
    if !(beta_fast > 0.0 && beta_slow > 0.0) {
        return Err(out_of_range(
            "rope_scaling.beta_fast",
            format!("{beta_fast} / {beta_slow} must be positive"),
        ));
    }
    let attention_factor = attention_factor
        .unwrap_or_else(|| if factor <= 1.0 { 1.0 } else { (0.1 * f64::from(factor).ln() + 1.0) as f32 });
    Ok(RopeScaling::Yarn {
        factor,
        original_max_position_embeddings,
        beta_fast,
        beta_slow,
        truncate,
        attention_factor,
    })
}

/// LongRoPE's scale of cos and sin when the config gives none (transformers' rule):
/// `sqrt(1 + ln(max / original) / ln(original))` for a context extended past the original.
fn longrope_attention_factor(max_position_embeddings: usize, original: usize) -> f32 {
    if max_position_embeddings <= original || original < 2 {
        return 1.0;
    }
    let factor = max_position_embeddings as f64 / original as f64;
    (1.0 + factor.ln() / (original as f64).ln()).sqrt() as f32
}

fn hf_rope_scaling(v: Option<&Value>, config: &Value) -> Result<Option<RopeScaling>, ConfigError> {
    let Some(v @ Value::Object(_)) = v else { return Ok(None) };
    let f = Fields(v);
    let kind = match f.opt_str("rope_type")? {
        Some(t) => t,
        None => f.opt_str("type")?.ok_or_else(|| missing("rope_scaling.rope_type"))?,
    };
    let positive = |name: &str| -> Result<f32, ConfigError> {
        let value = f.f32(name).map_err(|e| prefix(e, "rope_scaling."))?;
        match value.is_finite() && value > 0.0 {
            true => Ok(value),
            false => Err(out_of_range(
                &format!("rope_scaling.{name}"),
                format!("{value} is not a positive number"),
            )),
        }
    };
    match kind {
        "default" => Ok(None),
        "linear" => Ok(Some(RopeScaling::Linear { factor: positive("factor")? })),
        "llama3" => {
            let (low_freq_factor, high_freq_factor) =
                (positive("low_freq_factor")?, positive("high_freq_factor")?);
            if high_freq_factor <= low_freq_factor {
                let reason = format!("{high_freq_factor} is not above low_freq_factor {low_freq_factor}");
                return Err(out_of_range("rope_scaling.high_freq_factor", reason));
            }
            let original =
                f.usize("original_max_position_embeddings").map_err(|e| prefix(e, "rope_scaling."))?;
            if original == 0 {
                return Err(out_of_range(
                    "rope_scaling.original_max_position_embeddings",
                    "0 is not positive".into(),
                ));
            }
            Ok(Some(RopeScaling::Llama3 {
                factor: positive("factor")?,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: original,
            }))
        }
        "longrope" => {
            let top = Fields(config);
            let factors = |name: &str| -> Result<Vec<f32>, ConfigError> {
                let values = f
                    .get(name)
                    .and_then(Value::as_array)
                    .ok_or_else(|| missing(&format!("rope_scaling.{name}")))?;
                values
                    .iter()
                    .map(|v| v.as_f64().map(|x| x as f32).ok_or_else(|| Fields::invalid(name, v, "a number")))
                    .collect()
            };
            let original = match f.opt_usize("original_max_position_embeddings")? {
                Some(original) => original,
                None => top.usize("original_max_position_embeddings")?,
            };
            let attention_factor = match f.opt_f32("attention_factor")? {
                Some(factor) => factor,
                None => longrope_attention_factor(top.usize("max_position_embeddings")?, original),
            };
            Ok(Some(RopeScaling::LongRope {
                short_factor: factors("short_factor")?,
                long_factor: factors("long_factor")?,
                original_max_position_embeddings: original,
                attention_factor,
            }))
        }
        "yarn" => {
            if f.opt_f32("mscale")?.is_some() || f.opt_f32("mscale_all_dim")?.is_some() {
                return Err(ConfigError::Unsupported {
                    field: "rope_scaling.mscale".into(),
                    reason: "YaRN with DeepSeek's mscale".into(),
                });
            }
            let original = match f.opt_usize("original_max_position_embeddings")? {
                Some(original) => original,
                None => Fields(config).usize("max_position_embeddings")?,
            };
            yarn(
                positive("factor")?,
                original,
                f.opt_f32("beta_fast")?,
                f.opt_f32("beta_slow")?,
                f.opt_bool("truncate")?.unwrap_or(true),
                f.opt_f32("attention_factor")?,
            )
            .map(Some)
        }
        other => Err(ConfigError::InvalidField {
            field: "rope_scaling.rope_type".into(),
            reason: format!("unsupported rope scaling {other:?}"),
        }),
    }
}

fn prefix(e: ConfigError, p: &str) -> ConfigError {
    match e {
        ConfigError::MissingField(f) => ConfigError::MissingField(format!("{p}{f}")),
        ConfigError::InvalidField { field, reason } => {
            ConfigError::InvalidField { field: format!("{p}{field}"), reason }
        }
        other => other,
    }
}

/// Typed access to a JSON object's fields, with errors that name the field.
struct Fields<'a>(&'a Value);

impl Fields<'_> {
    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    fn invalid(name: &str, v: &Value, expected: &str) -> ConfigError {
        ConfigError::InvalidField { field: name.into(), reason: format!("{v} is not {expected}") }
    }

    fn opt_usize(&self, name: &str) -> Result<Option<usize>, ConfigError> {
        self.get(name)
            .map(|v| {
                v.as_u64().map(|n| n as usize).ok_or_else(|| Self::invalid(name, v, "a non-negative integer"))
            })
            .transpose()
    }

    fn usize(&self, name: &str) -> Result<usize, ConfigError> {
        self.opt_usize(name)?.ok_or_else(|| missing(name))
    }

    fn opt_f32(&self, name: &str) -> Result<Option<f32>, ConfigError> {
        self.get(name)
            .map(|v| v.as_f64().map(|n| n as f32).ok_or_else(|| Self::invalid(name, v, "a number")))
            .transpose()
    }

    fn f32(&self, name: &str) -> Result<f32, ConfigError> {
        self.opt_f32(name)?.ok_or_else(|| missing(name))
    }

    fn opt_bool(&self, name: &str) -> Result<Option<bool>, ConfigError> {
        self.get(name).map(|v| v.as_bool().ok_or_else(|| Self::invalid(name, v, "a bool"))).transpose()
    }

    fn opt_str(&self, name: &str) -> Result<Option<&str>, ConfigError> {
        self.get(name).map(|v| v.as_str().ok_or_else(|| Self::invalid(name, v, "a string"))).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rope_rows_move_second_halves_to_odd_slots_whole_rows_at_a_time() {
        let rows: Vec<u8> = (0..8).collect();
        assert_eq!(interleave_rope_rows(&rows, 2, 4).unwrap(), [0, 2, 1, 3, 4, 6, 5, 7]);
        let two_wide: Vec<u8> = (0..12).collect();
        assert_eq!(interleave_rope_rows(&two_wide, 1, 6).unwrap(), [0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11]);
        assert_eq!(interleave_rope_rows(&rows, 3, 2), None);
        assert_eq!(interleave_rope_rows(&two_wide, 4, 3), None);
    }

    fn base() -> Value {
        json!({
            "model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 256,
            "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2
        })
    }

    #[test]
    fn hf_config_reads_every_field() {
        let c = ModelConfig::from_hf_json(&base(), Some(&json!({"eos_token_id": [2, 3]}))).unwrap();
        assert_eq!((c.head_dim, c.num_key_value_heads, c.gqa_group_size()), (16, 2, 2));
        assert_eq!(c.eos_token_ids, vec![2, 3]);
        assert_eq!(c.rope_variant, RopeVariant::HalfSplit);
        assert!(c.tie_word_embeddings && !c.attention_bias);
    }

    #[test]
    fn each_missing_required_field_is_named() {
        for field in [
            "model_type",
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "rms_norm_eps",
        ] {
            let mut v = base();
            v.as_object_mut().unwrap().remove(field);
            match ModelConfig::from_hf_json(&v, None) {
                Err(ConfigError::MissingField(f)) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn llama3_scaling_is_read() {
        let mut v = base();
        v["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64});
        let c = ModelConfig::from_hf_json(&v, None).unwrap();
        let expected = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 64,
        };
        assert_eq!(c.rope_scaling, Some(expected));
    }

    #[test]
    fn rope_scalings_that_would_divide_by_zero_are_rejected() {
        let llama3 = |low: f64, high: f64, factor: f64, original: u64| {
            json!({"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                "high_freq_factor": high, "original_max_position_embeddings": original})
        };
        for (scaling, bad_field) in [
            (llama3(4.0, 4.0, 8.0, 64), "rope_scaling.high_freq_factor"),
            (llama3(4.0, 1.0, 8.0, 64), "rope_scaling.high_freq_factor"),
            (llama3(0.0, 4.0, 8.0, 64), "rope_scaling.low_freq_factor"),
            (llama3(1.0, 4.0, 0.0, 64), "rope_scaling.factor"),
            (llama3(1.0, 4.0, 8.0, 0), "rope_scaling.original_max_position_embeddings"),
            (json!({"rope_type": "linear", "factor": -2.0}), "rope_scaling.factor"),
        ] {
            let mut v = base();
            v["rope_scaling"] = scaling.clone();
            match ModelConfig::from_hf_json(&v, None) {
                Err(ConfigError::InvalidField { field, .. }) => assert_eq!(field, bad_field, "{scaling}"),
                other => panic!("{scaling}: {other:?}"),
            }
        }
    }

    #[test]
    fn quantized_checkpoints_other_than_gpt_oss_mxfp4_are_refused_by_name() {
        for method in ["gptq", "awq", "fp8", "mxfp4"] {
            let mut v = base();
            v["quantization_config"] = json!({"quant_method": method, "bits": 4});
            assert!(
                matches!(ModelConfig::from_hf_json(&v, None), Err(ConfigError::Unsupported { field, reason })
                    if field == "quantization_config" && reason.starts_with(method)),
                "{method} on llama"
            );
        }
        let mut v = base();
        v["quantization_config"] = Value::Null;
        assert!(ModelConfig::from_hf_json(&v, None).is_ok());
    }

    #[test]
    fn bad_head_counts_are_rejected() {
        let mut v = base();
        v["num_key_value_heads"] = json!(3);
        assert!(
            matches!(ModelConfig::from_hf_json(&v, None), Err(ConfigError::InvalidField { field, .. }) if field == "num_key_value_heads")
        );
    }

    #[test]
    fn transformers_5_rope_parameters_are_read() {
        let mut v = base();
        v.as_object_mut().unwrap().remove("rope_theta");
        v["rope_parameters"] = json!({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64});
        let c = ModelConfig::from_hf_json(&v, None).unwrap();
        assert_eq!(c.rope_theta, 500000.0);
        assert!(matches!(c.rope_scaling, Some(RopeScaling::Llama3 { factor: 8.0, .. })));
        v["rope_parameters"] = json!({"rope_type": "default", "rope_theta": 1e6});
        let c = ModelConfig::from_hf_json(&v, None).unwrap();
        assert_eq!((c.rope_theta, c.rope_scaling), (1e6, None));
        v["rope_parameters"] = json!({"full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}});
        let c = ModelConfig::from_hf_json(&v, None).unwrap();
        assert_eq!((c.rope_theta, c.local_rope_theta, c.rope_scaling), (1e6, Some(1e4), None));
        v["rope_parameters"] = json!({"chunked_attention": {"rope_theta": 1e6}});
        assert!(
            matches!(ModelConfig::from_hf_json(&v, None), Err(ConfigError::Unsupported { field, .. }) if field == "rope_parameters")
        );
    }

    #[test]
    fn fields_that_change_the_math_are_refused_not_ignored() {
        let refused = [
            ("layer_types", json!(["chunked_attention", "full_attention"])),
            ("hidden_act", json!("relu")),
            ("mlp_bias", json!(true)),
            ("partial_rotary_factor", json!(0.5)),
        ];
        for (field, value) in refused {
            let mut v = base();
            v[field] = value;
            match ModelConfig::from_hf_json(&v, None) {
                Err(ConfigError::Unsupported { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        let mut v = base();
        v["sliding_window"] = json!(4096);
        v["use_sliding_window"] = json!(false);
        v["layer_types"] = json!(["full_attention", "full_attention"]);
        v["hidden_act"] = json!("silu");
        v["final_logit_softcapping"] = Value::Null;
        assert_eq!(ModelConfig::from_hf_json(&v, None).unwrap().layer_windows, vec![None, None]);
    }

    #[test]
    fn sliding_windows_are_read_per_layer() {
        let mut v = base();
        v["sliding_window"] = json!(16);
        assert_eq!(ModelConfig::from_hf_json(&v, None).unwrap().layer_windows, vec![Some(16), Some(16)]);
        v["layer_types"] = json!(["sliding_attention", "full_attention"]);
        assert_eq!(ModelConfig::from_hf_json(&v, None).unwrap().layer_windows, vec![Some(16), None]);
        v["use_sliding_window"] = json!(false);
        v.as_object_mut().unwrap().remove("layer_types");
        assert_eq!(ModelConfig::from_hf_json(&v, None).unwrap().layer_windows, vec![None, None]);
    }

    #[test]
    fn qwen_moe_layers_follow_the_config_and_a_model_without_expert_layers_is_dense() {
        let mut v = base();
        v["model_type"] = json!("qwen3_moe");
        v["num_hidden_layers"] = json!(4);
        let experts = json!({"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32});
        v.as_object_mut().unwrap().extend(experts.as_object().unwrap().clone());
        v["decoder_sparse_step"] = json!(2);
        let c = ModelConfig::from_hf_json(&v, None).unwrap();
        assert_eq!(c.moe_layers, [false, true, false, true]);
        assert_eq!((c.layer_moe(0), c.layer_moe(1).map(|m| m.expert_intermediate_size)), (None, Some(32)));
        assert_eq!(c.intermediate_size, 96, "the dense layers' width");
        v["mlp_only_layers"] = json!([1, 3]);
        let c = ModelConfig::from_hf_json(&v, None).unwrap();
        assert_eq!((c.moe, c.moe_layers), (None, vec![false; 4]), "no expert layer: a dense model");
    }

    /// DeepSeek V2/V3's mixtures (shared experts without a gate, grouped routing) sit behind
    /// its multi-head latent attention, which pagoda does not run: the architecture is refused
    /// by name, from an HF config as from a GGUF file (`deepseek2`).
    #[test]
    fn deepseek_is_refused_by_its_architecture() {
        for arch in ["deepseek_v2", "deepseek_v3"] {
            let mut v = base();
            v["model_type"] = json!(arch);
            v["n_shared_experts"] = json!(1);
            v["kv_lora_rank"] = json!(512);
            match ModelConfig::from_hf_json(&v, None) {
                Err(e @ ConfigError::UnsupportedArchitecture(_)) => {
                    assert!(matches!(&e, ConfigError::UnsupportedArchitecture(a) if a == arch));
                    assert!(e.to_string().contains(arch), "{e}");
                }
                other => panic!("{arch}: {other:?}"),
            }
        }
        let mut w = crate::model::gguf::GgufWriter::new();
        w.metadata("general.architecture", crate::model::gguf::MetadataValue::String("deepseek2".into()));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deepseek2.gguf");
        w.write(&path).unwrap();
        let gguf = GgufFile::open(&path).unwrap();
        assert!(
            matches!(ModelConfig::from_gguf(&gguf), Err(ConfigError::UnsupportedArchitecture(a)) if a == "deepseek2")
        );
    }

    #[test]
    fn an_absurd_layer_count_is_refused_before_anything_is_allocated() {
        let mut v = base();
        v["num_hidden_layers"] = json!(1u64 << 40);
        assert!(
            matches!(ModelConfig::from_hf_json(&v, None), Err(ConfigError::InvalidField { field, .. }) if field == "num_hidden_layers")
        );
    }
}
