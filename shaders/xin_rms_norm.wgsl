// Linear input RMS-normed on the way in: x[k] * scale * NORM[k], the scales of the workgroup's
// NORM_ROWS rows from m0 computed first by all its invocations (rms_scale.wgsl), so the linear
// reads the bits the rms_norm kernel would have written.
@group(0) @binding(SLOT_NORM) var<storage, read> NORM: array<f32>;

fn row_scales(m0: u32, t: u32) {
    rms_scales(m0, P.m, P.k, P.eps, t);
}

fn row_scale(r: u32) -> f32 {
    return norm_scale[r];
}

fn input8(x: W8, s: f32, k: u32) -> W8 {
    let ga = vec4<f32>(NORM[k], NORM[k + 1u], NORM[k + 2u], NORM[k + 3u]);
    let gb = vec4<f32>(NORM[k + 4u], NORM[k + 5u], NORM[k + 6u], NORM[k + 7u]);
    return W8(x.a * s * ga, x.b * s * gb);
}

fn input1(x: f32, s: f32, k: u32) -> f32 {
    return x * s * NORM[k];
}
