//! The Llama-family forward pass on the GPU: one step over a flattened varlen batch as a
//! sequence of kernel calls (the embedding; per layer RMSNorm, the fused Q/K/V projection
//! (+ bias), RoPE with the paged KV write, paged GQA attention, the output projection with the
//! residual add, RMSNorm, the gated MLP projection with its activation, the down projection
//! with the residual add: 8 dispatches, 7 with RoPE in the projection's epilogue and 5 with the
//! norms fused too, the default in one-row tiles (the K-split decode GEMV, and the sequential
//! kernels over subgroups of 8 or 16); Q/K norms (Qwen3, Gemma 3) keep RoPE a dispatch of its
//! own, except in decode steps on flash attention, whose kernel norms, rotates and caches its
//! token's heads itself (`Step::flash_rope_attention`), and Gemma's sandwich norms add one
//! dispatch after each of the output and down projections (the post-norm, the residual add and
//! the next norm together), none where the norms are fused: there the next linears take the
//! sandwich in their prologue and write the new residual to the stream's other buffer
//! (`Step::sandwich_input`; tests/model_dispatches.rs states each family's count); then the
//! final norm and the LM head on only the rows that need
//! logits, and top-k/argmax on the GPU).

use std::borrow::Cow;

use indicatif::{ProgressBar, ProgressStyle};

use super::architecture::{MlpActivation, ModelConfig, RopeScaling, RopeVariant, interleave_rope_rows};
use super::fed_ids::{FedIds, IdFeed};
use super::files::ModelFiles;
use super::gated_mlp::{GateUp, GatedMlp, record_gate_up};
use super::lora::LoraTarget;
use super::lora::bank::LoraSlots;
use super::moe_layer::{ID_ROUTED_TOKENS, MoeBuffers, MoeLayer, SharedExpert};
use super::tensor::TensorView;
use super::weights::{ExpertWeights, LayerWeights, LlamaWeights, MlpWeights, WeightError, WeightFile};
use super::yarn::yarn_inv_freq;
use crate::gpu::{
    AttentionBatch, AttentionSpec, Elem, GateActivation, GpuContext, GpuError, HeldStep, KvCache,
    LinearInput, Llama3RopeScaling, LoraBank, LoraColumns, LoraShrunk, LoraSite, NO_LORA, ReadbackId,
    RopeCacheArgs, RopeMode, Step, StepInFlight, StepOutput, Tensor, Weight, llama3_freq_factors,
    rope_inv_freq,
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
    /// Q, K and V into one row `[q | k | v]`: one projection when they share a type.
    qkv: Vec<QkvProjection>,
    /// Qwen3's and Gemma 3's per-head norms, `[2, head_dim]` (query's, then key's).
    qk_norm: Option<Tensor>,
    o_proj: Weight,
    /// The output projection's bias (gpt-oss).
    o_bias: Option<Tensor>,
    /// Each query head's attention sink logit (gpt-oss), `[heads]`.
    sinks: Option<Tensor>,
    ffn_norm: Tensor,
    /// Gemma's sandwich: norms of the attention and the MLP outputs.
    post_attn_norm: Option<Tensor>,
    post_ffn_norm: Option<Tensor>,
    mlp: GpuMlp,
}

/// A layer's feed-forward on the GPU.
#[derive(Debug)]
enum GpuMlp {
    /// One gated MLP.
    Dense(GatedMlp),
    /// A mixture of experts.
    Experts(MoeLayer),
}

