//! The variants the portability and contract tests build ([`all_variants`], and apart from
//! them the cooperative-matrix linears, [`coop_variants`]): the single kernels, embeddings,
//! RoPE and attention variants in full, and of the linear cross product a sample that meets
//! every weight type, structure, prologue and epilogue.

use super::KernelVariant;
use super::attention::{ATTENTION_MAX_GROUP, AttentionPath, KvFormat};
use super::elementwise::GateActivation;
use super::linear::{LINEAR_GEMV_ROWS, LinearKernel, LinearPath, LinearPrologue, XLoad};
use super::linear_epilogue::LinearEpilogue;
use super::tree::Tree;
use super::weights::{WEIGHT_DTYPES, WeightSource};
use crate::dtype::DType;
use crate::gpu::linear_coop::CoopShape;

/// Head dimensions the attention kernel is specialised for ahead of time in the tests.
pub const TESTED_HEAD_DIMS: [u32; 6] = [64, 72, 80, 96, 128, 256];
/// Subgroup sizes the subgroup variants are built for (lavapipe 8, Intel 16, NVIDIA/Apple 32, AMD 64).
pub const SUBGROUP_SIZES: [u32; 4] = [8, 16, 32, 64];

/// The variants the portability and contract tests build: every kernel structure a linear
/// path has (row tile, weight source, activation load, tree) for every weight type, each with
/// one of the prologue and epilogue pairs in turn (so every type meets every pair), and every
/// structure with every pair for [`FULL_CROSS_DTYPE`] (the prologues and epilogues are the same
/// code whatever the weight type); the single kernels, embeddings, RoPE and attention variants
/// in full.
pub fn all_variants() -> Vec<KernelVariant> {
    let mut out = vec![
        KernelVariant::RmsNorm,
        KernelVariant::RmsNormSandwich,
        KernelVariant::GatedMul { act: GateActivation::Silu },
        KernelVariant::GatedMul { act: GateActivation::GeluTanh },
        KernelVariant::Scale,
        KernelVariant::Softcap,
        KernelVariant::AddInPlace,
        KernelVariant::GatherRows,
        KernelVariant::ScatterRows,
        KernelVariant::CopyIds,
        KernelVariant::MoeCombine,
        KernelVariant::SwigluClamped,
        KernelVariant::LoraShrink,
        KernelVariant::LoraShrinkGroups,
        KernelVariant::LoraExpandGroups,
        KernelVariant::TopK,
        KernelVariant::MoeRoute,
    ];
    let mut paths = vec![LinearPath::Sequential { subgroup: None }, LinearPath::KSplit];
    paths.extend(SUBGROUP_SIZES.iter().map(|&sg| LinearPath::Sequential { subgroup: Some(sg) }));
    let pairs: Vec<_> = prologue_epilogue_pairs().collect();
    for (index, dtype) in WEIGHT_DTYPES.into_iter().enumerate() {
        for source in WeightSource::ALL {
            out.push(KernelVariant::Embed { dtype, source });
        }
        // Each type starts the turn of pairs elsewhere, so every path meets every pair.
        let mut turn = index * 7;
        for &path in &paths {
            for structure in linear_structures(dtype, path) {
                if dtype == FULL_CROSS_DTYPE {
                    out.extend(pairs.iter().map(|&(prologue, epilogue)| structure(prologue, epilogue)));
                } else {
                    let (prologue, epilogue) = pairs[turn % pairs.len()];
                    out.push(structure(prologue, epilogue));
                    turn += 1;
                }
            }
        }
    }
    // The experts' rows by id (mixture-of-experts decode): every type on the one-row kernels of
    // both paths, plain on the sequential one and gated on the K-split one, and with each row's
    // expert's bias (gpt-oss's) on one path, the two paths in turn.
    for (index, dtype) in WEIGHT_DTYPES.into_iter().enumerate() {
        let (seq, ksplit) = (
            (LinearPath::Sequential { subgroup: None }, LinearKernel::Sequential { rows: 1 }),
            (LinearPath::KSplit, LinearKernel::Gemv { rows: 1 }),
        );
        let biased = if index % 2 == 0 { seq } else { ksplit };
        let paths = [
            (seq.0, seq.1, LinearEpilogue::Store),
            (ksplit.0, ksplit.1, LinearEpilogue::Gated(GateActivation::Silu)),
            (biased.0, biased.1, LinearEpilogue::Bias),
        ];
        for (path, kernel, epilogue) in paths {
            let (source, x_load, tree) = (WeightSource::Buffer, path.x_loads()[0], path.trees(kernel)[0]);
            let prologue = LinearPrologue::ExpertRows;
            out.push(KernelVariant::Linear { dtype, source, path, kernel, x_load, tree, prologue, epilogue });
        }
    }
    for kv in [KvFormat::F32, KvFormat::F16Packed, KvFormat::F16Native] {
        out.push(KernelVariant::RopeCache { kv, qk_norm: false });
        out.push(KernelVariant::RopeCache { kv, qk_norm: true });
        for head_dim in TESTED_HEAD_DIMS {
            // sinks (gpt-oss) at its head dimension only
            for sinks in [false, true].into_iter().take(1 + usize::from(head_dim == 64)) {
                let path = AttentionPath::PerQuery;
                let tree = Tree::Shared;
                out.push(KernelVariant::Attention { kv, head_dim, path, group: 1, tree, sinks });
                for tree in Tree::all() {
                    let path = AttentionPath::SplitKv;
                    out.push(KernelVariant::Attention { kv, head_dim, path, group: 1, tree, sinks });
                }
                for group in 1..=ATTENTION_MAX_GROUP {
                    let path = AttentionPath::PerQuerySubgroup;
                    let tree = Tree::Shared;
                    out.push(KernelVariant::Attention { kv, head_dim, path, group, tree, sinks });
                }
            }
            for group in 1..=crate::gpu::flash_max_group(head_dim) {
                let (path, tree) = (AttentionPath::Flash, Tree::Shared);
                out.push(KernelVariant::Attention { kv, head_dim, path, group, tree, sinks: false });
            }
        }
        // Flash with sinks at gpt-oss's heads (64 dimensions, 8 query heads a KV head) and one
        // head a group.
        for group in [1, 8] {
            let (path, tree) = (AttentionPath::Flash, Tree::Shared);
            out.push(KernelVariant::Attention { kv, head_dim: 64, path, group, tree, sinks: true });
        }
        // Flash with the Q/K norms and RoPE of its token: one head a group and the most,
        // half-split (Qwen3, Gemma 3), and interleaved once.
        for head_dim in [64, 128, 256] {
            for group in [1, crate::gpu::flash_max_group(head_dim)] {
                out.push(KernelVariant::FlashRope { kv, head_dim, group, half_split: true });
            }
        }
        out.push(KernelVariant::FlashRope { kv, head_dim: 128, group: 4, half_split: false });
    }
    out
}

