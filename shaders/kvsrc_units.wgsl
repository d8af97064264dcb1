// The KV pools as 16-byte units of four f16 pairs (src/gpu/shader.rs's KernelVariant::kv_units:
// the walking kernels over f16 pools whose heads' pairs are a multiple of 4, so every key's head
// starts on a unit): `key_eight` and `value_eight` read eight pairs from a pair index that is a
// multiple of 4 in two loads, not eight.
@group(0) @binding(SLOT_K_CACHE) var<storage, read> K_CACHE: array<vec4<u32>>;
@group(0) @binding(SLOT_V_CACHE) var<storage, read> V_CACHE: array<vec4<u32>>;

fn key_eight(i: u32) -> array<KvPair, 8> {
    let a = K_CACHE[i / 4u];
    let b = K_CACHE[i / 4u + 1u];
    return array<KvPair, 8>(a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
}

fn value_eight(i: u32) -> array<KvPair, 8> {
    let a = V_CACHE[i / 4u];
    let b = V_CACHE[i / 4u + 1u];
    return array<KvPair, 8>(a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
}
