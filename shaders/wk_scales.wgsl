// Q4_K/Q5_K super-block header: word 0 holds the f16 d (low half) and dmin (high half), words
// 1..3 the 12 bytes of packed 6-bit scales and minimums of the eight sub-blocks of 32.

// Byte i (0..12) of the packed scales of the super-block at word `base`.
fn k_scale_byte(base: u32, i: u32) -> u32 {
    return (wl(base + 1u + i / 4u) >> (8u * (i % 4u))) & 255u;
}

// (d * scale, dmin * min) of sub-block j (0..8): w = x * q - y.
fn k_sub_scale(base: u32, j: u32) -> vec2<f32> {
    let dm = unpack2x16float(wl(base));
    var sc: u32;
    var m: u32;
    if (j < 4u) {
        sc = k_scale_byte(base, j) & 63u;
        m = k_scale_byte(base, j + 4u) & 63u;
    } else {
        let e = k_scale_byte(base, j + 4u);
        sc = (e & 15u) | ((k_scale_byte(base, j - 4u) >> 6u) << 4u);
        m = (e >> 4u) | ((k_scale_byte(base, j) >> 6u) << 4u);
    }
    return vec2<f32>(dm.x * f32(sc), dm.y * f32(m));
}
