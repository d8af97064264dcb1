@group(0) @binding(SLOT_X) var<storage, read_write> X: array<f32>;

// x *= value.
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < P.n) {
        X[i] = X[i] * P.value;
    }
}
