// Flash attention doing the rope_cache kernel's work for its own token (the decode variant of
// the models with Q/K norms, src/gpu/attention_rope.rs): Q is the fused projection's row as
// projected. Each query head is RMS-normed (qk_norm_rms.wgsl) and rotated (rope_head.wgsl) as
// it is loaded, and the token's key head is normed, rotated and written with its value head to
// the cache at slot_mapping[tok] before the walk reads them: the expressions of rope_cache.wgsl,
// so the bits are those of the rope_cache dispatch it replaces. Only for steps whose every
// sequence has one new token (no other workgroup writes a key this one reads); the workgroups
// of one KV head's other query heads write the same bits to the same words. A slot of
// 0xffffffff (or past the pool) writes nothing.
@group(0) @binding(SLOT_POSITIONS) var<storage, read> POSITIONS: array<u32>;
@group(0) @binding(SLOT_INV_FREQ) var<storage, read> INV_FREQ: array<f32>;
@group(0) @binding(SLOT_SLOT_MAPPING) var<storage, read> SLOT_MAPPING: array<u32>;

fn qkv_at(i: u32) -> f32 {
    return Q[i];
}

fn rope_hd() -> u32 {
    return P.head_dim;
}

fn rope_half_split() -> bool {
    return HALF_SPLIT != 0u;
}

fn qk_eps() -> f32 {
    return P.qk_eps;
}

fn fresh_key_value(tok: u32, kvh: u32, t: u32) {
    let row_pairs = P.kv_heads * HP;
    let slot = SLOT_MAPPING[tok];
    if (slot < arrayLength(&K_CACHE) / row_pairs) {
        let kb = tok * P.q_stride + (P.heads + kvh) * HD;
        let vb = tok * P.q_stride + (P.heads + P.kv_heads + kvh) * HD;
        let scale = head_norm_scale(kb);
        let pos = POSITIONS[tok];
        let dst = slot * row_pairs + kvh * HP;
        for (var e = t; e < HP; e += WG) {
            let r = vec2<f32>(rotated(kb, 2u * e, pos, scale, P.head_dim), rotated(kb, 2u * e + 1u, pos, scale, P.head_dim));
            K_CACHE[dst + e] = kv_out(r);
            V_CACHE[dst + e] = kv_out(vec2<f32>(Q[vb + 2u * e], Q[vb + 2u * e + 1u]));
        }
    }
    storageBarrier();
}

fn query_scale(base: u32) -> f32 {
    return head_norm_scale(base);
}

fn query_pair(base: u32, d: u32, scale: f32, tok: u32) -> vec2<f32> {
    let pos = POSITIONS[tok];
    return vec2<f32>(rotated(base, 2u * d, pos, scale, 0u), rotated(base, 2u * d + 1u, pos, scale, 0u));
}
