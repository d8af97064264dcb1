// Linear input as stored: x itself (the row scale is unused).
fn row_scale(xr: u32, t: u32) -> f32 {
    return 1.0;
}

fn input8(x: W8, s: f32, k: u32) -> W8 {
    return x;
}

fn input1(x: f32, s: f32, k: u32) -> f32 {
    return x;
}
