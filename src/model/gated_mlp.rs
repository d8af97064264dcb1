//! A gated MLP on the GPU (a dense layer's or one expert's): its weights and how a step
//! records `act(gate_proj(h)) * up_proj(h)`.

use crate::gpu::{GateActivation, GpuError, LinearInput, Step, Tensor, Weight};

/// One gated MLP's weights (a dense layer's or one expert's).
#[derive(Debug)]
pub(crate) struct GatedMlp {
    pub(crate) gate_up: GateUp,
    pub(crate) down_proj: Weight,
}

/// The MLP's gate and up projections: one gated weight when they share a type, else two.
#[derive(Debug)]
pub(crate) enum GateUp {
    Gated(Weight),
    Split { gate: Weight, up: Weight },
}

/// `out = act(gate_proj(h)) * up_proj(h)`; `split` holds the gate's and the up projection's
/// outputs when they are two weights.
pub(crate) fn record_gate_up(
    step: &mut Step<'_>,
    gate_up: &GateUp,
    act: GateActivation,
    h: LinearInput<'_>,
    out: &Tensor,
    split: Option<&[Tensor; 2]>,
) -> Result<(), GpuError> {
    match (gate_up, split) {
        (GateUp::Gated(w), _) => step.linear_gated(h, w, act, out)?,
        (GateUp::Split { gate, up }, Some([gate_out, up_out])) => {
            step.linear(h, gate, gate_out)?;
            step.linear(h, up, up_out)?;
            step.gated_mul(act, gate_out, up_out, out)?;
        }
        (GateUp::Split { .. }, None) => {
            return Err(GpuError::Shape(
                "a workspace made for another model: no gate/up buffers for this split MLP".into(),
            ));
        }
    }
    Ok(())
}
