//! The Llama-family forward pass on the GPU: one step over a flattened varlen batch as a
//! sequence of kernel calls (embedding, per layer RMSNorm, Q/K/V (+ bias), RoPE, paged KV write,
//! paged GQA attention, output projection, SwiGLU, residuals; then the final norm and the
//! LM head on only the rows that need logits, and top-k/argmax on the GPU).

use indicatif::{ProgressBar, ProgressStyle};

use super::architecture::{MlpActivation, ModelConfig, RopeScaling, RopeVariant};
use super::files::ModelFiles;
use super::tensor::TensorView;
use super::weights::{LlamaWeights, WeightError, WeightFile};
use crate::gpu::{
    AttentionBatch, AttentionSpec, Elem, GpuContext, GpuError, KvCache, Llama3RopeScaling, RopeMode, Step,
    Tensor, Weight, llama3_freq_factors, rope_inv_freq,
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
    qk_norm: Option<[Tensor; 2]>,
    o_proj: Weight,
    ffn_norm: Tensor,
    /// Gemma's sandwich: norms of the attention and the MLP outputs.
    post_attn_norm: Option<Tensor>,
    post_ffn_norm: Option<Tensor>,
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
    /// The sliding layers' inverse frequencies when their RoPE base differs (Gemma 3).
    local_inv_freq: Option<Tensor>,
}

impl LlamaModel {
    /// Upload every weight of `files` to `ctx`, with a progress bar on stderr when `progress`,
    /// for contexts up to the model's own.
    pub fn load(ctx: &GpuContext, files: &ModelFiles, progress: bool) -> Result<Self, LlamaError> {
        Self::load_for_context(ctx, files, files.config.max_position_embeddings, progress)
    }

