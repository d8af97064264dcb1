//! The Llama-family forward pass on the GPU: one step over a flattened varlen batch as a
//! sequence of kernel calls (embedding, per layer RMSNorm, Q/K/V (+ bias), RoPE, paged KV write,
//! paged GQA attention, output projection, SwiGLU, residuals; then the final norm and the
//! LM head on only the rows that need logits, and top-k/argmax on the GPU).

use indicatif::{ProgressBar, ProgressStyle};

use super::config::{ModelConfig, RopeScaling, RopeVariant};
use super::files::ModelFiles;
use super::tensor::TensorView;
use super::weights::{LlamaWeights, WeightError, WeightFile};
use crate::gpu::{
    AttentionBatch, Elem, GpuContext, GpuError, KvCache, Llama3RopeScaling, RopeMode, Tensor, Weight,
    llama3_freq_factors, rope_inv_freq,
};

/// Why the model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum LlamaError {
    /// The weights do not fit the config.
    #[error(transparent)]
    Weights(#[from] WeightError),
    /// The GPU refused an upload or a step.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// A model feature the forward pass does not implement.
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// A batch that does not fit the workspace or is inconsistent.
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
}

/// One decoder layer on the GPU.
#[derive(Debug)]
struct GpuLayer {
    attn_norm: Tensor,
    q_proj: Weight,
    k_proj: Weight,
    v_proj: Weight,
    qkv_bias: Option<[Tensor; 3]>,
    o_proj: Weight,
    ffn_norm: Tensor,
    gate_proj: Weight,
    up_proj: Weight,
    down_proj: Weight,
}

/// A Llama-family model resident on the GPU, weights as stored (quantized stays quantized).
#[derive(Debug)]
pub struct LlamaModel {
    config: ModelConfig,
    rope_mode: RopeMode,
    embed_tokens: Weight,
    layers: Vec<GpuLayer>,
    norm: Tensor,
    lm_head: Weight,
    inv_freq: Tensor,
}

