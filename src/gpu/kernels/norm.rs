//! RMSNorm (`shaders/rms_norm.wgsl`): one workgroup of
//! [`WORKGROUP_SIZE`](crate::gpu::shader::WORKGROUP_SIZE) a row; fused into the next
//! projection instead where the capability layer says so ([`Step::rms_norm_input`]).

use crate::gpu::GpuError;
use crate::gpu::bind_cache::Binding;
use crate::gpu::shader::KernelVariant;
use crate::gpu::shader::params::RmsNormParams;
use crate::gpu::step::Step;
use crate::gpu::tensor::{Elem, Tensor};

use super::linear::LinearInput;
use super::{dims2, u};

impl Step<'_> {
    /// `out = x / sqrt(mean(x²) + eps) * weight` per row; `x`, `out`: f32 `[R, D]`, `weight`: `[D]`.
    pub fn rms_norm(&mut self, x: &Tensor, weight: &Tensor, eps: f32, out: &Tensor) -> Result<(), GpuError> {
        self.record_rms_norm(x, weight, eps, out, false)
    }

    /// `out += x / sqrt(mean(x²) + eps) * weight` per row (Gemma's sandwich: a projection's
    /// output normed and added to the residual stream) in one dispatch, with the bits of
    /// [`Self::rms_norm`] into a scratch tensor then [`Self::add_in_place`] of it into `out`;
    /// `x`, `out`: f32 `[R, D]` (distinct tensors), `weight`: `[D]`.
    pub fn rms_norm_add(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        eps: f32,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        self.record_rms_norm(x, weight, eps, out, true)
    }

    fn record_rms_norm(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        eps: f32,
        out: &Tensor,
        accumulate: bool,
    ) -> Result<(), GpuError> {
        let (rows, d) = dims2(x, "rms_norm x")?;
        weight.expect("rms_norm weight", Elem::F32, &[d])?;
        out.expect("rms_norm out", Elem::F32, &[rows, d])?;
        let params = RmsNormParams { rows: u(rows), d: u(d), eps, accumulate: u32::from(accumulate) };
        let grid = self.grid_groups(rows);
        let bindings =
            [Binding::tensor("X", x), Binding::tensor("WEIGHT", weight), Binding::tensor("OUT", out)];
        self.dispatch(KernelVariant::RmsNorm, &params, bindings, grid)
    }

    /// The input of the linear layers that `rms_norm(x, weight, eps)` feeds: where the adapter
    /// fuses norms into the row tile these rows take ([`Capabilities::fuses_norms`]), `x`
    /// normed on the way into each of them, recording nothing; elsewhere the norm recorded
    /// into `out` (shaped as `x`) and `out` returned. Either way the linears get the same bits.
    pub fn rms_norm_input<'a>(
        &mut self,
        x: &'a Tensor,
        weight: &'a Tensor,
        eps: f32,
        out: &'a Tensor,
    ) -> Result<LinearInput<'a>, GpuError> {
        let (rows, _) = dims2(x, "rms_norm x")?;
        let caps = self.ctx.capabilities();
        if caps.fuses_norms(caps.linear_kernel(rows)) {
            return Ok(LinearInput::rms_normed(x, weight, eps));
        }
        self.rms_norm(x, weight, eps, out)?;
        Ok(LinearInput::Plain(out))
    }
}
