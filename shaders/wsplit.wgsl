// Split rows (src/gpu/weights.rs's SplitBlock): every block's QW quant words in order (QW a
// multiple of 4, so block b's quants are the aligned run at word QW b of the row), then every
// block's HW header words in order (its scale d and what its format keeps beside it: see each
// wfmt_*.wgsl), padded to a whole unit; a row has w_k() / block_len blocks.
fn split_row_words(k: u32, block_len: u32, qw: u32, hw: u32) -> u32 {
    let blocks = k / block_len;
    return blocks * qw + whole_units(blocks * hw);
}

// The first header word of block b of the split row at rb.
fn split_header(rb: u32, b: u32, block_len: u32, qw: u32, hw: u32) -> u32 {
    return rb + w_k() / block_len * qw + hw * b;
}

// Words 2 h, 2 h + 1 (h = 0, 1) of a unit.
fn unit_half(u: vec4<u32>, h: u32) -> vec2<u32> {
    return select(u.xy, u.zw, h == 1u);
}

// The two header words of block b of a split row of two header words a block (QW a multiple of 4,
// so the pair is one half of a unit): one load.
fn split_header_pair(rb: u32, b: u32, block_len: u32, qw: u32) -> vec2<u32> {
    let h = split_header(rb, b, block_len, qw, 2u);
    return unit_half(wl4a(h & ~3u), h / 2u % 2u);
}
