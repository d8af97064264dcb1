// Elementwise kernels over n values: silu_mul (out = silu(gate) * up), gelu_tanh_mul
// (out = gelu_tanh(gate) * up), add_in_place (x += y), add_bias (x[r, :] += bias), gather_rows
// (out[r, :] = src[indices[r], :]), scale (x *= value) and softcap (x = value tanh(x / value)).
struct ElementwiseParams {
    n: u32,
    d: u32,
    value: f32,
}

@group(0) @binding(SLOT_P) var<uniform> P: ElementwiseParams;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}
