//! A gated MLP on the GPU (a dense layer's or one expert's): its weights and how a step
//! records `act(gate_proj(h)) * up_proj(h)`.

use crate::gpu::{GateActivation, GpuError, LinearInput, Step, Tensor, Weight};

/// One gated MLP's weights (a dense layer's or one expert's).
#[derive(Debug)]
pub(crate) struct GatedMlp {
    pub(crate) gate_up: GateUp,
    pub(crate) down_proj: Weight,
    /// The gate's, up's and down's biases (gpt-oss's experts, kept as [`GateUp::Split`]): its
    /// own `[ff]`, `[ff]` and `[hidden]`, or, for a view of stacked experts, the stack's `[E,
    /// ff]`, `[E, ff]` and `[E, hidden]` (one copy the views share; a linear adds its row).
    pub(crate) biases: Option<Box<[Tensor; 3]>>,
}

/// The MLP's gate and up projections: one gated weight when they share a type, else two; a
/// dense layer loaded for LoRA serving, whose adapters add to each before the activation,
/// stacks them as one plain weight instead (`Stacked`: the gate's rows, then the up's, both
/// outputs in one dispatch).
#[derive(Debug)]
pub(crate) enum GateUp {
    Gated(Weight),
    Split { gate: Weight, up: Weight },
    Stacked(Weight),
}

/// gpt-oss's expert over `rows` (`[n, hidden]`): `out = down(swiglu_clamped(gate(rows) + b_g,
/// up(rows) + b_u)) + b_d`, through `act` (`[n, ff]`) and the gate's and up's outputs `split`.
/// Its biases are its own or its row of the experts' stacked ones; `rows` comes with each row's
/// expert id when routed by id ([`LinearInput::ExpertRows`]): each row then goes through its
/// expert's weights and biases.
pub(crate) fn record_biased_expert(
    step: &mut Step<'_>,
    mlp: &GatedMlp,
    limit: f32,
    (rows, ids): (&Tensor, Option<&Tensor>),
    act: &Tensor,
    split: &[Tensor; 2],
    out: &Tensor,
) -> Result<(), GpuError> {
    let (GateUp::Split { gate, up }, Some([gate_bias, up_bias, down_bias])) =
        (&mlp.gate_up, mlp.biases.as_deref())
    else {
        return Err(GpuError::Shape("a biased expert needs its gate and up apart, with biases".into()));
    };
    let [gate_out, up_out] = split;
    let input = |x| match ids {
        Some(ids) => LinearInput::ExpertRows { x, ids },
        None => LinearInput::Plain(x),
    };
    step.linear_into(input(rows), gate, Some(gate_bias), gate_out, 0)?;
    step.linear_into(input(rows), up, Some(up_bias), up_out, 0)?;
    step.swiglu_clamped(limit, gate_out, up_out, act)?;
    step.linear_into(input(act), &mlp.down_proj, Some(down_bias), out, 0)?;
    Ok(())
}

/// `out = act(gate_proj(h)) * up_proj(h)`; `split` holds the gate's and the up projection's
/// outputs when they are two weights, `stacked` both side by side (`[M, 2 · ff]`) when they
/// are one stacked weight.
pub(crate) fn record_gate_up(
    step: &mut Step<'_>,
    gate_up: &GateUp,
    act: GateActivation,
    h: LinearInput<'_>,
    out: &Tensor,
    (split, stacked): (Option<&[Tensor; 2]>, Option<&Tensor>),
) -> Result<(), GpuError> {
    match (gate_up, split, stacked) {
        (GateUp::Gated(w), ..) => step.linear_gated(h, w, act, out)?,
        (GateUp::Split { gate, up }, Some([gate_out, up_out]), _) => {
            step.linear(h, gate, gate_out)?;
            step.linear(h, up, up_out)?;
            step.gated_mul(act, gate_out, up_out, out)?;
        }
        (GateUp::Stacked(w), _, Some(both)) => {
            step.linear(h, w, both)?;
            step.gated_mul_halves(act, both, out)?;
        }
        (GateUp::Split { .. } | GateUp::Stacked(_), ..) => {
            return Err(GpuError::Shape(
                "a workspace made for another model: no gate/up buffers for this MLP".into(),
            ));
        }
    }
    Ok(())
}
