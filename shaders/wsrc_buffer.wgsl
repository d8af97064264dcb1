// Weights read from a storage buffer of the layout of src/gpu/weights.rs, seen as 16-byte units
// (the buffer is padded to whole units): a word run the format aligns is one 16-byte load, any
// other word one load of its own. The weight formats read through these functions only.
@group(0) @binding(SLOT_W) var<storage, read> W: array<vec4<u32>>;

fn wl(i: u32) -> u32 {
    return W[i / 4u][i % 4u];
}

// Words i..i+3.
fn wl4(i: u32) -> vec4<u32> {
    return vec4<u32>(wl(i), wl(i + 1u), wl(i + 2u), wl(i + 3u));
}

// Words i..i+3 for i a multiple of 4 (a word run the format aligns: quants, K-quant headers,
// dense groups).
fn wl4a(i: u32) -> vec4<u32> {
    return W[i / 4u];
}

// Words i..i+7.
fn wl8(i: u32) -> WRun8 {
    return WRun8(wl4(i), wl4(i + 4u));
}

// Words i..i+7 for i a multiple of 4: two units.
fn wl8a(i: u32) -> WRun8 {
    return WRun8(W[i / 4u], W[i / 4u + 1u]);
}
