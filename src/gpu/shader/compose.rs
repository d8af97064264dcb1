//! Composes a variant's WGSL: a header naming its files and its injected constants, then the
//! files of `shaders/` in order.

use super::unroll::{select_epilogue, unroll, unroll_head};
use super::{
    ATTENTION_DOT_LANES, ATTENTION_SPLIT_CHUNK, AttentionPath, CoopElem, GateActivation, KV_PARTITION_TOKENS,
    KernelVariant, KvFormat, LINEAR_GEMM_BANDS, LinearEpilogue, LinearKernel, LinearPath, LinearPrologue,
    MAX_BLOCK_SIZE, Tree, WEIGHT_TEXELS, WORKGROUP_SIZE, WeightSource, XLoad, gemm_exchange_floats,
};
use crate::dtype::DType;

/// One file of `shaders/`.
#[derive(Debug, Clone, Copy)]
struct ShaderFile {
    name: &'static str,
    text: &'static str,
}

/// The [`ShaderFile`] `shaders/<name>`, embedded at build time.
macro_rules! shader_file {
    ($name:literal) => {
        ShaderFile { name: $name, text: include_str!(concat!("../../../shaders/", $name)) }
    };
}

/// A `const NAME: u32` put at the top of a shader, and the Rust item its value comes from.
struct Injected {
    name: String,
    value: u32,
    from: String,
}

impl Injected {
    fn new(name: impl Into<String>, value: u32, from: impl Into<String>) -> Self {
        Self { name: name.into(), value, from: from.into() }
    }
}

impl KvFormat {
    /// The file defining `KvPair`, `kv_in` and `kv_out` for this format.
    fn file(self) -> ShaderFile {
        match self {
            Self::F32 => shader_file!("kv_f32.wgsl"),
            Self::F16Packed => shader_file!("kv_f16_packed.wgsl"),
            Self::F16Native => shader_file!("kv_f16_native.wgsl"),
        }
    }
}

/// The name of each resource `files` declare (`@binding(SLOT_<NAME>)`), in declaration order:
/// the composer numbers the bindings so, from 0, and Rust finds them by name in naga's
/// reflection ([`super::reflect`]).
fn binding_names(files: &[ShaderFile]) -> impl Iterator<Item = &'static str> {
    let mut seen: Vec<&'static str> = Vec::new();
    for file in files {
        for (at, _) in file.text.match_indices("@binding(SLOT_") {
            let rest = &file.text[at + "@binding(SLOT_".len()..];
            let name = &rest[..rest.find(')').unwrap_or(0)];
            if !seen.contains(&name) {
                seen.push(name);
            }
        }
    }
    seen.into_iter()
}

/// The weight-format functions of `dtype` (`w_row_words`, `w_elem`, `w_group`, `w_block`, and
/// the K-split lanes' `run_quads`, `lane_run` and `lane_partial`: a lane's partial sum, the one
/// the decode GEMV and the prefill GEMM both call), after `w8.wgsl` (the W8/W32/V16 types, the
/// byte lanes of a word, the word runs and the rows' rounding to whole units), the word loads of
/// `source` (`wl`, `wl4a`, `wl8a`: a word, a unit, two units) and the shared pieces the format
/// uses: `wbits.wgsl` (bit fields of the quantized formats), `wsplit.wgsl` (split rows, which
/// every quantized format but Q4_K and Q5_K has; it reads the row length from the kernel's
/// `w_k`), `wk_scales.wgsl` (the Q4_K/Q5_K header), `wiq4.wgsl` (the IQ4 table),
/// `wblock_groups.wgsl` (a block as four groups) for the dense formats, which have no `w_block`
/// of their own, and `wrun_groups.wgsl` (a lane's run as two groups in k order) for the formats
/// without a lane run of their own (all but Q8_0, Q4_0, Q4_1, Q4_K and Q6_K).
fn weight_files(dtype: DType, source: WeightSource) -> Vec<ShaderFile> {
    let words = match source {
        WeightSource::Buffer => shader_file!("wsrc_buffer.wgsl"),
        WeightSource::Texture => shader_file!("wsrc_texture.wgsl"),
    };
    [vec![shader_file!("w8.wgsl"), words], format_files(dtype)].concat()
}