/// A projection writing columns `col0..` of the Q/K/V row, with its bias.
#[derive(Debug)]
struct QkvProjection {
    weight: Weight,
    bias: Option<Tensor>,
    col0: usize,
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
    /// for contexts up to the model's own. A half-split RoPE model without Q/K norms loads
    /// with its Q and K rows in interleaved order, so it rotates as a GGUF Llama does.
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
        Self::load_with(ctx, files, max_model_len, progress, false)
    }

    /// [`Self::load_for_context`] for serving LoRA adapters: a dense MLP's gate and up
    /// projections one stacked weight (both outputs side by side before the activation, the
    /// same bits as the gated weight: each output one linear's, [`Step::linear_gated`]'s
    /// promise), or apart where their types differ, so a row's adapter can add to each.
    pub fn load_for_lora(
        ctx: &GpuContext,
        files: &ModelFiles,
        max_model_len: usize,
        progress: bool,
    ) -> Result<Self, LlamaError> {
        Self::load_with(ctx, files, max_model_len, progress, true)
    }

    fn load_with(
        ctx: &GpuContext,
        files: &ModelFiles,
        max_model_len: usize,
        progress: bool,
        split_mlp: bool,
    ) -> Result<Self, LlamaError> {
        let config = files.config.clone();
        let weights = files.llama_weights()?;
        let optional = [
            (config.attention_bias, 3),
            (config.qk_norm, 2),
            (config.sandwich_norms, 2),
            (config.o_bias, 1),
            (config.attention_sinks, 1),
        ];
        let per_layer = 6 + optional.iter().filter(|(on, _)| *on).map(|(_, n)| n).sum::<u64>();
        let mlp_tensors = |w: &LayerWeights<'_>| match &w.mlp {
            MlpWeights::Dense(_) => 3,
            MlpWeights::Experts { experts, router_bias, shared, .. } => {
                let biases = if experts.iter().any(|e| e.biases.is_some()) { 3 } else { 0 };
                1 + u64::from(router_bias.is_some())
                    + (3 + biases) * experts.len() as u64
                    + if shared.is_some() { 4 } else { 0 }
            }
        };
        let total = weights.layers.iter().map(|w| per_layer + mlp_tensors(w)).sum::<u64>() + 3;
        let bar = if progress { ProgressBar::new(total) } else { ProgressBar::hidden() };
        bar.set_style(
            ProgressStyle::with_template("loading {msg} [{bar:30}] {pos}/{len} tensors")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(files.path.display().to_string());
        // Q/K norms need a whole head in one invocation, so only a model without them gains
        // from rotating neighbouring columns (in the Q/K/V projection's epilogue).
        let interleave_qk = config.rope_variant == RopeVariant::HalfSplit && !config.qk_norm;
        let rope_mode = match config.rope_variant {
            RopeVariant::HalfSplit if !interleave_qk => RopeMode::HalfSplit,
            _ => RopeMode::Interleaved,
        };
        let loader = Loader { ctx, config: &config, bar: &bar, interleave_qk, split_mlp };
        let embed_tokens = loader.matrix("embed_tokens", &weights.embed_tokens)?;
        let layers = weights
            .layers
            .iter()
            .enumerate()
            .map(|(l, w)| loader.layer(l, w))
            .collect::<Result<Vec<_>, LlamaError>>()?;
        let final_norm = loader.norm(&weights.norm)?;
        let lm_head = if is_tied(&weights) {
            bar.inc(1);
            embed_tokens.clone()
        } else {
            loader.matrix("lm_head", &weights.lm_head)?
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

    /// The most tokens a step may have and still run without a read-back in its
    /// middle: any number for a dense model; for a mixture of experts, the steps its layers
    /// route by id on the device ([`ID_ROUTED_TOKENS`]), and `None` where they route none
    /// (experts not stacked in one binding, or a path without one-row linear kernels): every step reads the router's choices back.
    pub fn whole_step_tokens(&self) -> Option<usize> {
        let mut experts = self.layers.iter().filter_map(|l| match &l.mlp {
            GpuMlp::Experts(moe) => Some(moe),
            GpuMlp::Dense(_) => None,
        });
        match self.config.moe {
            None => Some(usize::MAX),
            Some(_) => experts.all(|moe| moe.by_id).then_some(ID_ROUTED_TOKENS),
        }
    }

    /// True when its Q and K rows are stored in interleaved RoPE order (a LoRA adapter's `B`
    /// rows of Q and K must be too).
    pub fn qk_interleaved(&self) -> bool {
        self.rope_mode == RopeMode::Interleaved
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
        let readback = Readback { top_k, full_logits, feed: None, whole: false };
        self.forward_lora(ctx, ws, cache, batch, None, readback)
    }

    /// [`Self::forward`] submitted without waiting for the device: the step runs while the
    /// host goes on, and [`ForwardInFlight::wait`] reads it back. The input ids `launch.feed`
    /// names are copied on the device from its sampled ids (the step launched before this one
    /// left its rows' argmaxes there), and this step leaves its own there. A mixture of
    /// experts' step of more than [`Self::whole_step_tokens`] reads the router's choices back
    /// in its middle (so waits for the steps before it there).
    pub fn forward_launch(
        &self,
        ctx: &GpuContext,
        ws: &Workspace,
        cache: &KvCache,
        batch: &ForwardBatch,
        launch: Launch<'_>,
    ) -> Result<ForwardInFlight, LlamaError> {
        let (step, reads) = self.record_launch(ctx, ws, cache, batch, launch, false)?;
        Ok(ForwardInFlight { step: step.submit_async()?, reads })
    }

    /// [`Self::forward_launch`] recorded and encoded but not submitted: the host writes the
    /// sampled ids the step reads that the device does not hold (tokens sampled on the host,
    /// [`GpuContext::write_u32`]) and then submits it with [`ForwardHeld::submit`]. Until
    /// then no other step can be recorded. Not for a step of more than
    /// [`Self::whole_step_tokens`], which is submitted in its middle.
    pub fn forward_hold(
        &self,
        ctx: &GpuContext,
        ws: &Workspace,
        cache: &KvCache,
        batch: &ForwardBatch,
        launch: Launch<'_>,
    ) -> Result<ForwardHeld, LlamaError> {
        let (step, reads) = self.record_launch(ctx, ws, cache, batch, launch, true)?;
        Ok(ForwardHeld { step: step.hold()?, reads })
    }

    /// Records a launched step (whole, in one command buffer, when `held`).
    fn record_launch<'c>(
        &self,
        ctx: &'c GpuContext,
        ws: &Workspace,
        cache: &KvCache,
        batch: &ForwardBatch,
        launch: Launch<'_>,
        held: bool,
    ) -> Result<(Step<'c>, HeadReads), LlamaError> {
        let t = batch.input_ids.len();
        if self.whole_step_tokens().is_none_or(|most| held && t > most) {
            return Err(LlamaError::Unsupported(
                "a mixture-of-experts step that reads its router's choices back cannot be launched held"
                    .into(),
            ));
        }
        let Launch { top_k, full_logits, feed, lora } = launch;
        let readback = Readback { top_k, full_logits, feed: Some(feed), whole: held };
        self.record_forward(ctx, ws, cache, batch, lora, readback)
    }

    /// [`Self::forward`] with each token row's LoRA adapter: `lora.rows[t]` is the slot of
    /// `lora.slots` that row `t` adds (or [`NO_LORA`]). A batch where some row has an adapter
    /// runs the unfused linears (the same bits for the rows without one) with every adapted
    /// linear's delta added after its base product, before RoPE, the activation and the
    /// residual add.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_with_lora(
        &self,
        ctx: &GpuContext,
        ws: &Workspace,
        cache: &KvCache,
        batch: &ForwardBatch,
        lora: LoraRows<'_>,
        top_k: usize,
        full_logits: bool,
    ) -> Result<ForwardOutput, LlamaError> {
        let readback = Readback { top_k, full_logits, feed: None, whole: false };
        self.forward_lora(ctx, ws, cache, batch, Some(lora), readback)
    }

    fn forward_lora(
        &self,
        ctx: &GpuContext,
        ws: &Workspace,
        cache: &KvCache,
        batch: &ForwardBatch,
        lora: Option<LoraRows<'_>>,
        readback: Readback<'_>,
    ) -> Result<ForwardOutput, LlamaError> {
        let (step, reads) = self.record_forward(ctx, ws, cache, batch, lora, readback)?;
        Ok(reads.take(step.submit()?))
    }

    /// Records a step over `batch` up to its head's readbacks, not submitted yet.
    fn record_forward<'c>(
        &self,
        ctx: &'c GpuContext,
        ws: &Workspace,
        cache: &KvCache,
        batch: &ForwardBatch,
        lora: Option<LoraRows<'_>>,
        readback: Readback<'_>,
    ) -> Result<(Step<'c>, HeadReads), LlamaError> {
        ws.check(batch)?;
        let t = batch.input_ids.len();
        let mut step = if readback.whole { ctx.whole_step() } else { ctx.step() };
        let inputs = Inputs::write(&mut step, ws, batch)?;
        let lora = match lora {
            Some(l) if l.rows.iter().any(|&s| s != NO_LORA) => Some(l.write(&mut step, t)?),
            _ => None,
        };
        let k = readback.top_k.clamp(1, self.config.vocab_size);
        let tile_rows: Vec<usize> = inputs.head.iter().map(|tile| tile.indices.len()).collect();
        let fed = readback.feed.map(|feed| FedIds::write(&mut step, feed, t, &tile_rows, k)).transpose()?;
        if let Some(fed) = &fed {
            fed.copy_in(&mut step, &inputs.ids)?;
        }
        let acts = ws.acts.rows(t)?;
        // The residual stream: in `acts.x`, or in `acts.x2` between Gemma's sandwiches.
        let mut x = self.residual_start(&step, &acts, lora.is_some());
        step.embed(&inputs.ids, &self.embed_tokens, x)?;
        if let Some(scale) = self.config.embedding_scale {
            step.scale(x, scale)?;
        }
        // A layer's post-MLP norm (Gemma's sandwich) left to the next layer's input norm.
        let mut pending = None;
        for (index, layer) in self.layers.iter().enumerate() {
            let lora = lora.as_ref().map(|l| l.layer(index));
            let kv = KvLayer { cache, index };
            step = layer.record(step, self, &inputs, &acts, &mut x, kv, lora, &mut pending)?;
        }
        if let Some(post) = pending {
            step.rms_norm_add(&acts.o, post, self.config.rms_norm_eps, x)?;
        }
        if !std::ptr::eq(x, &acts.x) {
            return Err(LlamaError::Unsupported("the residual stream ended outside its buffer".into()));
        }
        self.record_head(step, &inputs, &acts, readback, fed.as_ref())
    }

    /// Where a step of `acts`' rows embeds its tokens: the residual stream moves to the other
    /// of its two buffers at each of Gemma's sandwiches the linears take in their prologue
    /// ([`Step::sandwich_input`]: each layer's post-attention one and each post-MLP one but the
    /// last layer's, the next layer's input), so it starts where an even count of moves leaves
    /// it in `acts.x`, which the head and [`Self::score_rows`] read. A LoRA step fuses none.
    fn residual_start<'a>(&self, step: &Step<'_>, acts: &'a Activations, lora: bool) -> &'a Tensor {
        let Some(x2) = &acts.x2 else { return &acts.x };
        if lora || !step.fuses_sandwich(acts.x.shape()[0]) {
            return &acts.x;
        }
        let dense = |l: &&GpuLayer| matches!(l.mlp, GpuMlp::Dense(_));
        let attention = self.layers.iter().filter(dense).filter(|l| l.post_attn_norm.is_some()).count();
        let last = self.layers.len().saturating_sub(1);
        let mlp = self.layers[..last].iter().filter(dense).filter(|l| l.post_ffn_norm.is_some()).count();
        if (attention + mlp) % 2 == 1 { x2 } else { &acts.x }
    }

    /// Records the head — per tile of sampled rows: the rows gathered, the final norm, the
    /// LM head and the top-k (its argmaxes copied to `fed`'s sampled ids) — and the readbacks
    /// `readback` asks for.
    fn record_head<'c>(
        &self,
        mut step: Step<'c>,
        inputs: &Inputs,
        acts: &Activations,
        readback: Readback<'_>,
        fed: Option<&FedIds>,
    ) -> Result<(Step<'c>, HeadReads), LlamaError> {
        let Readback { top_k, full_logits, .. } = readback;
        let k = top_k.clamp(1, self.config.vocab_size);
        let mut reads = Vec::new();
        for (index, tile) in inputs.head.iter().enumerate() {
            let (indices, xr, hr, logits) = (&tile.indices, &tile.x_rows, &tile.h_rows, &tile.logits);
            let rows = indices.len();
            step.gather_rows(&acts.x, indices, xr)?;
            let h = step.rms_norm_input(xr, &self.norm, self.config.rms_norm_eps, hr)?;
            step.linear(h, &self.lm_head, logits)?;
            if let Some(cap) = self.config.final_logit_softcap {
                step.softcap(logits, cap)?;
            }
            let top_values = step.scratch(Elem::F32, &[rows, k])?;
            let top_ids = step.scratch(Elem::U32, &[rows, k])?;
            step.top_k(logits, k, &top_values, &top_ids)?;
            if let Some(fed) = fed {
                fed.copy_out(&mut step, index, &top_ids)?;
            }
            reads.push((step.read(&top_values), step.read(&top_ids), full_logits.then(|| step.read(logits))));
        }
        Ok((step, HeadReads { k, reads }))
    }
}

