// Cooperative matrices' f16 inputs emulated (coop_mma_emu.wgsl, src/gpu/linear_coop.rs's
// CoopElem::F16 where emulated): activations and dequantized weights rounded to f16 by
// pack2x16float and held in f32, so no shader-f16 is needed.
alias CoopIn = f32;

fn coop_in(v: f32) -> CoopIn {
    return unpack2x16float(pack2x16float(vec2<f32>(v, 0.0))).x;
}
