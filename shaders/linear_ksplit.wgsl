// K-split GEMV (decode on GPUs): one workgroup per output; invocation t sums the 8-wide groups
// t, t + WG, ... of K in order (invocation 0 then the last k % 8 weights), and a fixed tree
// adds the WG partial sums (for a gated weight the up row's sums too). linear_gemm.wgsl
// computes prefill tiles in the same order, so a decode row and the same row in a prefill
// batch have the same bits. Lines starting with GATED are kept only for a gated weight and
// lines starting with PLAIN only for a plain one (see the docs of src/gpu/shader.rs).
var<workgroup> red: array<f32, GATES * WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let n = wid.z * P.nx + wid.x;
    let m = wid.y;
    let row_words = w_row_words(P.k);
    let rb = min(n, P.n_part - 1u) * row_words;
    GATED let ru = rb + P.n_part * row_words;
    let xr = x_row(m, 0u);
    row_scales(m, t);
    let scale = row_scale(0u);
    var acc = 0.0;
    GATED var up = 0.0;
    let groups = P.k / 8u;
    for (var g = t; g < groups; g += WG) {
        let x = input8(load_x8_direct(xr + 8u * g), scale, 8u * g);
        acc = dot8(x, w_group(rb, g), acc);
        GATED up = dot8(x, w_group(ru, g), up);
    }
    if (t == 0u) {
        for (var k = groups * 8u; k < P.k; k++) {
            let x = input1(X[xr + k], scale, k);
            acc = fma(x, w_elem(rb, k), acc);
            GATED up = fma(x, w_elem(ru, k), up);
        }
    }
    red[t] = acc;
    GATED red[WG + t] = up;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (t < s) {
            for (var r = 0u; r < GATES; r++) {
                red[r * WG + t] = red[r * WG + t] + red[r * WG + t + s];
            }
        }
    }
    if (t == 0u && m < P.m && n < P.n_part) {
        PLAIN emit(m, n, red[0]);
        GATED emit_gated(m, n, red[0], red[WG]);
    }
}