    /// [`Self::load`] for contexts up to `max_model_len` tokens (which of LongRoPE's factor
    /// sets the model rotates with).
    pub fn load_for_context(
        ctx: &GpuContext,
        files: &ModelFiles,
        max_model_len: usize,
        progress: bool,
    ) -> Result<Self, LlamaError> {
        let config = files.config.clone();
        let weights = files.llama_weights()?;
        let optional = [(config.attention_bias, 3), (config.qk_norm, 2), (config.sandwich_norms, 2)];
        let per_layer = 9 + optional.iter().filter(|(on, _)| *on).map(|(_, n)| n).sum::<u64>();
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
        let shifted = |t: &TensorView<'_>, offset: f32| -> Result<Tensor, LlamaError> {
            let v = ctx.upload_f32(&t.shape, &t.to_f32().iter().map(|w| w + offset).collect::<Vec<f32>>())?;
            bar.inc(1);
            Ok(v)
        };
        let vec = |t: &TensorView<'_>| shifted(t, 0.0);
        // Gemma's HF norms hold `w` of `x̂ · (1 + w)`: the 1 is added here, once.
        let norm_offset = if config.norm_weight_plus_one { 1.0 } else { 0.0 };
        let norm = |t: &TensorView<'_>| shifted(t, norm_offset);
        let embed_tokens = up("embed_tokens", &weights.embed_tokens)?;
        let layers = weights
            .layers
            .iter()
            .enumerate()
            .map(|(l, w)| {
                Ok(GpuLayer {
                    attn_norm: norm(&w.attn_norm)?,
                    q_proj: up(&format!("layers.{l}.q_proj"), &w.q_proj)?,
                    k_proj: up(&format!("layers.{l}.k_proj"), &w.k_proj)?,
                    v_proj: up(&format!("layers.{l}.v_proj"), &w.v_proj)?,
                    qkv_bias: match &w.qkv_bias {
                        Some([q, k, v]) => Some([vec(q)?, vec(k)?, vec(v)?]),
                        None => None,
                    },
                    qk_norm: match &w.qk_norm {
                        Some([q, k]) => Some([norm(q)?, norm(k)?]),
                        None => None,
                    },
                    o_proj: up(&format!("layers.{l}.o_proj"), &w.o_proj)?,
                    ffn_norm: norm(&w.ffn_norm)?,
                    post_attn_norm: w.post_norms.as_ref().map(|[attn, _]| norm(attn)).transpose()?,
                    post_ffn_norm: w.post_norms.as_ref().map(|[_, ffn]| norm(ffn)).transpose()?,
                    gate_proj: up(&format!("layers.{l}.gate_proj"), &w.gate_proj)?,
                    up_proj: up(&format!("layers.{l}.up_proj"), &w.up_proj)?,
                    down_proj: up(&format!("layers.{l}.down_proj"), &w.down_proj)?,
                })
            })
            .collect::<Result<Vec<_>, LlamaError>>()?;
        let final_norm = norm(&weights.norm)?;
        let lm_head = if is_tied(&weights) {
            bar.inc(1);
            embed_tokens.clone()
        } else {
            up("lm_head", &weights.lm_head)?
        };
        let inv_freq =
            ctx.upload_f32(&[config.head_dim / 2], &inv_freqs(&config, &files.weights, max_model_len)?)?;
        let local_inv_freq = match config.local_rope_theta {
            Some(theta) => Some(ctx.upload_f32(
                &[config.head_dim / 2],
                &rope_inv_freq(config.head_dim, f64::from(theta), None),
            )?),
            None => None,
        };
        bar.finish_and_clear();
        let rope_mode = match config.rope_variant {
            RopeVariant::Interleaved => RopeMode::Interleaved,
            RopeVariant::HalfSplit => RopeMode::HalfSplit,
        };
        Ok(Self {
            config,
            rope_mode,
            embed_tokens,
            layers,
            norm: final_norm,
            lm_head,
            inv_freq,
            local_inv_freq,
        })
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
        ws.check(batch)?;
        let inputs = Inputs::write(ctx, ws, batch)?;
        let acts = ws.acts.rows(batch.input_ids.len())?;
        let mut step = ctx.step();
        step.embed(&inputs.ids, &self.embed_tokens, &acts.x)?;
        if let Some(scale) = self.config.embedding_scale {
            step.scale(&acts.x, scale)?;
        }
        for (index, layer) in self.layers.iter().enumerate() {
            layer.record(&mut step, self, &inputs, &acts, cache, index)?;
        }
        self.record_head(step, ws, &inputs, &acts, Readback { top_k, full_logits })
    }

    /// Records the head — per tile of sampled rows: the rows gathered, the final norm, the
    /// LM head and the top-k — then submits the step and reads back what `readback` asks for.
    fn record_head(
        &self,
        mut step: Step<'_>,
        ws: &Workspace,
        inputs: &Inputs,
        acts: &Activations,
        readback: Readback,
    ) -> Result<ForwardOutput, LlamaError> {
        let Readback { top_k, full_logits } = readback;
        let k = top_k.clamp(1, self.config.vocab_size);
        let mut reads = Vec::new();
        for (tile, &rows) in ws.head_tiles.iter().zip(&inputs.tile_rows) {
            let (indices, xr, hr, logits) = (
                tile.indices.rows(rows)?,
                tile.x_rows.rows(rows)?,
                tile.h_rows.rows(rows)?,
                tile.logits.rows(rows)?,
            );
            step.gather_rows(&acts.x, &indices, &xr)?;
            step.rms_norm(&xr, &self.norm, self.config.rms_norm_eps, &hr)?;
            step.linear(&hr, &self.lm_head, &logits)?;
            if let Some(cap) = self.config.final_logit_softcap {
                step.softcap(&logits, cap)?;
            }
            let top_values = step.scratch(Elem::F32, &[rows, k])?;
            let top_ids = step.scratch(Elem::U32, &[rows, k])?;
            step.top_k(&logits, k, &top_values, &top_ids)?;
            reads.push((
                step.read(&top_values),
                step.read(&top_ids),
                full_logits.then(|| step.read(&logits)),
            ));
        }
        let mut out = step.submit()?;
        let mut output = ForwardOutput { k, top_values: Vec::new(), top_ids: Vec::new(), logits: None };
        for (values_id, ids_id, logits_id) in reads {
            output.top_values.extend(out.f32s(values_id));
            output.top_ids.extend(out.u32s(ids_id));
            if let Some(id) = logits_id {
                output.logits.get_or_insert_with(Vec::new).extend(out.f32s(id));
            }
        }
        Ok(output)
    }
}

