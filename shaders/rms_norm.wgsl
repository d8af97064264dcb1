// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * g, stored, or with `accumulate` added to
// y (the residual add after Gemma's sandwich norms: the normed value rounded to f32 first, then
// added, as the add_in_place kernel adds a stored norm). One workgroup per row; the scale comes
// from rms_scale.wgsl (one row: NORM_ROWS = 1, every level of its tree in workgroup memory:
// tree_shared.wgsl), composed before this file.
struct RmsNormParams {
    rows: u32,
    d: u32,
    eps: f32,
    accumulate: u32,
}

@group(0) @binding(SLOT_P) var<uniform> P: RmsNormParams;
@group(0) @binding(SLOT_X) var<storage, read> X: array<f32>;
@group(0) @binding(SLOT_WEIGHT) var<storage, read> WEIGHT: array<f32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<f32>;

fn x1(i: u32) -> f32 {
    return X[i];
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, lanes: Lanes) {
    let t = lanes.t;
    let row = wid.y * nwg.x + wid.x;
    let base = min(row, P.rows - 1u) * P.d;
    rms_scales(row, P.rows, P.d, P.eps, lanes);
    let scale = norm_scale[0];
    if (row < P.rows) {
        if (P.accumulate != 0u) {
            for (var k = t; k < P.d; k += WG) {
                OUT[base + k] = OUT[base + k] + X[base + k] * scale * WEIGHT[k];
            }
        } else {
            for (var k = t; k < P.d; k += WG) {
                OUT[base + k] = X[base + k] * scale * WEIGHT[k];
            }
        }
    }
}
