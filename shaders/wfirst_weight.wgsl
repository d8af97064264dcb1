// Where the weight's rows start in its binding for rows of x from m0: at word w0 (0, or one
// expert's rows of a stacked weight: src/gpu/weights.rs) whatever the row.
fn w_first(m0: u32) -> u32 {
    return P.w0;
}
