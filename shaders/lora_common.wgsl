// The parameters, bindings and flat index of the batched LoRA kernels (lora_shrink.wgsl,
// lora_shrink_groups.wgsl, lora_expand_groups.wgsl). Each row of the batch names its adapter's
// slot in ROWS (NO_SLOT: none); each kernel declares ROWS and AB, the adapters' values (f32s or
// 16-byte units). TABLE holds per slot and target four words: the offsets of its A
// ([rank, k]) and B ([n, rank rounded up to 4], the columns past the rank 0) in AB, both
// multiples of 4, its rank (0: the adapter does not touch this target) and its scale's bits.
// Both grouped kernels take a group of up to four rows of one adapter (GROUPS, made on the host
// by `lora_row_groups`, NO_ROW past the last) and four columns an invocation.
// A shrink computes the targets which..which+run into blocks of `width` columns of T's rows.
struct LoraParams {
    m: u32,
    k: u32,
    n: u32,
    n_rest: u32,
    width: u32,
    ldt: u32,
    t0: u32,
    ldy: u32,
    y0: u32,
    which: u32,
    run: u32,
    targets: u32,
    groups: u32,
}

const NO_SLOT: u32 = 0xffffffffu;

@group(0) @binding(SLOT_P) var<uniform> P: LoraParams;
@group(0) @binding(SLOT_TABLE) var<storage, read> TABLE: array<u32>;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// The table entry of `slot` for `target`.
fn entry(slot: u32, target_index: u32) -> u32 {
    return (slot * P.targets + target_index) * 4u;
}

const NO_ROW: u32 = 0xffffffffu;

// `acc` carried through the fma chain of x and a's four terms in order.
fn chain4(acc: f32, x: vec4<f32>, a: vec4<f32>) -> f32 {
    return fma(x.w, a.w, fma(x.z, a.z, fma(x.y, a.y, fma(x.x, a.x, acc))));
}

// One row's four outputs after the unit x, against the columns' units a0..a3.
fn chain_row(acc: vec4<f32>, x: vec4<f32>, a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>) -> vec4<f32> {
    return vec4(chain4(acc.x, x, a0), chain4(acc.y, x, a1), chain4(acc.z, x, a2), chain4(acc.w, x, a3));
}

// The second to fourth rows of a group: the first where the group ends.
fn or_first(rows: vec4<u32>) -> vec3<u32> {
    return select(rows.yzw, vec3(rows.x), rows.yzw == vec3(NO_ROW));
}

// A row's output plus its delta: `acc` (the fma chain over the rank) times the adapter's scale.
fn lora_out(y: f32, acc: f32, scale_bits: u32) -> f32 {
    return y + acc * bitcast<f32>(scale_bits);
}