/// The cooperative-matrix linear variants the portability and contract tests build, apart
/// from [`all_variants`] (naga writes the matrices in SPIR-V and MSL only): every weight type
/// on every matrix shape ([`CoopShape::ALL`]) and tile, through the adapter's matrices and
/// emulated, each with the next prologue and epilogue pair in turn (each shape's 32 meet all
/// 25) and the activation loads alternating.
pub fn coop_variants() -> Vec<KernelVariant> {
    let pairs: Vec<_> = prologue_epilogue_pairs().collect();
    let mut out = Vec::new();
    for shape in CoopShape::ALL {
        for emulated in [false, true] {
            let path = LinearPath::Coop { shape, emulated };
            for kernel in path.kernels() {
                for dtype in WEIGHT_DTYPES {
                    let turn = out.len();
                    let (prologue, epilogue) = pairs[turn % pairs.len()];
                    let x_load = path.x_loads()[turn % 2];
                    let (source, tree) = (WeightSource::Buffer, Tree::Shared);
                    out.push(KernelVariant::Linear {
                        dtype,
                        source,
                        path,
                        kernel,
                        x_load,
                        tree,
                        prologue,
                        epilogue,
                    });
                }
            }
        }
    }
    out
}

/// The weight type whose linear kernels the tests build with every prologue and epilogue on
/// every structure: f32, the quickest to compose and validate (a Q4_K variant takes about six
/// times as long: with it, this cross took most of the two shader tests' time).
const FULL_CROSS_DTYPE: DType = DType::F32;

/// The epilogues of the linears Gemma's sandwich feeds (the Q/K/V projection's, stored or
/// rotated into the cache, and the MLP's GELU-gated one): the tests build the sandwich prologue
/// with these only, its code being the same whatever the epilogue.
const SANDWICH_EPILOGUES: [LinearEpilogue; 3] = [
    LinearEpilogue::Store,
    LinearEpilogue::RopeCache { kv: KvFormat::F16Packed, bias: false },
    LinearEpilogue::Gated(GateActivation::GeluTanh),
];

/// Every (prologue, epilogue) pair the tests build, prologues outer: 25, the plain and normed
/// inputs with every epilogue and the sandwich with [`SANDWICH_EPILOGUES`].
fn prologue_epilogue_pairs() -> impl Iterator<Item = (LinearPrologue, LinearEpilogue)> {
    LinearPrologue::ALL.into_iter().flat_map(|p| {
        let tested =
            move |e: &LinearEpilogue| p != LinearPrologue::SandwichNorm || SANDWICH_EPILOGUES.contains(e);
        LinearEpilogue::ALL.into_iter().filter(tested).map(move |e| (p, e))
    })
}