/// The readbacks of a step's head, tile by tile: top values, top ids, and the logits where
/// asked for.
#[derive(Debug)]
struct HeadReads {
    k: usize,
    reads: Vec<(ReadbackId, ReadbackId, Option<ReadbackId>)>,
}

impl HeadReads {
    /// The step's output from its readbacks.
    fn take(self, mut out: StepOutput) -> ForwardOutput {
        let mut output =
            ForwardOutput { k: self.k, top_values: Vec::new(), top_ids: Vec::new(), logits: None };
        for (values_id, ids_id, logits_id) in self.reads {
            output.top_values.extend(out.f32s(values_id));
            output.top_ids.extend(out.u32s(ids_id));
            if let Some(id) = logits_id {
                output.logits.get_or_insert_with(Vec::new).extend(out.f32s(id));
            }
        }
        output
    }
}

/// A step launched with [`LlamaModel::forward_launch`], running on the device.
#[derive(Debug)]
pub struct ForwardInFlight {
    step: StepInFlight,
    reads: HeadReads,
}

impl ForwardInFlight {
    /// Waits for the step (not for steps launched after it) and reads its output back.
    pub fn wait(self, ctx: &GpuContext) -> Result<ForwardOutput, LlamaError> {
        Ok(self.reads.take(self.step.wait(ctx)?))
    }
}

/// A step recorded with [`LlamaModel::forward_hold`], not submitted yet.
#[derive(Debug)]
pub struct ForwardHeld {
    step: HeldStep,
    reads: HeadReads,
}

impl ForwardHeld {
    /// Submits the step (after the writes made since it was recorded) and returns at once.
    pub fn submit(self, ctx: &GpuContext) -> Result<ForwardInFlight, LlamaError> {
        Ok(ForwardInFlight { step: self.step.submit(ctx)?, reads: self.reads })
    }
}

/// How [`LlamaModel::forward_launch`] runs a step: the top `top_k` candidates of each logits
/// row read back (and the full rows with `full_logits`), input ids fed from the device's
/// sampled ids, and each row's LoRA adapter where `lora` is set.
#[derive(Debug, Clone, Copy)]
pub struct Launch<'a> {
    /// Candidates read back a row (at least 1: the argmax).
    pub top_k: usize,
    /// Read the full logits rows back too.
    pub full_logits: bool,
    /// The input ids copied from the sampled ids, which this step's argmaxes replace.
    pub feed: IdFeed<'a>,
    /// Each token row's adapter ([`LlamaModel::forward_with_lora`]).
    pub lora: Option<LoraRows<'a>>,
}

impl LlamaModel {
    /// Hands `each` the logits row of every token in `rows` (indices into the batch the last
    /// [`Self::forward`] on `ws` ran; nothing may run on `ws` in between), in order, a group at
    /// a time: each group's hidden states are gathered, normed and multiplied by the LM head
    /// in a submit of its own and read back, so the device and the host hold one group's
    /// logits (about [`SCORED_GROUP_BYTES`]) however many rows are scored. By the invariance
    /// rule, a row's logits are the bits `forward` gives the same row.
    pub fn score_rows(
        &self,
        ctx: &GpuContext,
        ws: &Workspace,
        rows: &[u32],
        mut each: impl FnMut(&[f32]),
    ) -> Result<(), LlamaError> {
        let (hidden, vocab) = (self.config.hidden_size, self.config.vocab_size);
        if let Some(&row) = rows.iter().find(|&&row| row as usize >= ws.limits.max_tokens) {
            return Err(LlamaError::InvalidBatch(format!("scored row {row} is past the workspace")));
        }
        for group in rows.chunks(ws.scored_group_rows) {
            let mut step = ctx.step();
            let n = group.len();
            let indices = step.scratch(Elem::U32, &[n])?;
            let (x_rows, h_rows) =
                (step.scratch(Elem::F32, &[n, hidden])?, step.scratch(Elem::F32, &[n, hidden])?);
            let logits = step.scratch(Elem::F32, &[n, vocab])?;
            step.write_u32(&indices, group)?;
            step.gather_rows(&ws.acts.x, &indices, &x_rows)?;
            let h = step.rms_norm_input(&x_rows, &self.norm, self.config.rms_norm_eps, &h_rows)?;
            step.linear(h, &self.lm_head, &logits)?;
            if let Some(cap) = self.config.final_logit_softcap {
                step.softcap(&logits, cap)?;
            }
            let read = step.read(&logits);
            let values = step.submit()?.f32s(read);
            values.chunks_exact(vocab).for_each(&mut each);
        }
        Ok(())
    }
}

/// What a step reads back: the `top_k` candidates of each sampled row, and with
/// `full_logits` the whole rows; where `feed` is set, its input ids come from the device's
/// sampled ids, and its rows' argmaxes go there.
#[derive(Debug, Clone, Copy)]
struct Readback<'f> {
    top_k: usize,
    full_logits: bool,
    feed: Option<IdFeed<'f>>,
    /// Record the step whole, in one command buffer (to hold it for a later submit).
    whole: bool,
}

/// A batch's inputs, written into the workspace: token ids, positions, KV slots, the
/// attention metadata and the rows to sample.
struct Inputs {
    ids: Tensor,
    positions: Tensor,
    slots: Tensor,
    attn: AttentionBatch,
    /// The head's buffers for the step's logits rows, tile by tile in row order.
    head: Vec<HeadTile>,
}

impl Inputs {
    /// Writes `batch` into `ws`'s input buffers (through `step`'s one upload).
    fn write(step: &mut Step<'_>, ws: &Workspace, batch: &ForwardBatch) -> Result<Self, LlamaError> {
        let (t, b) = (batch.input_ids.len(), batch.seq_lens.len());
        let tile_len = ws.head_tiles.first().map_or(1, |tile| tile.indices.len());
        let head = ws
            .head_tiles
            .iter()
            .zip(batch.logits_indices.chunks(tile_len))
            .map(|(tile, rows)| Ok((tile.rows(rows.len())?, rows)))
            .collect::<Result<Vec<_>, GpuError>>()?;
        for (tile, indices) in &head {
            step.write_u32(&tile.indices, indices)?;
        }
        let inputs = Self {
            ids: ws.input_ids.rows(t)?,
            positions: ws.positions.rows(t)?,
            slots: ws.slot_mapping.rows(t)?,
            attn: AttentionBatch {
                query_start_loc: ws.query_start_loc.rows(b + 1)?,
                seq_lens: ws.seq_lens.rows(b)?,
                block_table: ws.block_table.rows(b)?,
            },
            head: head.into_iter().map(|(tile, _)| tile).collect(),
        };
        step.write_u32(&inputs.ids, &batch.input_ids)?;
        step.write_u32(&inputs.positions, &batch.positions)?;
        step.write_u32(&inputs.slots, &batch.slot_mapping)?;
        step.write_u32(&inputs.attn.query_start_loc, &batch.query_start_loc)?;
        step.write_u32(&inputs.attn.seq_lens, &batch.seq_lens)?;
        step.write_u32(&inputs.attn.block_table, &batch.block_table)?;
        Ok(inputs)
    }
}

/// The activation buffers: the residual stream `x` (and `x2`, its other buffer, for models with
/// Gemma's sandwich norms: the linears that take a sandwich in their prologue write the new
/// residual there), the normed input `h` (where norms are not
/// fused into the linears they feed), the fused Q/K/V row `qkv`, the attention output `att`,
/// the MLP's activation `act`; `o`, a projection's output before Gemma's post-norm (normed and
/// added into `x`); and the gate and up outputs of an MLP whose two projections have different types.
#[derive(Debug)]
struct Activations {
    x: Tensor,
    x2: Option<Tensor>,
    h: Tensor,
    o: Tensor,
    qkv: Tensor,
    att: Tensor,
    act: Tensor,
    gate_up: Option<[Tensor; 2]>,
    /// The gate's and up's outputs side by side, `[T, 2 · ff]`, for a stacked gate and up.
    gate_up_stacked: Option<Tensor>,
    /// A mixture-of-experts model's router logits and weighted expert outputs.
    moe: Option<MoeBuffers>,
}

