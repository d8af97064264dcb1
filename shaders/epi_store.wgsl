// Linear epilogue: y = acc.
fn emit(m: u32, n: u32, acc: f32) {
    Y[y_index(m, n)] = acc;
}
