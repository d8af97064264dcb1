//! Shader composition: the one place that turns a kernel variant into WGSL source.
//!
//! Every variant pagoda can run is a [`KernelVariant`]; [`KernelVariant::source`] composes its
//! WGSL from the files in `shaders/` (a kernel body, a weight-format or KV-format snippet, and
//! the constants of the variant). The runtime builds pipelines from it and
//! `tests/shader_portability.rs` validates and translates every entry of [`all_variants`].

use crate::dtype::DType;

/// How a linear layer reduces over K. Both keep one fixed order per output row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinearPath {
    /// One invocation per output with a sequential K loop (fast on CPU drivers such as
    /// lavapipe); with `Some(size)` the activations are shared across subgroup lanes with
    /// `subgroupBroadcast`, specialised for that subgroup size.
    Sequential {
        /// Subgroup size the variant is built for, or `None` for plain loads.
        subgroup: Option<u32>,
    },
    /// One workgroup of `WG` invocations per output, K split across them and a fixed tree
    /// reduction (fast on discrete GPUs for decode).
    KSplit,
}

/// Element format of the paged K/V pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvFormat {
    /// f32 values.
    F32,
    /// f16 values packed two per u32 with `pack2x16float` (no shader-f16 needed).
    F16Packed,
    /// f16 values as `vec2<f16>` (needs shader-f16); same memory layout as `F16Packed`.
    F16Native,
}

impl KvFormat {
    /// Bytes per stored element.
    pub fn elem_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16Packed | Self::F16Native => 2,
        }
    }

    fn snippet(self) -> &'static str {
        match self {
            Self::F32 => include_str!("../../shaders/kv_f32.wgsl"),
            Self::F16Packed => include_str!("../../shaders/kv_f16_packed.wgsl"),
            Self::F16Native => include_str!("../../shaders/kv_f16_native.wgsl"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16Packed => "f16-packed",
            Self::F16Native => "f16-native",
        }
    }
}

/// Invocations per workgroup of the K-split linear kernels.
pub const LINEAR_WG: u32 = 64;
/// Invocations per workgroup of the sequential linear kernels (small, so that decode-sized
/// layers still give every CPU thread a workgroup).
pub const LINEAR_SEQ_WG: u32 = 16;
/// Output columns each invocation of the sequential linear kernels computes: one activation
/// load then serves this many weight rows.
pub const LINEAR_SEQ_COLS: u32 = 4;
/// Largest KV block size the attention kernel accepts.
pub const MAX_BLOCK_SIZE: u32 = 64;
/// Row tiles the linear kernels are built with: 1 for decode, 4 for prefill.
pub const LINEAR_ROW_TILES: [u32; 2] = [1, 4];
/// Weight element types the linear and embedding kernels read.
pub const WEIGHT_DTYPES: [DType; 15] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::IQ4NL,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Q2K,
    DType::Q3K,
    DType::IQ4XS,
];

/// One specialisation of one kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelVariant {
    /// Embedding rows gathered from a weight table of this type.
    Embed {
        /// Table element type.
        dtype: DType,
    },
    /// RMSNorm.
    RmsNorm,
    /// Rotary embedding (both modes, chosen by a parameter).
    Rope,
    /// `silu(a) * b`.
    SiluMul,
    /// `a += b`.
    AddInPlace,
    /// `a[r, :] += bias`.
    AddBias,
    /// Rows of a matrix picked by an index list.
    GatherRows,
    /// Top-k (and argmax as k = 1) per row.
    TopK,
    /// `y = x · Wᵀ`.
    Linear {
        /// Weight element type.
        dtype: DType,
        /// Reduction strategy.
        path: LinearPath,
        /// Rows of x each invocation (sequential) or workgroup (K-split) computes.
        rows_tile: u32,
    },
    /// Writes new K/V rows into the paged pools.
    ReshapeAndCache {
        /// Pool element format.
        kv: KvFormat,
    },
    /// Paged attention.
    Attention {
        /// Pool element format.
        kv: KvFormat,
        /// Head dimension (even).
        head_dim: u32,
    },
}