impl Activations {
    /// The buffers for `max_tokens` tokens of `model` (gate and up outputs only when a layer
    /// keeps its gate and up projections apart or stacked).
    fn new(ctx: &GpuContext, model: &LlamaModel, max_tokens: usize) -> Result<Self, GpuError> {
        let config = &model.config;
        let f = |width: usize| ctx.tensor(Elem::F32, &[max_tokens, width]);
        let (hd, q, kv, ff) =
            (config.hidden_size, config.q_size(), config.kv_size(), config.intermediate_size);
        let dense = |keep: fn(&GateUp) -> bool| {
            model
                .layers
                .iter()
                .any(|l| matches!(&l.mlp, GpuMlp::Dense(GatedMlp { gate_up, .. }) if keep(gate_up)))
        };
        let split_mlp = dense(|g| matches!(g, GateUp::Split { .. }));
        let stacked_mlp = dense(|g| matches!(g, GateUp::Stacked(_)));
        Ok(Self {
            x: f(hd)?,
            x2: if config.sandwich_norms { Some(f(hd)?) } else { None },
            h: f(hd)?,
            o: f(hd)?,
            qkv: f(q + 2 * kv)?,
            att: f(q)?,
            act: f(ff)?,
            gate_up: if split_mlp { Some([f(ff)?, f(ff)?]) } else { None },
            gate_up_stacked: if stacked_mlp { Some(f(2 * ff)?) } else { None },
            moe: config.moe.as_ref().map(|moe| MoeBuffers::new(ctx, moe, hd, max_tokens)).transpose()?,
        })
    }

    /// The residual stream's other buffer than `x` (one of the two), if the model has two.
    fn other(&self, x: &Tensor) -> Option<&Tensor> {
        let x2 = self.x2.as_ref()?;
        Some(if std::ptr::eq(x, &self.x) { x2 } else { &self.x })
    }

    /// The same buffers viewed for `t` tokens.
    fn rows(&self, t: usize) -> Result<Self, GpuError> {
        Ok(Self {
            x: self.x.rows(t)?,
            x2: self.x2.as_ref().map(|x2| x2.rows(t)).transpose()?,
            h: self.h.rows(t)?,
            o: self.o.rows(t)?,
            qkv: self.qkv.rows(t)?,
            att: self.att.rows(t)?,
            act: self.act.rows(t)?,
            gate_up: match &self.gate_up {
                Some([g, u]) => Some([g.rows(t)?, u.rows(t)?]),
                None => None,
            },
            gate_up_stacked: self.gate_up_stacked.as_ref().map(|g| g.rows(t)).transpose()?,
            moe: self.moe.as_ref().map(|m| m.rows(t)).transpose()?,
        })
    }
}

