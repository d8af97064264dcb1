// The narrow levels of a kernel's fixed tree in subgroup shuffles (src/gpu/shader.rs's
// Tree::Subgroup, built for subgroups of at least TREE_LANES lanes). A tree over `width`
// partials adds partial t + s into partial t for s = width / 2, ..., 1. The kernel runs the
// levels s >= narrow (tree_narrow: TREE_LANES, or the tree or the workgroup where narrower)
// through workgroup memory, a barrier each, which leaves the first `narrow` partials there;
// after one more barrier every subgroup reads them, lane l partial l % narrow (tree_lane), and
// adds the rest without barriers: lane l takes lane l ^ s's value for s = narrow / 2, ..., 1.
// For l < s that is partial l + s, the tree's own pair in the tree's order, and since a + b and
// b + a round alike, every lane ends with the root's bits (lanes other than the first of each
// `narrow` may differ where a NaN or max(+0, -0) meets its operands swapped; the kernels take
// nothing from them that a signed zero changes). Each subgroup reads the partials by its own
// lane ids, so which invocations make up a subgroup does not matter, nor its size, as long as
// it is at least `narrow` with its first lanes active (a workgroup whose size is a multiple of
// the subgroup size fills its subgroups). `narrow` is a constant, so the loops around the
// kernels' barriers and the shuffles are uniform.
struct Lanes {
    @builtin(local_invocation_index) t: u32,
    @builtin(subgroup_invocation_id) lane: u32,
}

fn subgroup_lane(lanes: Lanes) -> u32 {
    return lanes.lane;
}

fn tree_narrow(width: u32) -> u32 {
    return min(TREE_LANES, min(width, WG));
}

fn tree_lane(lanes: Lanes, narrow: u32) -> u32 {
    return lanes.lane % narrow;
}

fn tree_add(lanes: Lanes, narrow: u32, v: f32) -> f32 {
    var acc = v;
    for (var s = narrow / 2u; s > 0u; s >>= 1u) {
        acc = acc + subgroupShuffleXor(acc, s);
    }
    return acc;
}

fn tree_max(lanes: Lanes, narrow: u32, v: f32) -> f32 {
    var acc = v;
    for (var s = narrow / 2u; s > 0u; s >>= 1u) {
        acc = max(acc, subgroupShuffleXor(acc, s));
    }
    return acc;
}
