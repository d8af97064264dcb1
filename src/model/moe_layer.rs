//! A mixture-of-experts layer on the GPU. The router's logits and each token's choice of
//! experts and their weights are computed on the device (`Step::moe_route`) and read back (the
//! step is submitted there), the host groups the batch's tokens by expert from them
//! ([`group_by_expert`]), and a new step runs each chosen expert once over the rows that chose
//! it — gathered (unless every row of the batch chose it, as a lone decoding token's experts
//! are: then the rows themselves), the gated MLP (the GEMV for one row, the GEMM for more, every row with the
//! bits of its plain GEMV), the down projection, the rows weighted and put at their tokens'
//! slots — then adds each token's slots to the residual stream in slot order. Experts no token
//! chose are not read. A token's output depends on its own row only: its experts come from its
//! own logits, every linear's row is reduced in one order whatever the rows beside it, and its
//! slots are added in its own routing's order.
//!
//! A shared expert (Qwen2-MoE) runs over every row as one more slot, after the routed ones:
//! its gate's logit is written beside the router's, the routing kernel takes its sigmoid
//! after the routed weights, and its output rows are weighted by it as a routed expert's are
//! by the router. So a token's MLP output is
//! `((e_1 + e_2 + ...) + shared)` in that order, whatever its batch.

use super::gated_mlp::{GateUp, GatedMlp, record_biased_expert, record_gate_up};
use super::moe::{MoeConfig, group_by_expert};
use crate::gpu::{Elem, GateActivation, GpuContext, GpuError, Step, Tensor, Weight};

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
}

/// A shared expert on the GPU: its gated MLP and its gate, `[1, hidden]`.
#[derive(Debug)]
pub(super) struct SharedExpert {
    pub(super) mlp: GatedMlp,
    pub(super) gate: Weight,
}

/// The workspace's buffers of a mixture-of-experts model: each token's router logits (then
/// its shared expert's gate logit), the experts chosen and their weights (then the shared
/// expert's), and its weighted expert outputs (slot-major: one block of `T` rows per routed
/// expert a token takes, then the shared expert's).
#[derive(Debug)]
pub(super) struct MoeBuffers {
    logits: Tensor,
    ids: Tensor,
    weights: Tensor,
    slots: Tensor,
    slots_per_token: usize,
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
        let slots_per_token = routing.weights_width();
        Ok(Self {
            logits: ctx.tensor(Elem::F32, &[max_tokens, routing.logits_width()])?,
            ids: ctx.tensor(Elem::U32, &[max_tokens, routing.k])?,
            weights: ctx.tensor(Elem::F32, &[max_tokens, slots_per_token])?,
            slots: ctx.tensor(Elem::F32, &[slots_per_token * max_tokens, hidden])?,
            slots_per_token,
        })
    }

    /// The same buffers viewed for `t` tokens.
    pub(super) fn rows(&self, t: usize) -> Result<Self, GpuError> {
        Ok(Self {
            logits: self.logits.rows(t)?,
            ids: self.ids.rows(t)?,
            weights: self.weights.rows(t)?,
            slots: self.slots.rows(self.slots_per_token * t)?,
            slots_per_token: self.slots_per_token,
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
    /// Records `x += moe(h)` for the normed rows `h` (`[T, hidden]`): submits `step` with the
    /// router's choices (each token's experts and weights, picked on the device) and returns the step that runs the experts (and what follows).
    pub(super) fn record<'c>(
        &self,
        mut step: Step<'c>,
        x: &Tensor,
        h: &Tensor,
        buffers: &MoeBuffers,
        act: GateActivation,
    ) -> Result<Step<'c>, GpuError> {
        let routing = self.moe.routing();
        if buffers.logits.shape()[1] != routing.logits_width() {
            return Err(GpuError::Shape("a workspace made for another model's experts".into()));
        }
        step.linear_into(h, &self.router, self.router_bias.as_ref(), &buffers.logits, 0)?;
        if let Some(shared) = &self.shared {
            step.linear_into(h, &shared.gate, None, &buffers.logits, routing.experts)?;
        }
        step.moe_route(&buffers.logits, routing, &buffers.ids, &buffers.weights)?;
        let (ids_read, weights_read) = (step.read(&buffers.ids), step.read(&buffers.weights));
        let ctx = step.ctx;
        let mut out = step.submit()?;
        let (ids, weights) = (out.u32s(ids_read), out.f32s(weights_read));
        let groups = group_by_expert(routing.experts, routing.k, &ids, &weights);
        let t = ids.len() / routing.k;
        let mut step = ctx.step();
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
            let bits: Vec<u32> = rows.weights.iter().map(|w| w.to_bits()).collect();
            step.write_u32(&inputs.scales, &bits)?;
            chosen.push(inputs);
        }
        // the shared expert's rows: every token's, to the last slot, weighted by its gate
        let shared_inputs = match self.shared {
            Some(_) => {
                let first = self.moe.experts_per_token * t;
                let outputs = step.scratch(Elem::U32, &[t])?;
                let scales = step.scratch(Elem::U32, &[t])?;
                step.write_u32(&outputs, &(first..first + t).map(|r| r as u32).collect::<Vec<_>>())?;
                let bits: Vec<u32> =
                    weights.chunks_exact(routing.k + 1).map(|w| w[routing.k].to_bits()).collect();
                step.write_u32(&scales, &bits)?;
                Some((outputs, scales))
            }
            None => None,
        };
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
            let split = match mlp.gate_up {
                GateUp::Split { .. } => {
                    Some([step.scratch(Elem::F32, &[n, ff])?, step.scratch(Elem::F32, &[n, ff])?])
                }
                GateUp::Gated(_) => None,
            };
            let out = step.scratch(Elem::F32, &[n, hidden])?;
            match (self.swiglu_limit, &split) {
                (Some(limit), Some(split)) => {
                    record_biased_expert(&mut step, mlp, limit, rows, &act_out, split, &out)?
                }
                _ => {
                    record_gate_up(&mut step, &mlp.gate_up, act, rows.into(), &act_out, split.as_ref())?;
                    step.linear(&act_out, &mlp.down_proj, &out)?;
                }
            }
            step.scatter_rows(&out, &inputs.outputs, &inputs.scales, &buffers.slots)?;
        }
        if let (Some(shared), Some((outputs, scales))) = (&self.shared, &shared_inputs) {
            let (n, ff) = (outputs.len(), shared.mlp.down_proj.cols());
            let act_out = step.scratch(Elem::F32, &[n, ff])?;
            let split = match shared.mlp.gate_up {
                GateUp::Split { .. } => {
                    Some([step.scratch(Elem::F32, &[n, ff])?, step.scratch(Elem::F32, &[n, ff])?])
                }
                GateUp::Gated(_) => None,
            };
            let out = step.scratch(Elem::F32, &[n, hidden])?;
            record_gate_up(&mut step, &shared.mlp.gate_up, act, h.into(), &act_out, split.as_ref())?;
            step.linear(&act_out, &shared.mlp.down_proj, &out)?;
            step.scatter_rows(&out, outputs, scales, &buffers.slots)?;
        }
        step.moe_combine(x, &buffers.slots, buffers.slots_per_token)?;
        Ok(step)
    }
}
