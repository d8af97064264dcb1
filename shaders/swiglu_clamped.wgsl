@group(0) @binding(SLOT_GATE) var<storage, read> GATE: array<f32>;
@group(0) @binding(SLOT_UP) var<storage, read> UP: array<f32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<f32>;

// gpt-oss's clamped SwiGLU (transformers' GptOssExperts._apply_gate), limit = P.value:
// g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) * g * sigmoid(1.702 * g).
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < P.n) {
        let g = min(GATE[i], P.value);
        let u = clamp(UP[i], -P.value, P.value);
        OUT[i] = (u + 1.0) * (g / (1.0 + exp(-1.702 * g)));
    }
}
