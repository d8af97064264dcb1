// Flash attention's queries as stored (RoPE done before it: the projection's epilogue or the
// rope_cache kernel), and no key or value of its own to write.
fn fresh_key_value(tok: u32, kvh: u32, t: u32) {
}

fn query_scale(base: u32) -> f32 {
    return 1.0;
}

fn query_pair(base: u32, d: u32, scale: f32, tok: u32) -> vec2<f32> {
    return vec2<f32>(Q[base + 2u * d], Q[base + 2u * d + 1u]);
}
