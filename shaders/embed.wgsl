// y[t, k] = table[ids[t], k] for the ids that fall in this part of a row-split table.
struct EmbedParams {
    tokens: u32,
    d: u32,
    row0: u32,
    rows: u32,
}

@group(0) @binding(SLOT_P) var<uniform> P: EmbedParams;
@group(0) @binding(SLOT_IDS) var<storage, read> IDS: array<u32>;
@group(0) @binding(SLOT_OUT) var<storage, read_write> OUT: array<f32>;

// The row length of the table the format functions read (wsplit.wgsl).
fn w_k() -> u32 {
    return P.d;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    if (i >= P.tokens * P.d) {
        return;
    }
    let id = IDS[i / P.d];
    if (id < P.row0 || id >= P.row0 + P.rows) {
        return;
    }
    OUT[i] = w_elem((id - P.row0) * w_row_words(P.d), i % P.d);
}
