// Sequential path: one invocation per output column and TM rows, a sequential loop over k.
// The per-row statements (ROWS_* lines) are repeated for rows 0..TM by the composer (`_R` and `RR`
// become the row number), so the
// accumulators are plain registers rather than a private array.
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32 LANE_ARG) {
    LANE_LET
    let n = wid.x * WG + lid;
    let nc = min(n, P.n_part - 1u);
    let m0 = wid.y * TM;
    let rb = nc * w_row_words(P.k);
    ROWS_DECL var acc_R = 0.0; let xr_R = x_row(m0, RRu);
    let groups = P.k / 8u;
    for (var g = 0u; g < groups; g++) {
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
