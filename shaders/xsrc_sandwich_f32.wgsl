// The activations of a linear with Gemma's sandwich before it (xin_sandwich.wgsl) as f32 words
// (XLoad::Words, as xsrc_f32.wgsl): the residual X, the previous projection's output O (both
// [M, K]) and the post-norm's weight POST ([K]). `load_x8_direct` and `load_x4_direct` read X
// as stored; `x_word`, `o_word` and `post_word` one value, `o8`, `o4`, `post8` and `post4`
// eight or four from an index.
@group(0) @binding(SLOT_X) var<storage, read> X: array<f32>;
@group(0) @binding(SLOT_O) var<storage, read> O: array<f32>;
@group(0) @binding(SLOT_POST) var<storage, read> POST: array<f32>;

fn x_word(i: u32) -> f32 {
    return X[i];
}

fn o_word(i: u32) -> f32 {
    return O[i];
}

fn post_word(k: u32) -> f32 {
    return POST[k];
}

fn load_x8_direct(i: u32) -> W8 {
    return W8(vec4<f32>(X[i], X[i + 1u], X[i + 2u], X[i + 3u]), vec4<f32>(X[i + 4u], X[i + 5u], X[i + 6u], X[i + 7u]));
}

fn load_x4_direct(i: u32) -> vec4<f32> {
    return vec4<f32>(X[i], X[i + 1u], X[i + 2u], X[i + 3u]);
}

fn o8(i: u32) -> W8 {
    return W8(vec4<f32>(O[i], O[i + 1u], O[i + 2u], O[i + 3u]), vec4<f32>(O[i + 4u], O[i + 5u], O[i + 6u], O[i + 7u]));
}

fn o4(i: u32) -> vec4<f32> {
    return vec4<f32>(O[i], O[i + 1u], O[i + 2u], O[i + 3u]);
}

fn post8(k: u32) -> W8 {
    return W8(vec4<f32>(POST[k], POST[k + 1u], POST[k + 2u], POST[k + 3u]), vec4<f32>(POST[k + 4u], POST[k + 5u], POST[k + 6u], POST[k + 7u]));
}

fn post4(k: u32) -> vec4<f32> {
    return vec4<f32>(POST[k], POST[k + 1u], POST[k + 2u], POST[k + 3u]);
}
