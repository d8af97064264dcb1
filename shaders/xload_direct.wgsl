// Activations read by every invocation itself.
fn load_x8(xr: u32, lane: u32) -> W8 {
    return load_x8_direct(xr);
}
