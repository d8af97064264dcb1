// What the paged-attention kernels share: the parameters and bindings (the KV pools' in
// kvsrc_pairs.wgsl or kvsrc_units.wgsl, with `key_eight` and `value_eight`), finding a token's
// sequence, and the online softmax over a range of keys. Query token t's heads start at
// Q[t * q_stride] (the fused projection's row: queries, then keys and values); the output is
// [t, heads * HD]. Token t of sequence b sits at position seq_lens[b] - (query_start_loc[b + 1]
// - t) and attends to keys 0..=position through block_table[b] (only the last `window` when
// window > 0: a sliding-window layer). Scores are `q·k * scale`, soft-capped to
// `softcap * tanh(s / softcap)` when softcap > 0. Each kernel ends a query with
// `sink_finish` (sink_none.wgsl, or sink_logit.wgsl for attention sinks, where their formula
// is), which gives the factor of its weighted values and their denominator.
struct AttentionParams {
    tokens: u32,
    heads: u32,
    kv_heads: u32,
    block_size: u32,
    max_blocks: u32,
    num_seqs: u32,
    scale: f32,
    window: u32,
    softcap: f32,
    q_stride: u32,
    head_dim: u32,
    qk_eps: f32,
}

const HP: u32 = HD / 2u;

@group(0) @binding(SLOT_P) var<uniform> P: AttentionParams;
@group(0) @binding(SLOT_Q) var<storage, read> Q: array<f32>;
@group(0) @binding(SLOT_BLOCK_TABLE) var<storage, read> BLOCK_TABLE: array<u32>;
@group(0) @binding(SLOT_SEQ_LENS) var<storage, read> SEQ_LENS: array<u32>;
@group(0) @binding(SLOT_QUERY_START) var<storage, read> QUERY_START: array<u32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<f32>;

