// Weight format MXFP4 (OCP microscaling, gpt-oss's experts): GGUF blocks of 32 in split rows as
// Q4_0 (the unit of nibbles at word 4 b in Q4_0's order, the E8M0 byte e the low byte of header
// word b); each nibble indexes MXFP4_VALUES (the E2M1 values doubled, ggml's kvalues_mxfp4);
// w = 2^(e - 128) * MXFP4_VALUES[q] (ggml's GGML_E8M0_TO_FP32_HALF).
var<private> MXFP4_VALUES: array<f32, 16> = array<f32, 16>(
    0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0,
);

fn w_row_words(k: u32) -> u32 {
    return split_row_words(k, 32u, 4u, 1u);
}

// 2^(e - 128) from its bits: the exponent field e - 1 for e >= 2, the subnormals 2^-128 and
// 2^-127 below (as ggml builds them).
fn mxfp4_scale(rb: u32, b: u32) -> f32 {
    let e = wl(split_header(rb, b, 32u, 4u, 1u)) & 0xffu;
    return bitcast<f32>(select(0x00200000u << e, (e - 1u) << 23u, e >= 2u));
}

fn mxfp4_values(w: u32, shift: u32) -> vec4<f32> {
    let q = vec4<u32>(q4_nibbles(w, shift));
    return vec4<f32>(MXFP4_VALUES[q.x], MXFP4_VALUES[q.y], MXFP4_VALUES[q.z], MXFP4_VALUES[q.w]);
}

fn w_elem(rb: u32, k: u32) -> f32 {
    let b = k / 32u;
    return mxfp4_scale(rb, b) * MXFP4_VALUES[q4_nibble_at(rb + 4u * b, k % 32u)];
}

fn w_group(rb: u32, g: u32) -> W8 {
    let b = g / 4u;
    let q = g % 4u;
    let words = unit_half(wl4a(rb + 4u * b), q % 2u);
    let shift = 4u * (q / 2u);
    let d = mxfp4_scale(rb, b);
    return W8(d * mxfp4_values(words.x, shift), d * mxfp4_values(words.y, shift));
}

// A whole block: the scale read once and its unit of nibbles once.
fn w_block(rb: u32, b: u32) -> W32 {
    let q = wl4a(rb + 4u * b);
    let d = mxfp4_scale(rb, b);
    return W32(
        W8(d * mxfp4_values(q.x, 0u), d * mxfp4_values(q.y, 0u)),
        W8(d * mxfp4_values(q.z, 0u), d * mxfp4_values(q.w, 0u)),
        W8(d * mxfp4_values(q.x, 4u), d * mxfp4_values(q.y, 4u)),
        W8(d * mxfp4_values(q.z, 4u), d * mxfp4_values(q.w, 4u)),
    );
}
