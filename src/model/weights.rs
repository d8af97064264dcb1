//! The Llama-family weight set, looked up by each format's tensor names and checked
//! against the config's shapes.

use super::architecture::ModelConfig;
use super::gguf::GgufError;
use super::gguf_split::GgufModel;
use super::moe::MoeConfig;
use super::safetensors::{SafetensorsError, SafetensorsFiles};
use super::tensor::TensorView;

/// Why the weight set could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    /// A tensor the model needs is absent.
    #[error("missing tensor {0:?}")]
    MissingTensor(String),
    /// A tensor whose shape disagrees with the config.
    #[error("tensor {name:?} has shape {found:?}, but the config implies {expected:?}")]
    ShapeMismatch {
        /// The tensor.
        name: String,
        /// Shape the config implies (row-major).
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
    /// A GGUF read failure other than a missing tensor.
    #[error(transparent)]
    Gguf(GgufError),
    /// A safetensors read failure other than a missing tensor.
    #[error(transparent)]
    Safetensors(SafetensorsError),
}

impl From<GgufError> for WeightError {
    fn from(e: GgufError) -> Self {
        match e {
            GgufError::MissingTensor(name) => Self::MissingTensor(name),
            other => Self::Gguf(other),
        }
    }
}

impl From<SafetensorsError> for WeightError {
    fn from(e: SafetensorsError) -> Self {
        match e {
            SafetensorsError::MissingTensor(name) => Self::MissingTensor(name),
            other => Self::Safetensors(other),
        }
    }
}

/// Where the weights are stored.
#[derive(Debug)]
pub enum WeightFile {
    /// A GGUF file or the parts of a split one (llama.cpp names: `blk.N.attn_q.weight`, ...).
    Gguf(GgufModel),
    /// HF safetensors (names: `model.layers.N.self_attn.q_proj.weight`, ...).
    Safetensors(SafetensorsFiles),
}

/// Which weight of a decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LayerTensor {
    AttnNorm,
    Q,
    K,
    V,
    QBias,
    KBias,
    VBias,
    QNorm,
    KNorm,
    O,
    OBias,
    Sinks,
    Qkv,
    GateUp,
    FfnNorm,
    PostAttnNorm,
    PostFfnNorm,
    Gate,
    Up,
    Down,
}