impl GpuLayer {
    /// Records decoder layer `index`: `x += attention(norm(x))`, then `x += mlp(norm(x))` (each
    /// output normed once more first in Gemma's sandwich). A mixture-of-experts layer submits
    /// `step` to read its router's choices and goes on in the step it returns. `pending`: the
    /// previous layer's post-MLP norm, whose add of `o` into `x` this layer's input norm does
    /// (one dispatch for both where the norm is not fused into the linears); a dense layer
    /// with a sandwich leaves its own there. `x`: the buffer of `a` holding the residual stream,
    /// moved to the other one by each sandwich the linears take in their prologue.
    #[allow(clippy::too_many_arguments)]
    fn record<'c, 'm, 'a>(
        &'m self,
        mut step: Step<'c>,
        model: &LlamaModel,
        inputs: &Inputs,
        a: &'a Activations,
        x: &mut &'a Tensor,
        kv: KvLayer<'_>,
        lora: Option<LayerLora<'_>>,
        pending: &mut Option<&'m Tensor>,
    ) -> Result<Step<'c>, LlamaError> {
        let KvLayer { cache, index } = kv;
        let eps = model.config.rms_norm_eps;
        if let Some(lora) = lora {
            if let Some(post) = pending.take() {
                step.rms_norm_add(&a.o, post, eps, x)?;
            }
            self.record_with_lora(&mut step, model, inputs, a, x, kv, lora)?;
            return Ok(step);
        }
        let h = match pending.take() {
            Some(post) => {
                let (h, moved) =
                    step.sandwich_input(&a.o, post, x, &self.attn_norm, eps, &a.h, a.other(x))?;
                *x = moved;
                h
            }
            None => step.rms_norm_input(x, &self.attn_norm, eps, &a.h)?,
        };
        self.attention(&mut step, model, h, a, inputs, KvLayer { cache, index })?;
        let o = Projection { weight: &self.o_proj, bias: self.o_bias.as_ref() };
        match &self.mlp {
            GpuMlp::Dense(mlp) => {
                // Gemma's post-attention norm and the pre-MLP norm in one dispatch (in tiles
                // the norm is not fused into).
                let h = match &self.post_attn_norm {
                    Some(post) => {
                        step.linear_into(&a.att, o.weight, o.bias, &a.o, 0)?;
                        let other = a.other(x);
                        let (h, moved) =
                            step.sandwich_input(&a.o, post, x, &self.ffn_norm, eps, &a.h, other)?;
                        *x = moved;
                        h
                    }
                    None => {
                        add_projection(&mut step, a, x, &a.att, o, None, eps)?;
                        step.rms_norm_input(x, &self.ffn_norm, eps, &a.h)?
                    }
                };
                let outputs = (a.gate_up.as_ref(), a.gate_up_stacked.as_ref());
                record_gate_up(&mut step, &mlp.gate_up, activation(&model.config), h, &a.act, outputs)?;
                match &self.post_ffn_norm {
                    Some(post) => {
                        step.linear_into(&a.act, &mlp.down_proj, None, &a.o, 0)?;
                        *pending = Some(post);
                    }
                    None => {
                        let down = Projection { weight: &mlp.down_proj, bias: None };
                        add_projection(&mut step, a, x, &a.act, down, None, eps)?;
                    }
                }
                Ok(step)
            }
            GpuMlp::Experts(moe) => {
                add_projection(&mut step, a, x, &a.att, o, self.post_attn_norm.as_ref(), eps)?;
                step.rms_norm(x, &self.ffn_norm, eps, &a.h)?;
                let buffers = a.moe.as_ref().ok_or_else(|| {
                    LlamaError::InvalidBatch("a workspace made for another model: no expert buffers".into())
                })?;
                let act = activation(&model.config);
                Ok(moe.record(step, x, &a.h, buffers, act)?)
            }
        }
    }

    /// [`Self::record`] for a step with LoRA rows: the unfused path, every input a LoRA product
    /// reads materialized, each adapter's product added after its base linear; the residual
    /// stream in `x`.
    #[allow(clippy::too_many_arguments)]
    fn record_with_lora(
        &self,
        step: &mut Step<'_>,
        model: &LlamaModel,
        inputs: &Inputs,
        a: &Activations,
        x: &Tensor,
        kv: KvLayer<'_>,
        lora: LayerLora<'_>,
    ) -> Result<(), LlamaError> {
        let KvLayer { cache, index } = kv;
        let eps = model.config.rms_norm_eps;
        // The unfused path: every input a LoRA product reads is materialized.
        let c = &model.config;
        step.rms_norm(x, &self.attn_norm, eps, &a.h)?;
        for p in &self.qkv {
            step.linear_into(&a.h, &p.weight, p.bias.as_ref(), &a.qkv, p.col0)?;
        }
        let (q, kv) = (c.q_size(), c.kv_size());
        let qkv_targets = [LoraTarget::Q, LoraTarget::K, LoraTarget::V];
        let qkv = lora.shrink(step, &qkv_targets, &a.h)?;
        lora.expand(step, &qkv, &qkv_targets, &a.qkv, LoraColumns { col0: 0, first: q, rest: kv })?;
        self.attention_after_qkv(step, model, a, inputs, KvLayer { cache, index })?;
        let o = Projection { weight: &self.o_proj, bias: self.o_bias.as_ref() };
        lora.add_projection(step, a, x, (&a.att, o), self.post_attn_norm.as_ref(), eps, LoraTarget::O)?;
        step.rms_norm(x, &self.ffn_norm, eps, &a.h)?;
        let GpuMlp::Dense(mlp) = &self.mlp else {
            return Err(LlamaError::InvalidBatch(
                "LoRA adapters on a mixture-of-experts layer are not supported".into(),
            ));
        };
        let ff = c.intermediate_size;
        let gate_up = [LoraTarget::Gate, LoraTarget::Up];
        match (&mlp.gate_up, &a.gate_up_stacked, &a.gate_up) {
            (GateUp::Stacked(w), Some(both), _) => {
                step.linear(&a.h, w, both)?;
                let shrunk = lora.shrink(step, &gate_up, &a.h)?;
                lora.expand(step, &shrunk, &gate_up, both, LoraColumns { col0: 0, first: ff, rest: ff })?;
                step.gated_mul_halves(activation(c), both, &a.act)?;
            }
            (GateUp::Split { gate, up }, _, Some([gate_out, up_out])) => {
                step.linear(&a.h, gate, gate_out)?;
                step.linear(&a.h, up, up_out)?;
                let shrunk = lora.shrink(step, &gate_up, &a.h)?;
                lora.expand(step, &shrunk, &[LoraTarget::Gate], gate_out, LoraColumns::one(0, ff))?;
                lora.expand(step, &shrunk, &[LoraTarget::Up], up_out, LoraColumns::one(0, ff))?;
                step.gated_mul(activation(c), gate_out, up_out, &a.act)?;
            }
            _ => {
                return Err(LlamaError::InvalidBatch(
                    "LoRA rows need the gate and up projections unfused: load with LlamaModel::load_for_lora"
                        .into(),
                ));
            }
        }
        let down = Projection { weight: &mlp.down_proj, bias: None };
        lora.add_projection(step, a, x, (&a.act, down), self.post_ffn_norm.as_ref(), eps, LoraTarget::Down)?;
        Ok(())
    }

    /// `att = attention(rope(q), rope(k), v)` for `q, k, v` projected from `h`, over the paged
    /// cache, the new keys and values written into it first; with Q/K norms (Qwen3, Gemma 3),
    /// `q` and `k` are RMS-normed per head before RoPE, by the attention kernel itself in a
    /// decode step on flash attention (`Step::flash_rope_attention`), else by the rope_cache
    /// kernel.
    fn attention(
        &self,
        step: &mut Step<'_>,
        model: &LlamaModel,
        h: LinearInput<'_>,
        a: &Activations,
        inputs: &Inputs,
        kv: KvLayer<'_>,
    ) -> Result<(), LlamaError> {
        let rope = self.rope_args(model, inputs, kv);
        if self.qkv.iter().all(|p| step.fuses_rope_cache(h, &p.weight, p.bias.as_ref(), p.col0, &rope)) {
            for p in &self.qkv {
                step.linear_rope_cache(h, &p.weight, p.bias.as_ref(), &a.qkv, p.col0, &rope)?;
            }
        } else {
            for p in &self.qkv {
                step.linear_into(h, &p.weight, p.bias.as_ref(), &a.qkv, p.col0)?;
            }
            let spec = self.spec(model, kv.index);
            let tokens = a.qkv.shape()[0];
            if self.sinks.is_none() && step.fuses_rope_attention(&rope, &inputs.attn, &spec, tokens) {
                step.flash_rope_attention(&a.qkv, &rope, &inputs.attn, &spec, &a.att)?;
                return Ok(());
            }
            step.rope_cache(&a.qkv, &rope)?;
        }
        self.paged_attention(step, model, a, inputs, kv)
    }

    /// [`Self::attention`] from the Q/K/V row already in `a.qkv`: RoPE, the K/V write and the
    /// attention, as the unfused path records them.
    fn attention_after_qkv(
        &self,
        step: &mut Step<'_>,
        model: &LlamaModel,
        a: &Activations,
        inputs: &Inputs,
        kv: KvLayer<'_>,
    ) -> Result<(), LlamaError> {
        step.rope_cache(&a.qkv, &self.rope_args(model, inputs, kv))?;
        self.paged_attention(step, model, a, inputs, kv)
    }

    /// The RoPE-and-cache-write arguments of layer `kv.index` (its window's frequencies).
    fn rope_args<'a>(
        &'a self,
        model: &'a LlamaModel,
        inputs: &'a Inputs,
        kv: KvLayer<'a>,
    ) -> RopeCacheArgs<'a> {
        let c = &model.config;
        let KvLayer { cache, index } = kv;
        let inv_freq = match (&model.local_inv_freq, c.layer_windows[index]) {
            (Some(local), Some(_)) => local,
            _ => &model.inv_freq,
        };
        RopeCacheArgs {
            positions: &inputs.positions,
            inv_freq,
            qk_norm: self.qk_norm.as_ref().map(|w| (w, c.rms_norm_eps)),
            slot_mapping: &inputs.slots,
            cache,
            layer: index,
            heads: c.num_attention_heads,
            mode: model.rope_mode,
        }
    }

    /// How layer `index` attends: its heads, scale, window and soft-cap.
    fn spec(&self, model: &LlamaModel, index: usize) -> AttentionSpec {
        let c = &model.config;
        AttentionSpec {
            heads: c.num_attention_heads,
            scale: c.attention_scale,
            window: c.layer_windows[index],
            softcap: c.attn_logit_softcap,
        }
    }

    /// `att = attention(q, k, v)` over the paged cache, Q/K/V in `a.qkv` after RoPE.
    fn paged_attention(
        &self,
        step: &mut Step<'_>,
        model: &LlamaModel,
        a: &Activations,
        inputs: &Inputs,
        kv: KvLayer<'_>,
    ) -> Result<(), LlamaError> {
        let KvLayer { cache, index } = kv;
        let spec = self.spec(model, index);
        let sinks = self.sinks.as_ref();
        step.paged_attention_sinks(&a.qkv, cache, index, &inputs.attn, &spec, sinks, &a.att)?;
        Ok(())
    }
}

/// The gated MLP's activation: SiLU or Gemma's GELU-tanh.
fn activation(c: &ModelConfig) -> GateActivation {
    match c.mlp_activation {
        MlpActivation::Silu => GateActivation::Silu,
        MlpActivation::GeluTanh => GateActivation::GeluTanh,
    }
}

/// Each token row's LoRA adapter for [`LlamaModel::forward_with_lora`].
#[derive(Debug, Clone, Copy)]
pub struct LoraRows<'a> {
    /// The adapters on the GPU.
    pub slots: &'a LoraSlots,
    /// `[T]`: each row's slot, or [`NO_LORA`].
    pub rows: &'a [u32],
}

/// A step's LoRA rows written to the GPU.
struct StepLora<'a> {
    slots: &'a LoraSlots,
    rows: Tensor,
    shrunk: Tensor,
    /// The rows' groups for the shrink and the expand.
    groups: Tensor,
    /// The distinct slots the step's rows use.
    used: Vec<u32>,
}

impl<'a> LoraRows<'a> {
    /// Writes the rows' slots into the slots' row buffer through `step`'s upload.
    fn write(self, step: &mut Step<'_>, t: usize) -> Result<StepLora<'a>, LlamaError> {
        let capacity = self.slots.capacity() as u32;
        if self.rows.len() != t || self.rows.iter().any(|&s| s != NO_LORA && s >= capacity) {
            return Err(LlamaError::InvalidBatch(format!(
                "LoRA rows: {} slots for {t} tokens, each below {capacity} or none",
                self.rows.len()
            )));
        }
        let (rows, shrunk) = self.slots.scratch(t)?;
        step.write_u32(&rows, self.rows)?;
        let (group_rows, groups) = self.slots.groups(self.rows)?;
        step.write_u32(&groups, &group_rows)?;
        let mut used: Vec<u32> = self.rows.iter().copied().filter(|&s| s != NO_LORA).collect();
        used.sort_unstable();
        used.dedup();
        Ok(StepLora { slots: self.slots, rows, shrunk, groups, used })
    }
}

impl StepLora<'_> {
    fn layer(&self, layer: usize) -> LayerLora<'_> {
        LayerLora {
            bank: self.slots.layer(layer),
            rows: &self.rows,
            shrunk: &self.shrunk,
            groups: &self.groups,
            touched: self.slots.touched(self.used.iter().copied(), layer),
        }
    }
}

