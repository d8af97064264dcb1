// Linear input RMS-normed on the way in: x[k] * scale * NORM[k], the scales of the workgroup's
// NORM_ROWS rows from m0 computed first by all its invocations (rms_scale.wgsl), or by each
// subgroup alone (rms_scale_lanes.wgsl), so the linear reads the bits the rms_norm kernel would
// have written. NORM is read with `norm8` and `norm1`
// (xnorm_f32.wgsl or xnorm_vec4.wgsl, loaded as the activations are).

fn row_scales(m0: u32, lead: bool, lanes: Lanes) {
    rms_scales(m0, P.m, P.k, P.eps, lanes);
}

fn row_scale(r: u32) -> f32 {
    return norm_scale[r];
}

fn input8(x: W8, s: f32, k: u32) -> W8 {
    let g = norm8(k);
    return W8(x.a * s * g.a, x.b * s * g.b);
}

fn input4(x: vec4<f32>, s: f32, k: u32) -> vec4<f32> {
    return x * s * norm4(k);
}

fn input1(x: f32, s: f32, k: u32) -> f32 {
    return x * s * norm1(k);
}