impl WeightFile {
    /// The named tensor in this file's own naming.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, WeightError> {
        Ok(match self {
            Self::Gguf(g) => g.tensor(name)?,
            Self::Safetensors(s) => s.tensor(name)?,
        })
    }

    /// Every tensor of the file(s).
    pub fn tensors(&self) -> Box<dyn Iterator<Item = TensorView<'_>> + '_> {
        match self {
            Self::Gguf(g) => Box::new(g.tensors()),
            Self::Safetensors(s) => Box::new(s.tensors()),
        }
    }

    fn has_tensor(&self, name: &str) -> bool {
        match self {
            Self::Gguf(g) => g.has_tensor(name),
            Self::Safetensors(s) => s.has_tensor(name),
        }
    }

    fn embed_name(&self) -> &'static str {
        match self {
            Self::Gguf(_) => "token_embd.weight",
            Self::Safetensors(_) => "model.embed_tokens.weight",
        }
    }

    fn norm_name(&self) -> &'static str {
        match self {
            Self::Gguf(_) => "output_norm.weight",
            Self::Safetensors(_) => "model.norm.weight",
        }
    }

    fn lm_head_name(&self) -> &'static str {
        match self {
            Self::Gguf(_) => "output.weight",
            Self::Safetensors(_) => "lm_head.weight",
        }
    }

    fn layer_name(&self, layer: usize, t: LayerTensor, sandwich: bool) -> String {
        use LayerTensor::*;
        match self {
            Self::Gguf(_) => {
                let s = match t {
                    AttnNorm => "attn_norm.weight",
                    Q => "attn_q.weight",
                    K => "attn_k.weight",
                    V => "attn_v.weight",
                    QBias => "attn_q.bias",
                    KBias => "attn_k.bias",
                    VBias => "attn_v.bias",
                    QNorm => "attn_q_norm.weight",
                    KNorm => "attn_k_norm.weight",
                    O => "attn_output.weight",
                    OBias => "attn_output.bias",
                    Sinks => "attn_sinks.weight",
                    Qkv => "attn_qkv.weight",
                    // llama.cpp keeps Phi-3's fused gate/up under the up projection's name.
                    GateUp => "ffn_up.weight",
                    FfnNorm => "ffn_norm.weight",
                    PostAttnNorm => "post_attention_norm.weight",
                    PostFfnNorm => "post_ffw_norm.weight",
                    Gate => "ffn_gate.weight",
                    Up => "ffn_up.weight",
                    Down => "ffn_down.weight",
                };
                format!("blk.{layer}.{s}")
            }
            Self::Safetensors(_) => {
                let s = match t {
                    AttnNorm => "input_layernorm.weight",
                    Q => "self_attn.q_proj.weight",
                    K => "self_attn.k_proj.weight",
                    V => "self_attn.v_proj.weight",
                    QBias => "self_attn.q_proj.bias",
                    KBias => "self_attn.k_proj.bias",
                    VBias => "self_attn.v_proj.bias",
                    QNorm => "self_attn.q_norm.weight",
                    KNorm => "self_attn.k_norm.weight",
                    O => "self_attn.o_proj.weight",
                    OBias => "self_attn.o_proj.bias",
                    Sinks => "self_attn.sinks",
                    // Gemma's sandwich: `post_attention_layernorm` follows attention and
                    // `pre_feedforward_layernorm` is the MLP's input norm.
                    Qkv => "self_attn.qkv_proj.weight",
                    GateUp => "mlp.gate_up_proj.weight",
                    FfnNorm if sandwich => "pre_feedforward_layernorm.weight",
                    FfnNorm => "post_attention_layernorm.weight",
                    PostAttnNorm => "post_attention_layernorm.weight",
                    PostFfnNorm => "post_feedforward_layernorm.weight",
                    Gate => "mlp.gate_proj.weight",
                    Up => "mlp.up_proj.weight",
                    Down => "mlp.down_proj.weight",
                };
                format!("model.layers.{layer}.{s}")
            }
        }
    }

    /// A mixture-of-experts layer's router and experts: GGUF's stacked `ffn_{gate,up,down}_exps`
    /// cut per expert; HF's per-expert tensors (Qwen3-MoE's `mlp.experts.E.gate_proj`,
    /// Mixtral's `block_sparse_moe.experts.E.w1`), or transformers 5's stacked
    /// `mlp.experts.gate_up_proj` and `mlp.experts.down_proj`; and the shared expert with its
    /// gate where the config has one.
    fn experts(
        &self,
        l: usize,
        config: &ModelConfig,
        moe: &MoeConfig,
    ) -> Result<MlpWeights<'_>, WeightError> {
        let (h, e, ff) = (config.hidden_size, moe.num_experts, moe.expert_intermediate_size);
        let mixtral = config.architecture == "mixtral";
        // gpt-oss: biases on the router and on every expert projection
        let biased = config.swiglu_limit.is_some();
        let shared = self.shared_expert(l, config, moe)?;
        let (router, experts) = match self {
            Self::Gguf(_) => {
                let p = format!("blk.{l}.");
                let router = self.checked(&format!("{p}ffn_gate_inp.weight"), &[e, h])?;
                let gate = self.checked(&format!("{p}ffn_gate_exps.weight"), &[e, ff, h])?;
                let up = self.checked(&format!("{p}ffn_up_exps.weight"), &[e, ff, h])?;
                let down_name = format!("{p}ffn_down_exps.weight");
                let down = self.checked(&down_name, &[e, h, ff])?;
                let biases = match biased {
                    true => Some([
                        self.checked(&format!("{p}ffn_gate_exps.bias"), &[e, ff])?,
                        self.checked(&format!("{p}ffn_up_exps.bias"), &[e, ff])?,
                        self.checked(&format!("{p}ffn_down_exps.bias"), &[e, h])?,
                    ]),
                    false => None,
                };
                let experts = (0..e)
                    .map(|x| {
                        Ok(ExpertWeights {
                            gate_proj: expert(&gate, &format!("{p}ffn_gate_exps.weight"), x)?,
                            up_proj: expert(&up, &format!("{p}ffn_up_exps.weight"), x)?,
                            down_proj: expert(&down, &down_name, x)?,
                            biases: expert_biases(biases.as_ref(), &format!("{p}ffn_*_exps.bias"), x)?,
                        })
                    })
                    .collect::<Result<Vec<_>, WeightError>>()?;
                let router_bias =
                    biased.then(|| self.checked(&format!("{p}ffn_gate_inp.bias"), &[e])).transpose()?;
                return Ok(MlpWeights::Experts { router, router_bias, experts, shared });
            }
            Self::Safetensors(_) if biased => {
                // gpt-oss: the experts split by gpt_oss::split_experts at load
                let p = format!("model.layers.{l}.mlp.");
                let router = self.checked(&format!("{p}router.weight"), &[e, h])?;
                let router_bias = Some(self.checked(&format!("{p}router.bias"), &[e])?);
                let name = |part: &str| expert_name(l, part);
                let gate = self.checked(&name("gate_proj.weight"), &[e, ff, h])?;
                let up = self.checked(&name("up_proj.weight"), &[e, ff, h])?;
                let down = self.checked(&name("down_proj.weight"), &[e, h, ff])?;
                let biases = [
                    self.checked(&name("gate_proj.bias"), &[e, ff])?,
                    self.checked(&name("up_proj.bias"), &[e, ff])?,
                    self.checked(&name("down_proj_bias"), &[e, h])?,
                ];
                let experts = (0..e)
                    .map(|x| {
                        Ok(ExpertWeights {
                            gate_proj: expert(&gate, &name("gate_proj.weight"), x)?,
                            up_proj: expert(&up, &name("up_proj.weight"), x)?,
                            down_proj: expert(&down, &name("down_proj.weight"), x)?,
                            biases: expert_biases(Some(&biases), &name("*_proj.bias"), x)?,
                        })
                    })
                    .collect::<Result<Vec<_>, WeightError>>()?;
                return Ok(MlpWeights::Experts { router, router_bias, experts, shared });
            }
            Self::Safetensors(_) if mixtral => {
                let p = format!("model.layers.{l}.block_sparse_moe.");
                let router = self.checked(&format!("{p}gate.weight"), &[e, h])?;
                let experts = (0..e)
                    .map(|x| {
                        Ok(ExpertWeights {
                            gate_proj: self.checked(&format!("{p}experts.{x}.w1.weight"), &[ff, h])?,
                            up_proj: self.checked(&format!("{p}experts.{x}.w3.weight"), &[ff, h])?,
                            down_proj: self.checked(&format!("{p}experts.{x}.w2.weight"), &[h, ff])?,
                            biases: None,
                        })
                    })
                    .collect::<Result<Vec<_>, WeightError>>()?;
                (router, experts)
            }
            Self::Safetensors(_) => {
                let p = format!("model.layers.{l}.mlp.");
                let router = self.checked(&format!("{p}gate.weight"), &[e, h])?;
                let stacked = format!("{p}experts.gate_up_proj");
                let experts = if self.has_tensor(&stacked) {
                    let gate_up = self.checked(&stacked, &[e, 2 * ff, h])?;
                    let down_name = format!("{p}experts.down_proj");
                    let down = self.checked(&down_name, &[e, h, ff])?;
                    (0..e)
                        .map(|x| {
                            let both = expert(&gate_up, &stacked, x)?;
                            Ok(ExpertWeights {
                                gate_proj: cut(&both, &stacked, 0, ff)?,
                                up_proj: cut(&both, &stacked, ff, ff)?,
                                down_proj: expert(&down, &down_name, x)?,
                                biases: None,
                            })
                        })
                        .collect::<Result<Vec<_>, WeightError>>()?
                } else {
                    (0..e)
                        .map(|x| {
                            let get = |w: &str, shape: &[usize]| {
                                self.checked(&format!("{p}experts.{x}.{w}.weight"), shape)
                            };
                            Ok(ExpertWeights {
                                gate_proj: get("gate_proj", &[ff, h])?,
                                up_proj: get("up_proj", &[ff, h])?,
                                down_proj: get("down_proj", &[h, ff])?,
                                biases: None,
                            })
                        })
                        .collect::<Result<Vec<_>, WeightError>>()?
                };
                (router, experts)
            }
        };
        Ok(MlpWeights::Experts { router, router_bias: None, experts, shared })
    }

    /// Layer `l`'s shared expert (`[ff, hidden]` gate and up, `[hidden, ff]` down) and its gate
    /// (`[1, hidden]`) when the config has one: GGUF's `ffn_{gate,up,down}_shexp` and
    /// `ffn_gate_inp_shexp`, HF's `mlp.shared_expert.*` and `mlp.shared_expert_gate`.
    fn shared_expert(
        &self,
        l: usize,
        config: &ModelConfig,
        moe: &MoeConfig,
    ) -> Result<Option<SharedExpertWeights<'_>>, WeightError> {
        let Some(ff) = moe.shared_expert_intermediate_size else { return Ok(None) };
        let h = config.hidden_size;
        let name = |gguf: &str, hf: &str| match self {
            Self::Gguf(_) => format!("blk.{l}.{gguf}.weight"),
            Self::Safetensors(_) => format!("model.layers.{l}.mlp.{hf}.weight"),
        };
        Ok(Some(SharedExpertWeights {
            mlp: ExpertWeights {
                gate_proj: self.checked(&name("ffn_gate_shexp", "shared_expert.gate_proj"), &[ff, h])?,
                up_proj: self.checked(&name("ffn_up_shexp", "shared_expert.up_proj"), &[ff, h])?,
                down_proj: self.checked(&name("ffn_down_shexp", "shared_expert.down_proj"), &[h, ff])?,
                biases: None,
            },
            gate: self.checked(&name("ffn_gate_inp_shexp", "shared_expert_gate"), &[1, h])?,
        }))
    }

    fn checked(&self, name: &str, expected: &[usize]) -> Result<TensorView<'_>, WeightError> {
        of_shape(name, self.tensor(name)?, expected)
    }
}