/// Every kernel structure of `dtype`'s linear variants on `path` (kernel and tile, weight
/// source, activation load, tree) that [`is_sampled`] keeps, each as the variant it is with a
/// given prologue and epilogue.
fn linear_structures(
    dtype: DType,
    path: LinearPath,
) -> Vec<impl Fn(LinearPrologue, LinearEpilogue) -> KernelVariant> {
    let mut out = Vec::new();
    for kernel in path.kernels() {
        for &source in path.weight_sources() {
            for &x_load in path.x_loads() {
                for tree in path.trees(kernel) {
                    if !is_sampled(kernel, x_load, tree) {
                        continue;
                    }
                    out.push(move |prologue, epilogue| KernelVariant::Linear {
                        dtype,
                        source,
                        path,
                        kernel,
                        x_load,
                        tree,
                        prologue,
                        epilogue,
                    });
                }
            }
        }
    }
    out
}

/// True for the linear structures [`all_variants`] holds: every one but the GEMV's over 2 and
/// 4 rows, whose code differs from the 8 rows' only by the count of its unrolled row lines, of
/// which it keeps one (16-byte loads, the shared tree).
fn is_sampled(kernel: LinearKernel, x_load: XLoad, tree: Tree) -> bool {
    let widest = LINEAR_GEMV_ROWS[LINEAR_GEMV_ROWS.len() - 1];
    match kernel {
        LinearKernel::Gemv { rows } if rows != 1 && rows != widest => {
            x_load == XLoad::Units && tree == Tree::Shared
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::{KernelVariant, LinearPath, LinearPrologue, Tree, all_variants};

    /// The sequential kernel's subgroup lane and its subgroups' norm come from its tree's file,
    /// so every variant over subgroups of `sg` lanes is built with the tree of `sg` lanes.
    #[test]
    fn sequential_variants_over_subgroups_take_their_subgroups_tree() {
        for variant in all_variants() {
            if let KernelVariant::Linear { path: LinearPath::Sequential { subgroup }, tree, .. } = variant {
                let want = subgroup.map_or(Tree::Shared, |lanes| Tree::Subgroup { lanes });
                assert_eq!(tree, want, "{}", variant.label());
            }
        }
    }

    /// How many variants the portability and contract tests build: 18 single kernels (the
    /// LoRA shrink (scalar and over row groups) and its two expands, the experts' routing,
    /// scatter and combine, gpt-oss's clamped SwiGLU and
    /// the token-id copy and Gemma's sandwich among them), 2 embeddings for each of the 16 weight types, the linear
    /// structures (30 on the five sequential paths: 3 row tiles x 2 weight sources; 20 on the
    /// K-split path: the GEMV of 1 and of 8 rows with each of the 2 activation loads and 3
    /// trees, of 2 and of 4 rows with one, and the GEMM's 3 tiles with each load) once for 15
    /// types and with all 25 prologue and epilogue pairs for f32, 3 linears by expert ids for
    /// each of the 16 types (stored, gated, with each row's expert's bias), and 91 RoPE and attention
    /// variants for each of the 3 KV formats (2 RoPE; for each of the 6 head dimensions 1
    /// per-query, 3 split-KV and 4 subgroup ones, again with sinks at gpt-oss's head dimension
    /// 64 only; 31 flash ones, a group of each size up to `flash_max_group` (8, 6, 6, 5, 4 and 2
    /// heads), 2 with sinks at 64: groups of 1 and 8, and 7 with the Q/K norms and RoPE of their
    /// token: groups of 1 and the most at 64, 128 and 256, half-split, and 4 of 128 interleaved).
    /// Adding an option multiplies this: a
    /// new dimension should come with a reason.
    #[test]
    fn all_variants_counts_what_the_tests_build() {
        assert_eq!(
            all_variants().len(),
            17 + 16 * 2 + 15 * 50 + 50 * 25 + 16 * 3 + 3 * (2 + 6 * 8 + 8 + 31 + 2 + 7)
        );
    }

    /// Every weight type meets every prologue and epilogue pair, and every linear structure
    /// meets every pair (with f32 at least); every type is read by expert ids.
    #[test]
    fn the_sampled_linears_cover_every_type_pair_and_structure_pair() {
        use super::WEIGHT_DTYPES;
        use std::collections::HashSet;
        let mut type_pairs = HashSet::new();
        let mut structure_pairs = HashSet::new();
        let mut by_ids = HashSet::new();
        for variant in all_variants() {
            if let KernelVariant::Linear { dtype, prologue: LinearPrologue::ExpertRows, .. } = variant {
                by_ids.insert(dtype);
            } else if let KernelVariant::Linear {
                dtype,
                source,
                path,
                kernel,
                x_load,
                tree,
                prologue,
                epilogue,
            } = variant
            {
                type_pairs.insert((dtype, prologue, epilogue));
                structure_pairs.insert((
                    format!("{path:?} {kernel:?} {source:?} {x_load:?} {tree:?}"),
                    prologue,
                    epilogue,
                ));
            }
        }
        let pairs = super::prologue_epilogue_pairs().count();
        assert_eq!(pairs, 25);
        assert_eq!(type_pairs.len(), WEIGHT_DTYPES.len() * pairs);
        assert_eq!(structure_pairs.len(), 50 * pairs);
        assert_eq!(by_ids.len(), WEIGHT_DTYPES.len());
    }
}
