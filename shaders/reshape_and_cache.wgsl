// Writes new K and V rows [t, kv_heads * hd] into the paged pools [blocks * block_size, kv_heads,
// hd] at slot_mapping[t]; a slot of 0xffffffff is padding, and a slot past the pool, writes nothing.
struct ReshapeAndCacheParams {
    tokens: u32,
    row_pairs: u32,
}

@group(0) @binding(SLOT_P) var<uniform> P: ReshapeAndCacheParams;
@group(0) @binding(SLOT_K_NEW) var<storage, read> K_NEW: array<f32>;
@group(0) @binding(SLOT_V_NEW) var<storage, read> V_NEW: array<f32>;
@group(0) @binding(SLOT_SLOT_MAPPING) var<storage, read> SLOT_MAPPING: array<u32>;
@group(0) @binding(SLOT_K_CACHE) var<storage, read_write> K_CACHE: array<KvPair>;
@group(0) @binding(SLOT_V_CACHE) var<storage, read_write> V_CACHE: array<KvPair>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    if (i >= P.tokens * P.row_pairs) {
        return;
    }
    let tok = i / P.row_pairs;
    let pair = i % P.row_pairs;
    let slot = SLOT_MAPPING[tok];
    if (slot >= arrayLength(&K_CACHE) / P.row_pairs) {
        return;
    }
    let dst = slot * P.row_pairs + pair;
    K_CACHE[dst] = kv_out(vec2<f32>(K_NEW[2u * i], K_NEW[2u * i + 1u]));
    V_CACHE[dst] = kv_out(vec2<f32>(V_NEW[2u * i], V_NEW[2u * i + 1u]));
}
