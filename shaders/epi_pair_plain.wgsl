// The pair of outputs epi_rope_cache.wgsl rotates: the projection's as computed.
fn projected(n: u32, a: f32, b: f32) -> vec2<f32> {
    return vec2<f32>(a, b);
}
