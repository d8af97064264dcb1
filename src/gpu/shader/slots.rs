//! The binding slots of every kernel, by the name of the WGSL variable bound there.
//!
//! The bind groups are built from these constants, and the shader composer injects each one
//! into the shader as `const SLOT_<NAME>: u32`, which the shader uses as
//! `@group(0) @binding(SLOT_<NAME>) var<...> <NAME>: ...;`. Every kernel takes its
//! parameter block at [`PARAMS`] (`SLOT_P`, the uniform `P`).

/// The slot of every kernel's parameter block, the uniform `P`.
pub const PARAMS: u32 = 0;

/// The binding slots of one kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSlots {
    /// Name of the module of `shader::slots` that declares them.
    pub kernel: &'static str,
    /// Every slot but [`PARAMS`], with the name of the WGSL variable bound there.
    pub named: &'static [(&'static str, u32)],
}

/// Declares one module of slot constants per kernel, and its [`KernelSlots`] as `ALL`.
macro_rules! binding_slots {
    ($($(#[$meta:meta])* $kernel:ident { $($name:ident = $slot:literal,)* })*) => {$(
        $(#[$meta])*
        pub mod $kernel {
            $(
                #[doc = concat!("Slot of `", stringify!($name), "`.")]
                pub const $name: u32 = $slot;
            )*
            /// All of the above by name.
            pub const ALL: super::KernelSlots = super::KernelSlots {
                kernel: stringify!($kernel),
                named: &[$((stringify!($name), $name),)*],
            };
        }
    )*
        /// One past the largest slot of any kernel ([`PARAMS`] included): a bind group's
        /// resources fit an array this long, indexed by slot.
        pub const COUNT: usize = one_past_largest(&[PARAMS, $($($slot,)*)*]);
    };
}

/// One past the largest of `slots`.
const fn one_past_largest(slots: &[u32]) -> usize {
    let mut end = 0;
    let mut i = 0;
    while i < slots.len() {
        if slots[i] as usize + 1 > end {
            end = slots[i] as usize + 1;
        }
        i += 1;
    }
    end
}

binding_slots! {
    /// `shaders/embed.wgsl` (`W` declared by `wsrc_buffer.wgsl` or `wsrc_texture.wgsl`).
    embed {
        IDS = 1,
        W = 2,
        OUT = 3,
    }
    /// `shaders/rms_norm.wgsl`.
    rms_norm {
        X = 1,
        WEIGHT = 2,
        OUT = 3,
    }
    /// `shaders/rms_norm_sandwich.wgsl`.
    rms_norm_sandwich {
        O = 1,
        POST = 2,
        X = 3,
        PRE = 4,
        H = 5,
    }
    /// `shaders/rope_cache.wgsl` with `qk_norm_none.wgsl`.
    rope_cache {
        QKV = 1,
        POSITIONS = 2,
        INV_FREQ = 3,
        SLOT_MAPPING = 4,
        K_CACHE = 5,
        V_CACHE = 6,
    }
    /// `shaders/rope_cache.wgsl` with `qk_norm_rms.wgsl`.
    rope_cache_qk_norm {
        QKV = 1,
        POSITIONS = 2,
        INV_FREQ = 3,
        SLOT_MAPPING = 4,
        K_CACHE = 5,
        V_CACHE = 6,
        QK_NORM = 7,
    }
    /// `shaders/gated_mul.wgsl` (SiLU and GELU-tanh alike).
    gated_mul {
        GATE = 1,
        UP = 2,
        OUT = 3,
    }
    /// `shaders/swiglu_clamped.wgsl`.
    swiglu_clamped {
        GATE = 1,
        UP = 2,
        OUT = 3,
    }
    /// `shaders/scale.wgsl`.
    scale {
        X = 1,
    }
    /// `shaders/softcap.wgsl`.
    softcap {
        X = 1,
    }
    /// `shaders/add_in_place.wgsl`.
    add_in_place {
        X = 1,
        Y = 2,
    }
    /// `shaders/gather_rows.wgsl`.
    gather_rows {
        SRC = 1,
        INDICES = 2,
        OUT = 3,
    }
    /// `shaders/scatter_rows.wgsl`.
    scatter_rows {
        SRC = 1,
        INDICES = 2,
        SCALES = 3,
        OUT = 4,
    }
    /// `shaders/copy_ids.wgsl`.
    copy_ids {
        SRC = 1,
        PAIRS = 2,
        OUT = 3,
    }
    /// `shaders/moe_combine.wgsl`.
    moe_combine {
        X = 1,
        Y = 2,
    }
    /// `shaders/lora_shrink.wgsl` (with `lora_common.wgsl`).
    lora_shrink {
        AB = 1,
        TABLE = 2,
        ROWS = 3,
        X = 4,
        T = 5,
    }
    /// `shaders/lora_expand.wgsl` (with `lora_common.wgsl`).
    lora_expand {
        AB = 1,
        TABLE = 2,
        ROWS = 3,
        T = 4,
        Y = 5,
    }
    /// `shaders/top_k.wgsl`.
    top_k {
        LOGITS = 1,
        VALUES = 2,
        IDS = 3,
    }
    /// `shaders/linear_common.wgsl` (`X` declared by `xsrc_f32.wgsl` or `xsrc_vec4.wgsl`, `W` by
    /// `wsrc_buffer.wgsl` or `wsrc_texture.wgsl`, `NORM` by `xnorm_f32.wgsl` or
    /// `xnorm_vec4.wgsl`), both paths, every epilogue but the bias and the rotary one.
    linear {
        X = 1,
        W = 2,
        Y = 3,
    }
    /// `shaders/linear_common.wgsl` with `epi_bias.wgsl`.
    linear_bias {
        X = 1,
        W = 2,
        Y = 3,
        BIAS = 4,
    }
    /// `shaders/linear_common.wgsl` with `xin_rms_norm.wgsl`, every epilogue but the bias and the
    /// rotary one.
    linear_norm {
        X = 1,
        W = 2,
        Y = 3,
        NORM = 5,
    }
    /// `shaders/linear_common.wgsl` with `xin_rms_norm.wgsl` and `epi_bias.wgsl`.
    linear_bias_norm {
        X = 1,
        W = 2,
        Y = 3,
        BIAS = 4,
        NORM = 5,
    }
    /// `shaders/linear_common.wgsl` with `epi_rope_cache.wgsl`.
    linear_rope_cache {
        X = 1,
        W = 2,
        Y = 3,
        POSITIONS = 6,
        INV_FREQ = 7,
        SLOT_MAPPING = 8,
        K_CACHE = 9,
        V_CACHE = 10,
    }
    /// `shaders/linear_common.wgsl` with `xin_rms_norm.wgsl` and `epi_rope_cache.wgsl`.
    linear_rope_cache_norm {
        X = 1,
        W = 2,
        Y = 3,
        NORM = 5,
        POSITIONS = 6,
        INV_FREQ = 7,
        SLOT_MAPPING = 8,
        K_CACHE = 9,
        V_CACHE = 10,
    }
    /// `shaders/linear_common.wgsl` with `epi_pair_bias.wgsl` and `epi_rope_cache.wgsl`.
    linear_bias_rope_cache {
        X = 1,
        W = 2,
        Y = 3,
        BIAS = 4,
        POSITIONS = 6,
        INV_FREQ = 7,
        SLOT_MAPPING = 8,
        K_CACHE = 9,
        V_CACHE = 10,
    }
    /// `shaders/linear_common.wgsl` with `xin_rms_norm.wgsl`, `epi_pair_bias.wgsl` and
    /// `epi_rope_cache.wgsl`.
    linear_bias_rope_cache_norm {
        X = 1,
        W = 2,
        Y = 3,
        BIAS = 4,
        NORM = 5,
        POSITIONS = 6,
        INV_FREQ = 7,
        SLOT_MAPPING = 8,
        K_CACHE = 9,
        V_CACHE = 10,
    }
    /// `shaders/attention_common.wgsl` (all three attention kernels; `K_CACHE` and `V_CACHE`
    /// declared by `kvsrc_pairs.wgsl` or `kvsrc_units.wgsl`).
    attention {
        Q = 1,
        K_CACHE = 2,
        V_CACHE = 3,
        BLOCK_TABLE = 4,
        SEQ_LENS = 5,
        QUERY_START = 6,
        OUT = 7,
    }
    /// Flash attention with `flash_qk_rope.wgsl` (and `qk_norm_rms.wgsl`): the decode variant
    /// that norms, rotates and writes its token's queries and key (`K_CACHE` and `V_CACHE` by
    /// `kvsrc_pairs_rw.wgsl`).
    attention_rope {
        Q = 1,
        K_CACHE = 2,
        V_CACHE = 3,
        BLOCK_TABLE = 4,
        SEQ_LENS = 5,
        QUERY_START = 6,
        OUT = 7,
        POSITIONS = 9,
        INV_FREQ = 10,
        SLOT_MAPPING = 11,
        QK_NORM = 12,
    }
    /// The attention kernels with `sink_logit.wgsl`: each head's sink logit at `SINKS`.
    attention_sinks {
        Q = 1,
        K_CACHE = 2,
        V_CACHE = 3,
        BLOCK_TABLE = 4,
        SEQ_LENS = 5,
        QUERY_START = 6,
        OUT = 7,
        SINKS = 8,
    }
}