/// The files of [`weight_files`] after the word loads.
fn format_files(dtype: DType) -> Vec<ShaderFile> {
    let groups = shader_file!("wblock_groups.wgsl");
    let bits = shader_file!("wbits.wgsl");
    let k_scales = shader_file!("wk_scales.wgsl");
    let iq4 = shader_file!("wiq4.wgsl");
    let split = shader_file!("wsplit.wgsl");
    let runs = shader_file!("wrun_groups.wgsl");
    match dtype {
        DType::F32 => vec![shader_file!("wfmt_f32.wgsl"), groups, runs],
        DType::F16 => vec![shader_file!("wfmt_f16.wgsl"), groups, runs],
        DType::BF16 => vec![shader_file!("wfmt_bf16.wgsl"), groups, runs],
        DType::Q8_0 => vec![split, shader_file!("wfmt_q8_0.wgsl")],
        DType::Q4_0 => vec![bits, split, shader_file!("wfmt_q4_0.wgsl")],
        DType::Q4_1 => vec![bits, split, shader_file!("wfmt_q4_1.wgsl")],
        DType::Q5_0 => vec![bits, split, shader_file!("wfmt_q5_0.wgsl"), runs],
        DType::Q5_1 => vec![bits, split, shader_file!("wfmt_q5_1.wgsl"), runs],
        DType::IQ4NL => vec![bits, split, iq4, shader_file!("wfmt_iq4_nl.wgsl"), runs],
        DType::Q4K => vec![bits, k_scales, shader_file!("wfmt_q4_k.wgsl")],
        DType::Q5K => vec![bits, k_scales, shader_file!("wfmt_q5_k.wgsl"), runs],
        DType::Q6K => vec![bits, split, shader_file!("wfmt_q6_k.wgsl")],
        DType::Q2K => vec![bits, split, shader_file!("wfmt_q2_k.wgsl"), runs],
        DType::Q3K => vec![bits, split, shader_file!("wfmt_q3_k.wgsl"), runs],
        DType::IQ4XS => vec![bits, split, iq4, shader_file!("wfmt_iq4_xs.wgsl"), runs],
        DType::MXFP4 => vec![bits, split, shader_file!("wfmt_mxfp4.wgsl"), runs],
    }
}

/// The cooperative-matrix kernel's files on `path` (none off it): its inputs' type, the
/// matrices (or their emulation) and the kernel (see [`crate::gpu::linear_coop`]).
fn coop_files(path: LinearPath) -> Vec<ShaderFile> {
    let LinearPath::Coop { shape, emulated } = path else { return Vec::new() };
    let input = match (shape.elem, emulated) {
        (CoopElem::F16, false) => shader_file!("coop_in_f16.wgsl"),
        (CoopElem::F16, true) => shader_file!("coop_in_f16_emu.wgsl"),
        (CoopElem::F32, _) => shader_file!("coop_in_f32.wgsl"),
    };
    let multiply = match (emulated, shape.size) {
        (true, _) => vec![shader_file!("coop_mma_emu.wgsl")],
        (false, 8) => vec![shader_file!("coop_mat8.wgsl"), shader_file!("coop_mma.wgsl")],
        (false, _) => vec![shader_file!("coop_mat16.wgsl"), shader_file!("coop_mma.wgsl")],
    };
    [vec![input], multiply, vec![shader_file!("linear_coop.wgsl")]].concat()
}

impl LinearEpilogue {
    /// The files of the epilogue's `emit` functions.
    fn files(self) -> Vec<ShaderFile> {
        match self {
            Self::Store => vec![shader_file!("epi_store.wgsl")],
            Self::Accumulate => vec![shader_file!("epi_accumulate.wgsl")],
            Self::Bias => vec![shader_file!("epi_bias.wgsl")],
            Self::Gated(act) => vec![act.file(), shader_file!("epi_gated.wgsl")],
            Self::RopeCache { kv, bias } => {
                let projected = if bias {
                    shader_file!("epi_pair_bias.wgsl")
                } else {
                    shader_file!("epi_pair_plain.wgsl")
                };
                vec![
                    kv.file(),
                    projected,
                    shader_file!("rope_angle.wgsl"),
                    shader_file!("epi_rope_cache.wgsl"),
                ]
            }
        }
    }
}

