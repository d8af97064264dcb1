// Eight consecutive weights (or activations) of one row, dequantized to f32.
struct W8 {
    a: vec4<f32>,
    b: vec4<f32>,
}
