// The narrow levels of a kernel's fixed tree in subgroup shuffles (src/gpu/shader.rs's
// Tree::Subgroup). A tree over `width` partials adds partial t + s into partial t for
// s = width / 2, ..., 1. The kernel runs the levels s >= narrow (tree_narrow: the subgroup
// size) through workgroup memory, a barrier each, which leaves the first `narrow` partials
// there; after one more barrier every subgroup reads them, lane l partial l (tree_lane), and
// adds the rest without barriers: lane l takes lane l ^ s's value for s = narrow / 2, ..., 1.
// For l < s that is partial l + s, the tree's own pair in the tree's order, and since a + b and
// b + a round alike every lane ends with the root's bits. Each subgroup reads the partials by
// its own lane ids, so which invocations make up a subgroup does not matter. A subgroup wider
// than the tree runs every level in workgroup memory (narrow 1).
struct Lanes {
    @builtin(local_invocation_index) t: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) size: u32,
}

fn tree_narrow(lanes: Lanes, width: u32) -> u32 {
    return select(1u, lanes.size, lanes.size <= width);
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
