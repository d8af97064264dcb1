//! Adapters resident on the GPU: `max_loras` slots of every layer's seven targets (one
//! [`LoraBank`] a layer), the per-row slot list of a step and the shrunk rows' scratch.

use super::{LoraAdapter, LoraError, LoraTarget, QkRows};
use crate::gpu::{
    Elem, GpuContext, GpuError, LORA_GROUP_ROWS, LoraBank, LoraMatrices, Tensor, lora_group_capacity,
    lora_row_groups,
};
use crate::model::architecture::{ModelConfig, interleave_rope_rows};

/// The most targets one shrink computes (Q, K and V, which read the same input).
const SHRUNK_TARGETS: usize = 3;

/// GPU slots for up to `max_loras` adapters of rank up to `max_rank`, for batches of up to
/// `max_tokens` rows.
#[derive(Debug)]
pub struct LoraSlots {
    layers: Vec<LoraBank>,
    /// `u32 [max_tokens]`: each row's slot.
    rows: Tensor,
    /// `f32 [max_tokens, SHRUNK_TARGETS · width]`: the shrunk rows of up to three targets.
    shrunk: Tensor,
    /// `u32 [groups, LORA_GROUP_ROWS]`: the rows' groups (`lora_row_groups`).
    groups: Tensor,
    max_rank: usize,
    /// Whether the model's Q and K rows are in interleaved RoPE order.
    qk_interleaved: bool,
    /// Per slot and layer, the targets its adapter touches (bit `target.index()`).
    touched: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl LoraSlots {
    /// Empty slots for a model of `config` whose Q and K rows are interleaved (`qk_interleaved`,
    /// as [`crate::model::llama::LlamaModel::qk_interleaved`] says).
    pub fn new(
        ctx: &GpuContext,
        config: &ModelConfig,
        qk_interleaved: bool,
        max_loras: usize,
        max_rank: usize,
        max_tokens: usize,
    ) -> Result<Self, GpuError> {
        let slot_floats: usize = LoraTarget::ALL
            .iter()
            .map(|t| {
                let (out, inp) = t.shape(config);
                max_rank * (out + inp)
            })
            .sum();
        let layers = (0..config.num_hidden_layers)
            .map(|_| ctx.lora_bank(max_loras, LoraTarget::ALL.len(), slot_floats, max_rank))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            layers,
            rows: ctx.tensor(Elem::U32, &[max_tokens])?,
            shrunk: ctx.tensor(Elem::F32, &[max_tokens, SHRUNK_TARGETS * max_rank.next_multiple_of(4)])?,
            groups: ctx.tensor(Elem::U32, &[lora_group_capacity(max_tokens, max_loras), LORA_GROUP_ROWS])?,
            max_rank,
            qk_interleaved,
            touched: std::sync::Mutex::new(vec![vec![0; config.num_hidden_layers]; max_loras]),
        })
    }

    /// Number of slots (`--max-loras`).
    pub fn capacity(&self) -> usize {
        self.layers.first().map_or(0, LoraBank::slots)
    }

    /// The largest rank a slot holds (`--max-lora-rank`).
    pub fn max_rank(&self) -> usize {
        self.max_rank
    }

    /// The row slots `u32 [t]` and shrunk rows of a step of `t` rows.
    pub(crate) fn scratch(&self, t: usize) -> Result<(Tensor, Tensor), GpuError> {
        Ok((self.rows.rows(t)?, self.shrunk.rows(t)?))
    }

    /// The groups of a step's rows whose slots are `rows` ([`lora_row_groups`]), flat, and the
    /// view of the groups' buffer they fill.
    pub(crate) fn groups(&self, rows: &[u32]) -> Result<(Vec<u32>, Tensor), GpuError> {
        let groups = lora_row_groups(rows);
        let view = self.groups.rows(groups.len())?;
        Ok((groups.concat(), view))
    }

    /// Layer `layer`'s bank.
    pub(crate) fn layer(&self, layer: usize) -> &LoraBank {
        &self.layers[layer]
    }

    /// Puts `adapter` in `slot` (replacing what was there), its Q and K rows reordered to the
    /// model's.
    pub fn load(
        &self,
        ctx: &GpuContext,
        slot: usize,
        adapter: &LoraAdapter,
        config: &ModelConfig,
    ) -> Result<(), LoraError> {
        adapter.check_rank(self.max_rank)?;
        let gpu = |e: GpuError| LoraError::Read { path: adapter.path.clone(), reason: e.to_string() };
        let reorder = match (adapter.qk_rows, self.qk_interleaved) {
            (QkRows::HuggingFace, true) => true,
            (QkRows::Interleaved, false) => {
                return Err(LoraError::Mismatch {
                    path: adapter.path.clone(),
                    reason: "Q/K rows permuted for interleaved RoPE, the base model rotates halves".into(),
                });
            }
            _ => false,
        };
        for (layer, bank) in self.layers.iter().enumerate() {
            let modules: Vec<_> = adapter.modules.iter().filter(|m| m.layer == layer).collect();
            let mut b_rows: Vec<Option<Vec<f32>>> = vec![None; LoraTarget::ALL.len()];
            for m in &modules {
                let heads = match m.target {
                    LoraTarget::Q => config.num_attention_heads,
                    LoraTarget::K => config.num_key_value_heads,
                    _ => continue,
                };
                if reorder {
                    let rows = interleave_rope_rows(&m.b, heads, config.head_dim).ok_or_else(|| {
                        LoraError::Mismatch {
                            path: adapter.path.clone(),
                            reason: format!(
                                "layer {layer} {}: B rows do not split into heads",
                                m.target.hf_name()
                            ),
                        }
                    })?;
                    b_rows[m.target.index()] = Some(rows);
                }
            }
            let targets: Vec<Option<LoraMatrices<'_>>> = LoraTarget::ALL
                .iter()
                .map(|t| {
                    modules.iter().find(|m| m.target == *t).map(|m| LoraMatrices {
                        a: &m.a,
                        b: b_rows[t.index()].as_deref().unwrap_or(&m.b),
                        rank: m.rank,
                        scale: m.scale,
                    })
                })
                .collect();
            bank.write_slot(ctx, slot, &targets).map_err(gpu)?;
            let mask = modules.iter().fold(0u8, |mask, m| mask | 1 << m.target.index());
            self.touched.lock().unwrap_or_else(|p| p.into_inner())[slot][layer] = mask;
        }
        Ok(())
    }

    /// The targets of layer `layer` that any of `slots` touches (bit `target.index()`).
    pub(crate) fn touched(&self, slots: impl IntoIterator<Item = u32>, layer: usize) -> u8 {
        let touched = self.touched.lock().unwrap_or_else(|p| p.into_inner());
        slots.into_iter().filter_map(|s| touched.get(s as usize)).fold(0, |mask, layers| mask | layers[layer])
    }

    /// Empties `slot`: rows naming it then get no delta.
    pub fn clear(&self, ctx: &GpuContext, slot: usize) -> Result<(), GpuError> {
        let none = vec![None; LoraTarget::ALL.len()];
        self.layers.iter().try_for_each(|bank| bank.write_slot(ctx, slot, &none))?;
        if let Some(layers) = self.touched.lock().unwrap_or_else(|p| p.into_inner()).get_mut(slot) {
            layers.fill(0);
        }
        Ok(())
    }
}
