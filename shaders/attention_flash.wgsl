// Flash-decoding paged attention over a varlen batch (src/gpu/attention_flash.rs): one workgroup
// per query token and GH query heads of one KV head, every key and value read once for the GH
// heads. The WG invocations are KL = WG / DOT_LANES key lanes of DOT_LANES dimension lanes each:
// dimension lane dl holds the heads' dimension pairs dl, dl + DOT_LANES, ... of the queries and
// of the outputs (so a key's pairs are read side by side), and key lane kl walks the keys
// kl, kl + KL, kl + 2 KL, ... of the context in ascending order (KL partitions of the context,
// fixed by the keys' positions), each key with its own step of the online softmax. A key's q·k
// is summed as every attention kernel sums it (pair d into partial d % DOT_LANES, then the
// butterfly 4, 2, 1), here across the dimension lanes by subgroup shuffles. The KL partial
// states are then combined in a fixed tree (partial i takes partial i + s for s = KL / 2, ...,
// 1): the largest maximum, the rescaled sums and the rescaled values. Which keys a lane walks
// and the tree depend only on the query's position (its context and window), so a token's
// output has the same bits alone, in a batch, in a prefill chunk of any size, or decoding; a
// head's bits do not depend on the other heads of its group. Prefill and decode tokens take the
// same kernel.
//
// The queries are read through `query_scale` and `query_pair`, and `fresh_key_value` runs
// first: as stored (flash_qk_none.wgsl), or, in the decode variant of the models with Q/K norms
// (flash_qk_rope.wgsl), normed and rotated here, the token's key and value written into the
// cache first: the rope_cache kernel's work, with its expressions.
//
// Each head ends with `sink_finish` over the combined maximum and sum (sink_none.wgsl, or
// sink_logit.wgsl for attention sinks, gpt-oss), as every attention kernel does.
//
// The loops over a lane's pairs and over the heads are written out (LANE_PAIRS, GROUP_HEADS:
// src/gpu/shader/unroll.rs); the walk over the context is one loop of ceil(keys / KL) trips,
// uniform over the workgroup (a lane past the context reads a key it sees and drops it), so the
// shuffles run with every lane.

// Dimension pairs each lane holds, and the key lanes.
const PL: u32 = (HP + DOT_LANES - 1u) / DOT_LANES;
const KL: u32 = WG / DOT_LANES;

// The key lanes' maxima and sums for the GH heads, and one head's weighted values.
var<workgroup> red_m: array<f32, KL * GH>;
var<workgroup> red_l: array<f32, KL * GH>;
var<workgroup> red_v: array<vec2<f32>, KL * HP>;

// Pair `d` of the key or value head at pair `base` of `pool`'s index space; zeros past the head.
fn flash_key(base: u32, d: u32) -> vec2<f32> {
    if (d >= HP) {
        return vec2<f32>(0.0);
    }
    return kv_in(K_CACHE[base + d]);
}

fn flash_value(base: u32, d: u32) -> vec2<f32> {
    if (d >= HP) {
        return vec2<f32>(0.0);
    }
    return kv_in(V_CACHE[base + d]);
}

// `part` plus key pair `k` times query pair `qp` (x then y) for pair `d`; `part` past the head.
fn flash_dot(part: f32, qp: vec2<f32>, k: vec2<f32>, d: u32) -> f32 {
    if (d >= HP) {
        return part;
    }
    return fma(qp.y, k.y, fma(qp.x, k.x, part));
}

// The sum of the KL values at red_l[base], red_l[base + 1], ... by the fixed tree.
fn flash_tree_sum(base: u32) -> f32 {
    var v: array<f32, KL>;
    for (var i = 0u; i < KL; i++) {
        v[i] = red_l[base + i];
    }
    for (var s = KL / 2u; s > 0u; s >>= 1u) {
        for (var i = 0u; i < s; i++) {
            v[i] = v[i] + v[i + s];
        }
    }
    return v[0];
}

// The largest of the KL values at red_m[base], ...
fn flash_tree_max(base: u32) -> f32 {
    var v = red_m[base];
    for (var i = 1u; i < KL; i++) {
        v = max(v, red_m[base + i]);
    }
    return v;
}

