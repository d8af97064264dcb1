// Split-KV paged attention (flash-decoding) over a varlen batch: one workgroup per (query token,
// head), its context cut into fixed partitions of `part_blocks` KV blocks counted from the first
// key. Invocation t walks partitions t, t + WG, ... in ascending order with the online softmax
// of attention.wgsl (block by block), then the WG partial results are combined in a fixed
// tree: rescaled to the largest maximum, their sums and weighted values added pairwise. The
// partitions and the tree depend only on the context length, so a query's result depends only
// on its own context: one token alone, in a batch, in a prefill chunk or decoding. A context
// of one partition gives the bits of attention.wgsl (the other invocations add zeros).
//
// Query token t's heads start at Q[t * q_stride]; the output is [t, heads * HD]. Token t of
// sequence b sits at position seq_lens[b] - (query_start_loc[b + 1] - t) and attends to keys
// 0..=position through block_table[b] (only the last `window` when window > 0). Scores are
// `q·k * scale`, soft-capped to `softcap * tanh(s / softcap)` when softcap > 0.
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
// Value dimensions combined per round of the tree (bounds the workgroup memory).
const CHUNK: u32 = 32u;

@group(0) @binding(SLOT_P) var<uniform> P: AttentionParams;
@group(0) @binding(SLOT_Q) var<storage, read> Q: array<f32>;
@group(0) @binding(SLOT_K_CACHE) var<storage, read> K_CACHE: array<KvPair>;
@group(0) @binding(SLOT_V_CACHE) var<storage, read> V_CACHE: array<KvPair>;
@group(0) @binding(SLOT_BLOCK_TABLE) var<storage, read> BLOCK_TABLE: array<u32>;
@group(0) @binding(SLOT_SEQ_LENS) var<storage, read> SEQ_LENS: array<u32>;
@group(0) @binding(SLOT_QUERY_START) var<storage, read> QUERY_START: array<u32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<f32>;

var<workgroup> red_m: array<f32, WG>;
var<workgroup> red_l: array<f32, WG>;
var<workgroup> red_v: array<f32, WG * CHUNK>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = min(wid.y * nwg.x + wid.x, P.tokens * P.heads - 1u);
    let live = wid.y * nwg.x + wid.x < P.tokens * P.heads;
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
    // Inconsistent batch metadata (a token outside every sequence, or a sequence shorter than
    // its new tokens) attends to nothing and writes zeros.
    let valid = tok < end && end - tok <= SEQ_LENS[seq];
    var ctx = 0u;
    if (valid) {
        ctx = SEQ_LENS[seq] - (end - tok) + 1u;
    }
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
    let parts = (blocks + P.part_blocks - 1u) / P.part_blocks;
    for (var part = t; part < parts; part += WG) {
        let part_end = min((part + 1u) * P.part_blocks, blocks);
        for (var blk = max(part * P.part_blocks, first / P.block_size); blk < part_end; blk++) {
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
    }
    // The largest maximum, by a fixed tree.
    red_m[t] = m;
    for (var w = WG / 2u; w > 0u; w >>= 1u) {
        workgroupBarrier();
        if (t < w) {
            red_m[t] = max(red_m[t], red_m[t + w]);
        }
    }
    workgroupBarrier();
    let m_all = red_m[0];
    // An invocation without keys has l = 0 and weighs exp(-3e38 - m_all) = 0.
    let weight = exp(m - m_all);
    red_l[t] = l * weight;
    for (var w = WG / 2u; w > 0u; w >>= 1u) {
        workgroupBarrier();
        if (t < w) {
            red_l[t] = red_l[t] + red_l[t + w];
        }
    }
    workgroupBarrier();
    let l_all = red_l[0];
    for (var c0 = 0u; c0 < HD; c0 += CHUNK) {
        for (var c = 0u; c < CHUNK; c += 2u) {
            if (c0 + c < HD) {
                let a = acc[(c0 + c) / 2u] * weight;
                red_v[t * CHUNK + c] = a.x;
                red_v[t * CHUNK + c + 1u] = a.y;
            }
        }
        for (var w = WG / 2u; w > 0u; w >>= 1u) {
            workgroupBarrier();
            if (t < w) {
                for (var c = 0u; c < CHUNK; c++) {
                    red_v[t * CHUNK + c] = red_v[t * CHUNK + c] + red_v[(t + w) * CHUNK + c];
                }
            }
        }
        workgroupBarrier();
        if (t == 0u && live) {
            for (var c = 0u; c < CHUNK && c0 + c < HD; c++) {
                OUT[oo + c0 + c] = select(0.0, red_v[c] / l_all, valid);
            }
        }
        workgroupBarrier();
    }
}
