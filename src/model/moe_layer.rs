//! A mixture-of-experts layer on the GPU. The router's logits and each token's choice of
//! experts and their weights are computed on the device (`Step::moe_route`). A step of at most
//! [`ID_ROUTED_TOKENS`] tokens then runs on the device alone (llama.cpp's `mul_mat_id`): each
//! token's pair with each of its experts is a row, gathered from its token's, through the rows
//! its expert's id names of the stacked weights (`LinearInput::ExpertRows`: the gated MLP,
//! then the down projection, one-row kernels; gpt-oss's biased experts add their expert's row
//! of the stacked biases before the clamped SwiGLU and after the down projection), weighted and put at its slot; nothing is read
//! back, so such a step is recorded whole and can run behind the one before it. A bigger step
//! reads the choices back (the step is submitted there), the host groups the batch's tokens by
//! expert ([`group_by_expert`]), and a new step runs each chosen expert once over the rows that
//! chose it — gathered (unless every row of the batch chose it, as a lone decoding token's
//! experts are: then the rows themselves), the gated MLP (the GEMV for one row, the GEMM for
//! more), the down projection, the rows weighted and put at their tokens' slots. Either way
//! each token's slots are then added to the residual stream in slot order. A token's output
//! depends on its own row only, and has the same bits on either path: its experts and weights
//! come from its own logits on the device, every linear's row is reduced in one order whatever
//! the rows beside it (an expert's view and its rows by id read the same words), and its slots
//! are added in its own routing's order.
//!
//! A shared expert (Qwen2-MoE) runs over every row as one more slot, after the routed ones:
//! its gate's logit is written beside the router's, the routing kernel takes its sigmoid, and
//! its output rows are weighted by it as a routed expert's are by the router. So a token's MLP
//! output is `((e_1 + e_2 + ...) + shared)` in that order, whatever its batch.

use super::gated_mlp::{GateUp, GatedMlp, record_biased_expert, record_gate_up};
use super::moe::{MoeConfig, group_by_expert};
use crate::gpu::{Elem, GateActivation, GpuContext, GpuError, LinearInput, LinearPath, Step, Tensor, Weight};

/// One mixture-of-experts layer's weights on the GPU.
#[derive(Debug)]
pub(super) struct MoeLayer {
    /// The router, `[experts, hidden]`.
    pub(super) router: Weight,
    /// The router's bias, `[experts]` (gpt-oss).
    pub(super) router_bias: Option<Tensor>,
    /// gpt-oss's clamped SwiGLU limit: each expert's projections then carry biases.
    pub(super) swiglu_limit: Option<f32>,
    /// Each expert's gated MLP, in expert order.
    pub(super) experts: Vec<GatedMlp>,
    /// The shared expert every token goes through (Qwen2-MoE).
    pub(super) shared: Option<Box<SharedExpert>>,
    /// Its shape and routing rule.
    pub(super) moe: MoeConfig,
    /// True when its steps of at most [`ID_ROUTED_TOKENS`] route by id on the device: decided
    /// once at load ([`Self::on_context`]).
    pub(super) by_id: bool,
}

/// A shared expert on the GPU: its gated MLP and its gate, `[1, hidden]`.
#[derive(Debug)]
pub(super) struct SharedExpert {
    pub(super) mlp: GatedMlp,
    pub(super) gate: Weight,
}

/// The most tokens a step routes by id on the device (every pair of a token and one of its
/// experts a one-row GEMV through that expert's rows) rather than grouping them on the host:
/// decode-sized steps. Up to here the pairs' rows read about what the grouped path's experts
/// read (few tokens share an expert), without the round trip; past it the grouped GEMMs read
/// each expert once for all its rows, worth the read-back.
pub(crate) const ID_ROUTED_TOKENS: usize = 8;

/// The workspace's buffers of a mixture-of-experts model: each token's router logits (then
/// its shared expert's gate logit), the experts chosen and their weights (slot-major), the
/// shared expert's gates, and the weighted expert outputs (slot-major: one block of `T` rows
/// per routed expert a token takes, then the shared expert's).
#[derive(Debug)]
pub(super) struct MoeBuffers {
    logits: Tensor,
    ids: Tensor,
    weights: Tensor,
    gates: Tensor,
    slots: Tensor,
    slots_per_token: usize,
    experts_per_token: usize,
    /// Per token count `t` of a step routed by id, `1..=ID_ROUTED_TOKENS`, its fixed index
    /// lists (a step's inputs are written before its first dispatch, and these come mid-step).
    by_id: Vec<ByIdRows>,
}

