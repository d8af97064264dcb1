// Where the weight's rows start for row m0 of x (mixture-of-experts decode, llama.cpp's
// mul_mat_id): at the rows of the expert IDS[m0] names of a stacked weight, w_stride words an
// expert (src/gpu/weights.rs), so each row of x (a token's pair with one of its experts) is
// multiplied by its own expert's rows; and the bias epilogue's values for row m at that
// expert's row of stacked biases, b_stride values an expert (gpt-oss's biased experts). Only
// kernels of one row of x a tile read it.
@group(0) @binding(SLOT_IDS) var<storage, read> IDS: array<u32>;

fn w_first(m0: u32) -> u32 {
    return P.w0 + IDS[min(m0, P.m - 1u)] * P.w_stride;
}

fn bias_first(m: u32) -> u32 {
    return P.b0 + IDS[min(m, P.m - 1u)] * P.b_stride;
}
