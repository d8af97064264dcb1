// Weight format f32: one word per weight, rows padded to whole units (so groups of 8 are two).
fn w_row_words(k: u32) -> u32 {
    return whole_units(k);
}

fn w_elem(rb: u32, k: u32) -> f32 {
    return bitcast<f32>(wl(rb + k));
}

fn w_group(rb: u32, g: u32) -> W8 {
    let o = rb + 8u * g;
    return W8(bitcast<vec4<f32>>(wl4a(o)), bitcast<vec4<f32>>(wl4a(o + 4u)));
}
