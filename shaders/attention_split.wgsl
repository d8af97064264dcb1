// Split-KV paged attention (flash-decoding) over a varlen batch: one workgroup per (query token,
// head), the n keys it sees cut into partitions counted from the first: of ceil(n / WG) keys (at
// most WG partitions, the last maybe shorter) while that is at most PART_KEYS
// (src/gpu/shader.rs's KV_PARTITION_TOKENS), so a short context still spreads over the workgroup,
// else of PART_KEYS keys. Invocation t walks partitions t, t + WG, ... in ascending order with
// the online softmax of attention_common.wgsl (block by block), then the WG partial results are
// combined in a fixed tree: rescaled to the largest maximum, their sums and weighted values added
// pairwise (the tree's narrow levels in subgroup shuffles where the variant has them:
// tree_shared.wgsl, tree_subgroup.wgsl). The partitions and the tree depend only on the context
// length, so a query's result depends only on its own context: one token alone, in a batch, in
// a prefill chunk or decoding.

// CHUNK value dimensions are combined per round of the tree (bounds the workgroup memory);
// dimension c of invocation t's values sits at c * WG + t, so the invocations of a round touch
// consecutive words (no two in one memory bank).
var<workgroup> red_m: array<f32, WG>;
var<workgroup> red_l: array<f32, WG>;
var<workgroup> red_v: array<f32, WG * CHUNK>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, lanes: Lanes) {
    let t = lanes.t;
    let i = min(wid.y * nwg.x + wid.x, P.tokens * P.heads - 1u);
    let live = wid.y * nwg.x + wid.x < P.tokens * P.heads;
    let at = query_at(i);
    let oo = i * HD;
    // A token with inconsistent batch metadata attends to nothing and writes zeros.
    let ctx = at.ctx;
    let valid = ctx > 0u;
    var q = load_query(at.tok, at.head);
    var acc: array<vec2<f32>, HP>;
    var state = Softmax(-3.0e38, 0.0);
    let first = first_key(ctx);
    let end = max(key_end(ctx), first);
    let part_keys = clamp((end - first + WG - 1u) / WG, 1u, PART_KEYS);
    let parts = (end - first + part_keys - 1u) / part_keys;
    for (var part = t; part < parts; part += WG) {
        let key0 = first + part * part_keys;
        attend_keys(at.seq, at.head / (P.heads / P.kv_heads), key0, min(key0 + part_keys, end), &q, &acc, &state);
    }
    let m = state.m;
    let l = state.l;
    // The largest maximum, by a fixed tree.
    let narrow = tree_narrow(WG);
    red_m[t] = m;
    for (var w = WG / 2u; w >= narrow; w >>= 1u) {
        workgroupBarrier();
        if (t < w) {
            red_m[t] = max(red_m[t], red_m[t + w]);
        }
    }
    workgroupBarrier();
    let m_all = tree_max(lanes, narrow, red_m[tree_lane(lanes, narrow)]);
    // An invocation without keys has l = 0 and weighs exp(-3e38 - m_all) = 0.
    let weight = exp(m - m_all);
    red_l[t] = l * weight;
    for (var w = WG / 2u; w >= narrow; w >>= 1u) {
        workgroupBarrier();
        if (t < w) {
            red_l[t] = red_l[t] + red_l[t + w];
        }
    }
    workgroupBarrier();
    let l_all = tree_add(lanes, narrow, red_l[tree_lane(lanes, narrow)]);
    let fin = sink_finish(at.head, m_all, l_all);
    for (var c0 = 0u; c0 < HD; c0 += CHUNK) {
        for (var c = 0u; c < CHUNK; c += 2u) {
            if (c0 + c < HD) {
                let a = acc[(c0 + c) / 2u] * weight;
                red_v[c * WG + t] = a.x;
                red_v[(c + 1u) * WG + t] = a.y;
            }
        }
        for (var w = WG / 2u; w >= narrow; w >>= 1u) {
            workgroupBarrier();
            if (t < w) {
                for (var c = 0u; c < CHUNK; c++) {
                    red_v[c * WG + t] = red_v[c * WG + t] + red_v[c * WG + t + w];
                }
            }
        }
        workgroupBarrier();
        for (var c = 0u; c < CHUNK; c++) {
            let v = tree_add(lanes, narrow, red_v[c * WG + tree_lane(lanes, narrow)]);
            if (live && c % WG == t && c0 + c < HD) {
                OUT[oo + c0 + c] = select(0.0, v * fin.x / fin.y, valid);
            }
        }
        workgroupBarrier();
    }
}