impl Tree {
    /// The file defining `Lanes` and the tree's narrow levels (`subgroup_lane`, `tree_narrow`,
    /// `tree_lane`, `tree_add`, `tree_max`).
    fn file(self) -> ShaderFile {
        match self {
            Self::Shared => shader_file!("tree_shared.wgsl"),
            Self::Subgroup { .. } => shader_file!("tree_subgroup.wgsl"),
        }
    }
}

impl GateActivation {
    /// The file defining `act` for this activation.
    fn file(self) -> ShaderFile {
        match self {
            Self::Silu => shader_file!("act_silu.wgsl"),
            Self::GeluTanh => shader_file!("act_gelu_tanh.wgsl"),
        }
    }
}

impl KernelVariant {
    /// The complete WGSL module of this variant.
    pub fn source(&self) -> String {
        let files = self.files();
        let names: Vec<&str> = files.iter().map(|f| f.name).collect();
        let mut src = format!(
            "// Kernel `{}`, composed by pagoda's src/gpu/shader/compose.rs: the constants below,\n\
             // each injected from the Rust item named in its comment, then these files of shaders/:\n\
             // {}.\n",
            self.label(),
            names.join(", ")
        );
        if self.needs_f16() {
            src.push_str("enable f16;\n");
        }
        if self.needs_coop() {
            // naga holds the matrices to workgroup-uniform control flow, as it does barriers
            // (under this rule's name); coop_mma.wgsl keeps them subgroup-uniform, as they ask.
            src.push_str("enable wgpu_cooperative_matrix;\ndiagnostic(off, derivative_uniformity);\n");
        }
        let slots = binding_names(&files).enumerate().map(|(slot, name)| {
            Injected::new(
                format!("SLOT_{name}"),
                slot as u32,
                format!("binding {slot} of `{name}` in declaration order"),
            )
        });
        for c in self.injected().into_iter().chain(slots) {
            src.push_str(&format!("const {}: u32 = {}u; // {}\n", c.name, c.value, c.from));
        }
        for file in &files {
            src.push('\n');
            src.push_str(file.text);
        }
        match *self {
            Self::Linear { kernel, epilogue, .. } => {
                unroll(&select_epilogue(&src, epilogue.shape()), kernel.row_tile(), self.columns_tile())
            }
            Self::Attention { head_dim, group, .. } | Self::FlashRope { head_dim, group, .. } => {
                unroll_head(&src, head_dim / 2, ATTENTION_DOT_LANES, group)
            }
            _ => src,
        }
    }

    /// The rows a workgroup computes RMSNorm scales for, when the variant does
    /// (`rms_scale.wgsl` or `rms_scale_lanes.wgsl`, sized by `NORM_WG` and `NORM_ROWS`).
    pub(super) fn normed_rows(&self) -> Option<u32> {
        match self {
            Self::RmsNorm
            | Self::RmsNormSandwich
            | Self::Linear { prologue: LinearPrologue::RmsNorm | LinearPrologue::SandwichNorm, .. } => {
                Some(self.rows_per_workgroup())
            }
            _ => None,
        }
    }

    /// True when each subgroup of the variant computes its RMSNorm scales on its own
    /// (`rms_scale_lanes.wgsl`: [`LinearPath::norms_in_subgroups`]).
    pub(super) fn norm_in_lanes(&self) -> bool {
        match *self {
            Self::Linear {
                path: path @ LinearPath::Sequential { subgroup: Some(sg) },
                tree: Tree::Subgroup { lanes },
                prologue: LinearPrologue::RmsNorm | LinearPrologue::SandwichNorm,
                ..
            } => lanes == sg && path.norms_in_subgroups(),
            _ => false,
        }
    }

