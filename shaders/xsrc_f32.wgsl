// The linear's activations X as f32 words (src/gpu/shader.rs's XLoad::Words: the sequential
// path, and K-split rows whose length is not a multiple of 4): `x1` reads one,
// `load_x8_direct` eight and `load_x4_direct` four from an index.
@group(0) @binding(SLOT_X) var<storage, read> X: array<f32>;

fn x1(i: u32) -> f32 {
    return X[i];
}

fn load_x8_direct(i: u32) -> W8 {
    return W8(vec4<f32>(X[i], X[i + 1u], X[i + 2u], X[i + 3u]), vec4<f32>(X[i + 4u], X[i + 5u], X[i + 6u], X[i + 7u]));
}

fn load_x4_direct(i: u32) -> vec4<f32> {
    return vec4<f32>(X[i], X[i + 1u], X[i + 2u], X[i + 3u]);
}
