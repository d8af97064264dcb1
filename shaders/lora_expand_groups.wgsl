// LoRA expand: Y[row, y0 + c] += scale · sum_j T[row, t0 + j] B[c, j] over the rank of the row's
// adapter for each target of the run (rows without one, or whose adapter leaves the target
// alone, left as they are), the scale applied last (PEFT's `lora_B(lora_A(x)) * scaling`). The
// run's targets lie side by side in Y from y0 (the first n columns wide, each other n_rest) and
// in T (`width` values each from t0). One invocation per group of rows and four columns of a
// target, T and B as 16-byte units: per unit of the rank it loads the four rows' T and the four
// columns' B (eight loads for 64 products). Each output is one fma chain over j ascending from
// 0 to the rank rounded up to 4: past the rank B's columns are 0 and so are T's (the shrink
// writes them), and fma(0, 0, acc) is acc for every acc but -0, which a chain started at +0
// holds only when every product so far underflowed, so the chain has the bits of the one that
// stops at the rank (bar a delta of -0 against +0, which changes only a Y of -0). A row's bits
// are the same whatever the group, the run and the batch hold.
@group(0) @binding(SLOT_ROWS) var<storage, read> ROWS: array<u32>;
@group(0) @binding(SLOT_GROUPS) var<storage, read> GROUPS: array<vec4<u32>>;
@group(0) @binding(SLOT_T4) var<storage, read> T4: array<vec4<f32>>;
@group(0) @binding(SLOT_AB) var<storage, read> AB: array<vec4<f32>>;
@group(0) @binding(SLOT_Y) var<storage, read_write> Y: array<f32>;

// Adds `row`'s deltas of a target's columns c0..c0+3 (those below its `n`, from Y's column
// `y0`) into Y.
fn store(row: u32, y0: u32, c0: u32, n: u32, scale: u32, acc: vec4<f32>) {
    if (row == NO_ROW) {
        return;
    }
    let y = row * P.ldy + y0 + c0;
    for (var c = 0u; c < 4u; c++) {
        if (c0 + c < n) {
            Y[y + c] = lora_out(Y[y + c], acc[c], scale);
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    // The first target's column quads, then each other's.
    let first = (P.n + 3u) / 4u;
    let rest = (P.n_rest + 3u) / 4u;
    let quads = first + (P.run - 1u) * rest;
    if (i >= P.groups * quads) {
        return;
    }
    let rows = GROUPS[i / quads];
    let q = i % quads;
    let later = q >= first;
    let target_in_run = select(0u, 1u + (q - first) / max(rest, 1u), later);
    let c0 = select(q, (q - first) % max(rest, 1u), later) * 4u;
    let n = select(P.n, P.n_rest, later);
    let y0 = P.y0 + select(0u, P.n + (target_in_run - 1u) * P.n_rest, later);
    let slot = ROWS[rows.x];
    if (slot == NO_SLOT) {
        return;
    }
    let e = entry(slot, P.which + target_in_run);
    let units = (TABLE[e + 2u] + 3u) / 4u;
    if (units == 0u) {
        return;
    }
    // Rows past the group's last and columns past the target's last repeat the first row and
    // the last column (computed, never written).
    let more = or_first(rows);
    let ldt = P.ldt / 4u;
    let t = (P.t0 + target_in_run * P.width) / 4u;
    let t0 = rows.x * ldt + t;
    let t1 = more.x * ldt + t;
    let t2 = more.y * ldt + t;
    let t3 = more.z * ldt + t;
    let b = TABLE[e + 1u] / 4u;
    let b0 = b + c0 * units;
    let b1 = b + min(c0 + 1u, n - 1u) * units;
    let b2 = b + min(c0 + 2u, n - 1u) * units;
    let b3 = b + min(c0 + 3u, n - 1u) * units;
    var acc0 = vec4(0.0);
    var acc1 = vec4(0.0);
    var acc2 = vec4(0.0);
    var acc3 = vec4(0.0);
    for (var u = 0u; u < units; u++) {
        let c0u = AB[b0 + u];
        let c1u = AB[b1 + u];
        let c2u = AB[b2 + u];
        let c3u = AB[b3 + u];
        acc0 = chain_row(acc0, T4[t0 + u], c0u, c1u, c2u, c3u);
        acc1 = chain_row(acc1, T4[t1 + u], c0u, c1u, c2u, c3u);
        acc2 = chain_row(acc2, T4[t2 + u], c0u, c1u, c2u, c3u);
        acc3 = chain_row(acc3, T4[t3 + u], c0u, c1u, c2u, c3u);
    }
    let scale = TABLE[e + 3u];
    store(rows.x, y0, c0, n, scale, acc0);
    store(rows.y, y0, c0, n, scale, acc1);
    store(rows.z, y0, c0, n, scale, acc2);
    store(rows.w, y0, c0, n, scale, acc3);
}
