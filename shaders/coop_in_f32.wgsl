// Cooperative matrices' inputs in single precision (src/gpu/linear_coop.rs's CoopElem::F32):
// activations and dequantized weights as they are.
alias CoopIn = f32;

fn coop_in(v: f32) -> CoopIn {
    return v;
}
