//! The batched LoRA product (punica's shrink and expand, as vLLM runs it, in one dispatch):
//! every row of a batch names the slot of its adapter (or [`NO_LORA`]), and the delta
//! `scale · B (A x)` of each target of a group sharing an input (a layer's Q, K and V) is added
//! to the base linear's output row by row. Each value is one fma chain in a fixed order over the
//! row's own adapter, so a row's bits never depend on the other rows' adapters or on the batch.

use super::bind_cache::Binding;
use super::shader::KernelVariant;
use super::shader::params::LoraParams;
use super::shader::slots;
use super::step::Step;
use super::tensor::{Elem, Tensor};
use super::{GpuContext, GpuError};

/// The slot value of a row without an adapter.
pub const NO_LORA: u32 = u32::MAX;

/// Adapters' `A` and `B` matrices resident on the GPU for one group of targets (a layer's
/// projections): `slots` adapters, each with `targets` table entries of four words (the
/// offsets of its `A` `[rank, k]` and `B` `[n, rank]` in the data, its rank, 0 where the
/// adapter leaves the target alone, and the bits of its scale).
#[derive(Debug)]
pub struct LoraBank {
    data: Tensor,
    table: Tensor,
    slots: usize,
    targets: usize,
    slot_floats: usize,
    max_rank: usize,
}

/// One target's matrices of one adapter, as [`LoraBank::write_slot`] takes them.
#[derive(Debug, Clone, Copy)]
pub struct LoraMatrices<'a> {
    /// `[rank, k]`, row-major.
    pub a: &'a [f32],
    /// `[n, rank]`, row-major.
    pub b: &'a [f32],
    /// The rank.
    pub rank: usize,
    /// `alpha / rank` (or rsLoRA's `alpha / √rank`).
    pub scale: f32,
}

impl LoraBank {
    /// The largest rank any slot may hold: the width of the shrunk rows.
    pub fn max_rank(&self) -> usize {
        self.max_rank
    }

    /// Number of adapter slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Writes `slot`'s matrices, one entry per target (`None`: the adapter leaves it alone).
    pub fn write_slot(
        &self,
        ctx: &GpuContext,
        slot: usize,
        targets: &[Option<LoraMatrices<'_>>],
    ) -> Result<(), GpuError> {
        if slot >= self.slots || targets.len() != self.targets {
            return Err(GpuError::Shape(format!(
                "LoRA slot {slot} with {} targets, the bank has {} slots of {} targets",
                targets.len(),
                self.slots,
                self.targets
            )));
        }
        let base = slot * self.slot_floats;
        let mut data = Vec::with_capacity(self.slot_floats);
        let mut table = Vec::with_capacity(4 * self.targets);
        for m in targets {
            match m {
                Some(m) if m.rank > 0 => {
                    if m.rank > self.max_rank {
                        return Err(GpuError::Shape(format!(
                            "LoRA rank {} above the bank's {}",
                            m.rank, self.max_rank
                        )));
                    }
                    table.extend([(base + data.len()) as u32, (base + data.len() + m.a.len()) as u32]);
                    table.extend([m.rank as u32, m.scale.to_bits()]);
                    data.extend_from_slice(m.a);
                    data.extend_from_slice(m.b);
                }
                _ => table.extend([0, 0, 0, 0]),
            }
        }
        if data.len() > self.slot_floats {
            return Err(GpuError::Shape(format!(
                "LoRA slot of {} values, the bank holds {} a slot",
                data.len(),
                self.slot_floats
            )));
        }
        let write = |t: &Tensor, offset: usize, bytes: &[u8]| {
            if !bytes.is_empty() {
                ctx.queue.write_buffer(&t.buffer, 4 * offset as u64, bytes);
            }
        };
        write(&self.data, base, bytemuck::cast_slice(&data));
        write(&self.table, slot * 4 * self.targets, bytemuck::cast_slice(&table));
        Ok(())
    }
}

impl GpuContext {
    /// An empty bank of `slots` adapters over `targets` targets, each slot up to `slot_floats`
    /// values of `A` and `B` and ranks up to `max_rank`.
    pub fn lora_bank(
        &self,
        slots: usize,
        targets: usize,
        slot_floats: usize,
        max_rank: usize,
    ) -> Result<LoraBank, GpuError> {
        let data = self.tensor(Elem::F32, &[slots * slot_floats])?;
        let table = self.tensor(Elem::U32, &[slots * targets * 4])?;
        Ok(LoraBank { data, table, slots, targets, slot_floats, max_rank })
    }
}

/// Where a LoRA product reads and writes: the bank, the row slots `u32 [M]`, and the group of
/// targets (`first`, `first + 1`, ...) that read the same input and write one output's
/// consecutive column ranges, the first `first_width` wide and each other `width` wide.
#[derive(Debug, Clone, Copy)]
pub struct LoraSite<'a> {
    /// The adapters.
    pub bank: &'a LoraBank,
    /// Each row's slot, or [`NO_LORA`].
    pub rows: &'a Tensor,
    /// The group's first target in the bank.
    pub first: usize,
    /// Targets in the group.
    pub count: usize,
    /// Output columns of the first target.
    pub first_width: usize,
    /// Output columns of each later target.
    pub width: usize,
}

