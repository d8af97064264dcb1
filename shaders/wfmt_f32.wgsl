// Weight format f32: one word per weight, rows of K words.
fn w_row_words(k: u32) -> u32 {
    return k;
}

fn w_elem(rb: u32, k: u32) -> f32 {
    return bitcast<f32>(wl(rb + k));
}

fn w_group(rb: u32, g: u32) -> W8 {
    let o = rb + 8u * g;
    return W8(bitcast<vec4<f32>>(wl4(o)), bitcast<vec4<f32>>(wl4(o + 4u)));
}