/// One layer's LoRA products of a step.
#[derive(Clone, Copy)]
struct LayerLora<'a> {
    bank: &'a LoraBank,
    rows: &'a Tensor,
    shrunk: &'a Tensor,
    groups: &'a Tensor,
    /// The targets the step's adapters touch in this layer: the others take no dispatch.
    touched: u8,
}

impl<'a> LayerLora<'a> {
    /// Shrinks `x` for `targets` (consecutive in bank order, read from the same input) in one
    /// dispatch, or none where the step's adapters touch none of them.
    fn shrink(
        &self,
        step: &mut Step<'_>,
        targets: &[LoraTarget],
        x: &Tensor,
    ) -> Result<LoraShrunk<'a>, LlamaError> {
        let shrunk = LoraShrunk { t: self.shrunk, targets: bank_range(targets) };
        if targets.iter().any(|t| self.touches(*t)) {
            step.lora_shrink(self.site(), x, &shrunk)?;
        }
        Ok(shrunk)
    }

    /// `y += scale · B t` of each row's adapter for `targets` (a run in bank order, their
    /// columns of `y` as `columns` says), their shrunk rows `t` in `shrunk`.
    fn expand(
        &self,
        step: &mut Step<'_>,
        shrunk: &LoraShrunk<'_>,
        targets: &[LoraTarget],
        y: &Tensor,
        columns: LoraColumns,
    ) -> Result<(), LlamaError> {
        if targets.iter().any(|t| self.touches(*t)) {
            step.lora_expand(self.site(), shrunk, bank_range(targets), y, columns)?;
        }
        Ok(())
    }

    /// `x += proj(input)`, or with Gemma's sandwich `x += post_norm(proj(input))`, with each
    /// row's adapter's product for `target` added to the projection. Where nothing comes
    /// between the projection and the residual stream, the product is added into `x` after the
    /// projection's fused add ([`add_projection`]'s, so rows without an adapter get its bits);
    /// else into `o` before the add.
    #[allow(clippy::too_many_arguments)]
    fn add_projection(
        &self,
        step: &mut Step<'_>,
        a: &Activations,
        x: &Tensor,
        (input, proj): (&Tensor, Projection<'_>),
        post_norm: Option<&Tensor>,
        eps: f32,
        target: LoraTarget,
    ) -> Result<(), LlamaError> {
        let shrunk = self.shrink(step, &[target], input)?;
        let n = x.shape()[1];
        if post_norm.is_none() && proj.bias.is_none() {
            add_projection(step, a, x, input, proj, None, eps)?;
            return self.expand(step, &shrunk, &[target], x, LoraColumns::one(0, n));
        }
        step.linear_into(input, proj.weight, proj.bias, &a.o, 0)?;
        self.expand(step, &shrunk, &[target], &a.o, LoraColumns::one(0, n))?;
        match post_norm {
            Some(norm) => step.rms_norm_add(&a.o, norm, eps, x)?,
            None => step.add_in_place(x, &a.o)?,
        }
        Ok(())
    }

    fn touches(&self, target: LoraTarget) -> bool {
        self.touched & 1 << target.index() != 0
    }

    fn site(&self) -> LoraSite<'a> {
        LoraSite { bank: self.bank, rows: self.rows, groups: self.groups }
    }
}

/// The bank's entries of `targets`, a run in bank order.
fn bank_range(targets: &[LoraTarget]) -> std::ops::Range<usize> {
    let first = targets.first().map_or(0, |t| t.index());
    debug_assert!(targets.iter().zip(first..).all(|(t, i)| t.index() == i), "{targets:?} not in bank order");
    first..first + targets.len()
}

/// One layer of the paged KV cache.
#[derive(Debug, Clone, Copy)]
struct KvLayer<'a> {
    cache: &'a KvCache,
    index: usize,
}

/// A projection's weight and its bias, if any.
#[derive(Clone, Copy)]
struct Projection<'a> {
    weight: &'a Weight,
    bias: Option<&'a Tensor>,
}

/// `x += proj(input)`, or with Gemma's sandwich `x += post_norm(proj(input))` (`o` holds the
/// projection, normed and added in one dispatch); a biased projection (gpt-oss's output) goes
/// through `o` too. `x`: the residual stream.
fn add_projection(
    step: &mut Step<'_>,
    a: &Activations,
    x: &Tensor,
    input: &Tensor,
    proj: Projection<'_>,
    post_norm: Option<&Tensor>,
    eps: f32,
) -> Result<(), LlamaError> {
    match (post_norm, proj.bias) {
        (Some(norm), bias) => {
            step.linear_into(input, proj.weight, bias, &a.o, 0)?;
            step.rms_norm_add(&a.o, norm, eps, x)?;
        }
        (None, Some(bias)) => {
            step.linear_into(input, proj.weight, Some(bias), &a.o, 0)?;
            step.add_in_place(x, &a.o)?;
        }
        (None, None) => step.linear_add(input, proj.weight, x)?,
    }
    Ok(())
}

/// Uploads a model's tensors, counting them on the progress bar.
struct Loader<'a> {
    ctx: &'a GpuContext,
    config: &'a ModelConfig,
    bar: &'a ProgressBar,
    /// Q's and K's rows go in interleaved RoPE order (a half-split model without Q/K norms).
    interleave_qk: bool,
    /// Never fuse the gate and up projections into a gated weight: stack a dense layer's when
    /// they share a type, else keep them apart (LoRA serving).
    split_mlp: bool,
}

