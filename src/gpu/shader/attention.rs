//! The attention family: paged attention on each [`AttentionPath`] (`shaders/attention.wgsl`,
//! `attention_lanes.wgsl`, `attention_split.wgsl`, `attention_flash.wgsl`), flash attention
//! with its token's Q/K norms and RoPE (`flash_qk_rope.wgsl`), the K/V pools' element formats
//! ([`KvFormat`]) and the constants the kernels are sized by.

use super::KernelVariant;
use super::family::{Family, Injected, ShaderFile, shader_file};
use super::params::{AttentionParams, KernelParams, ParamsLayout};
use super::tree::Tree;
use super::unroll::unroll_head;

/// How the attention kernel spreads one query's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttentionPath {
    /// One invocation per (query token, head) walking the whole context (CPU drivers without
    /// subgroups of [`ATTENTION_DOT_LANES`]).
    PerQuery,
    /// The same walk by one subgroup of [`ATTENTION_DOT_LANES`] lanes per query token and
    /// [`attention_group`] heads of a KV head, each lane holding every eighth pair of the
    /// heads' dimensions: the same bits as `PerQuery`, with a key's and a value's pairs read
    /// side by side and once for the group (CPU drivers whose subgroups have exactly that many
    /// lanes).
    PerQuerySubgroup,
    /// One workgroup of [`ATTENTION_SPLIT_WG`] per (query token, head): the context cut into
    /// partitions fixed by its length (at most [`KV_PARTITION_TOKENS`] keys each), combined in a
    /// fixed tree.
    SplitKv,
    /// Flash-decoding (`shaders/attention_flash.wgsl`, [`crate::gpu::FLASH_WG`]): one workgroup
    /// per query token and [`crate::gpu::flash_group`] heads of a KV head, its lanes over the
    /// keys (partitions fixed by the keys' positions) and the heads' dimensions, the partitions
    /// combined in a fixed tree; prefill and decode tokens alike.
    Flash,
}

/// Element format of the paged K/V pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvFormat {
    /// f32 values.
    F32,
    /// f16 values packed two per u32 with `pack2x16float` (no shader-f16 needed).
    F16Packed,
    /// f16 values rounded by shader-f16's own conversion, a pair to a u32 word read with
    /// `unpack2x16float` (one 32-bit load a pair); same memory layout as `F16Packed`.
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

    /// True for the format rounded by shader-f16's own conversion (it needs SHADER_F16).
    pub(super) fn needs_f16(self) -> bool {
        self == Self::F16Native
    }

    /// The format's name in labels.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16Packed => "f16-packed",
            Self::F16Native => "f16-native",
        }
    }

    /// The file defining `KvPair`, `kv_in` and `kv_out` for this format.
    pub(super) fn file(self) -> ShaderFile {
        match self {
            Self::F32 => shader_file!("kv_f32.wgsl"),
            Self::F16Packed => shader_file!("kv_f16_packed.wgsl"),
            Self::F16Native => shader_file!("kv_f16_native.wgsl"),
        }
    }
}

/// Invocations per workgroup of split-KV attention: partitions one query works on at once.
pub const ATTENTION_SPLIT_WG: u32 = 32;
/// Head dimensions split-KV attention combines at once in its workgroup memory.
pub const ATTENTION_SPLIT_CHUNK: u32 = 32;
/// Partial sums every attention kernel splits a query·key product into (dimension pair `d` into
/// partial `d % ATTENTION_DOT_LANES`), added by a fixed butterfly: the lanes, and the
/// workgroup, of [`AttentionPath::PerQuerySubgroup`], so every path sums a score alike (the
/// other kernels hold the partials in two `vec4`s: it is 8).
pub const ATTENTION_DOT_LANES: u32 = 8;
/// Most query heads of one KV head the subgroup attention kernel computes together.
pub const ATTENTION_MAX_GROUP: u32 = 4;
/// Invocations per workgroup of flash attention: [`FLASH_KEY_LANES`] key lanes (`shaders/attention_flash.wgsl`) of
/// [`ATTENTION_DOT_LANES`] dimension lanes.
pub const FLASH_WG: u32 = 64;
/// Key lanes of a flash workgroup: keys `kl, kl + FLASH_KEY_LANES, ...` go to key lane `kl`.
pub const FLASH_KEY_LANES: u32 = FLASH_WG / ATTENTION_DOT_LANES;
/// Most query heads of one KV head a flash workgroup computes together.
pub const FLASH_MAX_GROUP: u32 = 8;

