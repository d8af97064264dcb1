// SiLU: g * sigmoid(g).
fn act(g: f32) -> f32 {
    return g / (1.0 + exp(-g));
}
