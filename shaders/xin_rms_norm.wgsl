// Linear input RMS-normed on the way in: x[k] * scale * NORM[k], the scale of each row from
// rms_scale.wgsl (computed once per row tile by the whole workgroup), so the linear reads the
// bits the rms_norm kernel would have written.
@group(0) @binding(SLOT_NORM) var<storage, read> NORM: array<f32>;

fn row_scale(xr: u32, t: u32) -> f32 {
    return rms_scale(xr, P.k, P.eps, t);
}

fn input8(x: W8, s: f32, k: u32) -> W8 {
    let ga = vec4<f32>(NORM[k], NORM[k + 1u], NORM[k + 2u], NORM[k + 3u]);
    let gb = vec4<f32>(NORM[k + 4u], NORM[k + 5u], NORM[k + 6u], NORM[k + 7u]);
    return W8(x.a * s * ga, x.b * s * gb);
}

fn input1(x: f32, s: f32, k: u32) -> f32 {
    return x * s * NORM[k];
}
