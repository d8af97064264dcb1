// Cooperative matrices' inputs in half precision (src/gpu/linear_coop.rs's CoopElem::F16):
// activations and dequantized weights rounded by shader-f16's conversion.
alias CoopIn = f16;

fn coop_in(v: f32) -> CoopIn {
    return f16(v);
}