    /// True when the attention variant reads its KV pools as 16-byte units of four f16 pairs
    /// (`kvsrc_units.wgsl`): the kernels that walk a key's head in one invocation (per query,
    /// split-KV) over f16 pools whose heads' pairs are a multiple of 4, so every head starts on
    /// a unit. The subgroup kernel's lanes read pairs side by side, and f32 pools keep pairs.
    pub(super) fn kv_units(&self) -> bool {
        match *self {
            Self::Attention { kv, head_dim, path, .. } => {
                kv != KvFormat::F32
                    && matches!(path, AttentionPath::PerQuery | AttentionPath::SplitKv)
                    && (head_dim / 2).is_multiple_of(4)
            }
            _ => false,
        }
    }

    /// The files of `shaders/` the variant is made of, in order.
    fn files(&self) -> Vec<ShaderFile> {
        match *self {
            Self::Embed { dtype, source } => {
                [vec![shader_file!("embed.wgsl")], weight_files(dtype, source)].concat()
            }
            Self::RmsNorm => {
                vec![Tree::Shared.file(), shader_file!("rms_scale.wgsl"), shader_file!("rms_norm.wgsl")]
            }
            Self::RmsNormSandwich => vec![
                Tree::Shared.file(),
                shader_file!("rms_scale.wgsl"),
                shader_file!("rms_norm_sandwich.wgsl"),
            ],
            Self::GatedMul { act } => {
                vec![shader_file!("elementwise.wgsl"), act.file(), shader_file!("gated_mul.wgsl")]
            }
            Self::Scale => vec![shader_file!("elementwise.wgsl"), shader_file!("scale.wgsl")],
            Self::Softcap => vec![shader_file!("elementwise.wgsl"), shader_file!("softcap.wgsl")],
            Self::AddInPlace => vec![shader_file!("elementwise.wgsl"), shader_file!("add_in_place.wgsl")],
            Self::GatherRows => vec![shader_file!("elementwise.wgsl"), shader_file!("gather_rows.wgsl")],
            Self::ScatterRows => vec![shader_file!("elementwise.wgsl"), shader_file!("scatter_rows.wgsl")],
            Self::CopyIds => vec![shader_file!("elementwise.wgsl"), shader_file!("copy_ids.wgsl")],
            Self::MoeCombine => vec![shader_file!("elementwise.wgsl"), shader_file!("moe_combine.wgsl")],
            Self::SwigluClamped => {
                vec![shader_file!("elementwise.wgsl"), shader_file!("swiglu_clamped.wgsl")]
            }
            Self::TopK => vec![shader_file!("top_k.wgsl")],
            Self::LoraShrink => vec![shader_file!("lora_common.wgsl"), shader_file!("lora_shrink.wgsl")],
            Self::LoraExpand => vec![shader_file!("lora_common.wgsl"), shader_file!("lora_expand.wgsl")],
            Self::Linear { .. } => self.linear_files(),
            Self::RopeCache { kv, qk_norm } => {
                let norm = if qk_norm {
                    shader_file!("qk_norm_rms.wgsl")
                } else {
                    shader_file!("qk_norm_none.wgsl")
                };
                let rope = [shader_file!("rope_angle.wgsl"), shader_file!("rope_head.wgsl")];
                [vec![kv.file(), norm], rope.to_vec(), vec![shader_file!("rope_cache.wgsl")]].concat()
            }
            Self::Attention { kv, path, tree, sinks, .. } => {
                let body = match path {
                    AttentionPath::PerQuery => vec![shader_file!("attention.wgsl")],
                    AttentionPath::PerQuerySubgroup => vec![shader_file!("attention_lanes.wgsl")],
                    AttentionPath::SplitKv => vec![tree.file(), shader_file!("attention_split.wgsl")],
                    AttentionPath::Flash => vec![shader_file!("attention_flash.wgsl")],
                };
                let pools = match self.kv_units() {
                    true => shader_file!("kvsrc_units.wgsl"),
                    false => shader_file!("kvsrc_pairs.wgsl"),
                };
                let sink = match sinks {
                    true => shader_file!("sink_logit.wgsl"),
                    false => shader_file!("sink_none.wgsl"),
                };
                let qk = shader_file!("flash_qk_none.wgsl");
                let body = match path {
                    AttentionPath::Flash => [vec![qk], body].concat(),
                    _ => body,
                };
                [vec![kv.file(), pools, shader_file!("attention_common.wgsl"), sink], body].concat()
            }
            Self::FlashRope { kv, .. } => vec![
                kv.file(),
                shader_file!("kvsrc_pairs_rw.wgsl"),
                shader_file!("attention_common.wgsl"),
                shader_file!("sink_none.wgsl"),
                shader_file!("qk_norm_rms.wgsl"),
                shader_file!("rope_angle.wgsl"),
                shader_file!("rope_head.wgsl"),
                shader_file!("flash_qk_rope.wgsl"),
                shader_file!("attention_flash.wgsl"),
            ],
        }
    }