impl LlamaModel {
    /// Upload every weight of `files` to `ctx`, with a progress bar on stderr when `progress`.
    pub fn load(ctx: &GpuContext, files: &ModelFiles, progress: bool) -> Result<Self, LlamaError> {
        let config = files.config.clone();
        let weights = files.llama_weights()?;
        let per_layer = if config.attention_bias { 12 } else { 9 };
        let total = weights.layers.len() as u64 * per_layer + 3;
        let bar = if progress { ProgressBar::new(total) } else { ProgressBar::hidden() };
        bar.set_style(
            ProgressStyle::with_template("loading {msg} [{bar:30}] {pos}/{len} tensors")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(files.path.display().to_string());
        let up = |name: &str, t: &TensorView<'_>| -> Result<Weight, LlamaError> {
            let w = upload_matrix(ctx, name, t)?;
            bar.inc(1);
            Ok(w)
        };
        let vec = |t: &TensorView<'_>| -> Result<Tensor, LlamaError> {
            let v = ctx.upload_f32(t.shape, &t.to_f32())?;
            bar.inc(1);
            Ok(v)
        };
        let embed_tokens = up("embed_tokens", &weights.embed_tokens)?;
        let layers = weights
            .layers
            .iter()
            .enumerate()
            .map(|(l, w)| {
                Ok(GpuLayer {
                    attn_norm: vec(&w.attn_norm)?,
                    q_proj: up(&format!("layers.{l}.q_proj"), &w.q_proj)?,
                    k_proj: up(&format!("layers.{l}.k_proj"), &w.k_proj)?,
                    v_proj: up(&format!("layers.{l}.v_proj"), &w.v_proj)?,
                    qkv_bias: match &w.qkv_bias {
                        Some([q, k, v]) => Some([vec(q)?, vec(k)?, vec(v)?]),
                        None => None,
                    },
                    o_proj: up(&format!("layers.{l}.o_proj"), &w.o_proj)?,
                    ffn_norm: vec(&w.ffn_norm)?,
                    gate_proj: up(&format!("layers.{l}.gate_proj"), &w.gate_proj)?,
                    up_proj: up(&format!("layers.{l}.up_proj"), &w.up_proj)?,
                    down_proj: up(&format!("layers.{l}.down_proj"), &w.down_proj)?,
                })
            })
            .collect::<Result<Vec<_>, LlamaError>>()?;
        let norm = vec(&weights.norm)?;
        let lm_head = if is_tied(&weights) {
            bar.inc(1);
            embed_tokens.clone()
        } else {
            up("lm_head", &weights.lm_head)?
        };
        let inv_freq = ctx.upload_f32(&[config.head_dim / 2], &inv_freqs(&config, &files.weights)?)?;
        bar.finish_and_clear();
        let rope_mode = match config.rope_variant {
            RopeVariant::Interleaved => RopeMode::Interleaved,
            RopeVariant::HalfSplit => RopeMode::HalfSplit,
        };
        Ok(Self { config, rope_mode, embed_tokens, layers, norm, lm_head, inv_freq })
    }

    /// The model's architecture.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Run one step over `batch`, writing K/V into `cache`, and return the top `top_k`
    /// logits (at least 1: the argmax) of each logits row, plus the full logits rows when
    /// `full_logits`.
    pub fn forward(
        &self,
        ctx: &GpuContext,
        ws: &Workspace,
        cache: &KvCache,
        batch: &ForwardBatch,
        top_k: usize,
        full_logits: bool,
    ) -> Result<ForwardOutput, LlamaError> {
        let c = &self.config;
        let t = batch.input_ids.len();
        let b = batch.seq_lens.len();
        let r = batch.logits_indices.len();
        ws.check(batch)?;
        let k = top_k.clamp(1, c.vocab_size);
        let view = |x: &Tensor, n: usize| x.rows(n);
        let (ids, positions, slots) =
            (view(&ws.input_ids, t)?, view(&ws.positions, t)?, view(&ws.slot_mapping, t)?);
        ctx.write_u32(&ids, &batch.input_ids)?;
        ctx.write_u32(&positions, &batch.positions)?;
        ctx.write_u32(&slots, &batch.slot_mapping)?;
        let attn = AttentionBatch {
            query_start_loc: view(&ws.query_start_loc, b + 1)?,
            seq_lens: view(&ws.seq_lens, b)?,
            block_table: view(&ws.block_table, b)?,
        };
        ctx.write_u32(&attn.query_start_loc, &batch.query_start_loc)?;
        ctx.write_u32(&attn.seq_lens, &batch.seq_lens)?;
        ctx.write_u32(&attn.block_table, &batch.block_table)?;
        let logits_indices = view(&ws.logits_indices, r)?;
        ctx.write_u32(&logits_indices, &batch.logits_indices)?;

        let x = view(&ws.x, t)?;
        let h = view(&ws.h, t)?;
        let o = view(&ws.o, t)?;
        let (q, kk, v, att) = (view(&ws.q, t)?, view(&ws.k, t)?, view(&ws.v, t)?, view(&ws.att, t)?);
        let (gate, up, act) = (view(&ws.gate, t)?, view(&ws.up, t)?, view(&ws.act, t)?);
        let eps = c.rms_norm_eps;
        let mut step = ctx.step();
        step.embed(&ids, &self.embed_tokens, &x)?;
        for (l, w) in self.layers.iter().enumerate() {
            step.rms_norm(&x, &w.attn_norm, eps, &h)?;
            step.linear(&h, &w.q_proj, &q)?;
            step.linear(&h, &w.k_proj, &kk)?;
            step.linear(&h, &w.v_proj, &v)?;
            if let Some([bq, bk, bv]) = &w.qkv_bias {
                step.add_bias(&q, bq)?;
                step.add_bias(&kk, bk)?;
                step.add_bias(&v, bv)?;
            }
            step.rope(&q, &positions, &self.inv_freq, c.num_attention_heads, self.rope_mode)?;
            step.rope(&kk, &positions, &self.inv_freq, c.num_key_value_heads, self.rope_mode)?;
            step.reshape_and_cache(&kk, &v, &slots, cache, l)?;
            step.paged_attention(&q, cache, l, &attn, c.num_attention_heads, &att)?;
            step.linear(&att, &w.o_proj, &o)?;
            step.add_in_place(&x, &o)?;
            step.rms_norm(&x, &w.ffn_norm, eps, &h)?;
            step.linear(&h, &w.gate_proj, &gate)?;
            step.linear(&h, &w.up_proj, &up)?;
            step.silu_mul(&gate, &up, &act)?;
            step.linear(&act, &w.down_proj, &o)?;
            step.add_in_place(&x, &o)?;
        }
        if r == 0 {
            step.submit()?;
            return Ok(ForwardOutput { k, top_values: Vec::new(), top_ids: Vec::new(), logits: None });
        }
        let (xr, hr, logits) = (view(&ws.x_rows, r)?, view(&ws.h_rows, r)?, view(&ws.logits, r)?);
        step.gather_rows(&x, &logits_indices, &xr)?;
        step.rms_norm(&xr, &self.norm, eps, &hr)?;
        step.linear(&hr, &self.lm_head, &logits)?;
        let top_values = ctx.tensor(Elem::F32, &[r, k])?;
        let top_ids = ctx.tensor(Elem::U32, &[r, k])?;
        step.top_k(&logits, k, &top_values, &top_ids)?;
        let values_id = step.read(&top_values);
        let ids_id = step.read(&top_ids);
        let logits_id = full_logits.then(|| step.read(&logits));
        let mut out = step.submit()?;
        Ok(ForwardOutput {
            k,
            top_values: out.f32s(values_id),
            top_ids: out.u32s(ids_id),
            logits: logits_id.map(|id| out.f32s(id)),
        })
    }
}

