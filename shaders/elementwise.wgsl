// Elementwise kernels over n values: silu_mul (out = silu(a) * b), add_in_place (a += b),
// add_bias (a[r, :] += bias) and gather_rows (out[r, :] = a[idx[r], :]).
struct Params {
    n: u32,
    d: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * 64u + lid;
}
