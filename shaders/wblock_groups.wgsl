
// Dense formats: a block of 32 weights is just its four groups of 8.
fn w_block(rb: u32, b: u32) -> W32 {
    return W32(w_group(rb, 4u * b), w_group(rb, 4u * b + 1u), w_group(rb, 4u * b + 2u), w_group(rb, 4u * b + 3u));
}