fn is_tied(w: &LlamaWeights<'_>) -> bool {
    w.lm_head.data.as_ptr() == w.embed_tokens.data.as_ptr()
}

fn upload_matrix(ctx: &GpuContext, name: &str, t: &TensorView<'_>) -> Result<Weight, GpuError> {
    let (rows, cols) = match *t.shape {
        [r, c] => (r, c),
        _ => return Err(GpuError::Shape(format!("{name}: expected a matrix, got shape {:?}", t.shape))),
    };
    ctx.upload_weight(name, t.dtype, rows, cols, t.data)
}

/// The RoPE inverse-frequency table: GGUF `rope_freqs.weight` divisors when present, else
/// the config's scaling.
fn inv_freqs(c: &ModelConfig, file: &WeightFile) -> Result<Vec<f32>, LlamaError> {
    let theta = f64::from(c.rope_theta);
    let stored = match file {
        WeightFile::Gguf(g) if g.has_tensor("rope_freqs.weight") => {
            Some(file.tensor("rope_freqs.weight")?.to_f32())
        }
        _ => None,
    };
    let factors = match (stored, c.rope_scaling) {
        (Some(f), _) => Some(f),
        (None, None) => None,
        (None, Some(RopeScaling::Linear { factor })) => Some(vec![factor; c.head_dim / 2]),
        (
            None,
            Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            }),
        ) => {
            let s = Llama3RopeScaling {
                factor: f64::from(factor),
                low_freq_factor: f64::from(low_freq_factor),
                high_freq_factor: f64::from(high_freq_factor),
                original_max_position_embeddings: original_max_position_embeddings as f64,
            };
            Some(llama3_freq_factors(c.head_dim, theta, &s))
        }
    };
    if factors.as_ref().is_some_and(|f| f.len() != c.head_dim / 2) {
        return Err(LlamaError::Unsupported(format!(
            "rope_freqs has the wrong length for head_dim {}",
            c.head_dim
        )));
    }
    Ok(rope_inv_freq(c.head_dim, theta, factors.as_deref()))
}

/// One step's flattened varlen batch, as the executor builds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardBatch {
    /// `[T]` token ids, sequence after sequence.
    pub input_ids: Vec<u32>,
    /// `[T]` position of each token in its sequence.
    pub positions: Vec<u32>,
    /// `[T]` KV slot of each token (`block * block_size + offset`).
    pub slot_mapping: Vec<u32>,
    /// `[B + 1]` first token of each sequence, then `T`.
    pub query_start_loc: Vec<u32>,
    /// `[B]` tokens of each sequence after this step.
    pub seq_lens: Vec<u32>,
    /// `[B, Workspace::max_blocks_per_seq]` block tables, padded with the null block 0.
    pub block_table: Vec<u32>,
    /// `[R]` flattened indices of the tokens whose logits are needed.
    pub logits_indices: Vec<u32>,
}

