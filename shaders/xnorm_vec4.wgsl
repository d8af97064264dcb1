// The RMSNorm weight of a normed linear input as 16-byte units (XLoad::Units, as its
// activations: the row length a multiple of 4): `norm1` reads one value, `norm8` eight from an
// index that is a multiple of 4 in two loads.
@group(0) @binding(SLOT_NORM) var<storage, read> NORM: array<vec4<f32>>;

fn norm1(k: u32) -> f32 {
    return NORM[k / 4u][k % 4u];
}

fn norm8(k: u32) -> W8 {
    return W8(NORM[k / 4u], NORM[k / 4u + 1u]);
}

fn norm4(k: u32) -> vec4<f32> {
    return NORM[k / 4u];
}