/// The weight-format functions of `dtype` (`w_row_words`, `w_elem`, `w_group`, `w_block`),
/// after the shared pieces the format uses: `w8.wgsl` (the W8/W32 types), `wbits.wgsl` (bit
/// fields of the quantized formats), `wk_scales.wgsl` (the Q4_K/Q5_K header), `wiq4.wgsl`
/// (the IQ4 table), and
/// `wblock_groups.wgsl` (a block as four groups) for formats without a `w_block` of their own.
fn weight_snippet(dtype: DType) -> String {
    let w8 = include_str!("../../shaders/w8.wgsl");
    let groups = include_str!("../../shaders/wblock_groups.wgsl");
    let bits = include_str!("../../shaders/wbits.wgsl");
    let k_scales = include_str!("../../shaders/wk_scales.wgsl");
    let iq4 = include_str!("../../shaders/wiq4.wgsl");
    let parts: &[&str] = match dtype {
        DType::F32 => &[w8, include_str!("../../shaders/wfmt_f32.wgsl"), groups],
        DType::F16 => &[w8, include_str!("../../shaders/wfmt_f16.wgsl"), groups],
        DType::BF16 => &[w8, include_str!("../../shaders/wfmt_bf16.wgsl"), groups],
        DType::Q8_0 => &[w8, include_str!("../../shaders/wfmt_q8_0.wgsl")],
        DType::Q4_0 => &[w8, bits, include_str!("../../shaders/wfmt_q4_0.wgsl")],
        DType::Q4_1 => &[w8, bits, include_str!("../../shaders/wfmt_q4_1.wgsl")],
        DType::Q5_0 => &[w8, bits, include_str!("../../shaders/wfmt_q5_0.wgsl")],
        DType::Q5_1 => &[w8, bits, include_str!("../../shaders/wfmt_q5_1.wgsl")],
        DType::IQ4NL => &[w8, bits, iq4, include_str!("../../shaders/wfmt_iq4_nl.wgsl")],
        DType::Q4K => &[w8, bits, k_scales, include_str!("../../shaders/wfmt_q4_k.wgsl")],
        DType::Q5K => &[w8, bits, k_scales, include_str!("../../shaders/wfmt_q5_k.wgsl")],
        DType::Q6K => &[w8, bits, include_str!("../../shaders/wfmt_q6_k.wgsl"), groups],
        DType::Q2K => &[w8, bits, include_str!("../../shaders/wfmt_q2_k.wgsl"), groups],
        DType::Q3K => &[w8, bits, include_str!("../../shaders/wfmt_q3_k.wgsl"), groups],
        DType::IQ4XS => &[w8, bits, iq4, include_str!("../../shaders/wfmt_iq4_xs.wgsl"), groups],
    };
    parts.concat()
}

impl KernelVariant {
    /// True when the variant needs the SHADER_F16 feature.
    pub fn needs_f16(&self) -> bool {
        matches!(
            self,
            Self::ReshapeAndCache { kv: KvFormat::F16Native }
                | Self::Attention { kv: KvFormat::F16Native, .. }
        )
    }

    /// True when the variant needs the SUBGROUP feature.
    pub fn needs_subgroup(&self) -> bool {
        matches!(self, Self::Linear { path: LinearPath::Sequential { subgroup: Some(_) }, .. })
    }

    /// A short unique name, used as the pipeline label.
    pub fn label(&self) -> String {
        match self {
            Self::Embed { dtype } => format!("embed/{}", dtype.name()),
            Self::RmsNorm => "rms_norm".into(),
            Self::Rope => "rope".into(),
            Self::SiluMul => "silu_mul".into(),
            Self::AddInPlace => "add_in_place".into(),
            Self::AddBias => "add_bias".into(),
            Self::GatherRows => "gather_rows".into(),
            Self::TopK => "top_k".into(),
            Self::Linear { dtype, path, rows_tile } => {
                let path = match path {
                    LinearPath::Sequential { subgroup: Some(sg) } => format!("seq-sg{sg}"),
                    LinearPath::Sequential { subgroup: None } => "seq".into(),
                    LinearPath::KSplit => "ksplit".into(),
                };
                format!("linear/{}/{path}/tm{rows_tile}", dtype.name())
            }
            Self::ReshapeAndCache { kv } => format!("reshape_and_cache/{}", kv.name()),
            Self::Attention { kv, head_dim } => format!("attention/{}/hd{head_dim}", kv.name()),
        }
    }

