//! Gemma's sandwich norms between two linears in one dispatch (`shaders/rms_norm_sandwich.wgsl`):
//! a projection's output `o` normed into the residual stream, `x += rms_norm(o) * post`, then
//! the next linears' input `h = rms_norm(x) * pre`, one workgroup a row, with the bits of the
//! two rms_norm dispatches it replaces. Where the adapter fuses norms into the linears' row
//! tile ([`Capabilities::fuses_norms`](super::Capabilities::fuses_norms): decode's one-row
//! tiles), the whole sandwich goes into the linears' prologue instead
//! ([`LinearInput::Sandwich`], `shaders/xin_sandwich.wgsl`), which writes the new residual to
//! the stream's other buffer: the residual stream then alternates between two buffers.

use super::GpuError;
use super::bind_cache::Binding;
use super::kernels::{LinearInput, SandwichInput, dims2, u};
use super::shader::KernelVariant;
use super::shader::params::RmsNormParams;
use super::step::Step;
use super::tensor::{Elem, Tensor};

impl Step<'_> {
    /// True when the sandwich before linears of `rows` rows runs in their prologue
    /// ([`Self::sandwich_input`] with a buffer for the new residual): the adapter fuses norms
    /// into these rows' tile.
    pub fn fuses_sandwich(&self, rows: usize) -> bool {
        let caps = self.ctx.capabilities();
        caps.fuses_norms(caps.linear_kernel(rows))
    }

    /// `x' = x + rms_norm(o, post)`, then the input of the linears `rms_norm(x', pre)` feeds,
    /// and the tensor that holds `x'` (the residual stream) after them. Where the adapter fuses
    /// norms into these rows' tile ([`Self::fuses_sandwich`]) and `x_out` is given: no
    /// dispatch, the linears' prologue computes both and writes `x'` to `x_out`
    /// ([`LinearInput::Sandwich`]; every linear that reads the input writes the same `x'`),
    /// which holds the stream once one has run. With no `x_out` there: [`Self::rms_norm_add`]
    /// into `x` and `x` normed on the way into the linears. Elsewhere
    /// [`Self::rms_norm_sandwich`] into `x` and `h` (shaped as `x`), `h` the input. The same
    /// bits every way.
    #[allow(clippy::too_many_arguments)]
    pub fn sandwich_input<'a, 'r: 'a>(
        &mut self,
        o: &'a Tensor,
        post: &'a Tensor,
        x: &'r Tensor,
        pre: &'a Tensor,
        eps: f32,
        h: &'a Tensor,
        x_out: Option<&'r Tensor>,
    ) -> Result<(LinearInput<'a>, &'r Tensor), GpuError> {
        let (rows, _) = dims2(x, "sandwich_input x")?;
        if !self.fuses_sandwich(rows) {
            self.rms_norm_sandwich(o, post, x, pre, eps, h)?;
            return Ok((LinearInput::Plain(h), x));
        }
        match x_out {
            Some(x_out) => {
                let input = SandwichInput { x, o, post, pre, eps, x_out };
                Ok((LinearInput::Sandwich(input), x_out))
            }
            None => {
                self.rms_norm_add(o, post, eps, x)?;
                Ok((LinearInput::rms_normed(x, pre, eps), x))
            }
        }
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