/// What a step reads back: the `top_k` candidates of each sampled row, and with
/// `full_logits` the whole rows.
#[derive(Debug, Clone, Copy)]
struct Readback {
    top_k: usize,
    full_logits: bool,
}

/// A batch's inputs, written into the workspace: token ids, positions, KV slots, the
/// attention metadata and the rows to sample.
struct Inputs {
    ids: Tensor,
    positions: Tensor,
    slots: Tensor,
    attn: AttentionBatch,
    /// Rows the step samples in each of the workspace's head tiles, in order.
    tile_rows: Vec<usize>,
}

impl Inputs {
    /// Writes `batch` into `ws`'s input buffers.
    fn write(ctx: &GpuContext, ws: &Workspace, batch: &ForwardBatch) -> Result<Self, LlamaError> {
        let (t, b) = (batch.input_ids.len(), batch.seq_lens.len());
        let tile_len = ws.head_tiles.first().map_or(1, |tile| tile.indices.len());
        let tiles = ws.head_tiles.iter().zip(batch.logits_indices.chunks(tile_len));
        let inputs = Self {
            ids: ws.input_ids.rows(t)?,
            positions: ws.positions.rows(t)?,
            slots: ws.slot_mapping.rows(t)?,
            attn: AttentionBatch {
                query_start_loc: ws.query_start_loc.rows(b + 1)?,
                seq_lens: ws.seq_lens.rows(b)?,
                block_table: ws.block_table.rows(b)?,
            },
            tile_rows: tiles.clone().map(|(_, indices)| indices.len()).collect(),
        };
        ctx.write_u32(&inputs.ids, &batch.input_ids)?;
        ctx.write_u32(&inputs.positions, &batch.positions)?;
        ctx.write_u32(&inputs.slots, &batch.slot_mapping)?;
        ctx.write_u32(&inputs.attn.query_start_loc, &batch.query_start_loc)?;
        ctx.write_u32(&inputs.attn.seq_lens, &batch.seq_lens)?;
        ctx.write_u32(&inputs.attn.block_table, &batch.block_table)?;
        for (tile, indices) in tiles {
            ctx.write_u32(&tile.indices.rows(indices.len())?, indices)?;
        }
        Ok(inputs)
    }
}

/// The activation buffers: the residual stream `x`, the normed input `h`, a block's output
/// `o`, and the attention and MLP intermediates.
#[derive(Debug)]
struct Activations {
    x: Tensor,
    h: Tensor,
    o: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    /// `q` and `k` normed per head, for models with q/k norms.
    qk_normed: Option<[Tensor; 2]>,
    att: Tensor,
    gate: Tensor,
    up: Tensor,
    act: Tensor,
}

impl Activations {
    /// The buffers for `max_tokens` tokens of `config`'s shapes (q/k-norm outputs only when
    /// the model norms them).
    fn new(ctx: &GpuContext, config: &ModelConfig, max_tokens: usize) -> Result<Self, GpuError> {
        let f = |width: usize| ctx.tensor(Elem::F32, &[max_tokens, width]);
        let (hd, q, kv, ff) =
            (config.hidden_size, config.q_size(), config.kv_size(), config.intermediate_size);
        Ok(Self {
            x: f(hd)?,
            h: f(hd)?,
            o: f(hd)?,
            q: f(q)?,
            k: f(kv)?,
            v: f(kv)?,
            qk_normed: if config.qk_norm { Some([f(q)?, f(kv)?]) } else { None },
            att: f(q)?,
            gate: f(ff)?,
            up: f(ff)?,
            act: f(ff)?,
        })
    }

