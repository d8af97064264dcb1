// Weights read from a 2D rgba32uint texture holding the same word stream as the buffer layout
// of src/gpu/weights.rs: word i is component i % 4 of texel i / 4, texels in rows of W_TEXELS.
// A CPU driver fetches a texel for all lanes with one gather where a storage-buffer load walks
// the lanes one by one, so a unit costs one fetch; the words, and so every result, are those of
// wsrc_buffer.wgsl.
@group(0) @binding(SLOT_W) var W: texture_2d<u32>;

fn wtexel(t: u32) -> vec4<u32> {
    return textureLoad(W, vec2<u32>(t % W_TEXELS, t / W_TEXELS), 0);
}

fn wl(i: u32) -> u32 {
    return wtexel(i / 4u)[i % 4u];
}

// Words i..i+3 for i a multiple of 4 (a unit: quants, headers, dense groups): one texel.
fn wl4a(i: u32) -> vec4<u32> {
    return wtexel(i / 4u);
}

// Words i..i+7 for i a multiple of 4: two texels.
fn wl8a(i: u32) -> WRun8 {
    return WRun8(wtexel(i / 4u), wtexel(i / 4u + 1u));
}
