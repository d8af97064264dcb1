// The parameters, bindings and flat index of the batched LoRA kernels (lora_shrink.wgsl,
// lora_shrink_groups.wgsl, lora_expand.wgsl, lora_expand_rows.wgsl). Each row of the batch
// names its adapter's slot in ROWS (NO_SLOT: none); each kernel declares ROWS (a storage
// buffer or a uniform) and AB, the adapters' values (f32s or 16-byte units). TABLE holds per
// slot and target four words: the offsets of its A ([rank, k], a multiple of 4) and B
// ([n, rank]) in AB, its rank (0: the adapter does not touch this target) and its scale's bits.
struct LoraParams {
    m: u32,
    k: u32,
    n: u32,
    max_rank: u32,
    ldy: u32,
    y0: u32,
    which: u32,
    targets: u32,
    groups: u32,
}

const NO_SLOT: u32 = 0xffffffffu;

@group(0) @binding(SLOT_P) var<uniform> P: LoraParams;
@group(0) @binding(SLOT_TABLE) var<storage, read> TABLE: array<u32>;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// The table entry of `slot` for this dispatch's target.
fn entry(slot: u32) -> u32 {
    return (slot * P.targets + P.which) * 4u;
}

// A row's output plus its delta: `acc` (the fma chain over the rank) times the adapter's scale.
// Both expand kernels end here, so they round alike.
fn lora_out(y: f32, acc: f32, scale_bits: u32) -> f32 {
    return y + acc * bitcast<f32>(scale_bits);
}