    /// The constants put at the top of the variant's shader before its binding slots: `WG` and
    /// the variant's own specialisation constants.
    fn injected(&self) -> Vec<Injected> {
        let (wg, wg_name) = self.workgroup_constant();
        let mut out = vec![Injected::new("WG", wg, format!("shader::{wg_name}"))];
        if let Some(rows) = self.normed_rows() {
            out.push(Injected::new("NORM_WG", WORKGROUP_SIZE, "shader::WORKGROUP_SIZE (rms_norm's)"));
            out.push(Injected::new("NORM_ROWS", rows, "KernelVariant::rows_per_workgroup"));
        }
        if let Self::Linear { tree: Tree::Subgroup { lanes }, .. }
        | Self::Attention { tree: Tree::Subgroup { lanes }, .. } = self
        {
            out.push(Injected::new("TREE_LANES", *lanes, "Tree::Subgroup::lanes"));
        }
        if let Self::Embed { source: WeightSource::Texture, .. }
        | Self::Linear { source: WeightSource::Texture, .. } = self
        {
            out.push(Injected::new("W_TEXELS", WEIGHT_TEXELS, "shader::WEIGHT_TEXELS"));
        }
        out.extend(match *self {
            Self::Linear { .. } => self.linear_constants(),
            Self::Attention { .. } | Self::FlashRope { .. } => self.attention_constants(),
            _ => Vec::new(),
        });
        out
    }

    /// A linear variant's files: its tree's, the common parts and the activations' loads, the
    /// weight format's, the input's (a fused norm's scales and weights), the kernel's body and
    /// its epilogue's.
    fn linear_files(&self) -> Vec<ShaderFile> {
        let Self::Linear { dtype, source, path, kernel, x_load, tree, prologue, epilogue, .. } = *self else {
            return Vec::new();
        };
        let body = match (path, kernel) {
            (LinearPath::Sequential { subgroup: Some(_) }, _) => {
                vec![shader_file!("xload_subgroup.wgsl"), shader_file!("linear_seq.wgsl")]
            }
            (_, LinearKernel::Sequential { .. }) => {
                vec![shader_file!("xload_direct.wgsl"), shader_file!("linear_seq.wgsl")]
            }
            (_, LinearKernel::Gemv { .. }) => vec![shader_file!("linear_ksplit.wgsl")],
            (_, LinearKernel::Gemm { .. }) => vec![shader_file!("linear_gemm.wgsl")],
            (_, LinearKernel::Coop(_)) => coop_files(path),
        };
        let input = match prologue {
            LinearPrologue::Plain => vec![shader_file!("xin_plain.wgsl")],
            LinearPrologue::RmsNorm | LinearPrologue::SandwichNorm => {
                let weight = match x_load {
                    XLoad::Words => shader_file!("xnorm_f32.wgsl"),
                    XLoad::Units => shader_file!("xnorm_vec4.wgsl"),
                };
                let scales = match self.norm_in_lanes() {
                    true => shader_file!("rms_scale_lanes.wgsl"),
                    false => shader_file!("rms_scale.wgsl"),
                };
                let input = match prologue {
                    LinearPrologue::SandwichNorm => shader_file!("xin_sandwich.wgsl"),
                    _ => shader_file!("xin_rms_norm.wgsl"),
                };
                vec![scales, weight, input]
            }
        };
        let activations = match (prologue, x_load) {
            (LinearPrologue::SandwichNorm, XLoad::Words) => shader_file!("xsrc_sandwich_f32.wgsl"),
            (LinearPrologue::SandwichNorm, XLoad::Units) => shader_file!("xsrc_sandwich_vec4.wgsl"),
            (_, XLoad::Words) => shader_file!("xsrc_f32.wgsl"),
            (_, XLoad::Units) => shader_file!("xsrc_vec4.wgsl"),
        };
        [
            vec![tree.file(), shader_file!("linear_common.wgsl"), activations],
            weight_files(dtype, source),
            input,
            body,
            epilogue.files(),
        ]
        .concat()
    }

