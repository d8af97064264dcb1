//! Every kernel's parameter block: a `#[repr(C)]` struct with the fields of the WGSL struct of
//! the same name, in the same order. A dispatch writes its bytes into the step's uniform ring,
//! as the uniform [`PARAMS`](super::reflect::PARAMS) (`P`) of the kernel.
//!
//! `kernel_params!` records each struct's [`ParamsLayout`] (field names, offsets, types and
//! size) next to it; `tests/shader_contract.rs` reads the params struct of every composed
//! shader with naga and checks it against that layout, so a field renamed, retyped or moved on
//! one side only fails the test.

/// Bytes each dispatch reserves for its parameter block in the step's uniform ring (before
/// rounding up to the device's uniform offset alignment). Every params struct fits in it.
pub(crate) const PARAMS_BYTES: u64 = 64;

/// One field of a parameter block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamsField {
    /// The field's name, the same in Rust and WGSL.
    pub name: &'static str,
    /// Byte offset from the start of the block.
    pub offset: usize,
    /// The scalar type, spelled the same in Rust and WGSL (`u32` or `f32`).
    pub ty: &'static str,
}

/// The layout a kernel's WGSL params struct must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamsLayout {
    /// Name of the struct, the same in Rust and WGSL.
    pub name: &'static str,
    /// Its fields in declaration order.
    pub fields: &'static [ParamsField],
    /// Its size in bytes.
    pub size: usize,
}

/// A kernel's parameter block: plain old data whose bytes the kernel reads as its uniform.
pub trait KernelParams: bytemuck::Pod {
    /// The struct's layout, to check against the shader's.
    const LAYOUT: ParamsLayout;
}

/// Declares a `#[repr(C)]` params struct of `u32`/`f32` fields and its [`KernelParams`] layout
/// (taken from `offset_of!` and `size_of`, so it cannot drift from the struct).
macro_rules! kernel_params {
    ($(#[$meta:meta])* $name:ident { $($(#[$field_meta:meta])* $field:ident: $ty:ident,)* }) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl KernelParams for $name {
            const LAYOUT: ParamsLayout = ParamsLayout {
                name: stringify!($name),
                fields: &[$(ParamsField {
                    name: stringify!($field),
                    offset: std::mem::offset_of!($name, $field),
                    ty: stringify!($ty),
                },)*],
                size: size_of::<$name>(),
            };
        }

        const _: () = assert!(size_of::<$name>() as u64 <= PARAMS_BYTES);
    };
}

kernel_params! {
    /// `shaders/embed.wgsl`: gathers rows of one part of a row-split embedding table.
    EmbedParams {
        /// Token ids to look up.
        tokens: u32,
        /// Columns of the table (the hidden size).
        d: u32,
        /// First table row held by this part.
        row0: u32,
        /// Table rows held by this part.
        rows: u32,
    }
}

kernel_params! {
    /// `shaders/rms_norm.wgsl`.
    RmsNormParams {
        /// Rows to normalise.
        rows: u32,
        /// Values per row.
        d: u32,
        /// Added to the mean square before the square root.
        eps: f32,
        /// 1 to add the normed rows to `OUT` (the residual add after Gemma's sandwich norms,
        /// [`Step::rms_norm_add`](crate::gpu::Step::rms_norm_add)), 0 to store them.
        accumulate: u32,
    }
}

kernel_params! {
    /// `shaders/rope_cache.wgsl`: RoPE (after the Q/K norms, when the model has them) and the
    /// paged KV write on the fused Q/K/V projection.
    RopeCacheParams {
        /// Tokens (rows of the projection).
        tokens: u32,
        /// Query heads per token.
        heads: u32,
        /// Key (and value) heads per token.
        kv_heads: u32,
        /// Head dimension (even).
        hd: u32,
        /// 1 for half-split pairs (i, i + hd / 2), 0 for interleaved pairs (2i, 2i + 1).
        half_split: u32,
        /// Added to the mean square of the Q/K norms.
        eps: f32,
    }
}

kernel_params! {
    /// `shaders/elementwise.wgsl`, shared by gated_mul, add_in_place, gather_rows,
    /// scatter_rows, moe_combine, scale and softcap.
    ElementwiseParams {
        /// Values to compute.
        n: u32,
        /// Row length (gather_rows, scatter_rows; gated_mul reading the halves of rows of 2d
        /// values, 0 for two tensors), or blocks of `n` values summed (moe_combine); 1 where
        /// rows do not matter.
        d: u32,
        /// The scalar of scale (the factor) and softcap (the cap); 0 elsewhere.
        value: f32,
    }
}

