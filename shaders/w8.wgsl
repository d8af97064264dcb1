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

// Sixteen values of one row as four quads: the activations of the run of 16 weights a K-split
// lane sums at a time (the format's `run_quads` says which k each quad starts at), or the run's
// quants.
struct V16 {
    a: vec4<f32>,
    b: vec4<f32>,
    c: vec4<f32>,
    d: vec4<f32>,
}

// The four quads' dot products x·q.
fn quad_dots(x: V16, q: V16) -> vec4<f32> {
    return vec4<f32>(dot(x.a, q.a), dot(x.b, q.b), dot(x.c, q.c), dot(x.d, q.d));
}

// x·w over the sixteen: the four quads' dot products, added. The activations only ever meet
// weights in products: a sum of activations could be contracted with the product a fused norm
// makes of them (x s g) into an fma, which the norm's own kernel's stored output cannot be,
// and a decode row would lose the bits of the same row prefilled.
fn run_dot(x: V16, w: V16) -> f32 {
    return dot(quad_dots(x, w), vec4<f32>(1.0));
}

// Eight consecutive words, two units (`wl8a`).
struct WRun8 {
    lo: vec4<u32>,
    hi: vec4<u32>,
}

// The byte lanes of a word: `vec4<u32>(w) >> BYTE_SHIFTS` puts byte i at the bottom of lane i.
const BYTE_SHIFTS = vec4<u32>(0u, 8u, 16u, 24u);

// The four bytes of a word, unsigned.
fn bytes4(w: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> BYTE_SHIFTS) & vec4<u32>(255u));
}

// The four bytes of a word, signed.
fn sbytes4(w: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(w) << (vec4<u32>(24u) - BYTE_SHIFTS)) >> vec4<u32>(24u));
}

// The 4-bit values at `shift` (0 or 4) of the four bytes of a word.
fn nibbles4(w: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> (BYTE_SHIFTS + shift)) & vec4<u32>(15u));
}

// x · w for eight weights, one fma chain in k order.
fn dot8(x: W8, w: W8, acc: f32) -> f32 {
    var s = fma(x.a.x, w.a.x, acc);
    s = fma(x.a.y, w.a.y, s);
    s = fma(x.a.z, w.a.z, s);
    s = fma(x.a.w, w.a.w, s);
    s = fma(x.b.x, w.b.x, s);
    s = fma(x.b.y, w.b.y, s);
    s = fma(x.b.z, w.b.z, s);
    return fma(x.b.w, w.b.w, s);
}

// Words rounded up to whole 16-byte units: every stored row starts on one (src/gpu/weights.rs),
// so the runs a format aligns within a row are aligned in the buffer.
fn whole_units(words: u32) -> u32 {
    return (words + 3u) & ~3u;
}
