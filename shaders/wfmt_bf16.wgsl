// Weight format bf16: two weights per word (low half first), rows padded to whole units
// (so a group of 8 is one).
fn w_row_words(k: u32) -> u32 {
    return whole_units((k + 1u) / 2u);
}

fn bf16_pair(w: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u));
}

fn w_elem(rb: u32, k: u32) -> f32 {
    return bf16_pair(wl(rb + k / 2u))[k % 2u];
}

fn w_group(rb: u32, g: u32) -> W8 {
    let o = rb + 4u * g;
    let q = wl4a(o);
    return W8(vec4<f32>(bf16_pair(q.x), bf16_pair(q.y)), vec4<f32>(bf16_pair(q.z), bf16_pair(q.w)));
}
