//! The elementwise kernels (`shaders/elementwise.wgsl` and one file each): one invocation a
//! value, [`WORKGROUP_SIZE`](crate::gpu::shader::WORKGROUP_SIZE) a workgroup, the grid
//! folded into y past the dimension limit ([`Step::grid_1d`]).

use crate::gpu::GpuError;
use crate::gpu::bind_cache::Binding;
use crate::gpu::shader::params::ElementwiseParams;
use crate::gpu::shader::{GateActivation, KernelVariant};
use crate::gpu::step::Step;
use crate::gpu::tensor::{Elem, Tensor};

use super::{dims2, u};

impl Step<'_> {
    /// Records elementwise kernel `variant` over `n` values (rows of `d`), `value` its scalar
    /// parameter: one invocation a value.
    fn elementwise<const N: usize>(
        &mut self,
        variant: KernelVariant,
        n: usize,
        d: usize,
        value: f32,
        bindings: [Binding; N],
    ) -> Result<(), GpuError> {
        let grid = self.grid_1d(variant, n);
        self.dispatch(variant, &ElementwiseParams { n: u(n), d: u(d), value }, bindings, grid)
    }

    /// `out = act(gate) * up` elementwise (SwiGLU with SiLU, Gemma's GeGLU with PyTorch's
    /// tanh-approximated GELU); all three f32 of the same shape.
    pub fn gated_mul(
        &mut self,
        act: GateActivation,
        gate: &Tensor,
        up: &Tensor,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        let variant = KernelVariant::GatedMul { act };
        up.expect("gated mul up", Elem::F32, gate.shape())?;
        out.expect("gated mul out", Elem::F32, gate.shape())?;
        let bindings =
            [Binding::tensor("GATE", gate), Binding::tensor("UP", up), Binding::tensor("OUT", out)];
        self.elementwise(variant, gate.len(), 0, 0.0, bindings)
    }

    /// [`Self::gated_mul`] of the halves of each row of `gate_up: f32 [M, 2N]` (N gate values,
    /// then N up values: a stacked gate and up projection's output) into `out: f32 [M, N]`.
    pub fn gated_mul_halves(
        &mut self,
        act: GateActivation,
        gate_up: &Tensor,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        let (m, n) = dims2(out, "gated mul out")?;
        gate_up.expect("gated mul gate and up", Elem::F32, &[m, 2 * n])?;
        let bindings =
            [Binding::tensor("GATE", gate_up), Binding::tensor("UP", gate_up), Binding::tensor("OUT", out)];
        self.elementwise(KernelVariant::GatedMul { act }, m * n, n, 0.0, bindings)
    }

    /// gpt-oss's clamped SwiGLU elementwise: `out = (clamp(up, ±limit) + 1) · g · σ(1.702 g)`
    /// with `g = min(gate, limit)`; all three f32 of the same shape.
    pub fn swiglu_clamped(
        &mut self,
        limit: f32,
        gate: &Tensor,
        up: &Tensor,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        if !(limit.is_finite() && limit > 0.0) {
            return Err(GpuError::Shape(format!("swiglu_clamped: the limit must be positive, not {limit}")));
        }
        up.expect("swiglu up", Elem::F32, gate.shape())?;
        out.expect("swiglu out", Elem::F32, gate.shape())?;
        let bindings =
            [Binding::tensor("GATE", gate), Binding::tensor("UP", up), Binding::tensor("OUT", out)];
        self.elementwise(KernelVariant::SwigluClamped, gate.len(), 1, limit, bindings)
    }

    /// `x *= factor` elementwise, in place.
    pub fn scale(&mut self, x: &Tensor, factor: f32) -> Result<(), GpuError> {
        self.elementwise(KernelVariant::Scale, x.len(), 1, factor, [Binding::tensor("X", x)])
    }

    /// `x = cap * tanh(x / cap)` elementwise, in place (Gemma 2's final-logit soft-capping).
    pub fn softcap(&mut self, x: &Tensor, cap: f32) -> Result<(), GpuError> {
        if cap <= 0.0 || cap.is_nan() {
            return Err(GpuError::Shape(format!("softcap: the cap must be positive, not {cap}")));
        }
        self.elementwise(KernelVariant::Softcap, x.len(), 1, cap, [Binding::tensor("X", x)])
    }

    /// `x += y` elementwise (the residual add); both f32 of the same shape.
    pub fn add_in_place(&mut self, x: &Tensor, y: &Tensor) -> Result<(), GpuError> {
        x.expect("add x", Elem::F32, y.shape())?;
        let bindings = [Binding::tensor("X", x), Binding::tensor("Y", y)];
        self.elementwise(KernelVariant::AddInPlace, x.len(), 1, 0.0, bindings)
    }

    /// `out[r, :] = src[indices[r], :]` for `src: f32 [T, D]`, `indices: u32 [R]`, `out: [R, D]`
    /// (e.g. the rows that need logits, before the LM head).
    pub fn gather_rows(&mut self, src: &Tensor, indices: &Tensor, out: &Tensor) -> Result<(), GpuError> {
        let (_, d) = dims2(src, "gather_rows src")?;
        let r = indices.len();
        indices.expect("gather_rows indices", Elem::U32, &[r])?;
        out.expect("gather_rows out", Elem::F32, &[r, d])?;
        let bindings =
            [Binding::tensor("SRC", src), Binding::tensor("INDICES", indices), Binding::tensor("OUT", out)];
        self.elementwise(KernelVariant::GatherRows, r * d, d, 0.0, bindings)
    }

    /// `out[indices[r], :] = src[r, :] * scales[r]` for `src: f32 [R, D]`, `indices: u32 [R]`,
    /// `scales: u32 [R]` (f32 bits), `out: f32 [N, D]`: an expert's output rows, weighted by
    /// the router, put at their tokens' slots. Rows `indices` does not name keep their values.
    pub fn scatter_rows(
        &mut self,
        src: &Tensor,
        indices: &Tensor,
        scales: &Tensor,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        let (r, d) = dims2(src, "scatter_rows src")?;
        let (_, out_d) = dims2(out, "scatter_rows out")?;
        indices.expect("scatter_rows indices", Elem::U32, &[r])?;
        scales.expect("scatter_rows scales", Elem::U32, &[r])?;
        if out_d != d {
            return Err(GpuError::Shape(format!("scatter_rows: rows of {d} into rows of {out_d}")));
        }
        let bindings = [
            Binding::tensor("SRC", src),
            Binding::tensor("INDICES", indices),
            Binding::tensor("SCALES", scales),
            Binding::tensor("OUT", out),
        ];
        self.elementwise(KernelVariant::ScatterRows, r * d, d, 0.0, bindings)
    }

    /// `x += y[0] + y[1] + ... + y[k - 1]` for `x: f32 [T, D]` and `y: f32 [k * T, D]`
    /// (slot-major: block `j` holds every token's `j`-th weighted expert output), each token's
    /// sum in slot order.
    pub fn moe_combine(&mut self, x: &Tensor, y: &Tensor, k: usize) -> Result<(), GpuError> {
        let (t, d) = dims2(x, "moe_combine x")?;
        y.expect("moe_combine y", Elem::F32, &[k * t, d])?;
        if k == 0 {
            return Err(GpuError::Shape("moe_combine: no expert slots".into()));
        }
        let bindings = [Binding::tensor("X", x), Binding::tensor("Y", y)];
        self.elementwise(KernelVariant::MoeCombine, t * d, k, 0.0, bindings)
    }
}
