// The pair of outputs epi_rope_cache.wgsl rotates: the projection's plus the biases of columns n
// and n + 1 (epi_bias.wgsl's addition, so the bits of the bias epilogue then rope_cache.wgsl).
@group(0) @binding(SLOT_BIAS) var<storage, read> BIAS: array<f32>;

fn projected(n: u32, a: f32, b: f32) -> vec2<f32> {
    return vec2<f32>(a + BIAS[P.n0 + n], b + BIAS[P.n0 + n + 1u]);
}
