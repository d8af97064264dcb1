// RoPE and the paged KV write, fused, on the projection qkv[t, (heads + 2 kv_heads) * hd] (the
// query heads, then the key heads, then the value heads). One invocation per (token, head):
// a query head is rotated in place (attention reads it there); a key head is rotated and
// written to K_CACHE at slot_mapping[t]; a value head is written to V_CACHE. With QK_NORM
// (Qwen3, Gemma 3) query and key heads are first RMS-normed over hd, the squares summed in
// ascending order (qk_norm_rms.wgsl). Pair p of a head is (2p, 2p + 1) in the interleaved mode and (p, p + hd / 2)
// in the half-split mode; it turns by positions[t] * inv_freq[p] (rope_angle.wgsl), with rope_head.wgsl's `rotated`, which flash attention's
// flash_qk_rope.wgsl shares. A slot of 0xffffffff (or past the pool) writes nothing.
struct RopeCacheParams {
    tokens: u32,
    heads: u32,
    kv_heads: u32,
    hd: u32,
    half_split: u32,
    eps: f32,
}

@group(0) @binding(SLOT_P) var<uniform> P: RopeCacheParams;
@group(0) @binding(SLOT_QKV) var<storage, read_write> QKV: array<f32>;
@group(0) @binding(SLOT_POSITIONS) var<storage, read> POSITIONS: array<u32>;
@group(0) @binding(SLOT_INV_FREQ) var<storage, read> INV_FREQ: array<f32>;
@group(0) @binding(SLOT_SLOT_MAPPING) var<storage, read> SLOT_MAPPING: array<u32>;
@group(0) @binding(SLOT_K_CACHE) var<storage, read_write> K_CACHE: array<KvPair>;
@group(0) @binding(SLOT_V_CACHE) var<storage, read_write> V_CACHE: array<KvPair>;

// What rope_head.wgsl and qk_norm_*.wgsl read: the row, its head dimension, the RoPE mode
// and the Q/K norms' eps.
fn qkv_at(i: u32) -> f32 {
    return QKV[i];
}

fn rope_hd() -> u32 {
    return P.hd;
}

fn rope_half_split() -> bool {
    return P.half_split != 0u;
}

fn qk_eps() -> f32 {
    return P.eps;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    let row_heads = P.heads + 2u * P.kv_heads;
    if (i >= P.tokens * row_heads) {
        return;
    }
    let tok = i / row_heads;
    let head = i % row_heads;
    let base = i * P.hd;
    let half = P.hd / 2u;
    let pos = POSITIONS[tok];
    let row_pairs = P.kv_heads * half;
    let slot = SLOT_MAPPING[tok];
    let cached = slot < arrayLength(&K_CACHE) / row_pairs;
    if (head < P.heads) {
        // In place, a pair at a time: both of its elements are read before either is written.
        let scale = head_norm_scale(base);
        for (var p = 0u; p < half; p++) {
            var j0 = 2u * p;
            var j1 = j0 + 1u;
            if (P.half_split != 0u) {
                j0 = p;
                j1 = p + half;
            }
            let r0 = rotated(base, j0, pos, scale, 0u);
            let r1 = rotated(base, j1, pos, scale, 0u);
            QKV[base + j0] = r0;
            QKV[base + j1] = r1;
        }
    } else if (head < P.heads + P.kv_heads) {
        if (cached) {
            let scale = head_norm_scale(base);
            let dst = slot * row_pairs + (head - P.heads) * half;
            for (var e = 0u; e < half; e++) {
                let r = vec2<f32>(rotated(base, 2u * e, pos, scale, P.hd), rotated(base, 2u * e + 1u, pos, scale, P.hd));
                K_CACHE[dst + e] = kv_out(r);
            }
        }
    } else if (cached) {
        let dst = slot * row_pairs + (head - P.heads - P.kv_heads) * half;
        for (var e = 0u; e < half; e++) {
            V_CACHE[dst + e] = kv_out(vec2<f32>(QKV[base + 2u * e], QKV[base + 2u * e + 1u]));
        }
    }
}