/// The index lists of a step of `t` tokens routed by id: pair `p = slot * t + token`'s token
/// (`p % t`), the pairs' slot rows (`p`), and the shared expert's (`k * t + token`).
#[derive(Debug, Clone)]
struct ByIdRows {
    tokens: Tensor,
    outputs: Tensor,
    shared_outputs: Tensor,
}

impl ByIdRows {
    fn new(ctx: &GpuContext, k: usize, t: usize) -> Result<Self, GpuError> {
        let pairs = k * t;
        let list = |r: std::ops::Range<usize>, f: &dyn Fn(usize) -> usize| -> Result<Tensor, GpuError> {
            ctx.upload_u32(&[r.len()], &r.map(|p| f(p) as u32).collect::<Vec<_>>())
        };
        Ok(Self {
            tokens: list(0..pairs, &|p| p % t)?,
            outputs: list(0..pairs, &|p| p)?,
            shared_outputs: list(pairs..pairs + t, &|p| p)?,
        })
    }
}

impl MoeBuffers {
    /// The buffers for `max_tokens` tokens of `hidden` values.
    pub(super) fn new(
        ctx: &GpuContext,
        moe: &MoeConfig,
        hidden: usize,
        max_tokens: usize,
    ) -> Result<Self, GpuError> {
        let routing = moe.routing();
        let slots_per_token = routing.k + usize::from(routing.shared);
        Ok(Self {
            logits: ctx.tensor(Elem::F32, &[max_tokens, routing.logits_width()])?,
            ids: ctx.tensor(Elem::U32, &[routing.k * max_tokens])?,
            weights: ctx.tensor(Elem::U32, &[routing.k * max_tokens])?,
            gates: ctx.tensor(Elem::U32, &[max_tokens])?,
            slots: ctx.tensor(Elem::F32, &[slots_per_token * max_tokens, hidden])?,
            slots_per_token,
            experts_per_token: routing.k,
            by_id: (1..=ID_ROUTED_TOKENS.min(max_tokens))
                .map(|t| ByIdRows::new(ctx, routing.k, t))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The same buffers viewed for `t` tokens.
    pub(super) fn rows(&self, t: usize) -> Result<Self, GpuError> {
        Ok(Self {
            logits: self.logits.rows(t)?,
            ids: self.ids.rows(self.experts_per_token * t)?,
            weights: self.weights.rows(self.experts_per_token * t)?,
            gates: self.gates.rows(t)?,
            slots: self.slots.rows(self.slots_per_token * t)?,
            slots_per_token: self.slots_per_token,
            experts_per_token: self.experts_per_token,
            by_id: self.by_id.clone(),
        })
    }
}

/// One chosen expert's rows in a step: which tokens (`None`: every token of the batch, in
/// order, so its rows are the normed rows themselves), where their outputs go, their weights.
struct ExpertInputs {
    expert: usize,
    tokens: Option<Tensor>,
    outputs: Tensor,
    scales: Tensor,
}

impl MoeLayer {
    /// True when a step of `t` tokens routes by id on the device (and so is recorded whole):
    /// at most [`ID_ROUTED_TOKENS`] of them, the experts stacked (and their biases, gpt-oss's,
    /// a row an expert), and a path with one-row linear kernels (not the cooperative
    /// matrices').
    pub(super) fn routes_by_id(&self, t: usize) -> bool {
        t <= ID_ROUTED_TOKENS && self.by_id
    }

    /// The layer loaded on `ctx`, with [`Self::by_id`] set: whether its experts can be read
    /// by id there at all.
    pub(super) fn on_context(self, ctx: &GpuContext) -> Self {
        let by_id = self.can_route_by_id(ctx);
        Self { by_id, ..self }
    }

    fn can_route_by_id(&self, ctx: &GpuContext) -> bool {
        let stacked = |w: &Weight| w.expert_words().is_some();
        let gate_up = |mlp: &GatedMlp| match &mlp.gate_up {
            GateUp::Gated(w) => stacked(w),
            GateUp::Split { gate, up } => stacked(gate) && stacked(up),
            GateUp::Stacked(_) => false,
        };
        // biases (gpt-oss's) stacked `[E, n]`, a row an expert
        let biases = |mlp: &GatedMlp| match mlp.biases.as_deref() {
            None => self.swiglu_limit.is_none(),
            Some(biases) => biases.iter().all(|b| b.shape().len() == 2),
        };
        self.experts.iter().all(|mlp| biases(mlp) && gate_up(mlp) && stacked(&mlp.down_proj))
            && !matches!(ctx.capabilities().linear_path(), LinearPath::Coop { .. })
    }

    /// Records `x += moe(h)` for the normed rows `h` (`[T, hidden]`): on the device alone for
    /// a step that [`Self::routes_by_id`], returning `step`; else submits `step` with the
    /// router's choices and returns the step that runs the experts (and what follows).
    pub(super) fn record<'c>(
        &self,
        mut step: Step<'c>,
        x: &Tensor,
        h: &Tensor,
        buffers: &MoeBuffers,
        act: GateActivation,
    ) -> Result<Step<'c>, GpuError> {
        let routing = self.moe.routing();
        if buffers.logits.shape()[1] != routing.logits_width() || buffers.experts_per_token != routing.k {
            return Err(GpuError::Shape("a workspace made for another model's experts".into()));
        }
        step.linear_into(h, &self.router, self.router_bias.as_ref(), &buffers.logits, 0)?;
        if let Some(shared) = &self.shared {
            step.linear_into(h, &shared.gate, None, &buffers.logits, routing.experts)?;
        }
        step.moe_route(&buffers.logits, routing, &buffers.ids, &buffers.weights, &buffers.gates)?;
        let t = h.shape()[0];
        if self.routes_by_id(t) {
            self.record_by_id(&mut step, x, h, buffers, act)?;
            return Ok(step);
        }
        let (ids_read, weights_read) = (step.read(&buffers.ids), step.read(&buffers.weights));
        let (mut out, mut step) = step.submit_and_continue()?;
        let (ids, weights) = (out.u32s(ids_read), out.u32s(weights_read));
        let groups = group_by_expert(routing.experts, routing.k, &ids, &weights);
        // the step's inputs first, then its dispatches
        let mut chosen = Vec::new();
        for (expert, rows) in groups.iter().enumerate().filter(|(_, g)| !g.tokens.is_empty()) {
            let n = rows.tokens.len();
            // a token chooses an expert once and its rows come in order: n == t is every row
            let tokens = match n == t {
                true => None,
                false => {
                    let tokens = step.scratch(Elem::U32, &[n])?;
                    step.write_u32(&tokens, &rows.tokens)?;
                    Some(tokens)
                }
            };
            let inputs = ExpertInputs {
                expert,
                tokens,
                outputs: step.scratch(Elem::U32, &[n])?,
                scales: step.scratch(Elem::U32, &[n])?,
            };
            step.write_u32(&inputs.outputs, &rows.outputs)?;
            step.write_u32(&inputs.scales, &rows.weights)?;
            chosen.push(inputs);
        }
        let shared_outputs = self.shared_outputs(&mut step, t)?;
        let (hidden, ff) = (h.shape()[1], self.moe.expert_intermediate_size);
        for inputs in &chosen {
            let n = inputs.outputs.len();
            let mlp = &self.experts[inputs.expert];
            let gathered;
            let rows = match &inputs.tokens {
                Some(tokens) => {
                    gathered = step.scratch(Elem::F32, &[n, hidden])?;
                    step.gather_rows(h, tokens, &gathered)?;
                    &gathered
                }
                None => h,
            };
            let act_out = step.scratch(Elem::F32, &[n, ff])?;
            let split = split_outputs(&mut step, mlp, n, ff)?;
            let out = step.scratch(Elem::F32, &[n, hidden])?;
            match (self.swiglu_limit, &split) {
                (Some(limit), Some(split)) => {
                    record_biased_expert(&mut step, mlp, limit, (rows, None), &act_out, split, &out)?
                }
                _ => {
                    record_gate_up(
                        &mut step,
                        &mlp.gate_up,
                        act,
                        rows.into(),
                        &act_out,
                        (split.as_ref(), None),
                    )?;
                    step.linear(&act_out, &mlp.down_proj, &out)?;
                }
            }
            step.scatter_rows(&out, &inputs.outputs, &inputs.scales, &buffers.slots)?;
        }
        self.record_shared(&mut step, h, buffers, act, shared_outputs.as_ref())?;
        step.moe_combine(x, &buffers.slots, buffers.slots_per_token)?;
        Ok(step)
    }

    /// The experts of a step that [`Self::routes_by_id`] on the device: pair `p = slot * T +
    /// t` of token `t` is row `p` of every linear, through expert `ids[p]`'s rows, and goes
    /// to slot row `p` weighted by `weights[p]`.
    fn record_by_id(
        &self,
        step: &mut Step<'_>,
        x: &Tensor,
        h: &Tensor,
        buffers: &MoeBuffers,
        act: GateActivation,
    ) -> Result<(), GpuError> {
        let (t, hidden) = (h.shape()[0], h.shape()[1]);
        let (pairs, ff) = (buffers.experts_per_token * t, self.moe.expert_intermediate_size);
        let lists = t
            .checked_sub(1)
            .and_then(|i| buffers.by_id.get(i))
            .ok_or_else(|| GpuError::Shape(format!("{t} tokens routed by id: no index lists for them")))?;
        let rows = step.scratch(Elem::F32, &[pairs, hidden])?;
        step.gather_rows(h, &lists.tokens, &rows)?;
        // any expert's views: the rows by id read the whole stack
        let mlp = &self.experts[0];
        let act_out = step.scratch(Elem::F32, &[pairs, ff])?;
        let split = split_outputs(step, mlp, pairs, ff)?;
        let out = step.scratch(Elem::F32, &[pairs, hidden])?;
        match (self.swiglu_limit, &split) {
            (Some(limit), Some(split)) => {
                record_biased_expert(step, mlp, limit, (&rows, Some(&buffers.ids)), &act_out, split, &out)?
            }
            _ => {
                let by_id = LinearInput::ExpertRows { x: &rows, ids: &buffers.ids };
                record_gate_up(step, &mlp.gate_up, act, by_id, &act_out, (split.as_ref(), None))?;
                let by_id = LinearInput::ExpertRows { x: &act_out, ids: &buffers.ids };
                step.linear(by_id, &mlp.down_proj, &out)?;
            }
        }
        step.scatter_rows(&out, &lists.outputs, &buffers.weights, &buffers.slots)?;
        let shared_outputs = self.shared.as_ref().map(|_| &lists.shared_outputs);
        self.record_shared(step, h, buffers, act, shared_outputs)?;
        step.moe_combine(x, &buffers.slots, buffers.slots_per_token)
    }

    /// The shared expert's slot rows for `t` tokens (the last block), written into a step that
    /// has recorded no dispatch yet; `None` without one.
    fn shared_outputs(&self, step: &mut Step<'_>, t: usize) -> Result<Option<Tensor>, GpuError> {
        if self.shared.is_none() {
            return Ok(None);
        }
        let first = self.moe.experts_per_token * t;
        let outputs = step.scratch(Elem::U32, &[t])?;
        step.write_u32(&outputs, &(first..first + t).map(|r| r as u32).collect::<Vec<_>>())?;
        Ok(Some(outputs))
    }

    /// The shared expert over every row of `h`, to its slot rows `outputs`, weighted by its
    /// gates.
    fn record_shared(
        &self,
        step: &mut Step<'_>,
        h: &Tensor,
        buffers: &MoeBuffers,
        act: GateActivation,
        outputs: Option<&Tensor>,
    ) -> Result<(), GpuError> {
        let (Some(shared), Some(outputs)) = (&self.shared, outputs) else {
            return Ok(());
        };
        let (n, hidden, ff) = (outputs.len(), h.shape()[1], shared.mlp.down_proj.cols());
        let act_out = step.scratch(Elem::F32, &[n, ff])?;
        let split = split_outputs(step, &shared.mlp, n, ff)?;
        let out = step.scratch(Elem::F32, &[n, hidden])?;
        record_gate_up(step, &shared.mlp.gate_up, act, h.into(), &act_out, (split.as_ref(), None))?;
        step.linear(&act_out, &shared.mlp.down_proj, &out)?;
        step.scatter_rows(&out, outputs, &buffers.gates, &buffers.slots)
    }
}

/// Scratch for a split MLP's gate and up outputs (`[n, ff]` each); `None` for a gated one.
fn split_outputs(
    step: &mut Step<'_>,
    mlp: &GatedMlp,
    n: usize,
    ff: usize,
) -> Result<Option<[Tensor; 2]>, GpuError> {
    match mlp.gate_up {
        GateUp::Split { .. } => {
            Ok(Some([step.scratch(Elem::F32, &[n, ff])?, step.scratch(Elem::F32, &[n, ff])?]))
        }
        GateUp::Gated(_) | GateUp::Stacked(_) => Ok(None),
    }
}