/// What one forward step returns for its logits rows.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardOutput {
    /// Entries per row in `top_values` / `top_ids`.
    pub k: usize,
    /// `[R, k]` largest logits, largest first.
    pub top_values: Vec<f32>,
    /// `[R, k]` their token ids (`top_ids[r * k]` is row `r`'s argmax).
    pub top_ids: Vec<u32>,
    /// `[R, vocab]` every logit, when asked for.
    pub logits: Option<Vec<f32>>,
}

/// Sizes a [`Workspace`] is allocated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceLimits {
    /// Most tokens in one step.
    pub max_tokens: usize,
    /// Most sequences in one step (and most logits rows).
    pub max_seqs: usize,
    /// Width of the block table.
    pub max_blocks_per_seq: usize,
}

/// Activation and batch-input buffers allocated once for the largest step and viewed by
/// row for each step.
#[derive(Debug)]
pub struct Workspace {
    limits: WorkspaceLimits,
    input_ids: Tensor,
    positions: Tensor,
    slot_mapping: Tensor,
    query_start_loc: Tensor,
    seq_lens: Tensor,
    block_table: Tensor,
    logits_indices: Tensor,
    x: Tensor,
    h: Tensor,
    o: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    att: Tensor,
    gate: Tensor,
    up: Tensor,
    act: Tensor,
    x_rows: Tensor,
    h_rows: Tensor,
    logits: Tensor,
}

impl Workspace {
    /// Allocate buffers for `config` and `limits`.
    pub fn new(ctx: &GpuContext, config: &ModelConfig, limits: WorkspaceLimits) -> Result<Self, GpuError> {
        let WorkspaceLimits { max_tokens: t, max_seqs: b, max_blocks_per_seq: mb } = limits;
        if t == 0 || b == 0 || mb == 0 {
            return Err(GpuError::Shape(format!("workspace limits must be positive: {limits:?}")));
        }
        let f = |shape: &[usize]| ctx.tensor(Elem::F32, shape);
        let u = |shape: &[usize]| ctx.tensor(Elem::U32, shape);
        let (hd, q, kv, ff) =
            (config.hidden_size, config.q_size(), config.kv_size(), config.intermediate_size);
        Ok(Self {
            limits,
            input_ids: u(&[t])?,
            positions: u(&[t])?,
            slot_mapping: u(&[t])?,
            query_start_loc: u(&[b + 1])?,
            seq_lens: u(&[b])?,
            block_table: u(&[b, mb])?,
            logits_indices: u(&[b])?,
            x: f(&[t, hd])?,
            h: f(&[t, hd])?,
            o: f(&[t, hd])?,
            q: f(&[t, q])?,
            k: f(&[t, kv])?,
            v: f(&[t, kv])?,
            att: f(&[t, q])?,
            gate: f(&[t, ff])?,
            up: f(&[t, ff])?,
            act: f(&[t, ff])?,
            x_rows: f(&[b, hd])?,
            h_rows: f(&[b, hd])?,
            logits: f(&[b, config.vocab_size])?,
        })
    }

    /// The sizes it was allocated for.
    pub fn limits(&self) -> WorkspaceLimits {
        self.limits
    }

    fn check(&self, batch: &ForwardBatch) -> Result<(), LlamaError> {
        let (t, b, r) = (batch.input_ids.len(), batch.seq_lens.len(), batch.logits_indices.len());
        let l = self.limits;
        let bad = |m: String| Err(LlamaError::InvalidBatch(m));
        if t == 0 || b == 0 {
            return bad("empty batch".into());
        }
        if t > l.max_tokens || b > l.max_seqs || r > l.max_seqs {
            return bad(format!("{t} tokens / {b} sequences / {r} logits rows exceed the workspace {l:?}"));
        }
        if batch.positions.len() != t || batch.slot_mapping.len() != t {
            return bad("positions and slot_mapping must have one entry per token".into());
        }
        if batch.query_start_loc.len() != b + 1 || batch.block_table.len() != b * l.max_blocks_per_seq {
            return bad(format!("query_start_loc or block_table do not fit {b} sequences"));
        }
        if batch.logits_indices.iter().any(|&i| i as usize >= t) {
            return bad("a logits index points past the batch".into());
        }
        Ok(())
    }
}
