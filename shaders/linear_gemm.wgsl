// K-split GEMM (prefill on GPUs): the K-split GEMV's reduction order for a tile of rows. The
// workgroup is BANDS bands of LANES invocations; band j computes rows m0 + j TM .. + TM of the
// same TN columns, and lane l of every band sums what lane l of the GEMV does: the blocks of
// 32 weights l, l + LANES, ... in order, each block's four groups in order (none for
// WALK_BLOCKS 0), then the groups past them l, l + LANES, ..., lane 0 then the last k % 8
// weights; the lanes' partial sums meet in the GEMV's tree (lane t adds lane t + s for s =
// LANES / 2, ..., 1), so each output has the bits of a decode row (linear_ksplit.wgsl). The
// weights of the tile's TN columns (gate and up rows for a gated weight) pass through
// workgroup memory a group a lane at a time, each invocation dequantizing its lane's group of
// its row once for every band to read: a weight group is dequantized once per BANDS * TM rows.
// Lines starting with ROWS / COLS / PAIRS, GATED / PAIRED / PLAIN are expanded by the composer
// as in the other linear kernels.
const LANES: u32 = WG / BANDS;
// Outputs each invocation accumulates (gate and up sums both).
const OUTS: u32 = TM * TN * GATES;
// The staged weights (row r, lane l: its first vec4 at 2 r LANES + l, its second LANES
// further, so the lanes of a band touch consecutive vec4s), reused after the K loop to pass
// partial sums down the tree (LANES / 2 lanes x BANDS x OUTS values); TILE is the larger of
// the two, in vec4s.
var<workgroup> tile: array<vec4<f32>, TILE>;

fn stage(r: u32, l: u32, w: W8) {
    tile[2u * r * LANES + l] = w.a;
    tile[(2u * r + 1u) * LANES + l] = w.b;
}

fn staged(r: u32, l: u32) -> W8 {
    return W8(tile[2u * r * LANES + l], tile[(2u * r + 1u) * LANES + l]);
}

// The group of 8 weights lane `lane` sums at step `s`, in the GEMV's order: while s <
// block_steps, group s % 4 of block (s / 4) LANES + lane (none, 0xffffffff, past the last
// block), then the groups past the blocks, LANES apart.
fn lane_group(s: u32, lane: u32, blocks: u32, block_steps: u32) -> u32 {
    if (s < block_steps) {
        let b = s / 4u * LANES + lane;
        return select(0xffffffffu, 4u * b + s % 4u, b < blocks);
    }
    return 4u * blocks + (s - block_steps) * LANES + lane;
}

// Slot of partial sum `o` of lane `j` of band `band` in the tree's exchange.
fn xi(band: u32, o: u32, j: u32) -> u32 {
    return (band * OUTS + o) * (LANES / 2u) + j;
}

fn put(i: u32, v: f32) {
    tile[i / 4u][i % 4u] = v;
}

fn take(i: u32) -> f32 {
    return tile[i / 4u][i % 4u];
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, lanes: Lanes) {
    let t = lanes.t;
    let band = t / LANES;
    let lane = t % LANES;
    let n = (wid.z * P.nx + wid.x) * TN;
    let m0 = wid.y * BANDS * TM;
    let row_words = w_row_words(P.k);
    // The weight row this invocation stages: column n + band, or for a gated weight the gate
    // row of column n + band (band < TN) or the up row of column n + band - TN.
    let staged_col = min(n + band % TN, P.n_part - 1u);
    let stage_rb = staged_col * row_words + (band / TN) * P.n_part * row_words;
    row_scales(m0, lanes);
    COLS let rb_C = min(n + CCu, P.n_part - 1u) * row_words;
    GATED COLS let ru_C = rb_C + P.n_part * row_words;
    ROWS let xr_R = x_row(m0 + band * TM, RRu);
    ROWS let s_R = row_scale(band * TM + RRu);
    ROWS COLS var acc_R_C = 0.0;
    GATED ROWS COLS var up_R_C = 0.0;
    let blocks = P.k / 32u * WALK_BLOCKS;
    let groups = P.k / 8u;
    let block_steps = 4u * ((blocks + LANES - 1u) / LANES);
    let steps = block_steps + (groups - 4u * blocks + LANES - 1u) / LANES;
    for (var s = 0u; s < steps; s++) {
        let g = lane_group(s, lane, blocks, block_steps);
        let live = g < groups;
        workgroupBarrier();
        if (live) {
            stage(band, lane, w_group(stage_rb, g));
        }
        workgroupBarrier();
        if (live) {
            COLS let w_C = staged(CCu, lane);
            GATED COLS let u_C = staged(TN + CCu, lane);
            ROWS let x_R = input8(load_x8_direct(xr_R + 8u * g), s_R, 8u * g);
            ROWS COLS acc_R_C = dot8(x_R, w_C, acc_R_C);
            GATED ROWS COLS up_R_C = dot8(x_R, u_C, up_R_C);
        }
    }
    if (lane == 0u) {
        for (var k = groups * 8u; k < P.k; k++) {
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
            ROWS COLS put(xi(band, RRu * TN + CCu, lane - s), acc_R_C);
            GATED ROWS COLS put(xi(band, (TM + RRu) * TN + CCu, lane - s), up_R_C);
        }
        workgroupBarrier();
        if (lane < s) {
            ROWS COLS acc_R_C = acc_R_C + take(xi(band, RRu * TN + CCu, lane));
            GATED ROWS COLS up_R_C = up_R_C + take(xi(band, (TM + RRu) * TN + CCu, lane));
        }
    }
    let mr = m0 + band * TM;
    if (lane == 0u) {
        PLAIN ROWS COLS if (mr + RRu < P.m && n + CCu < P.n_part) { emit(mr + RRu, n + CCu, acc_R_C); }
        GATED ROWS COLS if (mr + RRu < P.m && n + CCu < P.n_part) { emit_gated(mr + RRu, n + CCu, acc_R_C, up_R_C); }
        PAIRED ROWS PAIRS if (mr + RRu < P.m && n + CCu < P.n_part) { emit_pair(mr + RRu, n + CCu, acc_R_C, acc_R_D); }
    }
}
