// RMSNorm scales, 1 / sqrt(mean(x²) + eps), of the NORM_ROWS rows of X from row m0 (rows past
// the last, `rows - 1`, repeat it), into `norm_scale`. Each row's sum has one order whatever
// the calling kernel's workgroup size: NORM_WG strided partial sums of squares (partial l
// takes x[l], x[l + NORM_WG], ... in order), then a fixed tree over them (partial l adds
// partial l + s for s = NORM_WG / 2, ..., 1), its narrow levels in subgroup shuffles where the
// kernel has them (tree_shared.wgsl, tree_subgroup.wgsl). The rms_norm kernel and the linear
// kernels that norm their input (xin_rms_norm.wgsl) share it or its order
// (rms_scale_lanes.wgsl), so a fused norm has the bits of the separate kernel (X read with the
// caller's `x1`). The workgroup's invocations share the rows' partial sums and tree levels
// between them; every invocation calls it (it has barriers).
var<workgroup> norm_red: array<f32, NORM_ROWS * NORM_WG>;
var<workgroup> norm_scale: array<f32, NORM_ROWS>;

fn rms_scales(m0: u32, rows: u32, d: u32, eps: f32, lanes: Lanes) {
    let t = lanes.t;
    for (var i = t; i < NORM_ROWS * NORM_WG; i += WG) {
        let xr = min(m0 + i / NORM_WG, rows - 1u) * d;
        var ss = 0.0;
        for (var k = i % NORM_WG; k < d; k += NORM_WG) {
            let v = x1(xr + k);
            ss = fma(v, v, ss);
        }
        norm_red[i] = ss;
    }
    let narrow = tree_narrow(NORM_WG);
    for (var s = NORM_WG / 2u; s >= narrow; s >>= 1u) {
        workgroupBarrier();
        for (var i = t; i < NORM_ROWS * s; i += WG) {
            let j = i / s * NORM_WG + i % s;
            norm_red[j] = norm_red[j] + norm_red[j + s];
        }
    }
    workgroupBarrier();
    for (var r = 0u; r < NORM_ROWS; r++) {
        let ss = tree_add(lanes, narrow, norm_red[r * NORM_WG + tree_lane(lanes, narrow)]);
        if (r % WG == t) {
            norm_scale[r] = 1.0 / sqrt(ss / f32(d) + eps);
        }
    }
    workgroupBarrier();
}
