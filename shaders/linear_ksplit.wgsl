// K-split path: one workgroup per TN output columns and TM rows (TN = 1 for decode, more for a
// prefill tile, so that each activation load serves TN columns and each weight load TM rows);
// invocation t sums the 8-wide groups t, t + WG, ... in order, then a fixed tree adds the WG
// partial sums of each output (for a gated weight the up rows' sums too, after the gate
// rows'). Each output's order is the same whatever TM and TN are, so a decode row and the same
// row in a prefill tile have the same bits. Lines starting with ROWS / COLS are repeated by the
// composer for rows 0..TM (`_R`, `RR` become the row number) and columns 0..TN (`_C`, `CC`);
// lines starting with GATED are kept only for a gated weight and lines starting with PLAIN
// only for a plain one (see the docs of src/gpu/shader.rs).
const RED_ROWS: u32 = TM * TN * GATES;
var<workgroup> red: array<f32, RED_ROWS * WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let n = (wid.z * P.nx + wid.x) * TN;
    let m0 = wid.y * TM;
    let row_words = w_row_words(P.k);
    COLS let rb_C = min(n + CCu, P.n_part - 1u) * row_words;
    GATED COLS let ru_C = rb_C + P.n_part * row_words;
    ROWS let xr_R = x_row(m0, RRu);
    ROWS let s_R = row_scale(xr_R, t);
    ROWS COLS var acc_R_C = 0.0;
    GATED ROWS COLS var up_R_C = 0.0;
    let groups = P.k / 8u;
    for (var g = t; g < groups; g += WG) {
        COLS let w_C = w_group(rb_C, g);
        GATED COLS let u_C = w_group(ru_C, g);
        ROWS let x_R = input8(load_x8_direct(xr_R + 8u * g), s_R, 8u * g);
        ROWS COLS acc_R_C = dot8(x_R, w_C, acc_R_C);
        GATED ROWS COLS up_R_C = dot8(x_R, u_C, up_R_C);
    }
    if (t == 0u) {
        for (var k = groups * 8u; k < P.k; k++) {
            COLS let w_C = w_elem(rb_C, k);
            GATED COLS let u_C = w_elem(ru_C, k);
            ROWS let x_R = input1(X[xr_R + k], s_R, k);
            ROWS COLS acc_R_C = fma(x_R, w_C, acc_R_C);
            GATED ROWS COLS up_R_C = fma(x_R, u_C, up_R_C);
        }
    }
    ROWS COLS red[(RRu * TN + CCu) * WG + t] = acc_R_C;
    GATED ROWS COLS red[((TM + RRu) * TN + CCu) * WG + t] = up_R_C;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (t < s) {
            for (var r = 0u; r < RED_ROWS; r++) {
                red[r * WG + t] = red[r * WG + t] + red[r * WG + t + s];
            }
        }
    }
    if (t == 0u) {
        PLAIN ROWS COLS if (m0 + RRu < P.m && n + CCu < P.n_part) { emit(m0 + RRu, n + CCu, red[(RRu * TN + CCu) * WG]); }
        GATED ROWS COLS if (m0 + RRu < P.m && n + CCu < P.n_part) { emit_gated(m0 + RRu, n + CCu, red[(RRu * TN + CCu) * WG], red[((TM + RRu) * TN + CCu) * WG]); }
    }
}
