// The linear's activations X as 16-byte units, for the K-split kernels of rows whose length is
// a multiple of 4 (src/gpu/shader.rs's XLoad::Units; every model's rows), so that every row
// starts on a unit and a lane reads its eight activations in two loads, not eight. Tensor
// buffers are whole units, so every value is in one. `x1` reads one value, `load_x8_direct`
// eight from an index that is a multiple of 4.
@group(0) @binding(SLOT_X) var<storage, read> X: array<vec4<f32>>;

fn x1(i: u32) -> f32 {
    return X[i / 4u][i % 4u];
}

fn load_x8_direct(i: u32) -> W8 {
    return W8(X[i / 4u], X[i / 4u + 1u]);
}

fn load_x4_direct(i: u32) -> vec4<f32> {
    return X[i / 4u];
}
