// The RMSNorm scale of one row of X, 1 / sqrt(mean(x²) + eps), in one order whatever the
// calling kernel's workgroup size: NORM_WG strided sums of squares (sum l takes x[l],
// x[l + NORM_WG], ... in order), then a fixed tree over them. The rms_norm kernel and the
// linear kernels that norm their input (xin_rms_norm.wgsl) share it, so a fused norm has the
// bits of the separate kernel. Every invocation of the workgroup calls it (it has barriers)
// and gets the scale.
var<workgroup> norm_red: array<f32, NORM_WG>;

fn rms_scale(xr: u32, d: u32, eps: f32, t: u32) -> f32 {
    for (var l = t; l < NORM_WG; l += WG) {
        var ss = 0.0;
        for (var k = l; k < d; k += NORM_WG) {
            let v = X[xr + k];
            ss = fma(v, v, ss);
        }
        norm_red[l] = ss;
    }
    for (var s = NORM_WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        for (var l = t; l < s; l += WG) {
            norm_red[l] = norm_red[l] + norm_red[l + s];
        }
    }
    workgroupBarrier();
    let scale = 1.0 / sqrt(norm_red[0] / f32(d) + eps);
    workgroupBarrier();
    return scale;
}
