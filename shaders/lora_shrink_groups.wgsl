// LoRA shrink over groups of rows of one adapter, for K a multiple of 4 (every A starts on a
// 16-byte unit of the bank, src/gpu/lora.rs): one invocation per group, target of the run and
// four columns j0..j0+3, X, A and T as 16-byte units. Per k-unit it loads the four rows' X and
// the four columns' A (eight loads for 64 products; CPU drivers walk the lanes for each storage
// load). Each output T[row, t·width + j] is lora_shrink.wgsl's fma chain (k ascending from 0),
// so either kernel gives a row the same bits whatever the group holds; columns past the rank
// and rows without an adapter get 0.
@group(0) @binding(SLOT_ROWS) var<storage, read> ROWS: array<u32>;
@group(0) @binding(SLOT_GROUPS) var<storage, read> GROUPS: array<vec4<u32>>;
@group(0) @binding(SLOT_X4) var<storage, read> X4: array<vec4<f32>>;
@group(0) @binding(SLOT_AB) var<storage, read> AB: array<vec4<f32>>;
@group(0) @binding(SLOT_T4) var<storage, read_write> T4: array<vec4<f32>>;

// Writes `row`'s outputs j0..j0+3 of the block at column `t0` (T's row stride, `t0` and `j0`
// are multiples of 4), 0 past the rank.
fn store(row: u32, t0: u32, j0: u32, rank: u32, acc: vec4<f32>) {
    if (row != NO_ROW) {
        let past = vec4(j0) + vec4(0u, 1u, 2u, 3u) >= vec4(rank);
        T4[(row * P.ldt + t0 + j0) / 4u] = select(acc, vec4(0.0), past);
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let quads = P.width / 4u;
    if (i >= P.groups * P.run * quads) {
        return;
    }
    let rows = GROUPS[i / (P.run * quads)];
    let target_in_run = i / quads % P.run;
    let j0 = (i % quads) * 4u;
    let slot = ROWS[rows.x];
    var rank = 0u;
    var a = 0u;
    if (slot != NO_SLOT) {
        let e = entry(slot, P.which + target_in_run);
        rank = TABLE[e + 2u];
        a = TABLE[e] / 4u;
    }
    var acc0 = vec4(0.0);
    var acc1 = vec4(0.0);
    var acc2 = vec4(0.0);
    var acc3 = vec4(0.0);
    if (j0 < rank) {
        let k4 = P.k / 4u;
        // Rows past the group's last and columns past the rank repeat the first row and the
        // last column (computed, never written).
        let more = or_first(rows);
        let x0 = rows.x * k4;
        let x1 = more.x * k4;
        let x2 = more.y * k4;
        let x3 = more.z * k4;
        let a0 = a + j0 * k4;
        let a1 = a + min(j0 + 1u, rank - 1u) * k4;
        let a2 = a + min(j0 + 2u, rank - 1u) * k4;
        let a3 = a + min(j0 + 3u, rank - 1u) * k4;
        for (var kk = 0u; kk < k4; kk++) {
            let c0 = AB[a0 + kk];
            let c1 = AB[a1 + kk];
            let c2 = AB[a2 + kk];
            let c3 = AB[a3 + kk];
            acc0 = chain_row(acc0, X4[x0 + kk], c0, c1, c2, c3);
            acc1 = chain_row(acc1, X4[x1 + kk], c0, c1, c2, c3);
            acc2 = chain_row(acc2, X4[x2 + kk], c0, c1, c2, c3);
            acc3 = chain_row(acc3, X4[x3 + kk], c0, c1, c2, c3);
        }
    }
    let t0 = target_in_run * P.width;
    store(rows.x, t0, j0, rank, acc0);
    store(rows.y, t0, j0, rank, acc1);
    store(rows.z, t0, j0, rank, acc2);
    store(rows.w, t0, j0, rank, acc3);
}