impl LoraSite<'_> {
    /// Output columns of the whole group.
    pub fn columns(&self) -> usize {
        self.first_width + (self.count - 1) * self.width
    }
}

impl Step<'_> {
    /// `y[r, col0 + c] += scale · Σ_j t[r, j] · B[c, j]` with `t[r, j] = Σ_k x[r, k] · A[j, k]`
    /// over each target of the group and the adapter of each row `r` (rows without one, and
    /// targets their adapter leaves alone, untouched): one dispatch, one workgroup a row, the
    /// shrunk values in `t: f32 [M, ≥ count · max_rank]`; `x: f32 [M, K]`, `y: f32 [M, W]`.
    pub fn lora_apply(
        &mut self,
        site: LoraSite<'_>,
        x: &Tensor,
        t: &Tensor,
        y: &Tensor,
        col0: usize,
    ) -> Result<(), GpuError> {
        let (m, k) = match *x.shape() {
            [m, k] => (m, k),
            _ => return Err(GpuError::Shape(format!("lora_apply x: {:?} is not 2-D", x.shape()))),
        };
        let width = match *y.shape() {
            [rows, w] if rows == m => w,
            _ => return Err(GpuError::Shape(format!("lora_apply y: {:?} for {m} rows", y.shape()))),
        };
        let n = site.columns();
        if site.count == 0 || site.first + site.count > site.bank.targets || col0 + n > width {
            return Err(GpuError::Shape(format!(
                "lora_apply: targets {}..{} of {}, columns {col0}..{} of {width}",
                site.first,
                site.first + site.count,
                site.bank.targets,
                col0 + n
            )));
        }
        site.rows.expect("lora rows", Elem::U32, &[m])?;
        let ldt = match *t.shape() {
            [rows, ldt] if rows == m && ldt >= site.count * site.bank.max_rank && t.elem() == Elem::F32 => {
                ldt
            }
            _ => {
                return Err(GpuError::Shape(format!(
                    "lora_apply t: {:?} for {m} rows of {} shrunk values",
                    t.shape(),
                    site.count * site.bank.max_rank
                )));
            }
        };
        let u = |v: usize| v as u32;
        let params = LoraParams {
            m: u(m),
            k: u(k),
            n: u(n),
            max_rank: u(site.bank.max_rank),
            ldy: u(width),
            y0: u(col0),
            which: u(site.first),
            targets: u(site.bank.targets),
            count: u(site.count),
            n_first: u(site.first_width),
            ldt: u(ldt),
        };
        let bindings = [
            Binding::tensor(slots::lora_apply::X, x),
            Binding::tensor(slots::lora_apply::T, t),
            Binding::tensor(slots::lora_apply::Y, y),
            Binding::tensor(slots::lora_apply::AB, &site.bank.data),
            Binding::tensor(slots::lora_apply::TABLE, &site.bank.table),
            Binding::tensor(slots::lora_apply::ROWS, site.rows),
        ];
        let grid = self.grid_groups(m);
        if m == 0 || n == 0 {
            return Ok(());
        }
        self.dispatch(KernelVariant::LoraApply, &params, bindings, grid)
    }
}
