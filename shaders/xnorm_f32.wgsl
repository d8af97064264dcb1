// The RMSNorm weight of a normed linear input as f32 words (XLoad::Words, as its activations):
// `norm1` reads one, `norm8` eight from an index.
@group(0) @binding(SLOT_NORM) var<storage, read> NORM: array<f32>;

fn norm1(k: u32) -> f32 {
    return NORM[k];
}

fn norm8(k: u32) -> W8 {
    return W8(vec4<f32>(NORM[k], NORM[k + 1u], NORM[k + 2u], NORM[k + 3u]), vec4<f32>(NORM[k + 4u], NORM[k + 5u], NORM[k + 6u], NORM[k + 7u]));
}

fn norm4(k: u32) -> vec4<f32> {
    return vec4<f32>(NORM[k], NORM[k + 1u], NORM[k + 2u], NORM[k + 3u]);
}
