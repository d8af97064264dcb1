// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * g. One workgroup per row; invocation t sums
// the squares of k = t, t + WG, ... in order, then a fixed tree adds the WG partial sums.
struct RmsNormParams {
    rows: u32,
    d: u32,
    eps: f32,
}

@group(0) @binding(SLOT_P) var<uniform> P: RmsNormParams;
@group(0) @binding(SLOT_X) var<storage, read> X: array<f32>;
@group(0) @binding(SLOT_WEIGHT) var<storage, read> WEIGHT: array<f32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<f32>;

var<workgroup> red: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wid.y * nwg.x + wid.x;
    let base = min(row, P.rows - 1u) * P.d;
    var ss = 0.0;
    for (var k = t; k < P.d; k += WG) {
        let v = X[base + k];
        ss = fma(v, v, ss);
    }
    red[t] = ss;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (t < s) {
            red[t] = red[t] + red[t + s];
        }
    }
    workgroupBarrier();
    let scale = 1.0 / sqrt(red[0] / f32(P.d) + P.eps);
    if (row < P.rows) {
        for (var k = t; k < P.d; k += WG) {
            OUT[base + k] = X[base + k] * scale * WEIGHT[k];
        }
    }
}
