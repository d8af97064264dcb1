// The narrow levels of a kernel's fixed tree where the variant has no subgroups
// (src/gpu/shader.rs's Tree::Shared): none. A tree over `width` partials adds partial t + s
// into partial t for s = width / 2, ..., 1; with tree_narrow 1 the kernel runs every level
// through workgroup memory, and each invocation then reads the root (tree_lane 0) as it is.
struct Lanes {
    @builtin(local_invocation_index) t: u32,
}

// No subgroup lanes: every invocation is lane 0 of its own.
fn subgroup_lane(lanes: Lanes) -> u32 {
    return 0u;
}

fn tree_narrow(width: u32) -> u32 {
    return 1u;
}

fn tree_lane(lanes: Lanes, narrow: u32) -> u32 {
    return 0u;
}

fn tree_add(lanes: Lanes, narrow: u32, v: f32) -> f32 {
    return v;
}

fn tree_max(lanes: Lanes, narrow: u32, v: f32) -> f32 {
    return v;
}
