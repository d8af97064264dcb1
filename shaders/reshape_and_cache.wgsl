// Writes new K and V rows [t, kv_heads * hd] into the paged pools [blocks * block_size, kv_heads,
// hd] at slot_mapping[t]; a slot of 0xffffffff is padding, and a slot past the pool, writes nothing.
struct Params {
    tokens: u32,
    row_pairs: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> K_NEW: array<f32>;
@group(0) @binding(2) var<storage, read> V_NEW: array<f32>;
@group(0) @binding(3) var<storage, read> SLOTS: array<u32>;
@group(0) @binding(4) var<storage, read_write> K_CACHE: array<KvPair>;
@group(0) @binding(5) var<storage, read_write> V_CACHE: array<KvPair>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * 64u + lid;
    if (i >= P.tokens * P.row_pairs) {
        return;
    }
    let tok = i / P.row_pairs;
    let pair = i % P.row_pairs;
    let slot = SLOTS[tok];
    if (slot >= arrayLength(&K_CACHE) / P.row_pairs) {
        return;
    }
    let dst = slot * P.row_pairs + pair;
    K_CACHE[dst] = kv_out(vec2<f32>(K_NEW[2u * i], K_NEW[2u * i + 1u]));
    V_CACHE[dst] = kv_out(vec2<f32>(V_NEW[2u * i], V_NEW[2u * i + 1u]));
}
