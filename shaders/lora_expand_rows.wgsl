// LoRA expand over the rows of each adapter (a decode's batch): a workgroup per block of
// COLS * WG output columns and adapter slot; each invocation keeps COLS columns of the slot's
// B in registers and adds their products into every row of the slot, so B is read once a slot
// (not once a row) and each row's shrunk values once per COLS columns (not once an output).
// The shrunk rows T and the rows' slots are uniforms (CPU drivers gather those without the
// per-lane branches of a storage load). Each output is lora_expand.wgsl's fma chain (j
// ascending from 0, the scale applied last by lora_out), so either kernel gives a row the same
// bits.

// Output columns an invocation computes (`LORA_EXPAND_COLS` in src/gpu/lora.rs).
const COLS: u32 = 4u;

// The uniforms' sizes (64 KiB and 16 KiB): `LORA_UNIFORM_FLOATS` shrunk values and
// `LORA_UNIFORM_ROWS` rows (src/gpu/lora.rs).
@group(0) @binding(SLOT_ROWS) var<uniform> ROWS: array<vec4<u32>, 1024>;
@group(0) @binding(SLOT_T) var<uniform> T: array<vec4<f32>, 4096>;
@group(0) @binding(SLOT_Y) var<storage, read_write> Y: array<f32>;
@group(0) @binding(SLOT_AB) var<storage, read> AB: array<f32>;

// Up to 16 values of a rank, in registers.
struct Rank16 {
    q0: vec4<f32>,
    q1: vec4<f32>,
    q2: vec4<f32>,
    q3: vec4<f32>,
}

fn row_slot(row: u32) -> u32 {
    return ROWS[row >> 2u][row & 3u];
}

fn t_at(i: u32) -> f32 {
    return T[i >> 2u][i & 3u];
}

// B[c, j] (at `b + j`), 0 past the rank.
fn b_at(b: u32, j: u32, rank: u32) -> f32 {
    if (j < rank) {
        return AB[b + j];
    }
    return 0.0;
}

fn b_quad(b: u32, j: u32, rank: u32) -> vec4<f32> {
    return vec4(b_at(b, j, rank), b_at(b, j + 1u, rank), b_at(b, j + 2u, rank), b_at(b, j + 3u, rank));
}

// A column of B (at `b`) of rank up to 16.
fn b_column(b: u32, rank: u32) -> Rank16 {
    var col = Rank16(b_quad(b, 0u, rank), vec4(0.0), vec4(0.0), vec4(0.0));
    if (rank > 4u) {
        col.q1 = b_quad(b, 4u, rank);
    }
    if (rank > 8u) {
        col.q2 = b_quad(b, 8u, rank);
    }
    if (rank > 12u) {
        col.q3 = b_quad(b, 12u, rank);
    }
    return col;
}

fn t_quad(t: u32) -> vec4<f32> {
    return vec4(t_at(t), t_at(t + 1u), t_at(t + 2u), t_at(t + 3u));
}

// A shrunk row (at `t`) of rank up to 16 (values past the rank unused).
fn t_row(t: u32, rank: u32) -> Rank16 {
    var row = Rank16(t_quad(t), vec4(0.0), vec4(0.0), vec4(0.0));
    if (rank > 4u) {
        row.q1 = t_quad(t + 4u);
    }
    if (rank > 8u) {
        row.q2 = t_quad(t + 8u);
    }
    if (rank > 12u) {
        row.q3 = t_quad(t + 12u);
    }
    return row;
}

// `acc` carried through the fma chain of the first `left` (up to four) terms t.i b.i.
fn chain4(acc: f32, t: vec4<f32>, b: vec4<f32>, left: u32) -> f32 {
    var a = fma(t.x, b.x, acc);
    if (left > 1u) {
        a = fma(t.y, b.y, a);
    }
    if (left > 2u) {
        a = fma(t.z, b.z, a);
    }
    if (left > 3u) {
        a = fma(t.w, b.w, a);
    }
    return a;
}

// The fma chain of a row and a column over the rank (up to 16), j ascending from 0.
fn chain16(t: Rank16, b: Rank16, rank: u32) -> f32 {
    var acc = chain4(0.0, t.q0, b.q0, rank);
    if (rank > 4u) {
        acc = chain4(acc, t.q1, b.q1, rank - 4u);
    }
    if (rank > 8u) {
        acc = chain4(acc, t.q2, b.q2, rank - 8u);
    }
    if (rank > 12u) {
        acc = chain4(acc, t.q3, b.q3, rank - 12u);
    }
    return acc;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c0 = (wid.x * WG + lid) * COLS;
    let slot = wid.y;
    let e = entry(slot);
    let rank = TABLE[e + 2u];
    if (c0 >= P.n || rank == 0u) {
        return;
    }
    let cols = min(COLS, P.n - c0);
    let b = TABLE[e + 1u];
    let scale = TABLE[e + 3u];
    if (rank <= 16u) {
        // Columns past the target's last repeat it (computed, never written).
        let b0 = b_column(b + c0 * rank, rank);
        let b1 = b_column(b + min(c0 + 1u, P.n - 1u) * rank, rank);
        let b2 = b_column(b + min(c0 + 2u, P.n - 1u) * rank, rank);
        let b3 = b_column(b + min(c0 + 3u, P.n - 1u) * rank, rank);
        for (var row = 0u; row < P.m; row++) {
            if (row_slot(row) != slot) {
                continue;
            }
            let t = t_row(row * P.max_rank, rank);
            let y = row * P.ldy + P.y0 + c0;
            Y[y] = lora_out(Y[y], chain16(t, b0, rank), scale);
            if (cols > 1u) {
                Y[y + 1u] = lora_out(Y[y + 1u], chain16(t, b1, rank), scale);
            }
            if (cols > 2u) {
                Y[y + 2u] = lora_out(Y[y + 2u], chain16(t, b2, rank), scale);
            }
            if (cols > 3u) {
                Y[y + 3u] = lora_out(Y[y + 3u], chain16(t, b3, rank), scale);
            }
        }
        return;
    }
    for (var row = 0u; row < P.m; row++) {
        if (row_slot(row) != slot) {
            continue;
        }
        let t = row * P.max_rank;
        for (var i = 0u; i < cols; i++) {
            let bc = b + (c0 + i) * rank;
            var acc = 0.0;
            for (var j = 0u; j < rank; j++) {
                acc = fma(t_at(t + j), AB[bc + j], acc);
            }
            let y = row * P.ldy + P.y0 + c0 + i;
            Y[y] = lora_out(Y[y], acc, scale);
        }
    }
}
