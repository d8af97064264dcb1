// Weight format f16: two weights per word (low half first), rows padded to whole units
// (so a group of 8 is one).
fn w_row_words(k: u32) -> u32 {
    return whole_units((k + 1u) / 2u);
}

fn w_elem(rb: u32, k: u32) -> f32 {
    return unpack2x16float(wl(rb + k / 2u))[k % 2u];
}

fn w_group(rb: u32, g: u32) -> W8 {
    let o = rb + 4u * g;
    let q = wl4a(o);
    let p0 = unpack2x16float(q.x);
    let p1 = unpack2x16float(q.y);
    let p2 = unpack2x16float(q.z);
    let p3 = unpack2x16float(q.w);
    return W8(vec4<f32>(p0, p1), vec4<f32>(p2, p3));
}
