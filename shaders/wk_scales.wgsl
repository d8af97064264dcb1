// Q4_K/Q5_K super-block header: word 0 holds the f16 d (low half) and dmin (high half), words
// 1..3 the 12 bytes of packed 6-bit scales and minimums of the eight sub-blocks of 32. The
// super-blocks (36 and 44 words) keep the header on a multiple of 4 words: one aligned run.

// Byte i (0..12) of the packed scales of header `h`.
fn k_scale_byte(h: vec4<u32>, i: u32) -> u32 {
    return (vec3<u32>(h.y, h.z, h.w)[i / 4u] >> (8u * (i % 4u))) & 255u;
}

// (d * scale, dmin * min) of sub-block j (0..8): w = x * q - y.
fn k_sub_scale(base: u32, j: u32) -> vec2<f32> {
    let h = wl4a(base);
    let dm = unpack2x16float(h.x);
    var sc: u32;
    var m: u32;
    if (j < 4u) {
        sc = k_scale_byte(h, j) & 63u;
        m = k_scale_byte(h, j + 4u) & 63u;
    } else {
        let e = k_scale_byte(h, j + 4u);
        sc = (e & 15u) | ((k_scale_byte(h, j - 4u) >> 6u) << 4u);
        m = (e >> 4u) | ((k_scale_byte(h, j) >> 6u) << 4u);
    }
    return vec2<f32>(dm.x * f32(sc), dm.y * f32(m));
}
