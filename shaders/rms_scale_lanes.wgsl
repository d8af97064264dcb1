// RMSNorm scales with rms_scale.wgsl's bits, each subgroup summing them on its own: for
// variants whose subgroups have exactly TREE_LANES lanes, a size that divides NORM_WG and the
// workgroup (the sequential path on CPU adapters). Lane l takes partials l, l + TREE_LANES, ...
// (each x[p], x[p + NORM_WG], ... in order, as there), adds the tree's levels s >= TREE_LANES
// in its own registers (partials p and p + s sit in one lane) and the narrower ones in shuffles
// (tree_subgroup.wgsl), so every lane ends with the scale: no workgroup memory and no barrier,
// for every subgroup summing the rows' squares again.
var<private> norm_scale: array<f32, NORM_ROWS>;

fn rms_scales(m0: u32, rows: u32, d: u32, eps: f32, lanes: Lanes) {
    for (var r = 0u; r < NORM_ROWS; r++) {
        let xr = min(m0 + r, rows - 1u) * d;
        var part: array<f32, NORM_WG / TREE_LANES>;
        for (var j = 0u; j < NORM_WG / TREE_LANES; j++) {
            var ss = 0.0;
            for (var k = lanes.lane + j * TREE_LANES; k < d; k += NORM_WG) {
                let v = x1(xr + k);
                ss = fma(v, v, ss);
            }
            part[j] = ss;
        }
        for (var h = NORM_WG / TREE_LANES / 2u; h > 0u; h >>= 1u) {
            for (var j = 0u; j < h; j++) {
                part[j] = part[j] + part[j + h];
            }
        }
        norm_scale[r] = 1.0 / sqrt(tree_add(lanes, TREE_LANES, part[0]) / f32(d) + eps);
    }
}
