@group(0) @binding(SLOT_GATE) var<storage, read> GATE: array<f32>;
@group(0) @binding(SLOT_UP) var<storage, read> UP: array<f32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<f32>;

// out = act(gate) * up, `act` from the act_*.wgsl file composed before this one.
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < P.n) {
        OUT[i] = act(GATE[i]) * UP[i];
    }
}
