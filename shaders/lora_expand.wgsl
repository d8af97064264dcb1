// LoRA expand: Y[row, y0 + c] += scale * sum_j T[row, j] B[c, j] over the row's adapter's
// rank, for rows with an adapter touching this target (others left as they are): one
// invocation per output, one fma chain over j ascending, the scale applied last (PEFT's
// `lora_B(lora_A(x)) * scaling`).
@group(0) @binding(SLOT_ROWS) var<storage, read> ROWS: array<u32>;
@group(0) @binding(SLOT_T) var<storage, read> T: array<f32>;
@group(0) @binding(SLOT_Y) var<storage, read_write> Y: array<f32>;
@group(0) @binding(SLOT_AB) var<storage, read> AB: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= P.m * P.n) {
        return;
    }
    let row = i / P.n;
    let c = i % P.n;
    let slot = ROWS[row];
    if (slot == NO_SLOT) {
        return;
    }
    let e = entry(slot);
    let rank = TABLE[e + 2u];
    if (rank == 0u) {
        return;
    }
    let b = TABLE[e + 1u] + c * rank;
    let t = row * P.max_rank;
    var acc = 0.0;
    for (var j = 0u; j < rank; j++) {
        acc = fma(T[t + j], AB[b + j], acc);
    }
    let y = row * P.ldy + P.y0 + c;
    Y[y] = lora_out(Y[y], acc, TABLE[e + 3u]);
}
