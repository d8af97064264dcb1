// Gemma's sandwich between its two linears in one dispatch: x += rms_norm(o) * post (the
// rms_norm kernel with `accumulate`), then h = rms_norm(x) * pre (the rms_norm kernel), each row
// by one workgroup: the bits of those two dispatches (rms_scale.wgsl's sums, rms_norm.wgsl's
// expressions), the new x read back after a storage barrier. The scales come from
// rms_scale.wgsl (NORM_ROWS = 1, tree_shared.wgsl), composed before this file, reading O first
// and then X through `x1`.
struct RmsNormParams {
    rows: u32,
    d: u32,
    eps: f32,
    accumulate: u32,
}

@group(0) @binding(SLOT_P) var<uniform> P: RmsNormParams;
@group(0) @binding(SLOT_O) var<storage, read> O: array<f32>;
@group(0) @binding(SLOT_POST) var<storage, read> POST: array<f32>;
@group(0) @binding(SLOT_X) var<storage, read_write> X: array<f32>;
@group(0) @binding(SLOT_PRE) var<storage, read> PRE: array<f32>;
@group(0) @binding(SLOT_H) var<storage, read_write> H: array<f32>;

// The norm's input: o, then the new x.
var<private> norming_x: bool;

fn x1(i: u32) -> f32 {
    if (norming_x) {
        return X[i];
    }
    return O[i];
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, lanes: Lanes) {
    let t = lanes.t;
    let row = wid.y * nwg.x + wid.x;
    let base = min(row, P.rows - 1u) * P.d;
    norming_x = false;
    rms_scales(row, P.rows, P.d, P.eps, lanes);
    let post_scale = norm_scale[0];
    if (row < P.rows) {
        for (var k = t; k < P.d; k += WG) {
            X[base + k] = X[base + k] + O[base + k] * post_scale * POST[k];
        }
    }
    storageBarrier();
    norming_x = true;
    rms_scales(row, P.rows, P.d, P.eps, lanes);
    let pre_scale = norm_scale[0];
    if (row < P.rows) {
        for (var k = t; k < P.d; k += WG) {
            H[base + k] = X[base + k] * pre_scale * PRE[k];
        }
    }
}
