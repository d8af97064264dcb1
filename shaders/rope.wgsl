// Rotary position embedding in place on x[t, head, hd]. Pair p of a head is (2p, 2p + 1) in the
// interleaved mode and (p, p + hd / 2) in the half-split mode; its angle is positions[t] * inv_freq[p].
struct RopeParams {
    tokens: u32,
    heads: u32,
    hd: u32,
    half_split: u32,
}

@group(0) @binding(SLOT_P) var<uniform> P: RopeParams;
@group(0) @binding(SLOT_X) var<storage, read_write> X: array<f32>;
@group(0) @binding(SLOT_POSITIONS) var<storage, read> POSITIONS: array<u32>;
@group(0) @binding(SLOT_INV_FREQ) var<storage, read> INV_FREQ: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    let half = P.hd / 2u;
    if (i >= P.tokens * P.heads * half) {
        return;
    }
    let p = i % half;
    let head = i / half;
    let tok = head / P.heads;
    let base = head * P.hd;
    var i0 = base + 2u * p;
    var i1 = i0 + 1u;
    if (P.half_split != 0u) {
        i0 = base + p;
        i1 = i0 + half;
    }
    let angle = f32(POSITIONS[tok]) * INV_FREQ[p];
    let c = cos(angle);
    let s = sin(angle);
    let x0 = X[i0];
    let x1 = X[i1];
    X[i0] = x0 * c - x1 * s;
    X[i1] = x0 * s + x1 * c;
}
