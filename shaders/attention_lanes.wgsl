// Paged attention over a varlen batch, one subgroup of DOT_LANES lanes (the workgroup) per
// query token and GH query heads of one KV head: lane l holds the heads' dimension pairs l,
// l + DOT_LANES, ... of the queries and of the outputs, so a key's or value's pairs are read by
// the lanes side by side, and once for all GH heads. Each lane sums its pairs of q·k, a
// shuffle-xor butterfly adds the lanes' sums (the order attention_common.wgsl's `attend_keys`
// sums in) and every lane then holds the score. Each head's walk is attention.wgsl's — the
// context block by block in ascending order, each block's scores, its maximum, one rescale, its
// values added — so the bits are attention.wgsl's, with the context's work spread over the
// lanes and its loads shared by the heads instead of one invocation per (token, head).
//
// The loops over a lane's pairs and over the heads are written out (LANE_PAIRS, GROUP_HEADS:
// src/gpu/shader/unroll.rs; DOT_LANES is 8, so is the butterfly): lavapipe ends every loop of
// an invocation once their iterations together pass 65,535, and a loop inside the walk would
// cost its trip count at every key.

// Dimension pairs each lane holds.
const PL: u32 = (HP + DOT_LANES - 1u) / DOT_LANES;

// Key pair `d` at `kb`; zeros past the head.
fn lane_key(kb: u32, d: u32) -> vec2<f32> {
    if (d >= HP) {
        return vec2<f32>(0.0);
    }
    return kv_in(K_CACHE[kb + d]);
}

// Value pair `d` at `vb`; zeros past the head.
fn lane_value(vb: u32, d: u32) -> vec2<f32> {
    if (d >= HP) {
        return vec2<f32>(0.0);
    }
    return kv_in(V_CACHE[vb + d]);
}

// `part` plus key pair `k` times query pair `qp` (x then y), for pair `d`; `part` past the head.
fn lane_dot(part: f32, qp: vec2<f32>, k: vec2<f32>, d: u32) -> f32 {
    if (d >= HP) {
        return part;
    }
    return fma(qp.y, k.y, fma(qp.x, k.x, part));
}

// `a` plus value pair `v` weighted by `e`, for pair `d`; `a` past the head.
fn lane_fma(a: vec2<f32>, e: f32, v: vec2<f32>, d: u32) -> vec2<f32> {
    if (d >= HP) {
        return a;
    }
    return fma(vec2<f32>(e, e), v, a);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32) {
    // Everything up to the output is uniform across the workgroup: one token, GH heads.
    let first_query = (wid.y * nwg.x + wid.x) * GH;
    if (first_query >= P.tokens * P.heads) {
        return;
    }
    let at = query_at(first_query);
    let ctx = at.ctx;
    var q: array<array<vec2<f32>, PL>, GH>;
    var acc: array<array<vec2<f32>, PL>, GH>;
    let qo = at.tok * P.q_stride + at.head * HD;
    for (var h = 0u; h < GH; h++) {
        for (var p = 0u; p < PL; p++) {
            let d = p * DOT_LANES + lane;
            if (d < HP) {
                q[h][p] = vec2<f32>(Q[qo + h * HD + 2u * d], Q[qo + h * HD + 2u * d + 1u]);
            }
        }
    }
    // Each head's running softmax: the largest score so far and the sum of exp(score - m).
    var m: array<f32, GH>;
    var l: array<f32, GH>;
    GROUP_HEADS m[HHu] = -3.0e38;
    let kvh = at.head / (P.heads / P.kv_heads);
    let blocks = min((ctx + P.block_size - 1u) / P.block_size, P.max_blocks);
    let first = first_key(ctx);
    var s: array<array<f32, MAX_BS>, GH>;
    for (var blk = first / P.block_size; blk < blocks; blk++) {
        let phys = BLOCK_TABLE[at.seq * P.max_blocks + blk];
        let n_in = min(P.block_size, ctx - blk * P.block_size);
        let j0 = max(first, blk * P.block_size) - blk * P.block_size;
        var tile_max: array<f32, GH>;
        GROUP_HEADS tile_max[HHu] = -3.0e38;
        for (var j = j0; j < n_in; j++) {
            let kb = ((phys * P.block_size + j) * P.kv_heads + kvh) * HP;
            LANE_PAIRS let k_PP = lane_key(kb, PPu * DOT_LANES + lane);
            GROUP_HEADS var part_HH = 0.0;
            GROUP_HEADS LANE_PAIRS part_HH = lane_dot(part_HH, q[HHu][PPu], k_PP, PPu * DOT_LANES + lane);
            GROUP_HEADS part_HH = part_HH + subgroupShuffleXor(part_HH, 4u);
            GROUP_HEADS part_HH = part_HH + subgroupShuffleXor(part_HH, 2u);
            GROUP_HEADS part_HH = part_HH + subgroupShuffleXor(part_HH, 1u);
            GROUP_HEADS s[HHu][j] = score_of(part_HH);
            GROUP_HEADS tile_max[HHu] = max(tile_max[HHu], s[HHu][j]);
        }
        GROUP_HEADS let m_new_HH = max(m[HHu], tile_max[HHu]);
        GROUP_HEADS let corr_HH = exp(m[HHu] - m_new_HH);
        GROUP_HEADS l[HHu] = l[HHu] * corr_HH;
        GROUP_HEADS LANE_PAIRS acc[HHu][PPu] = acc[HHu][PPu] * corr_HH;
        for (var j = j0; j < n_in; j++) {
            let vb = ((phys * P.block_size + j) * P.kv_heads + kvh) * HP;
            LANE_PAIRS let v_PP = lane_value(vb, PPu * DOT_LANES + lane);
            GROUP_HEADS let e_HH = exp(s[HHu][j] - m_new_HH);
            GROUP_HEADS l[HHu] = l[HHu] + e_HH;
            GROUP_HEADS LANE_PAIRS acc[HHu][PPu] = lane_fma(acc[HHu][PPu], e_HH, v_PP, PPu * DOT_LANES + lane);
        }
        GROUP_HEADS m[HHu] = m_new_HH;
    }
    // Inconsistent batch metadata (ctx 0) writes zeros rather than a wrapped-around context.
    for (var h = 0u; h < GH; h++) {
        let oo = (first_query + h) * HD;
        let fin = sink_finish(at.head + h, m[h], l[h]);
        for (var p = 0u; p < PL; p++) {
            let d = p * DOT_LANES + lane;
            if (d < HP) {
                let o = select(vec2<f32>(0.0), acc[h][p] * fin.x / fin.y, ctx > 0u);
                OUT[oo + 2u * d] = o.x;
                OUT[oo + 2u * d + 1u] = o.y;
            }
        }
    }
}
