// PyTorch's GELU, tanh approximation: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))); tanh is
// 1 in f32 past 15.
fn act(g: f32) -> f32 {
    let inner = clamp(0.7978845608028654 * (g + 0.044715 * g * g * g), -15.0, 15.0);
    return 0.5 * g * (1.0 + tanh(inner));
}
