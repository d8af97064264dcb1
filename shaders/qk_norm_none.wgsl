// RoPE + cache without Q/K norms: heads are rotated as projected.
fn head_norm_scale(base: u32) -> f32 {
    return 1.0;
}

fn head_value(base: u32, j: u32, scale: f32, w0: u32) -> f32 {
    return qkv_at(base + j);
}
