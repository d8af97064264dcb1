// K-split path: one workgroup per output column and TM rows; invocation t sums the 8-wide
// groups t, t + WG, ... in order, then a fixed tree adds the WG partial sums.
var<workgroup> red: array<f32, TM * WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let n = wid.z * P.nx + wid.x;
    let nc = min(n, P.n_part - 1u);
    let m0 = wid.y * TM;
    let rb = nc * w_row_words(P.k);
    var acc: array<f32, TM>;
    let groups = P.k / 8u;
    for (var g = t; g < groups; g += WG) {
        let w = w_group(rb, g);
        for (var r = 0u; r < TM; r++) {
            acc[r] = dot8(load_x8_direct(x_row(m0, r) + 8u * g), w, acc[r]);
        }
    }
    if (t == 0u) {
        for (var k = groups * 8u; k < P.k; k++) {
            let w = w_elem(rb, k);
            for (var r = 0u; r < TM; r++) {
                acc[r] = fma(X[x_row(m0, r) + k], w, acc[r]);
            }
        }
    }
    for (var r = 0u; r < TM; r++) {
        red[r * WG + t] = acc[r];
    }
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (t < s) {
            for (var r = 0u; r < TM; r++) {
                red[r * WG + t] = red[r * WG + t] + red[r * WG + t + s];
            }
        }
    }
    if (t == 0u && n < P.n_part) {
        for (var r = 0u; r < TM; r++) {
            if (m0 + r < P.m) {
                Y[(m0 + r) * P.ldy + P.n0 + n] = red[r * WG];
            }
        }
    }
}
