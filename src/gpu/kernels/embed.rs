//! Embedding rows gathered from a weight table of any weight type (`shaders/embed.wgsl`),
//! one invocation an output value.

use crate::gpu::GpuError;
use crate::gpu::bind_cache::Binding;
use crate::gpu::shader::KernelVariant;
use crate::gpu::shader::params::EmbedParams;
use crate::gpu::step::Step;
use crate::gpu::tensor::{Elem, Tensor};
use crate::gpu::weights::Weight;

use super::u;

impl Step<'_> {
    /// `out[t, :] = table[ids[t], :]` for `ids: u32 [T]`, `out: f32 [T, D]`, a `[vocab, D]` table
    /// of any weight type. Ids outside the table leave their row untouched.
    pub fn embed(&mut self, ids: &Tensor, table: &Weight, out: &Tensor) -> Result<(), GpuError> {
        let t = ids.len();
        ids.expect("embed ids", Elem::U32, &[t])?;
        out.expect("embed out", Elem::F32, &[t, table.cols()])?;
        let variant = KernelVariant::Embed { dtype: table.dtype(), source: table.source() };
        for part in &table.parts {
            let params =
                EmbedParams { tokens: u(t), d: u(table.cols()), row0: u(part.row0), rows: u(part.rows) };
            let grid = self.grid_1d(variant, t * table.cols());
            let bindings =
                [Binding::tensor("IDS", ids), Binding::new("W", &part.words), Binding::tensor("OUT", out)];
            self.dispatch(variant, &params, bindings, grid)?;
        }
        Ok(())
    }
}
