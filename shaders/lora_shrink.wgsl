// LoRA shrink: T[row, t·width + j] = sum_k X[row, k] A_t[j, k] for each target t of the run and
// j below the row's adapter's rank for it (the block's other columns 0, as for a row without
// one): one invocation per output, one fma chain over k ascending, so a row's values depend on
// its own input and adapter only.
@group(0) @binding(SLOT_ROWS) var<storage, read> ROWS: array<u32>;
@group(0) @binding(SLOT_X) var<storage, read> X: array<f32>;
@group(0) @binding(SLOT_T) var<storage, read_write> T: array<f32>;
@group(0) @binding(SLOT_AB) var<storage, read> AB: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let per_row = P.run * P.width;
    if (i >= P.m * per_row) {
        return;
    }
    let row = i / per_row;
    let col = i % per_row;
    let j = col % P.width;
    let slot = ROWS[row];
    var acc = 0.0;
    if (slot != NO_SLOT) {
        let e = entry(slot, P.which + col / P.width);
        if (j < TABLE[e + 2u]) {
            let a = TABLE[e] + j * P.k;
            let x = row * P.k;
            for (var kk = 0u; kk < P.k; kk++) {
                acc = fma(X[x + kk], AB[a + kk], acc);
            }
        }
    }
    T[row * P.ldt + col] = acc;
}
