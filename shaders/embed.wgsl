// y[t, k] = table[ids[t], k] for the ids that fall in this part of a row-split table.
struct Params {
    tokens: u32,
    d: u32,
    row0: u32,
    rows: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> IDS: array<u32>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * 64u + lid;
    if (i >= P.tokens * P.d) {
        return;
    }
    let id = IDS[i / P.d];
    if (id < P.row0 || id >= P.row0 + P.rows) {
        return;
    }
    Y[i] = w_elem((id - P.row0) * w_row_words(P.d), i % P.d);
}
