@group(0) @binding(SLOT_GATE) var<storage, read> GATE: array<f32>;
@group(0) @binding(SLOT_UP) var<storage, read> UP: array<f32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < P.n) {
        let g = GATE[i];
        OUT[i] = g / (1.0 + exp(-g)) * UP[i];
    }
}