    /// The complete WGSL module of this variant.
    pub fn source(&self) -> String {
        let mut src = String::new();
        if self.needs_f16() {
            src.push_str("enable f16;\n\n");
        }
        match *self {
            Self::Embed { dtype } => {
                src.push_str(include_str!("../../shaders/embed.wgsl"));
                src.push_str(&weight_snippet(dtype));
            }
            Self::RmsNorm => src.push_str(include_str!("../../shaders/rms_norm.wgsl")),
            Self::Rope => src.push_str(include_str!("../../shaders/rope.wgsl")),
            Self::SiluMul | Self::AddInPlace | Self::AddBias | Self::GatherRows => {
                src.push_str(include_str!("../../shaders/elementwise.wgsl"));
                src.push_str(match self {
                    Self::SiluMul => include_str!("../../shaders/silu_mul.wgsl"),
                    Self::AddInPlace => include_str!("../../shaders/add_in_place.wgsl"),
                    Self::AddBias => include_str!("../../shaders/add_bias.wgsl"),
                    _ => include_str!("../../shaders/gather_rows.wgsl"),
                });
            }
            Self::TopK => src.push_str(include_str!("../../shaders/top_k.wgsl")),
            Self::Linear { dtype, path, rows_tile } => {
                let (wg, cols) = match path {
                    LinearPath::Sequential { .. } => (LINEAR_SEQ_WG, LINEAR_SEQ_COLS),
                    LinearPath::KSplit => (LINEAR_WG, 1),
                };
                src.push_str(&format!(
                    "const WG: u32 = {wg}u;\nconst TM: u32 = {rows_tile}u;\nconst TN: u32 = {cols}u;\n\n"
                ));
                src.push_str(include_str!("../../shaders/linear_common.wgsl"));
                src.push_str(&weight_snippet(dtype));
                match path {
                    LinearPath::Sequential { subgroup } => {
                        let (snippet, arg, lane) = match subgroup {
                            Some(_) => (
                                include_str!("../../shaders/xload_subgroup.wgsl"),
                                ", @builtin(subgroup_invocation_id) lane: u32",
                                "",
                            ),
                            None => (include_str!("../../shaders/xload_direct.wgsl"), "", "let lane = 0u;"),
                        };
                        src.push_str(snippet);
                        src.push_str(
                            &include_str!("../../shaders/linear_seq.wgsl")
                                .replace(" LANE_ARG", arg)
                                .replace("LANE_LET", lane),
                        );
                    }
                    LinearPath::KSplit => src.push_str(include_str!("../../shaders/linear_ksplit.wgsl")),
                }
                src = unroll(&src, rows_tile, cols);
            }
            Self::ReshapeAndCache { kv } => {
                src.push_str(kv.snippet());
                src.push_str(include_str!("../../shaders/reshape_and_cache.wgsl"));
            }
            Self::Attention { kv, head_dim } => {
                src.push_str(&format!(
                    "const HD: u32 = {head_dim}u;\nconst MAX_BS: u32 = {MAX_BLOCK_SIZE}u;\n\n"
                ));
                src.push_str(kv.snippet());
                src.push_str(include_str!("../../shaders/attention.wgsl"));
            }
        }
        src
    }
}

/// Expands every line starting with a `ROWS_*` marker into one copy of the rest of the line per
/// row `0..rows` (`RR` and the identifier suffix `_R` become the row number), and every line
/// (or expanded row) starting with a `COLS_*` marker into one copy per column `0..cols` (`CC`
/// and `_C` become the column number).
fn unroll(src: &str, rows: u32, cols: u32) -> String {
    let mut out = String::with_capacity(src.len() * 2);
    for line in src.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        for row_text in expand(trimmed, "ROWS_", "RR", "_R", rows) {
            for text in expand(&row_text, "COLS_", "CC", "_C", cols) {
                out.push_str(indent);
                out.push_str(&text);
                out.push('\n');
            }
        }
    }
    out
}

/// `text` unchanged when it does not start with `marker`; otherwise one copy of the text after
/// the marker's word per index `0..count`, with `number` and `suffix` replaced by the index.
fn expand(text: &str, marker: &str, number: &str, suffix: &str, count: u32) -> Vec<String> {
    match text.strip_prefix(marker).and_then(|rest| rest.split_once(' ')) {
        Some((_, body)) => (0..count)
            .map(|i| body.replace(number, &i.to_string()).replace(suffix, &format!("_{i}")))
            .collect(),
        None => vec![text.to_string()],
    }
}

/// Head dimensions the attention kernel is specialised for ahead of time in the tests.
pub const TESTED_HEAD_DIMS: [u32; 4] = [64, 80, 96, 128];
/// Subgroup sizes the subgroup variants are built for (lavapipe 8, Intel 16, NVIDIA/Apple 32, AMD 64).
pub const SUBGROUP_SIZES: [u32; 4] = [8, 16, 32, 64];

/// Every variant pagoda can build: all weight types, linear paths, subgroup sizes, row tiles,
/// KV formats and the tested head dimensions.
pub fn all_variants() -> Vec<KernelVariant> {
    let mut out = vec![
        KernelVariant::RmsNorm,
        KernelVariant::Rope,
        KernelVariant::SiluMul,
        KernelVariant::AddInPlace,
        KernelVariant::AddBias,
        KernelVariant::GatherRows,
        KernelVariant::TopK,
    ];
    let mut paths = vec![LinearPath::Sequential { subgroup: None }, LinearPath::KSplit];
    paths.extend(SUBGROUP_SIZES.iter().map(|&sg| LinearPath::Sequential { subgroup: Some(sg) }));
    for dtype in WEIGHT_DTYPES {
        out.push(KernelVariant::Embed { dtype });
        for path in &paths {
            for rows_tile in LINEAR_ROW_TILES {
                out.push(KernelVariant::Linear { dtype, path: *path, rows_tile });
            }
        }
    }
    for kv in [KvFormat::F32, KvFormat::F16Packed, KvFormat::F16Native] {
        out.push(KernelVariant::ReshapeAndCache { kv });
        for head_dim in TESTED_HEAD_DIMS {
            out.push(KernelVariant::Attention { kv, head_dim });
        }
    }
    out
}
