// Linear epilogue: y += acc (the residual add fused into the projection before it; the same
// bits as adding the stored product).
fn emit(m: u32, n: u32, acc: f32) {
    let i = y_index(m, n);
    Y[i] = Y[i] + acc;
}
