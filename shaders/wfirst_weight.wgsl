// Where the weight's rows start in its binding for rows of x from m0: at word w0 (0, or one
// expert's rows of a stacked weight: src/gpu/weights.rs) whatever the row; and where the bias
// epilogue's values start for row m: at b0 (0, or that expert's row of stacked biases).
fn w_first(m0: u32) -> u32 {
    return P.w0;
}

fn bias_first(m: u32) -> u32 {
    return P.b0;
}
