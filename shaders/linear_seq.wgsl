// Sequential path: one invocation per output column and TM rows, a sequential loop over k.
// The loop walks whole blocks of 32 weights (a quantized block's scale and words read once),
// then the remaining groups of 8 and single weights; the fma chain stays k-ascending, so the
// bits are those of a plain k loop. The per-row statements (ROWS_* lines) are repeated for rows
// 0..TM by the composer (`_R` and `RR` become the row number), so the accumulators are plain
// registers rather than a private array.
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32 LANE_ARG) {
    LANE_LET
    let n = wid.x * WG + lid;
    let nc = min(n, P.n_part - 1u);
    let m0 = wid.y * TM;
    let rb = nc * w_row_words(P.k);
    ROWS_DECL var acc_R = 0.0; let xr_R = x_row(m0, RRu);
    let blocks = P.k / 32u;
    for (var b = 0u; b < blocks; b++) {
        let w = w_block(rb, b);
        ROWS_BLOCK let xb_R = xr_R + 32u * b; acc_R = dot8(load_x8(xb_R, lane), w.g0, acc_R); acc_R = dot8(load_x8(xb_R + 8u, lane), w.g1, acc_R); acc_R = dot8(load_x8(xb_R + 16u, lane), w.g2, acc_R); acc_R = dot8(load_x8(xb_R + 24u, lane), w.g3, acc_R);
    }
    let groups = P.k / 8u;
    for (var g = blocks * 4u; g < groups; g++) {
        let w = w_group(rb, g);
        ROWS_GROUP acc_R = dot8(load_x8(xr_R + 8u * g, lane), w, acc_R);
    }
    for (var k = groups * 8u; k < P.k; k++) {
        let w = w_elem(rb, k);
        ROWS_TAIL acc_R = fma(X[xr_R + k], w, acc_R);
    }
    if (n < P.n_part) {
        ROWS_STORE if (m0 + RRu < P.m) { Y[(m0 + RRu) * P.ldy + P.n0 + n] = acc_R; }
    }
}
