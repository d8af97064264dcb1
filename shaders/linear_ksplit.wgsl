// K-split path: one workgroup per output column and TM rows; invocation t sums the 8-wide
// groups t, t + WG, ... in order, then a fixed tree adds the WG partial sums (for a gated
// weight, the up row's sums too, in rows TM..2TM of the reduction). The per-row statements
// (lines starting with ROWS) are repeated for rows 0..TM by the composer (`_R` and `RR` become
// the row number); lines starting with GATED are kept only for a gated weight and lines
// starting with PLAIN only for a plain one (see the docs of src/gpu/shader.rs).
const RED_ROWS: u32 = TM * GATES;
var<workgroup> red: array<f32, RED_ROWS * WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let n = wid.z * P.nx + wid.x;
    let nc = min(n, P.n_part - 1u);
    let m0 = wid.y * TM;
    let rb = nc * w_row_words(P.k);
    GATED let ru = rb + P.n_part * w_row_words(P.k);
    ROWS var acc_R = 0.0; let xr_R = x_row(m0, RRu);
    GATED ROWS var up_R = 0.0;
    let groups = P.k / 8u;
    for (var g = t; g < groups; g += WG) {
        let w = w_group(rb, g);
        GATED let u = w_group(ru, g);
        ROWS let x_R = load_x8_direct(xr_R + 8u * g);
        ROWS acc_R = dot8(x_R, w, acc_R);
        GATED ROWS up_R = dot8(x_R, u, up_R);
    }
    if (t == 0u) {
        for (var k = groups * 8u; k < P.k; k++) {
            let w = w_elem(rb, k);
            GATED let u = w_elem(ru, k);
            ROWS acc_R = fma(X[xr_R + k], w, acc_R);
            GATED ROWS up_R = fma(X[xr_R + k], u, up_R);
        }
    }
    ROWS red[RRu * WG + t] = acc_R;
    GATED ROWS red[(TM + RRu) * WG + t] = up_R;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (t < s) {
            for (var r = 0u; r < RED_ROWS; r++) {
                red[r * WG + t] = red[r * WG + t] + red[r * WG + t + s];
            }
        }
    }
    if (t == 0u && n < P.n_part) {
        PLAIN ROWS if (m0 + RRu < P.m) { emit(m0 + RRu, n, red[RRu * WG]); }
        GATED ROWS if (m0 + RRu < P.m) { emit_gated(m0 + RRu, n, red[RRu * WG], red[(TM + RRu) * WG]); }
    }
}
