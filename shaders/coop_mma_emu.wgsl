// The tile multiply of coop_mma.wgsl emulated in plain arithmetic over workgroup memory, for
// adapters without cooperative matrices (lavapipe: PAGODA_LINEAR=coop-emulated): the same
// matrices shared out by subgroup the same way, each output of a matrix owned by one lane of
// its subgroup, which adds each k-step of CS to it as one fma chain in ascending k (products
// of the inputs are exact in f32 for f16 inputs). Written out per step, so lavapipe's budget of
// loop iterations a shader invocation goes into the steps, not into their products.
fn tile_multiply(u: CoopLanes, steps: u32) {
    for (var i = u.sg; i < TILES_M * TILES_N; i += u.count) {
        let mi = i / TILES_N;
        let ni = i % TILES_N;
        for (var e = u.lane; e < CS * CS; e += u.size) {
            let r = mi * CS + e / CS;
            let n = ni * CS + e % CS;
            var c = cs[r * NT + n];
            for (var s = 0u; s < steps; s++) {
                c = emu_step(r * KT + s * CS, n * KT + s * CS, c);
            }
            cs[r * NT + n] = c;
        }
    }
}

// c + xs[a ..] · ws[b ..] over one k-step.
fn emu_step(a: u32, b: u32, c: f32) -> f32 {
    var acc = emu_eight(a, b, c);
    if (CS == 16u) {
        acc = emu_eight(a + 8u, b + 8u, acc);
    }
    return acc;
}

fn emu_eight(a: u32, b: u32, c: f32) -> f32 {
    var s = fma(f32(xs[a]), f32(ws[b]), c);
    s = fma(f32(xs[a + 1u]), f32(ws[b + 1u]), s);
    s = fma(f32(xs[a + 2u]), f32(ws[b + 2u]), s);
    s = fma(f32(xs[a + 3u]), f32(ws[b + 3u]), s);
    s = fma(f32(xs[a + 4u]), f32(ws[b + 4u]), s);
    s = fma(f32(xs[a + 5u]), f32(ws[b + 5u]), s);
    s = fma(f32(xs[a + 6u]), f32(ws[b + 6u]), s);
    return fma(f32(xs[a + 7u]), f32(ws[b + 7u]), s);
}
