// The activations of a linear with Gemma's sandwich before it (xin_sandwich.wgsl) as 16-byte
// units (XLoad::Units, as xsrc_vec4.wgsl: the row length a multiple of 4): the residual X, the
// previous projection's output O (both [M, K]) and the post-norm's weight POST ([K]).
// `load_x8_direct` and `load_x4_direct` read X as stored; `x_word`, `o_word` and `post_word`
// one value, `o8`, `o4`, `post8` and `post4` eight or four from an index that is a multiple of 4.
@group(0) @binding(SLOT_X) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(SLOT_O) var<storage, read> O: array<vec4<f32>>;
@group(0) @binding(SLOT_POST) var<storage, read> POST: array<vec4<f32>>;

fn x_word(i: u32) -> f32 {
    return X[i / 4u][i % 4u];
}

fn o_word(i: u32) -> f32 {
    return O[i / 4u][i % 4u];
}

fn post_word(k: u32) -> f32 {
    return POST[k / 4u][k % 4u];
}

fn load_x8_direct(i: u32) -> W8 {
    return W8(X[i / 4u], X[i / 4u + 1u]);
}

fn load_x4_direct(i: u32) -> vec4<f32> {
    return X[i / 4u];
}

fn o8(i: u32) -> W8 {
    return W8(O[i / 4u], O[i / 4u + 1u]);
}

fn o4(i: u32) -> vec4<f32> {
    return O[i / 4u];
}

fn post8(k: u32) -> W8 {
    return W8(POST[k / 4u], POST[k / 4u + 1u]);
}

fn post4(k: u32) -> vec4<f32> {
    return POST[k / 4u];
}
