// Paged attention over a varlen batch, one invocation per (query token, head). Query token t's
// heads start at Q[t * q_stride] (the fused projection's row: queries, then keys and values);
// the output is [t, heads * HD]. Query token t of
// sequence b sits at position seq_lens[b] - (query_start_loc[b + 1] - t) and attends to keys
// 0..=position through block_table[b] — only the last `window` of them when window > 0 (a
// sliding-window layer). Scores are `q·k * scale`, soft-capped to `softcap * tanh(s / softcap)`
// when softcap > 0. Keys are walked one KV block at a time in ascending order with an online
// softmax, so a query's result depends only on its own context.
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
    part_blocks: u32,
}

const HP: u32 = HD / 2u;

@group(0) @binding(SLOT_P) var<uniform> P: AttentionParams;
@group(0) @binding(SLOT_Q) var<storage, read> Q: array<f32>;
@group(0) @binding(SLOT_K_CACHE) var<storage, read> K_CACHE: array<KvPair>;
@group(0) @binding(SLOT_V_CACHE) var<storage, read> V_CACHE: array<KvPair>;
@group(0) @binding(SLOT_BLOCK_TABLE) var<storage, read> BLOCK_TABLE: array<u32>;
@group(0) @binding(SLOT_SEQ_LENS) var<storage, read> SEQ_LENS: array<u32>;
@group(0) @binding(SLOT_QUERY_START) var<storage, read> QUERY_START: array<u32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    if (i >= P.tokens * P.heads) {
        return;
    }
    let tok = i / P.heads;
    let head = i % P.heads;
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
    let seq = lo;
    let qo = tok * P.q_stride + head * HD;
    let oo = i * HD;
    let end = QUERY_START[seq + 1u];
    if (tok >= end || end - tok > SEQ_LENS[seq]) {
        // Inconsistent batch metadata: a token outside every sequence, or a sequence shorter
        // than its new tokens. Write zeros rather than walk a wrapped-around context.
        for (var d = 0u; d < HD; d++) {
            OUT[oo + d] = 0.0;
        }
        return;
    }
    let ctx = SEQ_LENS[seq] - (end - tok) + 1u;
    let kvh = head / (P.heads / P.kv_heads);
    var q: array<vec2<f32>, HP>;
    var acc: array<vec2<f32>, HP>;
    for (var d = 0u; d < HP; d++) {
        q[d] = vec2<f32>(Q[qo + 2u * d], Q[qo + 2u * d + 1u]);
    }
    var m = -3.0e38;
    var l = 0.0;
    var s: array<f32, MAX_BS>;
    let blocks = min((ctx + P.block_size - 1u) / P.block_size, P.max_blocks);
    var first = 0u;
    if (P.window > 0u && ctx > P.window) {
        first = ctx - P.window;
    }
    for (var blk = first / P.block_size; blk < blocks; blk++) {
        let phys = BLOCK_TABLE[seq * P.max_blocks + blk];
        let n_in = min(P.block_size, ctx - blk * P.block_size);
        let j0 = max(first, blk * P.block_size) - blk * P.block_size;
        var tile_max = -3.0e38;
        for (var j = j0; j < n_in; j++) {
            let kb = ((phys * P.block_size + j) * P.kv_heads + kvh) * HP;
            var dot = 0.0;
            for (var d = 0u; d < HP; d++) {
                let k = kv_in(K_CACHE[kb + d]);
                dot = fma(q[d].x, k.x, dot);
                dot = fma(q[d].y, k.y, dot);
            }
            var score = dot * P.scale;
            if (P.softcap > 0.0) {
                score = P.softcap * tanh(clamp(score / P.softcap, -15.0, 15.0));
            }
            s[j] = score;
            tile_max = max(tile_max, s[j]);
        }
        let m_new = max(m, tile_max);
        let corr = exp(m - m_new);
        l = l * corr;
        for (var d = 0u; d < HP; d++) {
            acc[d] = acc[d] * corr;
        }
        for (var j = j0; j < n_in; j++) {
            let p = exp(s[j] - m_new);
            l = l + p;
            let vb = ((phys * P.block_size + j) * P.kv_heads + kvh) * HP;
            for (var d = 0u; d < HP; d++) {
                acc[d] = fma(vec2<f32>(p, p), kv_in(V_CACHE[vb + d]), acc[d]);
            }
        }
        m = m_new;
    }
    for (var d = 0u; d < HP; d++) {
        let o = acc[d] / l;
        OUT[oo + 2u * d] = o.x;
        OUT[oo + 2u * d + 1u] = o.y;
    }
}
