// Weight format f32: one word per weight, rows of K words.
fn w_row_words(k: u32) -> u32 {
    return k;
}

fn w_elem(rb: u32, k: u32) -> f32 {
    return bitcast<f32>(W[rb + k]);
}

fn w_group(rb: u32, g: u32) -> W8 {
    let o = rb + 8u * g;
    return W8(
        vec4<f32>(bitcast<f32>(W[o]), bitcast<f32>(W[o + 1u]), bitcast<f32>(W[o + 2u]), bitcast<f32>(W[o + 3u])),
        vec4<f32>(bitcast<f32>(W[o + 4u]), bitcast<f32>(W[o + 5u]), bitcast<f32>(W[o + 6u]), bitcast<f32>(W[o + 7u])),
    );
}
