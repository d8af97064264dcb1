// K-split path: one workgroup per output column and TM rows; invocation t sums the 8-wide
// groups t, t + WG, ... in order, then a fixed tree adds the WG partial sums. The per-row
// statements (lines starting with ROWS) are repeated for rows 0..TM by the composer (`_R` and
// `RR` become the row number; see the docs of src/gpu/shader.rs).
var<workgroup> red: array<f32, TM * WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let n = wid.z * P.nx + wid.x;
    let nc = min(n, P.n_part - 1u);
    let m0 = wid.y * TM;
    let rb = nc * w_row_words(P.k);
    ROWS var acc_R = 0.0; let xr_R = x_row(m0, RRu);
    let groups = P.k / 8u;
    for (var g = t; g < groups; g += WG) {
        let w = w_group(rb, g);
        ROWS acc_R = dot8(load_x8_direct(xr_R + 8u * g), w, acc_R);
    }
    if (t == 0u) {
        for (var k = groups * 8u; k < P.k; k++) {
            let w = w_elem(rb, k);
            ROWS acc_R = fma(X[xr_R + k], w, acc_R);
        }
    }
    ROWS red[RRu * WG + t] = acc_R;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (t < s) {
            for (var r = 0u; r < TM; r++) {
                red[r * WG + t] = red[r * WG + t] + red[r * WG + t + s];
            }
        }
    }
    if (t == 0u && n < P.n_part) {
        ROWS if (m0 + RRu < P.m) { Y[(m0 + RRu) * P.ldy + P.n0 + n] = red[RRu * WG]; }
    }
}