// The sequence query token `tok` belongs to (binary search of query_start_loc).
fn sequence_of(tok: u32) -> u32 {
    var lo = 0u;
    var hi = P.num_seqs;
    while (hi - lo > 1u) {
        let mid = (lo + hi) / 2u;
        if (QUERY_START[mid] <= tok) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// Keys query token `tok` of sequence `seq` sees (its position + 1), or 0 for inconsistent batch
// metadata (a token outside every sequence, or a sequence shorter than its new tokens).
fn context_of(tok: u32, seq: u32) -> u32 {
    let end = QUERY_START[seq + 1u];
    if (tok >= end || end - tok > SEQ_LENS[seq]) {
        return 0u;
    }
    return SEQ_LENS[seq] - (end - tok) + 1u;
}

// Query `i` of the batch: token i / heads, head i % heads, the token's sequence and the keys
// it sees (`context_of`).
struct Query {
    tok: u32,
    head: u32,
    seq: u32,
    ctx: u32,
}

fn query_at(i: u32) -> Query {
    let tok = i / P.heads;
    let seq = sequence_of(tok);
    return Query(tok, i % P.heads, seq, context_of(tok, seq));
}

// The first key the query sees: 0, or the start of its sliding window.
fn first_key(ctx: u32) -> u32 {
    if (P.window > 0u && ctx > P.window) {
        return ctx - P.window;
    }
    return 0u;
}

// One past the last key the query sees: its context, within the block table's width.
fn key_end(ctx: u32) -> u32 {
    return min(ctx, P.max_blocks * P.block_size);
}

// A key's score from its dot product with the query: `dot * scale`, soft-capped when asked.
fn score_of(dot: f32) -> f32 {
    var score = dot * P.scale;
    if (P.softcap > 0.0) {
        score = P.softcap * tanh(clamp(score / P.softcap, -15.0, 15.0));
    }
    return score;
}

// Running softmax state: the largest score so far and the sum of exp(score - m).
struct Softmax {
    m: f32,
    l: f32,
}

// `acc` plus key pair `k` (pair `d` of its head) times query pair `d` (x then y); `acc` past
// the head's pairs.
fn pair_fma(acc: f32, q: ptr<function, array<vec2<f32>, HP>>, k: KvPair, d: u32) -> f32 {
    if (d >= HP) {
        return acc;
    }
    let kf = kv_in(k);
    return fma((*q)[d].y, kf.y, fma((*q)[d].x, kf.x, acc));
}

// `acc`'s pair `d` plus `p` times value pair `v`; nothing past the head's pairs.
fn value_fma(acc: ptr<function, array<vec2<f32>, HP>>, p: f32, v: KvPair, d: u32) {
    if (d < HP) {
        (*acc)[d] = fma(vec2<f32>(p, p), kv_in(v), (*acc)[d]);
    }
}

// Walks keys key0..key1 of sequence `seq` in ascending order, one KV block at a time: the
// scores of the block's keys in the range, their maximum, then the running state and `acc`
// rescaled once and their values added.
//
// The loops over the head's pairs are written out (HEAD_PAIRS, HEAD_EIGHTS: src/gpu/shader/
// unroll.rs), so a key costs lavapipe's loop limit two iterations whatever the head dimension.
//
// A key's q·k is summed as every kernel sums it, the subgroup kernel's way: pair d of the
// head's HP dimension pairs goes to partial sum d % DOT_LANES (x then y, ascending d), and the
// partials are added pairwise, each with the one DOT_LANES / 2, then / 4, ... above it (the
// butterfly of a subgroup's shuffle-xor), so all of them agree bit for bit.
fn attend_keys(
    seq: u32,
    kvh: u32,
    key0: u32,
    key1: u32,
    q: ptr<function, array<vec2<f32>, HP>>,
    acc: ptr<function, array<vec2<f32>, HP>>,
    state: ptr<function, Softmax>,
) {
    var s: array<f32, MAX_BS>;
    for (var blk = key0 / P.block_size; blk * P.block_size < key1; blk++) {
        let phys = BLOCK_TABLE[seq * P.max_blocks + blk];
        let n_in = min(P.block_size, key1 - blk * P.block_size);
        let j0 = max(key0, blk * P.block_size) - blk * P.block_size;
        var tile_max = -3.0e38;
        for (var j = j0; j < n_in; j++) {
            let kb = ((phys * P.block_size + j) * P.kv_heads + kvh) * HP;
            // Partial sums 0-3 and 4-7 (DOT_LANES is 8).
            var lo = vec4<f32>(0.0);
            var hi = vec4<f32>(0.0);
            // A head whose pairs are not a multiple of 8 reads its last eight past its end (the
            // next head's pairs, or values the bounds checks give at the pool's end): the pairs
            // past HP are never added.
            HEAD_EIGHTS let k_PP = key_eight(kb + PPu);
            HEAD_EIGHTS lo = vec4<f32>(pair_fma(lo.x, q, k_PP[0], PPu), pair_fma(lo.y, q, k_PP[1], PPu + 1u), pair_fma(lo.z, q, k_PP[2], PPu + 2u), pair_fma(lo.w, q, k_PP[3], PPu + 3u));
            HEAD_EIGHTS hi = vec4<f32>(pair_fma(hi.x, q, k_PP[4], PPu + 4u), pair_fma(hi.y, q, k_PP[5], PPu + 5u), pair_fma(hi.z, q, k_PP[6], PPu + 6u), pair_fma(hi.w, q, k_PP[7], PPu + 7u));
            let half = lo + hi;
            let quarter = half.xy + half.zw;
            s[j] = score_of(quarter.x + quarter.y);
            tile_max = max(tile_max, s[j]);
        }
        let m_new = max((*state).m, tile_max);
        let corr = exp((*state).m - m_new);
        (*state).l = (*state).l * corr;
        HEAD_PAIRS (*acc)[PPu] = (*acc)[PPu] * corr;
        for (var j = j0; j < n_in; j++) {
            let p = exp(s[j] - m_new);
            (*state).l = (*state).l + p;
            let vb = ((phys * P.block_size + j) * P.kv_heads + kvh) * HP;
            HEAD_EIGHTS let v_PP = value_eight(vb + PPu);
            HEAD_EIGHTS value_fma(acc, p, v_PP[0], PPu); value_fma(acc, p, v_PP[1], PPu + 1u); value_fma(acc, p, v_PP[2], PPu + 2u); value_fma(acc, p, v_PP[3], PPu + 3u);
            HEAD_EIGHTS value_fma(acc, p, v_PP[4], PPu + 4u); value_fma(acc, p, v_PP[5], PPu + 5u); value_fma(acc, p, v_PP[6], PPu + 6u); value_fma(acc, p, v_PP[7], PPu + 7u);
        }
        (*state).m = m_new;
    }
}

// Query head `head` of token `tok`, as HP pairs.
fn load_query(tok: u32, head: u32) -> array<vec2<f32>, HP> {
    let qo = tok * P.q_stride + head * HD;
    var q: array<vec2<f32>, HP>;
    for (var d = 0u; d < HP; d++) {
        q[d] = vec2<f32>(Q[qo + 2u * d], Q[qo + 2u * d + 1u]);
    }
    return q;
}
