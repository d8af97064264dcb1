@group(0) @binding(SLOT_SRC) var<storage, read> SRC: array<u32>;
// (source index, destination index) pairs, n of them.
@group(0) @binding(SLOT_PAIRS) var<storage, read> PAIRS: array<u32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<u32>;

// out[pairs[2i + 1]] = src[pairs[2i]]: token ids moved on the device, bit for bit (a sampled
// id into the sampled-ids buffer, or from there into the next step's input ids).
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < P.n) {
        OUT[PAIRS[2u * i + 1u]] = SRC[PAIRS[2u * i]];
    }
}