/// Query heads the subgroup attention kernel computes together for a model with
/// `heads_per_kv` query heads on each KV head: the largest divisor of it up to
/// [`ATTENTION_MAX_GROUP`], so a group never straddles two KV heads.
pub fn attention_group(heads_per_kv: u32) -> u32 {
    (1..=ATTENTION_MAX_GROUP.min(heads_per_kv)).rev().find(|g| heads_per_kv.is_multiple_of(*g)).unwrap_or(1)
}

/// Most keys a split-KV partition holds. The n keys a query sees are cut into partitions of
/// ceil(n / [`ATTENTION_SPLIT_WG`]) keys while that is at most this (so even a short context
/// spreads over the whole workgroup), else into partitions of this many. An invocation walks
/// its partition's keys one by one, which is the kernel's latency at small batches: with
/// partitions of 128 keys an H200 took 119 µs a layer to attend over the 16 to 80 keys of a
/// batch-1 decode, with partitions of 16 (one KV block) 68 µs.
pub const KV_PARTITION_TOKENS: u32 = 16;
/// Largest KV block size the attention kernel accepts.
pub const MAX_BLOCK_SIZE: u32 = 64;

/// The family of [`KernelVariant::Attention`] and [`KernelVariant::FlashRope`].
pub(super) struct Attention;

impl Family for Attention {
    fn label(&self, variant: &KernelVariant) -> String {
        match *variant {
            KernelVariant::Attention { kv, head_dim, path, group, tree, sinks } => {
                let path = match path {
                    AttentionPath::PerQuery => "per-query".to_string(),
                    AttentionPath::PerQuerySubgroup => format!("per-query-sg{ATTENTION_DOT_LANES}"),
                    AttentionPath::SplitKv => "split-kv".to_string(),
                    AttentionPath::Flash => "flash".to_string(),
                };
                let group = if group > 1 { format!("/g{group}") } else { String::new() };
                format!(
                    "attention/{}/hd{head_dim}/{path}{}{group}{}",
                    kv.name(),
                    tree.suffix(),
                    if sinks { "/sinks" } else { "" }
                )
            }
            KernelVariant::FlashRope { kv, head_dim, group, half_split } => {
                let mode = if half_split { "half-split" } else { "interleaved" };
                format!("attention/{}/hd{head_dim}/flash-qk-rope-{mode}/g{group}", kv.name())
            }
            _ => String::new(),
        }
    }

    fn workgroup(&self, variant: &KernelVariant) -> (u32, &'static str) {
        match path_of(variant) {
            AttentionPath::SplitKv => (ATTENTION_SPLIT_WG, "ATTENTION_SPLIT_WG"),
            AttentionPath::PerQuerySubgroup => (ATTENTION_DOT_LANES, "ATTENTION_DOT_LANES"),
            AttentionPath::Flash => (FLASH_WG, "FLASH_WG"),
            AttentionPath::PerQuery => (super::WORKGROUP_SIZE, "WORKGROUP_SIZE"),
        }
    }

    fn needs_f16(&self, variant: &KernelVariant) -> bool {
        match *variant {
            KernelVariant::Attention { kv, .. } | KernelVariant::FlashRope { kv, .. } => kv.needs_f16(),
            _ => false,
        }
    }

    /// The subgroup kernel's and flash's lanes, and split-KV's subgroup trees.
    fn needs_subgroup(&self, variant: &KernelVariant) -> bool {
        match *variant {
            KernelVariant::Attention { path, tree, .. } => {
                matches!(path, AttentionPath::PerQuerySubgroup | AttentionPath::Flash)
                    || matches!(tree, Tree::Subgroup { .. })
            }
            _ => matches!(variant, KernelVariant::FlashRope { .. }),
        }
    }

    fn params(&self, _variant: &KernelVariant) -> ParamsLayout {
        AttentionParams::LAYOUT
    }

