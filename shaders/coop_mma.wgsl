// The tile multiply through the adapter's cooperative matrices (linear_coop.wgsl): the
// workgroup's TILES_M x TILES_N output matrices shared out by subgroup (matrix i of
// subgroup s: s, s + count, ...), each loaded from cs, multiplied and added `steps` k-steps
// of CS in ascending order (A from xs row-major, B from ws whose weight rows are its columns),
// and stored back. The control flow is uniform in each subgroup, which is what the matrices
// ask (the module's derivative_uniformity diagnostic is off: naga holds them to the
// workgroup's).
fn tile_multiply(u: CoopLanes, steps: u32) {
    for (var i = u.sg; i < TILES_M * TILES_N; i += u.count) {
        let mi = i / TILES_N;
        let ni = i % TILES_N;
        let at = mi * CS * NT + ni * CS;
        var c = coopLoadT<CoopC>(&cs[at], NT);
        for (var s = 0u; s < steps; s++) {
            let a = coopLoadT<CoopA>(&xs[mi * CS * KT + s * CS], KT);
            let b = coopLoad<CoopB>(&ws[ni * CS * KT + s * CS], KT);
            c = coopMultiplyAdd(a, b, c);
        }
        coopStoreT(c, &cs[at], NT);
    }
}
