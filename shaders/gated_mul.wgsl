@group(0) @binding(SLOT_GATE) var<storage, read> GATE: array<f32>;
@group(0) @binding(SLOT_UP) var<storage, read> UP: array<f32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<f32>;

// out = act(gate) * up, `act` from the act_*.wgsl file composed before this one. GATE and UP
// are two tensors of n values (P.d = 0), or both the one tensor whose rows hold P.d gate values
// then P.d up values (a stacked gate and up projection's output).
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < P.n) {
        var g = i;
        var u = i;
        if (P.d != 0u) {
            g = i / P.d * 2u * P.d + i % P.d;
            u = g + P.d;
        }
        OUT[i] = act(GATE[g]) * UP[u];
    }
}