/// `t` (the tensor `name`) when its shape is `expected`, else a shape mismatch naming it.
pub fn of_shape<'a>(
    name: &str,
    t: TensorView<'a>,
    expected: &[usize],
) -> Result<TensorView<'a>, WeightError> {
    if *t.shape != *expected {
        return Err(WeightError::ShapeMismatch {
            name: name.to_owned(),
            expected: expected.to_vec(),
            found: t.shape.to_vec(),
        });
    }
    Ok(t)
}

/// Rows `first..first + rows` of the fused matrix `name` (see [`TensorView::rows`]).
fn cut<'a>(
    fused: &TensorView<'a>,
    name: &str,
    first: usize,
    rows: usize,
) -> Result<TensorView<'a>, WeightError> {
    fused.rows(first, rows).ok_or_else(|| WeightError::ShapeMismatch {
        name: name.to_owned(),
        expected: vec![first + rows],
        found: fused.shape.to_vec(),
    })
}

/// Expert `x`'s gate, up and down biases of stacked `[experts, n]` biases.
fn expert_biases<'a>(
    stacked: Option<&[TensorView<'a>; 3]>,
    name: &str,
    x: usize,
) -> Result<Option<[TensorView<'a>; 3]>, WeightError> {
    let Some([g, u, d]) = stacked else { return Ok(None) };
    Ok(Some([expert(g, name, x)?, expert(u, name, x)?, expert(d, name, x)?]))
}

