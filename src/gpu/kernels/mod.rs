//! One typed function per kernel, recorded into a [`Step`]. Each checks its shapes and returns
//! [`GpuError::Shape`] on a mismatch instead of dispatching.
//!
//! One module a kernel family, each with its shapes' checks, the variant it picks, its grid and
//! its bindings: [`linear`], [`attention`], [`norm`], [`rope`], [`embed`], [`elementwise`],
//! [`top_k`], [`moe_route`] (flash attention's own in [`crate::gpu::attention_flash`], the LoRA kernels' in
//! [`crate::gpu::lora`], the token-id copy in [`crate::gpu::copy_ids`]).

mod attention;
mod elementwise;
mod embed;
mod linear;
mod moe_route;
mod norm;
mod rope;
mod top_k;

pub use attention::{AttentionBatch, AttentionSpec};
pub(crate) use attention::{attention_bindings, attention_params};
pub use linear::{LinearInput, SandwichInput, linear_variant_of, linear_warm_up_rows};
pub use moe_route::{MoeRouting, RouteRule};
pub use rope::{RopeCacheArgs, RopeMode};

use crate::gpu::GpuError;
use crate::gpu::tensor::Tensor;

pub(crate) fn u(n: usize) -> u32 {
    n as u32
}

pub(crate) fn dims2(t: &Tensor, what: &str) -> Result<(usize, usize), GpuError> {
    match *t.shape() {
        [r, c] => Ok((r, c)),
        _ => Err(GpuError::Shape(format!("{what}: expected 2 dimensions, got {:?}", t.shape()))),
    }
}
