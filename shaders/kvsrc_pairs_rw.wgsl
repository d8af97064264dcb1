// The KV pools as pairs, writable (flash attention's decode variant with Q/K norms writes its
// token's key and value: flash_qk_rope.wgsl); otherwise kvsrc_pairs.wgsl.
@group(0) @binding(SLOT_K_CACHE) var<storage, read_write> K_CACHE: array<KvPair>;
@group(0) @binding(SLOT_V_CACHE) var<storage, read_write> V_CACHE: array<KvPair>;

fn key_eight(i: u32) -> array<KvPair, 8> {
    return array<KvPair, 8>(K_CACHE[i], K_CACHE[i + 1u], K_CACHE[i + 2u], K_CACHE[i + 3u], K_CACHE[i + 4u], K_CACHE[i + 5u], K_CACHE[i + 6u], K_CACHE[i + 7u]);
}

fn value_eight(i: u32) -> array<KvPair, 8> {
    return array<KvPair, 8>(V_CACHE[i], V_CACHE[i + 1u], V_CACHE[i + 2u], V_CACHE[i + 3u], V_CACHE[i + 4u], V_CACHE[i + 5u], V_CACHE[i + 6u], V_CACHE[i + 7u]);
}
