// Linear epilogue of a gated weight: y = act(gate) * up, `act` from the act_*.wgsl file composed
// before this one (the same bits as the gated_mul kernel over the two stored products).
fn emit_gated(m: u32, n: u32, gate: f32, up: f32) {
    Y[y_index(m, n)] = act(gate) * up;
}