    /// The same buffers viewed for `t` tokens.
    fn rows(&self, t: usize) -> Result<Self, GpuError> {
        Ok(Self {
            x: self.x.rows(t)?,
            h: self.h.rows(t)?,
            o: self.o.rows(t)?,
            q: self.q.rows(t)?,
            k: self.k.rows(t)?,
            v: self.v.rows(t)?,
            qk_normed: match &self.qk_normed {
                Some([q, k]) => Some([q.rows(t)?, k.rows(t)?]),
                None => None,
            },
            att: self.att.rows(t)?,
            gate: self.gate.rows(t)?,
            up: self.up.rows(t)?,
            act: self.act.rows(t)?,
        })
    }
}

impl GpuLayer {
    /// Records decoder layer `index`: `x += attention(norm(x))`, then `x += mlp(norm(x))` (each
    /// output normed once more first in Gemma's sandwich).
    fn record(
        &self,
        step: &mut Step<'_>,
        model: &LlamaModel,
        inputs: &Inputs,
        a: &Activations,
        cache: &KvCache,
        index: usize,
    ) -> Result<(), LlamaError> {
        let eps = model.config.rms_norm_eps;
        step.rms_norm(&a.x, &self.attn_norm, eps, &a.h)?;
        self.attention(step, model, inputs, a, cache, index)?;
        add_residual(step, a, self.post_attn_norm.as_ref(), eps)?;
        step.rms_norm(&a.x, &self.ffn_norm, eps, &a.h)?;
        self.mlp(step, model, a)?;
        add_residual(step, a, self.post_ffn_norm.as_ref(), eps)?;
        Ok(())
    }

    /// `o = o_proj(attention(rope(q), rope(k), v))` over the paged cache, the new keys and
    /// values written into it first; with Qwen3's norms, `q` and `k` are RMS-normed per head
    /// before RoPE.
    fn attention(
        &self,
        step: &mut Step<'_>,
        model: &LlamaModel,
        inputs: &Inputs,
        a: &Activations,
        cache: &KvCache,
        index: usize,
    ) -> Result<(), LlamaError> {
        let c = &model.config;
        step.linear(&a.h, &self.q_proj, &a.q)?;
        step.linear(&a.h, &self.k_proj, &a.k)?;
        step.linear(&a.h, &self.v_proj, &a.v)?;
        if let Some([bq, bk, bv]) = &self.qkv_bias {
            step.add_bias(&a.q, bq)?;
            step.add_bias(&a.k, bk)?;
            step.add_bias(&a.v, bv)?;
        }
        let (q, k) = match (&self.qk_norm, &a.qk_normed) {
            (Some([q_norm, k_norm]), Some([q_out, k_out])) => {
                let per_head = |x: &Tensor, heads: usize| x.view(&[x.shape()[0] * heads, c.head_dim]);
                let (q_heads, k_heads) = (c.num_attention_heads, c.num_key_value_heads);
                step.rms_norm(&per_head(&a.q, q_heads)?, q_norm, c.rms_norm_eps, &per_head(q_out, q_heads)?)?;
                step.rms_norm(&per_head(&a.k, k_heads)?, k_norm, c.rms_norm_eps, &per_head(k_out, k_heads)?)?;
                (q_out, k_out)
            }
            _ => (&a.q, &a.k),
        };
        let window = c.layer_windows[index];
        let inv_freq = match (&model.local_inv_freq, window) {
            (Some(local), Some(_)) => local,
            _ => &model.inv_freq,
        };
        step.rope(q, &inputs.positions, inv_freq, c.num_attention_heads, model.rope_mode)?;
        step.rope(k, &inputs.positions, inv_freq, c.num_key_value_heads, model.rope_mode)?;
        step.reshape_and_cache(k, &a.v, &inputs.slots, cache, index)?;
        let spec = AttentionSpec {
            heads: c.num_attention_heads,
            scale: c.attention_scale,
            window,
            softcap: c.attn_logit_softcap,
        };
        step.paged_attention(q, cache, index, &inputs.attn, &spec, &a.att)?;
        step.linear(&a.att, &self.o_proj, &a.o)?;
        Ok(())
    }