    /// A linear variant's specialisation constants: its row and column tiles, and for the
    /// K-split kernels the gates and the GEMM's bands and tree exchange.
    fn linear_constants(&self) -> Vec<Injected> {
        let Self::Linear { path, kernel, epilogue, .. } = *self else { return Vec::new() };
        let tm = Injected::new("TM", kernel.row_tile(), "LinearKernel::row_tile");
        let gates = Injected::new("GATES", epilogue.gates(), "LinearEpilogue::gates (gate and up rows)");
        let tn = Injected::new(
            "TN",
            self.columns_tile(),
            match path {
                LinearPath::Sequential { .. } => "KernelVariant::columns_tile (shader::LINEAR_SEQ_COLS rows)",
                LinearPath::KSplit => "KernelVariant::columns_tile (shader::LINEAR_KSPLIT_COLS weight rows)",
                LinearPath::Coop { .. } => "KernelVariant::columns_tile (CoopTile::cols weight rows)",
            },
        );
        match kernel {
            LinearKernel::Sequential { .. } => vec![tm, tn],
            LinearKernel::Gemv { .. } => vec![tm, tn, gates],
            LinearKernel::Gemm { band_rows } => {
                let bands = Injected::new("BANDS", LINEAR_GEMM_BANDS, "shader::LINEAR_GEMM_BANDS");
                let tile =
                    Injected::new("TILE", gemm_exchange_floats(band_rows), "shader::gemm_exchange_floats");
                vec![tm, tn, gates, bands, tile]
            }
            LinearKernel::Coop(tile) => {
                let LinearPath::Coop { shape, .. } = path else { return Vec::new() };
                vec![
                    Injected::new("MT", tile.rows, "CoopTile::rows"),
                    Injected::new("NT", tile.cols, "CoopTile::cols"),
                    Injected::new("KT", tile.depth, "CoopTile::depth"),
                    Injected::new("CS", shape.size, "CoopShape::size"),
                    gates,
                ]
            }
        }
    }

    /// An attention variant's specialisation constants: the head dimension, the block size's
    /// bound and the dot product's lanes, and its path's own.
    fn attention_constants(&self) -> Vec<Injected> {
        let (head_dim, path, group) = match *self {
            Self::Attention { head_dim, path, group, .. } => (head_dim, path, group),
            Self::FlashRope { head_dim, group, .. } => (head_dim, AttentionPath::Flash, group),
            _ => return Vec::new(),
        };

        let mut out = vec![
            Injected::new("HD", head_dim, "KernelVariant::Attention::head_dim"),
            Injected::new("MAX_BS", MAX_BLOCK_SIZE, "shader::MAX_BLOCK_SIZE"),
            Injected::new("DOT_LANES", ATTENTION_DOT_LANES, "shader::ATTENTION_DOT_LANES"),
        ];
        match path {
            AttentionPath::SplitKv => out.extend([
                Injected::new("CHUNK", ATTENTION_SPLIT_CHUNK, "shader::ATTENTION_SPLIT_CHUNK"),
                Injected::new("PART_KEYS", KV_PARTITION_TOKENS, "shader::KV_PARTITION_TOKENS"),
            ]),
            AttentionPath::PerQuerySubgroup | AttentionPath::Flash => {
                out.push(Injected::new("GH", group, "KernelVariant::Attention::group"))
            }
            AttentionPath::PerQuery => {}
        }
        if let Self::FlashRope { half_split, .. } = *self {
            let from = "KernelVariant::FlashRope::half_split";
            out.push(Injected::new("HALF_SPLIT", u32::from(half_split), from));
        }
        out
    }
}