    fn files(&self, variant: &KernelVariant) -> Vec<ShaderFile> {
        match *variant {
            KernelVariant::Attention { kv, path, tree, sinks, .. } => {
                let body = match path {
                    AttentionPath::PerQuery => vec![shader_file!("attention.wgsl")],
                    AttentionPath::PerQuerySubgroup => vec![shader_file!("attention_lanes.wgsl")],
                    AttentionPath::SplitKv => vec![tree.file(), shader_file!("attention_split.wgsl")],
                    AttentionPath::Flash => vec![shader_file!("attention_flash.wgsl")],
                };
                let pools = match variant.kv_units() {
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
            KernelVariant::FlashRope { kv, .. } => vec![
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
            _ => Vec::new(),
        }
    }

    /// The split-KV tree's lanes, the head dimension, the block size's bound and the dot
    /// product's lanes, and the path's own.
    fn constants(&self, variant: &KernelVariant) -> Vec<Injected> {
        let (head_dim, group, tree) = match *variant {
            KernelVariant::Attention { head_dim, group, tree, .. } => (head_dim, group, tree),
            KernelVariant::FlashRope { head_dim, group, .. } => (head_dim, group, Tree::Shared),
            _ => return Vec::new(),
        };
        let mut out: Vec<Injected> = tree.constants().into_iter().collect();
        out.extend([
            Injected::new("HD", head_dim, "KernelVariant::Attention::head_dim"),
            Injected::new("MAX_BS", MAX_BLOCK_SIZE, "shader::MAX_BLOCK_SIZE"),
            Injected::new("DOT_LANES", ATTENTION_DOT_LANES, "shader::ATTENTION_DOT_LANES"),
        ]);
        match path_of(variant) {
            AttentionPath::SplitKv => out.extend([
                Injected::new("CHUNK", ATTENTION_SPLIT_CHUNK, "shader::ATTENTION_SPLIT_CHUNK"),
                Injected::new("PART_KEYS", KV_PARTITION_TOKENS, "shader::KV_PARTITION_TOKENS"),
            ]),
            AttentionPath::PerQuerySubgroup | AttentionPath::Flash => {
                out.push(Injected::new("GH", group, "KernelVariant::Attention::group"))
            }
            AttentionPath::PerQuery => {}
        }
        if let KernelVariant::FlashRope { half_split, .. } = *variant {
            let from = "KernelVariant::FlashRope::half_split";
            out.push(Injected::new("HALF_SPLIT", u32::from(half_split), from));
        }
        out
    }

    /// The head's dimension pairs and the group's heads written out (`HEAD_PAIRS`, ...).
    fn expand(&self, variant: &KernelVariant, src: String) -> String {
        match *variant {
            KernelVariant::Attention { head_dim, group, .. }
            | KernelVariant::FlashRope { head_dim, group, .. } => {
                unroll_head(&src, head_dim / 2, ATTENTION_DOT_LANES, group)
            }
            _ => src,
        }
    }
}

/// The path of an attention variant: flash for the flash kernel with RoPE.
fn path_of(variant: &KernelVariant) -> AttentionPath {
    match *variant {
        KernelVariant::Attention { path, .. } => path,
        _ => AttentionPath::Flash,
    }
}

impl KernelVariant {
    /// True when the attention variant reads its KV pools as 16-byte units of four f16 pairs
    /// (`kvsrc_units.wgsl`): the kernels that walk a key's head in one invocation (per query,
    /// split-KV) over f16 pools whose heads' pairs are a multiple of 4, so every head starts on
    /// a unit. The subgroup kernel's lanes read pairs side by side, and f32 pools keep pairs.
    fn kv_units(&self) -> bool {
        match *self {
            Self::Attention { kv, head_dim, path, .. } => {
                kv != KvFormat::F32
                    && matches!(path, AttentionPath::PerQuery | AttentionPath::SplitKv)
                    && (head_dim / 2).is_multiple_of(4)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::attention_group;

    #[test]
    fn attention_groups_divide_the_heads_of_a_kv_head() {
        let groups: Vec<u32> =
            [1, 2, 3, 4, 5, 6, 7, 8, 10, 14, 16].into_iter().map(attention_group).collect();
        assert_eq!(groups, [1, 2, 3, 4, 1, 3, 1, 4, 2, 2, 4]);
    }
}
