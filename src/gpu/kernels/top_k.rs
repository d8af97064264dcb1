//! Top-k and argmax per row (`shaders/top_k.wgsl`): one workgroup of
//! [`TOP_K_WG`](crate::gpu::shader::TOP_K_WG) a row.

use crate::gpu::GpuError;
use crate::gpu::bind_cache::Binding;
use crate::gpu::shader::KernelVariant;
use crate::gpu::shader::params::TopKParams;
use crate::gpu::step::Step;
use crate::gpu::tensor::{Elem, Tensor};

use super::{dims2, u};

impl Step<'_> {
    /// The `k` largest logits of each row of `logits: f32 [R, V]`, largest first with ties to
    /// the lower index, into `values: f32 [R, k]` and `ids: u32 [R, k]`. NaN is never chosen.
    pub fn top_k(
        &mut self,
        logits: &Tensor,
        k: usize,
        values: &Tensor,
        ids: &Tensor,
    ) -> Result<(), GpuError> {
        let (rows, v) = dims2(logits, "top_k logits")?;
        if k == 0 || k > v {
            return Err(GpuError::Shape(format!("top_k: k = {k} for rows of {v}")));
        }
        values.expect("top_k values", Elem::F32, &[rows, k])?;
        ids.expect("top_k ids", Elem::U32, &[rows, k])?;
        let grid = self.grid_groups(rows);
        let bindings = [
            Binding::tensor("LOGITS", logits),
            Binding::tensor("VALUES", values),
            Binding::tensor("IDS", ids),
        ];
        self.dispatch(KernelVariant::TopK, &TopKParams { rows: u(rows), v: u(v), k: u(k) }, bindings, grid)
    }

    /// The index of the largest logit of each row (ties to the lower index) into `ids: u32 [R, 1]`,
    /// with its value into `values: f32 [R, 1]`.
    pub fn argmax(&mut self, logits: &Tensor, values: &Tensor, ids: &Tensor) -> Result<(), GpuError> {
        self.top_k(logits, 1, values, ids)
    }
}