// Pair `d` of the KL lanes' weighted values, summed by the fixed tree.
fn flash_tree_pair(d: u32) -> vec2<f32> {
    var v: array<vec2<f32>, KL>;
    for (var i = 0u; i < KL; i++) {
        v[i] = red_v[i * HP + d];
    }
    for (var s = KL / 2u; s > 0u; s >>= 1u) {
        for (var i = 0u; i < s; i++) {
            v[i] = v[i] + v[i + s];
        }
    }
    return v[0];
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
) {
    // Everything up to the combine is uniform across the workgroup: one token, GH heads.
    let first_query = (wid.y * nwg.x + wid.x) * GH;
    if (first_query >= P.tokens * P.heads) {
        return;
    }
    // The dimension lanes of a key lane are DOT_LANES neighbours of one subgroup.
    let dl = sg_lane % DOT_LANES;
    let kl = (sg * sg_size + sg_lane) / DOT_LANES;
    let at = query_at(first_query);
    let ctx = at.ctx;
    let kvh = at.head / (P.heads / P.kv_heads);
    let qo = at.tok * P.q_stride + at.head * HD;
    // The token's key and value written first where the variant does (flash_qk_rope.wgsl).
    fresh_key_value(at.tok, kvh, t);
    var q: array<array<vec2<f32>, PL>, GH>;
    var acc: array<array<vec2<f32>, PL>, GH>;
    for (var h = 0u; h < GH; h++) {
        let qs = query_scale(qo + h * HD);
        for (var p = 0u; p < PL; p++) {
            let d = p * DOT_LANES + dl;
            if (d < HP) {
                q[h][p] = query_pair(qo + h * HD, d, qs, at.tok);
            }
        }
    }
    // Each head's running softmax over this lane's keys: the largest score and the sum of
    // exp(score - m).
    var m: array<f32, GH>;
    var l: array<f32, GH>;
    GROUP_HEADS m[HHu] = -3.0e38;
    let first = first_key(ctx);
    let end = max(key_end(ctx), first);
    for (var tile = first / KL; tile * KL < end; tile++) {
        let key = tile * KL + kl;
        let live = key >= first && key < end;
        let k = select(first, key, live);
        let phys = BLOCK_TABLE[at.seq * P.max_blocks + k / P.block_size];
        let base = ((phys * P.block_size + k % P.block_size) * P.kv_heads + kvh) * HP;
        LANE_PAIRS let k_PP = flash_key(base, PPu * DOT_LANES + dl);
        LANE_PAIRS let v_PP = flash_value(base, PPu * DOT_LANES + dl);
        GROUP_HEADS var part_HH = 0.0;
        GROUP_HEADS LANE_PAIRS part_HH = flash_dot(part_HH, q[HHu][PPu], k_PP, PPu * DOT_LANES + dl);
        GROUP_HEADS part_HH = part_HH + subgroupShuffleXor(part_HH, 4u);
        GROUP_HEADS part_HH = part_HH + subgroupShuffleXor(part_HH, 2u);
        GROUP_HEADS part_HH = part_HH + subgroupShuffleXor(part_HH, 1u);
        GROUP_HEADS let s_HH = score_of(part_HH);
        GROUP_HEADS let m_new_HH = select(m[HHu], max(m[HHu], s_HH), live);
        GROUP_HEADS let corr_HH = exp(m[HHu] - m_new_HH);
        GROUP_HEADS let e_HH = select(0.0, exp(s_HH - m_new_HH), live);
        GROUP_HEADS l[HHu] = l[HHu] * corr_HH + e_HH;
        GROUP_HEADS LANE_PAIRS acc[HHu][PPu] = select(acc[HHu][PPu], fma(vec2<f32>(e_HH, e_HH), v_PP, acc[HHu][PPu] * corr_HH), live);
        GROUP_HEADS m[HHu] = m_new_HH;
    }
    // The combine: the heads' maxima and sums by key lane, then their roots in every lane.
    if (dl == 0u) {
        GROUP_HEADS red_m[HHu * KL + kl] = m[HHu];
    }
    workgroupBarrier();
    var m_all: array<f32, GH>;
    var weight: array<f32, GH>;
    for (var h = 0u; h < GH; h++) {
        m_all[h] = flash_tree_max(h * KL);
        // A lane without keys has l = 0 and weighs exp(-3e38 - m_all) = 0.
        weight[h] = exp(m[h] - m_all[h]);
    }
    if (dl == 0u) {
        GROUP_HEADS red_l[HHu * KL + kl] = l[HHu] * weight[HHu];
    }
    workgroupBarrier();
    for (var h = 0u; h < GH; h++) {
        let fin = sink_finish(at.head + h, m_all[h], flash_tree_sum(h * KL));
        for (var p = 0u; p < PL; p++) {
            let d = p * DOT_LANES + dl;
            if (d < HP) {
                red_v[kl * HP + d] = acc[h][p] * weight[h];
            }
        }
        workgroupBarrier();
        // Inconsistent batch metadata (ctx 0) writes zeros rather than a wrapped-around context.
        let oo = (first_query + h) * HD;
        for (var d = t; d < HP; d += WG) {
            let o = select(vec2<f32>(0.0), flash_tree_pair(d) * fin.x / fin.y, ctx > 0u);
            OUT[oo + 2u * d] = o.x;
            OUT[oo + 2u * d + 1u] = o.y;
        }
        workgroupBarrier();
    }
}
