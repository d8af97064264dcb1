// IQ4_NL's and IQ4_XS's non-linear 4-bit values, and a lookup of four nibbles at once.
var<private> IQ4_VALUES: array<f32, 16> = array<f32, 16>(
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0,
);

// The table values of the four nibbles at `shift` of w.
fn iq4_values(w: u32, shift: u32) -> vec4<f32> {
    let q = vec4<u32>(q4_nibbles(w, shift));
    return vec4<f32>(IQ4_VALUES[q.x], IQ4_VALUES[q.y], IQ4_VALUES[q.z], IQ4_VALUES[q.w]);
}
