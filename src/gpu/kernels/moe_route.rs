//! A mixture-of-experts router's choice per token on the device (`shaders/moe_route.wgsl`):
//! each token's experts and their weights from its router logits, one invocation a token.

use crate::gpu::GpuError;
use crate::gpu::bind_cache::Binding;
use crate::gpu::shader::KernelVariant;
use crate::gpu::shader::params::MoeRouteParams;
use crate::gpu::step::Step;
use crate::gpu::tensor::{Elem, Tensor};

use super::{dims2, u};

/// How a router weighs the experts it picks (the model's `RouterRule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteRule {
    /// Softmax over every expert, then the top k, their probabilities as they are.
    SoftmaxTopK,
    /// Softmax over every expert, then the top k divided by their sum.
    SoftmaxTopKRenormalized,
    /// The top k logits, then a softmax over those k.
    TopKSoftmax,
}

/// What one mixture-of-experts routing picks: `k` of `experts` by `rule`, and whether each
/// logits row ends with a shared expert's gate logit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeRouting {
    /// Routed experts.
    pub experts: usize,
    /// Experts each token takes.
    pub k: usize,
    /// How their weights come from the logits.
    pub rule: RouteRule,
    /// The logits' column `experts` is the shared expert's gate logit.
    pub shared: bool,
}

impl MoeRouting {
    /// Logits per row: the routed experts', then the shared gate's.
    pub fn logits_width(&self) -> usize {
        self.experts + usize::from(self.shared)
    }
}

impl Step<'_> {
    /// Each token's experts from its row of `logits: f32 [T, routing.logits_width()]`: the `k`
    /// largest router logits, largest first with ties to the lower expert (NaN as the lowest
    /// f32), into `ids: u32 [k * T]` and their weights by the rule into `weights: u32 [k * T]`
    /// (f32 bits, as [`Self::scatter_rows`] takes its scales), both slot-major (slot `s` of
    /// token `t` at `s * T + t`, where its expert's output goes among the slots), and `sigmoid`
    /// of the shared expert's gate logit into `gates: u32 [T]` (f32 bits; not written without
    /// one). A row's values depend on that row alone.
    pub fn moe_route(
        &mut self,
        logits: &Tensor,
        routing: MoeRouting,
        ids: &Tensor,
        weights: &Tensor,
        gates: &Tensor,
    ) -> Result<(), GpuError> {
        let (rows, width) = dims2(logits, "moe_route logits")?;
        let MoeRouting { experts, k, rule, shared } = routing;
        if k == 0 || k > experts || width != routing.logits_width() || logits.elem() != Elem::F32 {
            return Err(GpuError::Shape(format!(
                "moe_route: {k} of {experts} experts (shared: {shared}) from f32 logits {:?} {:?}",
                logits.elem(),
                logits.shape()
            )));
        }
        ids.expect("moe_route ids", Elem::U32, &[k * rows])?;
        weights.expect("moe_route weights", Elem::U32, &[k * rows])?;
        gates.expect("moe_route gates", Elem::U32, &[rows])?;
        if rows == 0 {
            return Ok(());
        }
        let variant = KernelVariant::MoeRoute;
        let grid = self.grid_1d(variant, rows);
        let params = MoeRouteParams {
            rows: u(rows),
            experts: u(experts),
            k: u(k),
            stride: u(width),
            rule: match rule {
                RouteRule::SoftmaxTopK => 0,
                RouteRule::SoftmaxTopKRenormalized => 1,
                RouteRule::TopKSoftmax => 2,
            },
            gate: u32::from(shared),
        };
        let bindings = [
            Binding::tensor("LOGITS", logits),
            Binding::tensor("IDS", ids),
            Binding::tensor("WEIGHTS", weights),
            Binding::tensor("GATES", gates),
        ];
        self.dispatch(variant, &params, bindings, grid)
    }
}
