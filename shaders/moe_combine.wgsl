@group(0) @binding(SLOT_X) var<storage, read_write> X: array<f32>;
@group(0) @binding(SLOT_Y) var<storage, read> Y: array<f32>;

// x[i] += y[0][i] + y[1][i] + ... + y[d - 1][i] over the d = experts-per-token blocks of n
// values of y (slot-major: a token's weighted expert outputs, its first choice first), added in
// that order whatever else the batch holds.
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < P.n) {
        var s = Y[i];
        for (var j = 1u; j < P.d; j++) {
            s = s + Y[j * P.n + i];
        }
        X[i] = X[i] + s;
    }
}
