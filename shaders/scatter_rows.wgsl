@group(0) @binding(SLOT_SRC) var<storage, read> SRC: array<f32>;
@group(0) @binding(SLOT_INDICES) var<storage, read> INDICES: array<u32>;
// One f32 a row, as its bits (the step's inputs are written as u32 words).
@group(0) @binding(SLOT_SCALES) var<storage, read> SCALES: array<u32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<f32>;

// out[indices[r], :] = src[r, :] * scales[r]: an expert's output rows, weighted by the router,
// put where their tokens' slots are.
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < P.n) {
        let r = i / P.d;
        OUT[INDICES[r] * P.d + i % P.d] = SRC[i] * bitcast<f32>(SCALES[r]);
    }
}
