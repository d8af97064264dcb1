// Paged attention over a varlen batch, one subgroup of DOT_LANES lanes (the workgroup) per
// (query token, head): lane l holds the head's dimension pairs l, l + DOT_LANES, ... of the
// query and of the output, so a key's or value's pairs are read by the lanes side by side.
// Each lane sums its pairs of q·k, a shuffle-xor butterfly adds the lanes' sums (the order
// attention_common.wgsl's `attend_blocks` sums in) and every lane then holds the score. The
// walk is attention.wgsl's — the context block by block in ascending order, each block's scores,
// its maximum, one rescale, its values added — so the bits are attention.wgsl's, with the
// context's work spread over the lanes instead of one invocation per (token, head).

// Dimension pairs each lane holds.
const PL: u32 = (HP + DOT_LANES - 1u) / DOT_LANES;

// `part` plus key pair `d` at `kb` times the query pair `qp` (x then y); `part` past the head.
fn lane_dot(part: f32, qp: vec2<f32>, kb: u32, d: u32) -> f32 {
    if (d >= HP) {
        return part;
    }
    let k = kv_in(K_CACHE[kb + d]);
    return fma(qp.y, k.y, fma(qp.x, k.x, part));
}

// `a` plus value pair `d` at `vb` weighted by `e`; `a` past the head.
fn lane_fma(a: vec2<f32>, e: f32, vb: u32, d: u32) -> vec2<f32> {
    if (d >= HP) {
        return a;
    }
    return fma(vec2<f32>(e, e), kv_in(V_CACHE[vb + d]), a);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32) {
    // Everything up to the output is uniform across the workgroup: one (token, head).
    let i = wid.y * nwg.x + wid.x;
    if (i >= P.tokens * P.heads) {
        return;
    }
    let at = query_at(i);
    let ctx = at.ctx;
    var q: array<vec2<f32>, PL>;
    var acc: array<vec2<f32>, PL>;
    let qo = at.tok * P.q_stride + at.head * HD;
    for (var p = 0u; p < PL; p++) {
        let d = p * DOT_LANES + lane;
        if (d < HP) {
            q[p] = vec2<f32>(Q[qo + 2u * d], Q[qo + 2u * d + 1u]);
        }
    }
    var state = Softmax(-3.0e38, 0.0);
    let kvh = at.head / (P.heads / P.kv_heads);
    let blocks = min((ctx + P.block_size - 1u) / P.block_size, P.max_blocks);
    let first = first_key(ctx);
    var s: array<f32, MAX_BS>;
    for (var blk = first / P.block_size; blk < blocks; blk++) {
        let phys = BLOCK_TABLE[at.seq * P.max_blocks + blk];
        let n_in = min(P.block_size, ctx - blk * P.block_size);
        let j0 = max(first, blk * P.block_size) - blk * P.block_size;
        var tile_max = -3.0e38;
        for (var j = j0; j < n_in; j++) {
            let kb = ((phys * P.block_size + j) * P.kv_heads + kvh) * HP;
            var part = 0.0;
            LANE_PAIRS part = lane_dot(part, q[PPu], kb, PPu * DOT_LANES + lane);
            // Written out as the loops over the lane's pairs are (LANE_PAIRS, DOT_LANES is 8):
            // lavapipe ends every loop of an invocation once their iterations together pass
            // 65,535, and a loop here would cost its trip count at every key.
            part = part + subgroupShuffleXor(part, 4u);
            part = part + subgroupShuffleXor(part, 2u);
            part = part + subgroupShuffleXor(part, 1u);
            s[j] = score_of(part);
            tile_max = max(tile_max, s[j]);
        }
        let m_new = max(state.m, tile_max);
        let corr = exp(state.m - m_new);
        state.l = state.l * corr;
        LANE_PAIRS acc[PPu] = acc[PPu] * corr;
        for (var j = j0; j < n_in; j++) {
            let e = exp(s[j] - m_new);
            state.l = state.l + e;
            let vb = ((phys * P.block_size + j) * P.kv_heads + kvh) * HP;
            LANE_PAIRS acc[PPu] = lane_fma(acc[PPu], e, vb, PPu * DOT_LANES + lane);
        }
        state.m = m_new;
    }
    // Inconsistent batch metadata (ctx 0) writes zeros rather than a wrapped-around context.
    for (var p = 0u; p < PL; p++) {
        let d = p * DOT_LANES + lane;
        if (d < HP) {
            let o = select(vec2<f32>(0.0), acc[p] / state.l, ctx > 0u);
            OUT[i * HD + 2u * d] = o.x;
            OUT[i * HD + 2u * d + 1u] = o.y;
        }
    }
}