impl Loader<'_> {
    /// One matrix, as stored.
    fn matrix(&self, name: &str, t: &TensorView<'_>) -> Result<Weight, LlamaError> {
        let (rows, cols) = matrix_dims(name, t)?;
        let w = self.ctx.upload_weight(name, t.dtype, rows, cols, t.data)?;
        self.bar.inc(1);
        Ok(w)
    }

    /// Vectors uploaded as one f32 tensor of `shape`, each value plus `offset`.
    fn vectors(&self, shape: &[usize], ts: &[&TensorView<'_>], offset: f32) -> Result<Tensor, LlamaError> {
        let values: Vec<f32> = ts.iter().flat_map(|t| t.to_f32()).map(|w| w + offset).collect();
        let v = self.ctx.upload_f32(shape, &values)?;
        self.bar.inc(ts.len() as u64);
        Ok(v)
    }

    /// The stored bytes of Q, K and V (weights or biases), Q's and K's rows in interleaved RoPE
    /// order (as llama.cpp's converter stores Llama's) when the model loads so, else as they
    /// are: a half-split model then rotates neighbouring columns, the same attention scores.
    fn rope_rows<'t>(&self, qkv: [&TensorView<'t>; 3]) -> Result<[Cow<'t, [u8]>; 3], LlamaError> {
        let (c, hd) = (self.config, self.config.head_dim);
        let rows = |t: &TensorView<'t>, heads: usize| -> Result<Cow<'t, [u8]>, LlamaError> {
            if !self.interleave_qk {
                return Ok(Cow::Borrowed(t.data));
            }
            let shape = &t.shape;
            let rows = interleave_rope_rows(t.data, heads, hd).ok_or_else(|| {
                LlamaError::Unsupported(format!("{heads} heads of {hd} rows in a tensor of shape {shape:?}"))
            })?;
            Ok(Cow::Owned(rows))
        };
        let [q, k, v] = qkv;
        Ok([rows(q, c.num_attention_heads)?, rows(k, c.num_key_value_heads)?, Cow::Borrowed(v.data)])
    }

    /// What a norm's stored weights need added: Gemma's HF norms hold `w` of `x̂ · (1 + w)`,
    /// and the 1 is added here, once.
    fn norm_offset(&self) -> f32 {
        if self.config.norm_weight_plus_one { 1.0 } else { 0.0 }
    }

    /// A norm's weights.
    fn norm(&self, t: &TensorView<'_>) -> Result<Tensor, LlamaError> {
        self.vectors(&t.shape, &[t], self.norm_offset())
    }

    fn layer(&self, l: usize, w: &LayerWeights<'_>) -> Result<GpuLayer, LlamaError> {
        let hd = self.config.head_dim;
        Ok(GpuLayer {
            attn_norm: self.norm(&w.attn_norm)?,
            qkv: self.qkv(l, w)?,
            qk_norm: match &w.qk_norm {
                Some([q, k]) => Some(self.vectors(&[2, hd], &[q, k], self.norm_offset())?),
                None => None,
            },
            o_proj: self.matrix(&format!("layers.{l}.o_proj"), &w.o_proj)?,
            o_bias: w.o_bias.as_ref().map(|b| self.vectors(&b.shape, &[b], 0.0)).transpose()?,
            sinks: w.sinks.as_ref().map(|s| self.vectors(&s.shape, &[s], 0.0)).transpose()?,
            ffn_norm: self.norm(&w.ffn_norm)?,
            post_attn_norm: w.post_norms.as_ref().map(|[attn, _]| self.norm(attn)).transpose()?,
            post_ffn_norm: w.post_norms.as_ref().map(|[_, ffn]| self.norm(ffn)).transpose()?,
            mlp: match &w.mlp {
                MlpWeights::Dense(mlp) => GpuMlp::Dense(self.gated_mlp(&format!("layers.{l}"), mlp, true)?),
                MlpWeights::Experts { router, router_bias, experts, shared } => GpuMlp::Experts(
                    MoeLayer {
                        router: self.matrix(&format!("layers.{l}.router"), router)?,
                        router_bias: router_bias
                            .as_ref()
                            .map(|b| self.vectors(&b.shape, &[b], 0.0))
                            .transpose()?,
                        swiglu_limit: self.config.swiglu_limit,
                        experts: self.experts(l, experts)?,
                        shared: match shared {
                            Some(s) => Some(Box::new(SharedExpert {
                                mlp: self.gated_mlp(&format!("layers.{l}.shared_expert"), &s.mlp, false)?,
                                gate: self.matrix(&format!("layers.{l}.shared_expert_gate"), &s.gate)?,
                            })),
                            None => None,
                        },
                        moe: self.config.moe.ok_or_else(|| {
                            LlamaError::Unsupported("expert weights in a model without experts".into())
                        })?,
                        by_id: false,
                    }
                    .on_context(self.ctx),
                ),
            },
        })
    }

    /// A mixture's experts: each projection of every expert stacked in one binding, each expert's
    /// weights views of its rows ([`GpuContext::upload_stacked_weight`]); where the experts
    /// differ in type or shape, or a stack would pass the binding limit, each expert's own.
    fn experts(&self, l: usize, experts: &[ExpertWeights<'_>]) -> Result<Vec<GatedMlp>, LlamaError> {
        if let Some(stacked) = self.stacked_experts(l, experts)? {
            return Ok(stacked);
        }
        experts
            .iter()
            .enumerate()
            .map(|(e, mlp)| self.gated_mlp(&format!("layers.{l}.experts.{e}"), mlp, false))
            .collect()
    }

    /// The experts as views of stacked weights, `None` where they cannot be stacked.
    fn stacked_experts(
        &self,
        l: usize,
        experts: &[ExpertWeights<'_>],
    ) -> Result<Option<Vec<GatedMlp>>, LlamaError> {
        type Pick = for<'e, 'a> fn(&'e ExpertWeights<'a>) -> &'e TensorView<'a>;
        let (gate, up, down): (Pick, Pick, Pick) = (|e| &e.gate_proj, |e| &e.up_proj, |e| &e.down_proj);
        let Some(first) = experts.first() else { return Ok(None) };
        let alike =
            |f: Pick| experts.iter().all(|e| f(e).dtype == f(first).dtype && f(e).shape == f(first).shape);
        if !(alike(gate) && alike(up) && alike(down)) {
            return Ok(None);
        }
        let stack = |f: Pick| -> Vec<u8> { experts.iter().flat_map(|e| f(e).data.iter().copied()).collect() };
        let n = experts.len();
        let upload =
            |part: &str, t: &TensorView<'_>, groups: &[&[u8]]| -> Result<Option<Vec<Weight>>, LlamaError> {
                let name = format!("layers.{l}.experts.{part}");
                let (rows, cols) = matrix_dims(&name, t)?;
                Ok(self.ctx.upload_stacked_weight(&name, t.dtype, n, rows, cols, groups)?)
            };
        // as `gate_up` fuses them: a biased expert (gpt-oss) keeps its gate and up apart
        let fused = !self.split_mlp
            && first.biases.is_none()
            && first.gate_proj.dtype == first.up_proj.dtype
            && first.gate_proj.shape == first.up_proj.shape;
        let (gates, ups) = (stack(gate), stack(up));
        let gate_ups: Vec<GateUp> = if fused {
            let Some(views) = upload("gate_up_proj", &first.gate_proj, &[&gates, &ups])? else {
                return Ok(None);
            };
            views.into_iter().map(GateUp::Gated).collect()
        } else {
            let Some(g) = upload("gate_proj", &first.gate_proj, &[&gates])? else { return Ok(None) };
            let Some(u) = upload("up_proj", &first.up_proj, &[&ups])? else { return Ok(None) };
            g.into_iter().zip(u).map(|(gate, up)| GateUp::Split { gate, up }).collect()
        };
        let Some(downs) = upload("down_proj", &first.down_proj, &[&stack(down)])? else { return Ok(None) };
        self.bar.inc(3 * n as u64);
        let biases = self.stacked_biases(experts)?;
        let out = gate_ups
            .into_iter()
            .zip(downs)
            .map(|(gate_up, down_proj)| GatedMlp { gate_up, down_proj, biases: biases.clone() })
            .collect();
        Ok(Some(out))
    }

    /// The experts' gate, up and down biases (gpt-oss's) stacked per projection, `[E, ff]`,
    /// `[E, ff]` and `[E, hidden]`, one copy every expert's view shares: a linear through an
    /// expert's view adds its row, one by ids each row's expert's.
    fn stacked_biases(&self, experts: &[ExpertWeights<'_>]) -> Result<Option<Box<[Tensor; 3]>>, LlamaError> {
        let Some(first) = experts.first().and_then(|e| e.biases.as_ref()) else { return Ok(None) };
        let stack = |i: usize| -> Result<Tensor, LlamaError> {
            let one = &first[i];
            let views =
                experts
                    .iter()
                    .map(|e| {
                        e.biases.as_ref().map(|b| &b[i]).filter(|b| b.shape == one.shape).ok_or_else(|| {
                            LlamaError::Unsupported("experts whose biases differ in shape".into())
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
            self.vectors(&[experts.len(), one.shape.iter().product()], &views, 0.0)
        };
        Ok(Some(Box::new([stack(0)?, stack(1)?, stack(2)?])))
    }

    /// A gated MLP (a `dense` layer's, or one expert's), its weights named after `prefix`.
    fn gated_mlp(&self, prefix: &str, w: &ExpertWeights<'_>, dense: bool) -> Result<GatedMlp, LlamaError> {
        let bias = |t: &TensorView<'_>| self.vectors(&t.shape, &[t], 0.0);
        let biases = match &w.biases {
            Some([g, u, d]) => Some(Box::new([bias(g)?, bias(u)?, bias(d)?])),
            None => None,
        };
        Ok(GatedMlp {
            gate_up: self.gate_up(prefix, w, dense)?,
            down_proj: self.matrix(&format!("{prefix}.down_proj"), &w.down_proj)?,
            biases,
        })
    }

    /// Q, K and V as one stacked weight (and one bias) when they share a type, else three
    /// projections into their columns of the same row; Q's and K's rows in interleaved RoPE
    /// order when the model loads so.
    fn qkv(&self, l: usize, w: &LayerWeights<'_>) -> Result<Vec<QkvProjection>, LlamaError> {
        let stored = [&w.q_proj, &w.k_proj, &w.v_proj];
        let weight_rows = self.rope_rows(stored)?;
        let weights: [TensorView<'_>; 3] = std::array::from_fn(|i| stored[i].with_data(&weight_rows[i]));
        let views = weights.each_ref();
        let bias_rows = w.qkv_bias.as_ref().map(|b| self.rope_rows(b.each_ref())).transpose()?;
        let bias_views: Option<[TensorView<'_>; 3]> = w
            .qkv_bias
            .as_ref()
            .zip(bias_rows.as_ref())
            .map(|(b, rows)| std::array::from_fn(|i| b[i].with_data(&rows[i])));
        let biases = bias_views.as_ref().map(|b| b.each_ref());
        if views.iter().all(|v| v.dtype == w.q_proj.dtype) {
            let name = format!("layers.{l}.qkv_proj");
            let mut rows = 0;
            let mut data = Vec::with_capacity(views.iter().map(|v| v.data.len()).sum());
            for v in views {
                let (r, _) = matrix_dims(&name, v)?;
                rows += r;
                data.extend_from_slice(v.data);
            }
            let (_, cols) = matrix_dims(&name, &w.q_proj)?;
            let weight = self.ctx.upload_weight(&name, w.q_proj.dtype, rows, cols, &data)?;
            self.bar.inc(3);
            let bias = biases.map(|b| self.vectors(&[rows], &b, 0.0)).transpose()?;
            return Ok(vec![QkvProjection { weight, bias, col0: 0 }]);
        }
        let mut col0 = 0;
        let mut out = Vec::new();
        for (i, (view, part)) in views.into_iter().zip(["q", "k", "v"]).enumerate() {
            let weight = self.matrix(&format!("layers.{l}.{part}_proj"), view)?;
            let bias = biases.map(|b| self.vectors(&[weight.rows()], &[b[i]], 0.0)).transpose()?;
            let rows = weight.rows();
            out.push(QkvProjection { weight, bias, col0 });
            col0 += rows;
        }
        Ok(out)
    }

    /// The gate and up projections as one gated weight when they share a type, else two; for
    /// LoRA serving, a `dense` layer's as one stacked weight when they share a type.
    fn gate_up(&self, prefix: &str, w: &ExpertWeights<'_>, dense: bool) -> Result<GateUp, LlamaError> {
        let alike = w.gate_proj.dtype == w.up_proj.dtype && w.gate_proj.shape == w.up_proj.shape;
        if self.split_mlp && dense && alike && w.biases.is_none() {
            let name = format!("{prefix}.gate_up_proj");
            let (rows, cols) = matrix_dims(&name, &w.gate_proj)?;
            let both = [w.gate_proj.data, w.up_proj.data].concat();
            let weight = self.ctx.upload_weight(&name, w.gate_proj.dtype, 2 * rows, cols, &both)?;
            self.bar.inc(2);
            return Ok(GateUp::Stacked(weight));
        }
        // a biased expert (gpt-oss) keeps its gate and up apart: its biases come before the
        // clamped SwiGLU, which is no gated epilogue
        let fused = !self.split_mlp && w.biases.is_none();
        if fused && alike {
            let name = format!("{prefix}.gate_up_proj");
            let (rows, cols) = matrix_dims(&name, &w.gate_proj)?;
            let weight = self.ctx.upload_gated_weight(
                &name,
                w.gate_proj.dtype,
                rows,
                cols,
                w.gate_proj.data,
                w.up_proj.data,
            )?;
            self.bar.inc(2);
            return Ok(GateUp::Gated(weight));
        }
        Ok(GateUp::Split {
            gate: self.matrix(&format!("{prefix}.gate_proj"), &w.gate_proj)?,
            up: self.matrix(&format!("{prefix}.up_proj"), &w.up_proj)?,
        })
    }
}

fn is_tied(w: &LlamaWeights<'_>) -> bool {
    w.lm_head.data.as_ptr() == w.embed_tokens.data.as_ptr()
}

fn matrix_dims(name: &str, t: &TensorView<'_>) -> Result<(usize, usize), GpuError> {
    match *t.shape {
        [r, c] => Ok((r, c)),
        _ => Err(GpuError::Shape(format!("{name}: expected a matrix, got shape {:?}", t.shape))),
    }
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
        (
            None,
            Some(RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                truncate,
                ..
            }),
        ) => {
            let betas = (f64::from(beta_fast), f64::from(beta_slow));
            let (factor, original) = (f64::from(factor), original_max_position_embeddings);
            return Ok(yarn_inv_freq(c.head_dim, theta, factor, original, betas, truncate));
        }
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
    /// `[B, WorkspaceLimits::max_blocks_per_seq]` block tables, padded with the null block 0.
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
    /// Most sequences in one step.
    pub max_seqs: usize,
    /// Most logits rows in one step: one a sequence, more where speculative decoding verifies
    /// proposals (a row each); at most `max_tokens`.
    pub max_logits_rows: usize,
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
    /// Rows of one group of [`LlamaModel::score_rows`]: as many as keep its pooled
    /// (power-of-two) logits buffer within [`SCORED_GROUP_BYTES`] and the binding limit.
    scored_group_rows: usize,
}

/// Bytes of logits one group of [`LlamaModel::score_rows`] holds on the device and reads
/// back (at least one row).
pub const SCORED_GROUP_BYTES: u64 = 16 << 20;

/// Rows of `row_bytes` that a pooled buffer (its size rounded up to a power of two) holds
/// within `limit` bytes.
fn pooled_rows(limit: u64, row_bytes: u64) -> usize {
    let largest = 1u64 << (63 - limit.max(1).leading_zeros());
    (largest / row_bytes.max(1)) as usize
}

/// The head's buffers for one tile of sampled rows: which token rows, their hidden states
/// gathered and (where the norm is not fused into the LM head) normed, and their logits. A large vocabulary times many sequences would
/// exceed one binding (256 × 151936 × 4 bytes is 155 MB), so the rows are cut into tiles.
#[derive(Debug)]
struct HeadTile {
    indices: Tensor,
    x_rows: Tensor,
    h_rows: Tensor,
    logits: Tensor,
}

impl HeadTile {
    /// Views of its first `rows` rows.
    fn rows(&self, rows: usize) -> Result<Self, GpuError> {
        Ok(Self {
            indices: self.indices.rows(rows)?,
            x_rows: self.x_rows.rows(rows)?,
            h_rows: self.h_rows.rows(rows)?,
            logits: self.logits.rows(rows)?,
        })
    }
}

impl Workspace {
    /// Allocate buffers for `model` and `limits`.
    pub fn new(ctx: &GpuContext, model: &LlamaModel, limits: WorkspaceLimits) -> Result<Self, GpuError> {
        let config = &model.config;
        let WorkspaceLimits { max_tokens: t, max_seqs: b, max_logits_rows: r, max_blocks_per_seq: mb } =
            limits;
        if t == 0 || b == 0 || r == 0 || mb == 0 || r > t {
            return Err(GpuError::Shape(format!(
                "workspace limits must be positive, logits rows at most tokens: {limits:?}"
            )));
        }
        let f = |shape: &[usize]| ctx.tensor(Elem::F32, shape);
        let u = |shape: &[usize]| ctx.tensor(Elem::U32, shape);
        let hd = config.hidden_size;
        let row_bytes = 4 * config.vocab_size as u64;
        let rows_per_tile = (ctx.max_binding_bytes() / row_bytes).min(r as u64) as usize;
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
            acts: Activations::new(ctx, model, t)?,
            head_tiles: (0..r.div_ceil(rows_per_tile))
                .map(|tile| {
                    let rows = rows_per_tile.min(r - tile * rows_per_tile);
                    Ok(HeadTile {
                        indices: u(&[rows])?,
                        x_rows: f(&[rows, hd])?,
                        h_rows: f(&[rows, hd])?,
                        logits: f(&[rows, config.vocab_size])?,
                    })
                })
                .collect::<Result<_, GpuError>>()?,
            scored_group_rows: pooled_rows(ctx.max_binding_bytes().min(SCORED_GROUP_BYTES), row_bytes).max(1),
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
        if t > l.max_tokens || b > l.max_seqs || r > l.max_logits_rows {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scored_group_holds_at_most_16_mib_of_logits() {
        // SmolLM2's 49,152 entries a row: 85 rows (16,711,680 bytes) in a 16 MiB pooled buffer.
        assert_eq!(pooled_rows(SCORED_GROUP_BYTES, 4 * 49_152), 85);
        // Qwen2's 151,936: 27 rows.
        assert_eq!(pooled_rows(SCORED_GROUP_BYTES, 4 * 151_936), 27);
        // A limit that is not a power of two holds what its largest power of two holds.
        assert_eq!(pooled_rows(24 << 20, 4 * 49_152), 85);
    }
}
