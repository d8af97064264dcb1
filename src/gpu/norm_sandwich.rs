//! Gemma's sandwich norms between two linears in one dispatch (`shaders/rms_norm_sandwich.wgsl`):
//! a projection's output `o` normed into the residual stream, `x += rms_norm(o) * post`, then
//! the next linears' input `h = rms_norm(x) * pre`, one workgroup a row, with the bits of the
//! two rms_norm dispatches it replaces. Where the adapter fuses norms into the linears' row
//! tile ([`Capabilities::fuses_norms`](super::Capabilities::fuses_norms): decode's one-row
//! tiles), the second norm goes into the linears instead, as [`Step::rms_norm_input`] does.

use super::GpuError;
use super::bind_cache::Binding;
use super::kernels::{LinearInput, dims2, u};
use super::shader::KernelVariant;
use super::shader::params::RmsNormParams;
use super::step::Step;
use super::tensor::{Elem, Tensor};

impl Step<'_> {
    /// `x += rms_norm(o, post)`, then the input of the linears `rms_norm(x, pre)` feeds: where
    /// the adapter fuses norms into these rows' tile, [`Self::rms_norm_add`] and `x` normed on
    /// the way into the linears; elsewhere [`Self::rms_norm_sandwich`] into `h` (shaped as `x`)
    /// and `h` returned. The same bits either way.
    #[allow(clippy::too_many_arguments)]
    pub fn rms_norm_add_input<'a>(
        &mut self,
        o: &Tensor,
        post: &Tensor,
        x: &'a Tensor,
        pre: &'a Tensor,
        eps: f32,
        h: &'a Tensor,
    ) -> Result<LinearInput<'a>, GpuError> {
        let (rows, _) = dims2(x, "rms_norm_add_input x")?;
        let caps = self.ctx.capabilities();
        if caps.fuses_norms(caps.linear_kernel(rows)) {
            self.rms_norm_add(o, post, eps, x)?;
            return Ok(LinearInput::rms_normed(x, pre, eps));
        }
        self.rms_norm_sandwich(o, post, x, pre, eps, h)?;
        Ok(LinearInput::Plain(h))
    }

    /// `x += rms_norm(o) * post`, then `h = rms_norm(x) * pre`, per row, in one dispatch: the
    /// bits of [`Self::rms_norm_add`] then [`Self::rms_norm`]. `o`, `x`, `h`: f32 `[R, D]`
    /// (distinct tensors), `post`, `pre`: `[D]`.
    pub fn rms_norm_sandwich(
        &mut self,
        o: &Tensor,
        post: &Tensor,
        x: &Tensor,
        pre: &Tensor,
        eps: f32,
        h: &Tensor,
    ) -> Result<(), GpuError> {
        let (rows, d) = dims2(o, "rms_norm_sandwich o")?;
        for (what, w) in [("post", post), ("pre", pre)] {
            w.expect(&format!("rms_norm_sandwich {what}"), Elem::F32, &[d])?;
        }
        x.expect("rms_norm_sandwich x", Elem::F32, &[rows, d])?;
        h.expect("rms_norm_sandwich h", Elem::F32, &[rows, d])?;
        let params = RmsNormParams { rows: u(rows), d: u(d), eps, accumulate: 0 };
        let grid = self.grid_groups(rows);
        let bindings = [
            Binding::tensor("O", o),
            Binding::tensor("POST", post),
            Binding::tensor("X", x),
            Binding::tensor("PRE", pre),
            Binding::tensor("H", h),
        ];
        self.dispatch(KernelVariant::RmsNormSandwich, &params, bindings, grid)
    }
}
