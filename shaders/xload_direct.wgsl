// Activations read by every invocation itself, through the input functions (`input8`).
fn load_x8(xi: u32, k: u32, s: f32, lane: u32) -> W8 {
    return input8(load_x8_direct(xi), s, k);
}
