// Linear epilogue of a Q/K/V projection: rope_cache.wgsl's interleaved RoPE and paged KV write
// (no Q/K norms) done on each pair of outputs as the projection computes them (biases added
// first by epi_pair_bias.wgsl), so the separate dispatch goes. Column c of the qkv row
// (P.y0 + P.n0 + n) is a query column below heads * hd, a key column below
// (heads + kv_heads) * hd, a value column after; pair (2p, 2p + 1) of a head turns by
// positions[m] * inv_freq[p], with rope_cache.wgsl's expressions, so the bits are the separate
// kernels'. Queries are stored rotated (attention reads them there); keys and values are
// stored as projected, as the separate kernel leaves them, and written to K_CACHE (rotated)
// and V_CACHE at slot_mapping[m]; a slot of 0xffffffff (or past the pool) writes no cache.
@group(0) @binding(SLOT_POSITIONS) var<storage, read> POSITIONS: array<u32>;
@group(0) @binding(SLOT_INV_FREQ) var<storage, read> INV_FREQ: array<f32>;
@group(0) @binding(SLOT_SLOT_MAPPING) var<storage, read> SLOT_MAPPING: array<u32>;
@group(0) @binding(SLOT_K_CACHE) var<storage, read_write> K_CACHE: array<KvPair>;
@group(0) @binding(SLOT_V_CACHE) var<storage, read_write> V_CACHE: array<KvPair>;

// Outputs n and n + 1 of row m, `projected` (with their biases or without): the pair (a, b)
// of one head.
fn emit_pair(m: u32, n: u32, acc_a: f32, acc_b: f32) {
    let ab = projected(n, acc_a, acc_b);
    let a = ab.x;
    let b = ab.y;
    let i = y_index(m, n);
    let col = P.y0 + P.n0 + n;
    let q_cols = P.heads * P.hd;
    let kv_cols = P.kv_heads * P.hd;
    let cs = rope_cos_sin(POSITIONS[m], INV_FREQ[(col % P.hd) / 2u]);
    let rotated = vec2<f32>(a * cs.x - b * cs.y, a * cs.y + b * cs.x);
    if (col < q_cols) {
        Y[i] = rotated.x;
        Y[i + 1u] = rotated.y;
        return;
    }
    Y[i] = a;
    Y[i + 1u] = b;
    let row_pairs = kv_cols / 2u;
    let slot = SLOT_MAPPING[m];
    if (slot >= arrayLength(&K_CACHE) / row_pairs) {
        return;
    }
    if (col < q_cols + kv_cols) {
        K_CACHE[slot * row_pairs + (col - q_cols) / 2u] = kv_out(rotated);
    } else {
        V_CACHE[slot * row_pairs + (col - q_cols - kv_cols) / 2u] = kv_out(vec2<f32>(a, b));
    }
}
