// Weights read from a 2D rgba32uint texture holding the same word stream as the buffer layout
// of src/gpu/weights.rs: word i is component i % 4 of texel i / 4, texels in rows of W_TEXELS.
// A CPU driver fetches a texel for all lanes with one gather where a storage-buffer load walks
// the lanes one by one, so a run of words costs one or two fetches; the words, and so every
// result, are those of wsrc_buffer.wgsl.
@group(0) @binding(SLOT_W) var W: texture_2d<u32>;

fn wtexel(t: u32) -> vec4<u32> {
    return textureLoad(W, vec2<u32>(t % W_TEXELS, t / W_TEXELS), 0);
}

// Words s..s+3 (s = 0..4) of the eight words of texels a then b.
fn wshift(a: vec4<u32>, b: vec4<u32>, s: u32) -> vec4<u32> {
    var r = b;
    r = select(r, vec4<u32>(a.w, b.x, b.y, b.z), s == 3u);
    r = select(r, vec4<u32>(a.z, a.w, b.x, b.y), s == 2u);
    r = select(r, vec4<u32>(a.y, a.z, a.w, b.x), s == 1u);
    return select(r, a, s == 0u);
}

fn wl(i: u32) -> u32 {
    return wtexel(i / 4u)[i % 4u];
}

// Words i..i+3.
fn wl4(i: u32) -> vec4<u32> {
    let t = i / 4u;
    return wshift(wtexel(t), wtexel(t + 1u), i % 4u);
}

// Words i..i+3 for i a multiple of 4 (a word run the format aligns: quants, K-quant headers,
// dense groups): one texel.
fn wl4a(i: u32) -> vec4<u32> {
    return wtexel(i / 4u);
}

// Words i..i+7: three texels.
fn wl8(i: u32) -> WRun8 {
    let t = i / 4u;
    let b = wtexel(t + 1u);
    return WRun8(wshift(wtexel(t), b, i % 4u), wshift(b, wtexel(t + 2u), i % 4u));
}

// Words i..i+7 for i a multiple of 4: two texels.
fn wl8a(i: u32) -> WRun8 {
    return WRun8(wtexel(i / 4u), wtexel(i / 4u + 1u));
}
