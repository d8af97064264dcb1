// The types of the weight functions.

// Eight consecutive weights (or activations) of one row, dequantized to f32.
struct W8 {
    a: vec4<f32>,
    b: vec4<f32>,
}

// One block of 32 consecutive weights of one row (k = 32 b .. 32 b + 31), as four W8 groups.
struct W32 {
    g0: W8,
    g1: W8,
    g2: W8,
    g3: W8,
}

// Eight consecutive words, two units (`wl8a`).
struct WRun8 {
    lo: vec4<u32>,
    hi: vec4<u32>,
}

// Words rounded up to whole 16-byte units: every stored row starts on one (src/gpu/weights.rs),
// so the runs a format aligns within a row are aligned in the buffer.
fn whole_units(words: u32) -> u32 {
    return (words + 3u) & ~3u;
}
