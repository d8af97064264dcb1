// K-split GEMM (prefill and batched decode on GPUs): the K-split GEMV's reduction order for a
// tile of rows. The workgroup is BANDS bands of LANES invocations; band j computes rows
// m0 + j TM .. + TM of the same TN columns, and lane l of every band sums what lane l of the
// GEMV does: the partial sums of runs l, l + LANES, ... in order through the format's
// `lane_partial` (each run's weights decoded once by `lane_run` for the band's TM rows, and read
// by the bands of the tile from the same cache lines), lane 0 then the last k % 16 weights; the
// lanes' partial sums meet in the GEMV's tree (lane t adds lane t + s for s = LANES / 2, ..., 1)
// through workgroup memory, so each output has the bits of a decode row (linear_ksplit.wgsl).
// Lines starting with ROWS / COLS / PAIRS, GATED / PAIRED / PLAIN are expanded by the composer
// as in the other linear kernels.
const LANES: u32 = WG / BANDS;
// Outputs each invocation accumulates (gate and up sums both).
const OUTS: u32 = TM * TN * GATES;
// The tree's exchange: LANES / 2 lanes x BANDS x OUTS partial sums (TILE).
var<workgroup> tile: array<f32, TILE>;

// Slot of partial sum `o` of lane `j` of band `band` in the tree's exchange.
fn xi(band: u32, o: u32, j: u32) -> u32 {
    return (band * OUTS + o) * (LANES / 2u) + j;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, lanes: Lanes) {
    let t = lanes.t;
    let band = t / LANES;
    let lane = t % LANES;
    let n = (wid.z * P.nx + wid.x) * TN;
    let m0 = wid.y * BANDS * TM;
    let row_words = w_row_words(P.k);
    row_scales(m0, n == 0u, lanes);
    COLS let rb_C = w_first(m0) + min(n + CCu, P.n_part - 1u) * row_words;
    GATED COLS let ru_C = rb_C + P.n_part * row_words;
    ROWS let xr_R = x_row(m0 + band * TM, RRu);
    ROWS let s_R = row_scale(band * TM + RRu);
    ROWS COLS var acc_R_C = 0.0;
    GATED ROWS COLS var up_R_C = 0.0;
    let runs = P.k / 16u;
    for (var r = lane; r < runs; r += LANES) {
        COLS let w_C = lane_run(rb_C, r);
        GATED COLS let u_C = lane_run(ru_C, r);
        ROWS let x_R = x_run(xr_R, r, s_R);
        ROWS COLS acc_R_C = acc_R_C + lane_partial(w_C, x_R);
        GATED ROWS COLS up_R_C = up_R_C + lane_partial(u_C, x_R);
    }
    if (lane == 0u) {
        for (var k = runs * 16u; k < P.k; k++) {
            COLS let w_C = w_elem(rb_C, k);
            GATED COLS let u_C = w_elem(ru_C, k);
            ROWS let x_R = input1(x1(xr_R + k), s_R, k);
            ROWS COLS acc_R_C = fma(x_R, w_C, acc_R_C);
            GATED ROWS COLS up_R_C = fma(x_R, u_C, up_R_C);
        }
    }
    for (var s = LANES / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (lane >= s && lane < 2u * s) {
            ROWS COLS tile[xi(band, RRu * TN + CCu, lane - s)] = acc_R_C;
            GATED ROWS COLS tile[xi(band, (TM + RRu) * TN + CCu, lane - s)] = up_R_C;
        }
        workgroupBarrier();
        if (lane < s) {
            ROWS COLS acc_R_C = acc_R_C + tile[xi(band, RRu * TN + CCu, lane)];
            GATED ROWS COLS up_R_C = up_R_C + tile[xi(band, (TM + RRu) * TN + CCu, lane)];
        }
    }
    let mr = m0 + band * TM;
    if (lane == 0u) {
        PLAIN ROWS COLS if (mr + RRu < P.m && n + CCu < P.n_part) { emit(mr + RRu, n + CCu, acc_R_C); }
        GATED ROWS COLS if (mr + RRu < P.m && n + CCu < P.n_part) { emit_gated(mr + RRu, n + CCu, acc_R_C, up_R_C); }
        PAIRED ROWS PAIRS if (mr + RRu < P.m && n + CCu < P.n_part) { emit_pair(mr + RRu, n + CCu, acc_R_C, acc_R_D); }
    }
}
