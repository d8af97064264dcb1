// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * g. One workgroup per row; invocation t sums
// the squares of k = t, t + 64, ... in order, then a fixed tree adds the 64 partial sums.
struct Params {
    rows: u32,
    d: u32,
    eps: f32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> G: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wid.y * nwg.x + wid.x;
    let base = min(row, P.rows - 1u) * P.d;
    var ss = 0.0;
    for (var k = t; k < P.d; k += 64u) {
        let v = X[base + k];
        ss = fma(v, v, ss);
    }
    red[t] = ss;
    for (var s = 32u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (t < s) {
            red[t] = red[t] + red[t + s];
        }
    }
    workgroupBarrier();
    let scale = 1.0 / sqrt(red[0] / f32(P.d) + P.eps);
    if (row < P.rows) {
        for (var k = t; k < P.d; k += 64u) {
            Y[base + k] = X[base + k] * scale * G[k];
        }
    }
}
