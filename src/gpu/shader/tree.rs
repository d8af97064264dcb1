//! The fixed reduction trees of the K-split GEMV, split-KV attention and the RMSNorm scales:
//! [`Tree`], its file and its `TREE_LANES` constant.

use super::family::{Injected, ShaderFile, shader_file};

/// How a K-split GEMV (its lanes' sums and a fused RMSNorm's squares) or a split-KV attention
/// workgroup adds its invocations' partial results: one fixed tree either way (partial t takes
/// partial t + s for s = WG / 2, ..., 1), so the same bits; over subgroups the levels narrower
/// than the tree's lanes are shuffles instead of rounds of workgroup memory and barriers. The
/// sequential path over subgroups of 8 or 16 sums a fused RMSNorm's squares in each subgroup
/// alone (over wider fixed subgroups its fused norm shuffles the levels under the workgroup's
/// 16 lanes). The other trees stay in workgroup memory: the prefill GEMM's (its bands would
/// each need subgroups of their own) and the RMSNorm kernel's (before the tiles of more than
/// one row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tree {
    /// Every level through workgroup memory (`shaders/tree_shared.wgsl`).
    Shared,
    /// The levels narrower than `lanes` in `subgroupShuffleXor` (`shaders/tree_subgroup.wgsl`,
    /// `TREE_LANES`), for subgroups of at least that many lanes.
    Subgroup {
        /// Lanes the shuffles span: a power of two no larger than the adapter's smallest
        /// subgroup.
        lanes: u32,
    },
}

/// The shuffle widths of the GEMV's and split-KV's subgroup trees: an adapter takes the widest
/// its smallest subgroup holds (8 on lavapipe and Intel, 32 on NVIDIA and AMD under Vulkan),
/// and one whose subgroups may have fewer than 8 lanes keeps [`Tree::Shared`] (wgpu reports 4
/// for Metal, and for Vulkan drivers without subgroup size control).
pub const TREE_LANES: [u32; 2] = [8, 32];

impl Tree {
    /// The GEMV's and split-KV's tree on an adapter whose smallest subgroup has `min_lanes`
    /// lanes (`None`: no subgroups).
    pub fn for_subgroups(min_lanes: Option<u32>) -> Self {
        let widest = TREE_LANES.into_iter().rev().find(|&lanes| min_lanes.is_some_and(|min| lanes <= min));
        widest.map_or(Self::Shared, |lanes| Self::Subgroup { lanes })
    }

    /// Every tree the GEMV and split-KV are built with.
    pub fn all() -> [Self; 3] {
        [Self::Shared, Self::Subgroup { lanes: TREE_LANES[0] }, Self::Subgroup { lanes: TREE_LANES[1] }]
    }

    /// What a variant's label adds for this tree.
    pub(super) fn suffix(self) -> String {
        match self {
            Self::Shared => String::new(),
            Self::Subgroup { lanes } => format!("-sgtree{lanes}"),
        }
    }

    /// The file defining `Lanes` and the tree's narrow levels (`subgroup_lane`, `tree_narrow`,
    /// `tree_lane`, `tree_add`, `tree_max`).
    pub(super) fn file(self) -> ShaderFile {
        match self {
            Self::Shared => shader_file!("tree_shared.wgsl"),
            Self::Subgroup { .. } => shader_file!("tree_subgroup.wgsl"),
        }
    }

    /// The constant the subgroup tree's file reads (`TREE_LANES`), none for the shared tree.
    pub(super) fn constants(self) -> Option<Injected> {
        match self {
            Self::Shared => None,
            Self::Subgroup { lanes } => Some(Injected::new("TREE_LANES", lanes, "Tree::Subgroup::lanes")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Tree;

    #[test]
    fn adapters_take_the_widest_tree_their_smallest_subgroup_holds() {
        let trees: Vec<Tree> = [None, Some(4), Some(8), Some(16), Some(32), Some(64)]
            .into_iter()
            .map(Tree::for_subgroups)
            .collect();
        let lanes = |lanes| Tree::Subgroup { lanes };
        assert_eq!(trees, [Tree::Shared, Tree::Shared, lanes(8), lanes(8), lanes(32), lanes(32)]);
    }
}