    /// `o = down_proj(act(gate_proj(h)) * up_proj(h))`, `act` SiLU or Gemma's GELU-tanh.
    fn mlp(&self, step: &mut Step<'_>, model: &LlamaModel, a: &Activations) -> Result<(), LlamaError> {
        step.linear(&a.h, &self.gate_proj, &a.gate)?;
        step.linear(&a.h, &self.up_proj, &a.up)?;
        match model.config.mlp_activation {
            MlpActivation::Silu => step.silu_mul(&a.gate, &a.up, &a.act)?,
            MlpActivation::GeluTanh => step.gelu_tanh_mul(&a.gate, &a.up, &a.act)?,
        }
        step.linear(&a.act, &self.down_proj, &a.o)?;
        Ok(())
    }
}

/// `x += o`, or with Gemma's sandwich `x += post_norm(o)` (`h` is free by then and holds the
/// normed output).
fn add_residual(
    step: &mut Step<'_>,
    a: &Activations,
    post_norm: Option<&Tensor>,
    eps: f32,
) -> Result<(), LlamaError> {
    match post_norm {
        Some(norm) => {
            step.rms_norm(&a.o, norm, eps, &a.h)?;
            step.add_in_place(&a.x, &a.h)?;
        }
        None => step.add_in_place(&a.x, &a.o)?,
    }
    Ok(())
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
/// the config's scaling (LongRoPE's long factors when `max_model_len` passes the original
/// context).
fn inv_freqs(c: &ModelConfig, file: &WeightFile, max_model_len: usize) -> Result<Vec<f32>, LlamaError> {
    let theta = f64::from(c.rope_theta);
    let stored = match file {
        WeightFile::Gguf(g) if g.has_tensor("rope_freqs.weight") => {
            Some(file.tensor("rope_freqs.weight")?.to_f32())
        }
        _ => None,
    };
    let factors = match (stored, c.rope_scaling.clone()) {
        (Some(f), _) => Some(f),
        (
            None,
            Some(RopeScaling::LongRope {
                short_factor, long_factor, original_max_position_embeddings, ..
            }),
        ) => Some(if max_model_len > original_max_position_embeddings { long_factor } else { short_factor }),
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
    acts: Activations,
    /// The sampled rows, cut into tiles of as many rows as keep a tile's logits under the
    /// binding limit (the last tile may be shorter).
    head_tiles: Vec<HeadTile>,
}

/// The head's buffers for one tile of sampled rows: which token rows, their hidden states
/// gathered and normed, and their logits. A large vocabulary times many sequences would
/// exceed one binding (256 × 151936 × 4 bytes is 155 MB), so the rows are cut into tiles.
#[derive(Debug)]
struct HeadTile {
    indices: Tensor,
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
        let hd = config.hidden_size;
        let row_bytes = 4 * config.vocab_size as u64;
        let rows_per_tile = (ctx.max_binding_bytes() / row_bytes).min(b as u64) as usize;
        if rows_per_tile == 0 {
            return Err(GpuError::TooLarge(format!(
                "one logits row of {} entries exceeds the {}-byte binding limit",
                config.vocab_size,
                ctx.max_binding_bytes()
            )));
        }
        Ok(Self {
            limits,
            input_ids: u(&[t])?,
            positions: u(&[t])?,
            slot_mapping: u(&[t])?,
            query_start_loc: u(&[b + 1])?,
            seq_lens: u(&[b])?,
            block_table: u(&[b, mb])?,
            acts: Activations::new(ctx, config, t)?,
            head_tiles: (0..b.div_ceil(rows_per_tile))
                .map(|tile| {
                    let rows = rows_per_tile.min(b - tile * rows_per_tile);
                    Ok(HeadTile {
                        indices: u(&[rows])?,
                        x_rows: f(&[rows, hd])?,
                        h_rows: f(&[rows, hd])?,
                        logits: f(&[rows, config.vocab_size])?,
                    })
                })
                .collect::<Result<_, GpuError>>()?,
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
