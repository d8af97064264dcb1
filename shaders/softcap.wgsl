@group(0) @binding(SLOT_X) var<storage, read_write> X: array<f32>;

// x = value * tanh(x / value): soft-capping to (-value, value). tanh is 1 in f32 past 15.
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < P.n) {
        X[i] = P.value * tanh(clamp(X[i] / P.value, -15.0, 15.0));
    }
}
