// Sequential path: one invocation per output column and TM rows, a sequential loop over k.
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32 LANE_ARG) {
    LANE_LET
    let n = wid.x * WG + lid;
    let nc = min(n, P.n_part - 1u);
    let m0 = wid.y * TM;
    let rb = nc * w_row_words(P.k);
    var acc: array<f32, TM>;
    let groups = P.k / 8u;
    for (var g = 0u; g < groups; g++) {
        let w = w_group(rb, g);
        for (var r = 0u; r < TM; r++) {
            acc[r] = dot8(load_x8(x_row(m0, r) + 8u * g, lane), w, acc[r]);
        }
    }
    for (var k = groups * 8u; k < P.k; k++) {
        let w = w_elem(rb, k);
        for (var r = 0u; r < TM; r++) {
            acc[r] = fma(X[x_row(m0, r) + k], w, acc[r]);
        }
    }
    if (n < P.n_part) {
        for (var r = 0u; r < TM; r++) {
            if (m0 + r < P.m) {
                Y[(m0 + r) * P.ldy + P.n0 + n] = acc[r];
            }
        }
    }
}
