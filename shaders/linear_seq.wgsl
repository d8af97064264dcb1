// Sequential path: one invocation per TN output columns and TM rows, a sequential loop over k.
// The loop walks whole blocks of 32 weights (a quantized block's scale and words read once),
// then the remaining groups of 8 and single weights; each output's fma chain stays
// k-ascending, so its bits are those of a plain k loop whatever TM and TN are. Each activation
// load serves TN columns (twice over for a gated weight: gate and up rows) and each weight
// load TM rows. Lines starting with ROWS / COLS are repeated by the composer for rows 0..TM
// (`_R`, `RR` become the row number) and columns 0..TN (`_C`, `CC` become the column number),
// so accumulators are plain registers; lines starting with GATED are kept only for a gated
// weight, PAIRED only for an epilogue taking two columns at once (PAIRS repeats the line per
// column pair: `CC`, `_C` the first, `DD`, `_D` the second) and PLAIN only for the others
// (see the docs of src/gpu/shader.rs).
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, lanes: Lanes) {
    let lid = lanes.t;
    let lane = subgroup_lane(lanes);
    let n = (wid.x * WG + lid) * TN;
    let m0 = wid.y * TM;
    let row_words = w_row_words(P.k);
    COLS let rb_C = w_first(m0) + min(n + CCu, P.n_part - 1u) * row_words;
    GATED COLS let ru_C = rb_C + P.n_part * row_words;
    ROWS let xr_R = x_row(m0, RRu);
    row_scales(m0, wid.x == 0u, lanes);
    ROWS let s_R = row_scale(RRu);
    ROWS COLS var acc_R_C = 0.0;
    GATED ROWS COLS var up_R_C = 0.0;
    let blocks = P.k / 32u;
    for (var b = 0u; b < blocks; b++) {
        COLS let w_C = w_block(rb_C, b);
        GATED COLS let u_C = w_block(ru_C, b);
        ROWS let x_R = load_x8(xr_R + 32u * b, 32u * b, s_R, lane);
        ROWS COLS acc_R_C = dot8(x_R, w_C.g0, acc_R_C);
        GATED ROWS COLS up_R_C = dot8(x_R, u_C.g0, up_R_C);
        ROWS let y_R = load_x8(xr_R + 32u * b + 8u, 32u * b + 8u, s_R, lane);
        ROWS COLS acc_R_C = dot8(y_R, w_C.g1, acc_R_C);
        GATED ROWS COLS up_R_C = dot8(y_R, u_C.g1, up_R_C);
        ROWS let z_R = load_x8(xr_R + 32u * b + 16u, 32u * b + 16u, s_R, lane);
        ROWS COLS acc_R_C = dot8(z_R, w_C.g2, acc_R_C);
        GATED ROWS COLS up_R_C = dot8(z_R, u_C.g2, up_R_C);
        ROWS let v_R = load_x8(xr_R + 32u * b + 24u, 32u * b + 24u, s_R, lane);
        ROWS COLS acc_R_C = dot8(v_R, w_C.g3, acc_R_C);
        GATED ROWS COLS up_R_C = dot8(v_R, u_C.g3, up_R_C);
    }
    let groups = P.k / 8u;
    for (var g = blocks * 4u; g < groups; g++) {
        COLS let w_C = w_group(rb_C, g);
        GATED COLS let u_C = w_group(ru_C, g);
        ROWS let x_R = load_x8(xr_R + 8u * g, 8u * g, s_R, lane);
        ROWS COLS acc_R_C = dot8(x_R, w_C, acc_R_C);
        GATED ROWS COLS up_R_C = dot8(x_R, u_C, up_R_C);
    }
    for (var k = groups * 8u; k < P.k; k++) {
        COLS let w_C = w_elem(rb_C, k);
        GATED COLS let u_C = w_elem(ru_C, k);
        ROWS let x_R = input1(x1(xr_R + k), s_R, k);
        ROWS COLS acc_R_C = fma(x_R, w_C, acc_R_C);
        GATED ROWS COLS up_R_C = fma(x_R, u_C, up_R_C);
    }
    PLAIN ROWS COLS if (m0 + RRu < P.m && n + CCu < P.n_part) { emit(m0 + RRu, n + CCu, acc_R_C); }
    GATED ROWS COLS if (m0 + RRu < P.m && n + CCu < P.n_part) { emit_gated(m0 + RRu, n + CCu, acc_R_C, up_R_C); }
    PAIRED ROWS PAIRS if (m0 + RRu < P.m && n + CCu < P.n_part) { emit_pair(m0 + RRu, n + CCu, acc_R_C, acc_R_D); }
}
