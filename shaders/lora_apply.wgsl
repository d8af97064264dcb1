// LoRA, shrink and expand in one dispatch: one workgroup a row. The shrink writes the row's
// T[g, j] = sum_k X[row, k] A_g[j, k] for each target g of the group and j below its adapter's
// rank (0 elsewhere, as for a row without an adapter), one fma chain over k ascending; then,
// once the workgroup's T is written, the expand adds Y[row, y0 + c] += scale_g * sum_j T[g, j]
// B_g[c', j] for each output column c (column c' of its target g; targets the adapter leaves
// alone, and rows without one, keep their values), one fma chain over j ascending, the scale
// applied last (PEFT's `lora_B(lora_A(x)) * scaling`). A row's values depend on its own input
// and adapter only, and are the bits of separate shrink and expand passes.
@group(0) @binding(SLOT_X) var<storage, read> X: array<f32>;
@group(0) @binding(SLOT_T) var<storage, read_write> T: array<f32>;
@group(0) @binding(SLOT_Y) var<storage, read_write> Y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= P.m) {
        return;
    }
    let slot = ROWS[row];
    let width = P.count * P.max_rank;
    let t = row * P.ldt;
    for (var i = lid; i < width; i += WG) {
        let g = i / P.max_rank;
        let j = i % P.max_rank;
        var acc = 0.0;
        if (slot != NO_SLOT) {
            let e = entry(slot, P.which + g);
            if (j < TABLE[e + 2u]) {
                let a = TABLE[e] + j * P.k;
                let x = row * P.k;
                for (var kk = 0u; kk < P.k; kk++) {
                    acc = fma(X[x + kk], AB[a + kk], acc);
                }
            }
        }
        T[t + i] = acc;
    }
    storageBarrier();
    if (slot == NO_SLOT) {
        return;
    }
    // Columns below n_first are the first target's; the others split evenly among the rest.
    let rest = select(1u, (P.n - P.n_first) / max(P.count - 1u, 1u), P.count > 1u);
    for (var c = lid; c < P.n; c += WG) {
        var g = 0u;
        var col = c;
        if (c >= P.n_first) {
            g = 1u + (c - P.n_first) / rest;
            col = (c - P.n_first) % rest;
        }
        let e = entry(slot, P.which + g);
        let rank = TABLE[e + 2u];
        if (rank == 0u) {
            continue;
        }
        let b = TABLE[e + 1u] + col * rank;
        let tg = t + g * P.max_rank;
        var acc = 0.0;
        for (var j = 0u; j < rank; j++) {
            acc = fma(T[tg + j], AB[b + j], acc);
        }
        let y = row * P.ldy + P.y0 + c;
        Y[y] = Y[y] + acc * bitcast<f32>(TABLE[e + 3u]);
    }
}
