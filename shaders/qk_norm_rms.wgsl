// RoPE + cache with Q/K norms: each query and key head is RMS-normed over hd first. QK_NORM
// holds the query heads' weights, then the key heads' ([2, hd]). The row is read through the
// kernel's `qkv_at` (rope_cache.wgsl, or flash_qk_rope.wgsl: both sum a head alike).
@group(0) @binding(SLOT_QK_NORM) var<storage, read> QK_NORM: array<f32>;

// 1 / sqrt(mean(x²) + eps) over the head at `base`, the squares summed in ascending order.
fn head_norm_scale(base: u32) -> f32 {
    var ss = 0.0;
    for (var d = 0u; d < rope_hd(); d++) {
        let v = qkv_at(base + d);
        ss = fma(v, v, ss);
    }
    return 1.0 / sqrt(ss / f32(rope_hd()) + qk_eps());
}

fn head_value(base: u32, j: u32, scale: f32, w0: u32) -> f32 {
    return qkv_at(base + j) * scale * QK_NORM[w0 + j];
}
