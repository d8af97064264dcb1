// Eight consecutive weights (or activations) of one row, dequantized to f32.
struct W8 {
    a: vec4<f32>,
    b: vec4<f32>,
}

// One block of 32 consecutive weights of one row (k = 32 b .. 32 b + 31), as four W8 groups.
struct W32 {
    g0: W8,
    g1: W8,
    g2: W8,
    g3: W8,
}
