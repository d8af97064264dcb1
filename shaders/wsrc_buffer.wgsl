// Weights read from a storage buffer of u32 words (the layout of src/gpu/weights.rs), one load
// a word. The weight formats read through these functions only.
@group(0) @binding(SLOT_W) var<storage, read> W: array<u32>;

fn wl(i: u32) -> u32 {
    return W[i];
}

// Words i..i+3.
fn wl4(i: u32) -> vec4<u32> {
    return vec4<u32>(W[i], W[i + 1u], W[i + 2u], W[i + 3u]);
}

// Words i..i+3 for i a multiple of 4 (a word run the format aligns: K-quant headers and quants).
fn wl4a(i: u32) -> vec4<u32> {
    return wl4(i);
}

// Words i..i+7.
fn wl8(i: u32) -> WRun8 {
    return WRun8(wl4(i), wl4(i + 4u));
}

fn wl_head4(o: u32) -> WHead4 {
    return WHead4(W[o], wl4(o + 1u));
}

fn wl_head8(o: u32) -> WHead8 {
    return WHead8(W[o], wl4(o + 1u), wl4(o + 5u));
}