/// Expert `x` of a stacked `[experts, rows, cols]` tensor, as a `[rows, cols]` matrix.
fn expert<'a>(stacked: &TensorView<'a>, name: &str, x: usize) -> Result<TensorView<'a>, WeightError> {
    let one = cut(stacked, name, x, 1)?;
    Ok(TensorView {
        dtype: one.dtype,
        shape: std::borrow::Cow::Owned(one.shape[1..].to_vec()),
        data: one.data,
    })
}

/// The weights of one decoder layer. Matrices are `[out_features, in_features]`.
#[derive(Debug, Clone)]
pub struct LayerWeights<'a> {
    /// RMSNorm before attention, `[hidden]`.
    pub attn_norm: TensorView<'a>,
    /// Query projection, `[heads * head_dim, hidden]`.
    pub q_proj: TensorView<'a>,
    /// Key projection, `[kv_heads * head_dim, hidden]`.
    pub k_proj: TensorView<'a>,
    /// Value projection, `[kv_heads * head_dim, hidden]`.
    pub v_proj: TensorView<'a>,
    /// Q/K/V biases, when the config says so.
    pub qkv_bias: Option<[TensorView<'a>; 3]>,
    /// Per-head RMSNorm weights of the queries and keys before RoPE (Qwen3), `[head_dim]` each.
    pub qk_norm: Option<[TensorView<'a>; 2]>,
    /// Attention output projection, `[hidden, heads * head_dim]`.
    pub o_proj: TensorView<'a>,
    /// Attention output projection's bias (gpt-oss), `[hidden]`.
    pub o_bias: Option<TensorView<'a>>,
    /// Each query head's attention sink logit (gpt-oss), `[heads]`.
    pub sinks: Option<TensorView<'a>>,
    /// RMSNorm before the feed-forward, `[hidden]`.
    pub ffn_norm: TensorView<'a>,
    /// RMSNorms after attention and after the feed-forward, before each residual add (Gemma's
    /// sandwich), `[hidden]` each.
    pub post_norms: Option<[TensorView<'a>; 2]>,
    /// The feed-forward: one gated MLP, or a mixture of experts.
    pub mlp: MlpWeights<'a>,
}

/// A layer's feed-forward weights.
#[derive(Debug, Clone)]
pub enum MlpWeights<'a> {
    /// One gated MLP.
    Dense(ExpertWeights<'a>),
    /// A router, `[experts, hidden]`, and the experts' gated MLPs in expert order.
    Experts {
        /// The router's matrix.
        router: TensorView<'a>,
        /// The router's bias, `[experts]` (gpt-oss).
        router_bias: Option<TensorView<'a>>,
        /// Each expert's MLP.
        experts: Vec<ExpertWeights<'a>>,
        /// The shared expert every token goes through (Qwen2-MoE).
        shared: Option<SharedExpertWeights<'a>>,
    },
}

/// A shared expert: a gated MLP every token goes through beside its routed experts, its output
/// scaled by `sigmoid(gate · x)`.
#[derive(Debug, Clone)]
pub struct SharedExpertWeights<'a> {
    /// The MLP.
    pub mlp: ExpertWeights<'a>,
    /// Its gate, `[1, hidden]`.
    pub gate: TensorView<'a>,
}

/// One gated MLP (a dense layer's, or one expert's).
#[derive(Debug, Clone)]
pub struct ExpertWeights<'a> {
    /// SwiGLU gate, `[intermediate, hidden]`.
    pub gate_proj: TensorView<'a>,
    /// SwiGLU up, `[intermediate, hidden]`.
    pub up_proj: TensorView<'a>,
    /// SwiGLU down, `[hidden, intermediate]`.
    pub down_proj: TensorView<'a>,
    /// The gate's, up's and down's biases (gpt-oss's experts), `[intermediate]`,
    /// `[intermediate]`, `[hidden]`.
    pub biases: Option<[TensorView<'a>; 3]>,
}

impl<'a> LayerWeights<'a> {
    /// The layer's one gated MLP; `None` for a mixture of experts.
    pub fn dense_mlp(&self) -> Option<&ExpertWeights<'a>> {
        match &self.mlp {
            MlpWeights::Dense(mlp) => Some(mlp),
            MlpWeights::Experts { .. } => None,
        }
    }
}

