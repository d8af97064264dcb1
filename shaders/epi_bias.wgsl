// Linear epilogue: y = acc + bias[n] (Q/K/V biases, gpt-oss's experts'; the same bits as adding
// the bias to the stored product), the bias's values from bias_first(m) of its binding (the
// wfirst file's: one expert's row of stacked biases, or the row of the expert row m names).
@group(0) @binding(SLOT_BIAS) var<storage, read> BIAS: array<f32>;

fn emit(m: u32, n: u32, acc: f32) {
    Y[y_index(m, n)] = acc + BIAS[bias_first(m) + P.n0 + n];
}
