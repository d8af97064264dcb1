// Linear epilogue: y = acc + bias[n] (Q/K/V biases; the same bits as adding the bias to the
// stored product).
@group(0) @binding(SLOT_BIAS) var<storage, read> BIAS: array<f32>;

fn emit(m: u32, n: u32, acc: f32) {
    Y[y_index(m, n)] = acc + BIAS[P.n0 + n];
}
