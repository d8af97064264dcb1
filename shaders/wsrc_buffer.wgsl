// Weights read from a storage buffer of the layout of src/gpu/weights.rs, seen as 16-byte units
// (every row is whole units, and every run of words a format reads starts on one): a run is one
// 16-byte load per unit, a single word one load of its own. The weight formats read through these
// functions only.
@group(0) @binding(SLOT_W) var<storage, read> W: array<vec4<u32>>;

fn wl(i: u32) -> u32 {
    return W[i / 4u][i % 4u];
}

// Words i..i+3 for i a multiple of 4 (a unit: quants, headers, dense groups).
fn wl4a(i: u32) -> vec4<u32> {
    return W[i / 4u];
}

// Words i..i+7 for i a multiple of 4: two units.
fn wl8a(i: u32) -> WRun8 {
    return WRun8(W[i / 4u], W[i / 4u + 1u]);
}
