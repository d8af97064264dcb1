// Activations read once per subgroup: lane i loads x[i] of a group of 8 (through `input1`, so
// a normed input costs one more load a lane, not eight) and the others take it with
// subgroupBroadcast (all lanes of a subgroup share the same rows).
fn load_x8(xi: u32, k: u32, s: f32, lane: u32) -> W8 {
    let v = input1(x1(xi + lane % 8u), s, k + lane % 8u);
    return W8(
        vec4<f32>(subgroupBroadcast(v, 0u), subgroupBroadcast(v, 1u), subgroupBroadcast(v, 2u), subgroupBroadcast(v, 3u)),
        vec4<f32>(subgroupBroadcast(v, 4u), subgroupBroadcast(v, 5u), subgroupBroadcast(v, 6u), subgroupBroadcast(v, 7u)),
    );
}