kernel_params! {
    /// `shaders/lora_common.wgsl`, shared by the LoRA shrink and expand.
    LoraParams {
        /// Rows of the batch.
        m: u32,
        /// Input features of the targets (columns of `A`; the shrink's).
        k: u32,
        /// Output features of the (first) target (rows of `B`; the expand's).
        n: u32,
        /// Output features of each other target of the expand's run.
        n_rest: u32,
        /// Values a target's shrunk row holds (the largest rank rounded up to 4).
        width: u32,
        /// Row stride of the shrunk rows.
        ldt: u32,
        /// First column of the shrunk rows the expand reads (its target's block).
        t0: u32,
        /// Row stride of the output (the expand's).
        ldy: u32,
        /// First output column the (first) target writes (the expand's).
        y0: u32,
        /// The (first) target of the table (`target` is a WGSL keyword).
        which: u32,
        /// Targets the kernel computes, from `which`.
        run: u32,
        /// Targets per slot in the table.
        targets: u32,
        /// Groups of rows of one adapter (`lora_row_groups`) the grouped kernels take.
        groups: u32,
    }
}

kernel_params! {
    /// `shaders/top_k.wgsl`.
    TopKParams {
        /// Rows of logits.
        rows: u32,
        /// Logits per row.
        v: u32,
        /// Values kept per row.
        k: u32,
    }
}

kernel_params! {
    /// `shaders/moe_route.wgsl`.
    MoeRouteParams {
        /// Tokens (rows of logits).
        rows: u32,
        /// Routed experts (the router's logits per row).
        experts: u32,
        /// Experts each token takes.
        k: u32,
        /// Row stride of the logits (`experts`, plus the shared expert's gate logit).
        stride: u32,
        /// The router's rule: 0 softmax then top k, 1 the same renormalised, 2 top k then
        /// softmax.
        rule: u32,
        /// 1 when the row ends with the shared expert's gate logit (`shared` is a WGSL keyword).
        gate: u32,
    }
}

kernel_params! {
    /// `shaders/linear_common.wgsl`: `y = x · wᵀ` for one part of a row-split weight.
    LinearParams {
        /// Rows of x.
        m: u32,
        /// Weight rows (output columns) in this part.
        n_part: u32,
        /// Columns of x and of the weight.
        k: u32,
        /// Row stride of y (all output columns).
        ldy: u32,
        /// First weight row of this part.
        n0: u32,
        /// Workgroups along x of the K-split grid (0 on the sequential path).
        nx: u32,
        /// Column of y where the weight's first row goes (a projection writing into a slice
        /// of a wider output).
        y0: u32,
        /// Added to the mean square of the RMSNorm fused before the linear
        /// ([`LinearPrologue::RmsNorm`](super::LinearPrologue::RmsNorm)); 0 otherwise.
        eps: f32,
        /// Query heads of the Q/K/V row the rotary epilogue
        /// ([`LinearEpilogue::RopeCache`](super::LinearEpilogue::RopeCache)) writes; 0 otherwise.
        heads: u32,
        /// Key (and value) heads of that row; 0 otherwise.
        kv_heads: u32,
        /// Head dimension of that row; 0 otherwise.
        hd: u32,
        /// First word of the weight's rows in the part's binding: one expert's rows of a
        /// stacked weight ([`Weight`](crate::gpu::Weight)'s views); 0 otherwise.
        w0: u32,
        /// Words between two experts' rows of a stacked weight, for a variant whose rows of x
        /// each name their expert ([`LinearPrologue::ExpertRows`](super::LinearPrologue::ExpertRows)); 0 otherwise.
        w_stride: u32,
        /// First value of the bias epilogue's row in its binding: one expert's row `e · N` of
        /// stacked `[E, N]` biases, the expert the weight is a view of; 0 otherwise.
        b0: u32,
        /// Values between two experts' rows of stacked biases, for a variant whose rows of x each
        /// name their expert (and so their bias row); 0 otherwise.
        b_stride: u32,
    }
}

kernel_params! {
    /// `shaders/attention_common.wgsl` (all three attention kernels).
    AttentionParams {
        /// Query tokens in the flattened batch.
        tokens: u32,
        /// Query heads.
        heads: u32,
        /// K/V heads.
        kv_heads: u32,
        /// Tokens per KV block.
        block_size: u32,
        /// Columns of the block table.
        max_blocks: u32,
        /// Sequences in the batch.
        num_seqs: u32,
        /// Scale of the attention scores (1 / sqrt(head_dim) unless the model says otherwise).
        scale: f32,
        /// Keys a query sees, counting itself (a sliding-window layer); 0 means all.
        window: u32,
        /// Soft-cap of the scores (`softcap * tanh(s / softcap)`); 0 means none.
        softcap: f32,
        /// Elements from one query token's row to the next (the fused projection's width).
        q_stride: u32,
        /// Elements of a head (`HD`, as a uniform: flash_qk_rope.wgsl's norm divides by it as
        /// rope_cache.wgsl does).
        head_dim: u32,
        /// The Q/K norms' eps: flash_qk_rope.wgsl.
        qk_eps: f32,
    }
}
