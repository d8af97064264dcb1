// The parameters and flat index of the elementwise kernels over n values, each composed
// from this file and its own: gated_mul (out = act(gate) * up, with act_silu.wgsl or
// act_gelu_tanh.wgsl), add_in_place (x += y), gather_rows (out[r, :] = src[indices[r], :]),
// copy_ids (out[pairs[2i + 1]] = src[pairs[2i]], u32),
// scatter_rows (out[indices[r], :] = src[r, :] * scales[r]), moe_combine (x += the sum of d
// blocks of y), scale (x *= value), softcap (x = value tanh(x / value)) and swiglu_clamped (gpt-oss's
// clamped SwiGLU, limit = value).
struct ElementwiseParams {
    n: u32,
    d: u32,
    value: f32,
}

@group(0) @binding(SLOT_P) var<uniform> P: ElementwiseParams;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}