/// Every weight of a Llama-family model, shape-checked against its config.
#[derive(Debug, Clone)]
pub struct LlamaWeights<'a> {
    /// Token embedding, `[vocab, hidden]`.
    pub embed_tokens: TensorView<'a>,
    /// Decoder layers in order.
    pub layers: Vec<LayerWeights<'a>>,
    /// Final RMSNorm, `[hidden]`.
    pub norm: TensorView<'a>,
    /// LM head, `[vocab, hidden]`; the embedding itself when tied.
    pub lm_head: TensorView<'a>,
}

impl<'a> LlamaWeights<'a> {
    /// Look up and shape-check every weight `config` needs in `file`.
    pub fn from_file(file: &'a WeightFile, config: &ModelConfig) -> Result<Self, WeightError> {
        use LayerTensor::*;
        let (h, q, kv, ff, vocab) = (
            config.hidden_size,
            config.q_size(),
            config.kv_size(),
            config.intermediate_size,
            config.vocab_size,
        );
        let embed_tokens = file.checked(file.embed_name(), &[vocab, h])?;
        let layers = (0..config.num_hidden_layers)
            .map(|l| {
                let get =
                    |t, shape: &[usize]| file.checked(&file.layer_name(l, t, config.sandwich_norms), shape);
                let [q_proj, k_proj, v_proj] = if config.fused_projections {
                    let qkv = get(Qkv, &[q + 2 * kv, h])?;
                    let name = file.layer_name(l, Qkv, false);
                    [cut(&qkv, &name, 0, q)?, cut(&qkv, &name, q, kv)?, cut(&qkv, &name, q + kv, kv)?]
                } else {
                    [get(Q, &[q, h])?, get(K, &[kv, h])?, get(V, &[kv, h])?]
                };
                let mlp = match config.layer_moe(l) {
                    Some(moe) => file.experts(l, config, moe)?,
                    None => {
                        let [gate_proj, up_proj] = if config.fused_projections {
                            let gate_up = get(GateUp, &[2 * ff, h])?;
                            let name = file.layer_name(l, GateUp, false);
                            [cut(&gate_up, &name, 0, ff)?, cut(&gate_up, &name, ff, ff)?]
                        } else {
                            [get(Gate, &[ff, h])?, get(Up, &[ff, h])?]
                        };
                        MlpWeights::Dense(ExpertWeights {
                            gate_proj,
                            up_proj,
                            down_proj: get(Down, &[h, ff])?,
                            biases: None,
                        })
                    }
                };
                Ok(LayerWeights {
                    attn_norm: get(AttnNorm, &[h])?,
                    q_proj,
                    k_proj,
                    v_proj,
                    qkv_bias: if config.attention_bias {
                        Some([get(QBias, &[q])?, get(KBias, &[kv])?, get(VBias, &[kv])?])
                    } else {
                        None
                    },
                    qk_norm: if config.qk_norm {
                        Some([get(QNorm, &[config.head_dim])?, get(KNorm, &[config.head_dim])?])
                    } else {
                        None
                    },
                    o_proj: get(O, &[h, q])?,
                    o_bias: if config.o_bias { Some(get(OBias, &[h])?) } else { None },
                    sinks: if config.attention_sinks {
                        Some(get(Sinks, &[config.num_attention_heads])?)
                    } else {
                        None
                    },
                    // llama.cpp's gpt-oss names the MLP's input norm after HF's
                    // `post_attention_layernorm`
                    ffn_norm: if config.architecture == "gpt-oss" {
                        file.checked(&format!("blk.{l}.post_attention_norm.weight"), &[h])?
                    } else {
                        get(FfnNorm, &[h])?
                    },
                    post_norms: if config.sandwich_norms {
                        Some([get(PostAttnNorm, &[h])?, get(PostFfnNorm, &[h])?])
                    } else {
                        None
                    },
                    mlp,
                })
            })
            .collect::<Result<Vec<_>, WeightError>>()?;
        let norm = file.checked(file.norm_name(), &[h])?;
        let lm_head = if config.tie_word_embeddings && !file.has_tensor(file.lm_head_name()) {
            embed_tokens.clone()
        } else {
            file.checked(file.lm_head_name(), &[vocab, h])?
        };
        Ok(Self { embed_tokens, layers, norm, lm_head })
    }
}

/// The names gpt-oss's experts get once `gpt_oss::split_experts` has cut them, for layer `l`:
/// `mlp.experts.{gate,up,down}_proj.weight` (`[experts, out, in]`) and
/// `mlp.experts.{gate,up}_proj.bias` (`[experts, ff]`).
pub fn expert_name(l: usize, part: &str) -> String {
    format!("model.layers.{l}.mlp.experts.{part}")
}
