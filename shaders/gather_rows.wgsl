@group(0) @binding(SLOT_SRC) var<storage, read> SRC: array<f32>;
@group(0) @binding(SLOT_INDICES) var<storage, read> INDICES: array<u32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < P.n) {
        OUT[i] = SRC[INDICES[i / P.d] * P.d + i % P.d];
    }
}
