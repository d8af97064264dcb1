//! Token ids moved on the device: [`Step::copy_ids`].

use super::GpuError;
use super::bind_cache::Binding;
use super::shader::KernelVariant;
use super::shader::params::ElementwiseParams;
use super::step::Step;
use super::tensor::{Elem, Tensor};

impl Step<'_> {
    /// `out[d] = src[s]` for each `(s, d)` row of `pairs: u32 [n, 2]`, bit for bit; `src` and
    /// `out` are `u32` tensors of distinct buffers. An index past its tensor is a
    /// [`GpuError::Shape`] where the caller can see it: the pairs are the step's inputs, so the
    /// caller checks them against `src` and `out` when it writes them.
    pub fn copy_ids(&mut self, src: &Tensor, pairs: &Tensor, out: &Tensor) -> Result<(), GpuError> {
        let n = pairs.shape().first().copied().unwrap_or(0);
        pairs.expect("copy_ids pairs", Elem::U32, &[n, 2])?;
        for (what, t) in [("copy_ids src", src), ("copy_ids out", out)] {
            if t.elem() != Elem::U32 {
                return Err(GpuError::Shape(format!("{what}: expected U32, got {:?}", t.elem())));
            }
        }
        if n == 0 {
            return Ok(());
        }
        let variant = KernelVariant::CopyIds;
        let grid = self.grid_1d(variant, n);
        let bindings =
            [Binding::tensor("SRC", src), Binding::tensor("PAIRS", pairs), Binding::tensor("OUT", out)];
        self.dispatch(variant, &ElementwiseParams { n: n as u32, d: 1, value: 0.0 }, bindings, grid)
    }
}
