//! The batched LoRA product (punica's shrink and expand, as vLLM runs it): every row of a
//! batch names the slot of its adapter (or [`NO_LORA`]), and a target's delta
//! `scale · B (A x)` is added to the base linear's output row by row. Each output is one fma
//! chain in a fixed order over the row's own adapter, so a row's bits never depend on the other
//! rows' adapters or on the batch. Batches whose shrunk rows fit a uniform buffer (decodes) take
//! an expand that reads each adapter's `B` once for all of that adapter's rows; where `K` is a
//! multiple of 4 the shrink takes each adapter's rows four at a time ([`lora_row_groups`]), so
//! one load of `A` serves four rows.

use super::bind_cache::Binding;
use super::shader::KernelVariant;
use super::shader::params::LoraParams;
use super::step::Step;
use super::tensor::{Elem, Tensor};
use super::{GpuContext, GpuError};

/// The slot value of a row without an adapter.
pub const NO_LORA: u32 = u32::MAX;

/// Shrunk values the uniform scratch holds (`lora_expand_rows.wgsl`'s `T`, 64 KiB: the least
/// uniform binding every WebGPU device takes).
const LORA_UNIFORM_FLOATS: usize = 16384;
/// Rows the uniform scratch holds (`lora_expand_rows.wgsl`'s `ROWS`, 16 KiB).
const LORA_UNIFORM_ROWS: usize = 4096;

/// Output columns an invocation of `lora_expand_rows.wgsl` computes (its `COLS`).
const LORA_EXPAND_COLS: usize = 4;

/// Rows a group of [`lora_row_groups`] holds (`lora_shrink_groups.wgsl`'s `vec4<u32>`).
pub const LORA_GROUP_ROWS: usize = 4;

/// A group's entry past its last row.
const NO_ROW: u32 = u32::MAX;

/// The rows of a batch whose slots are `slots` in groups of up to [`LORA_GROUP_ROWS`] of one
/// slot (the rows without an adapter a slot of their own), each group's rows ascending, the
/// groups by slot; [`NO_ROW`] fills a group past its last row. At most
/// [`lora_group_capacity`] groups. The grouped shrink reads them (`groups` of [`LoraSite`]).
pub fn lora_row_groups(slots: &[u32]) -> Vec<[u32; LORA_GROUP_ROWS]> {
    let mut order: Vec<u32> = (0..slots.len() as u32).collect();
    order.sort_by_key(|&r| slots[r as usize]);
    order
        .chunk_by(|&a, &b| slots[a as usize] == slots[b as usize])
        .flat_map(|run| run.chunks(LORA_GROUP_ROWS))
        .map(|rows| {
            let mut group = [NO_ROW; LORA_GROUP_ROWS];
            group[..rows.len()].copy_from_slice(rows);
            group
        })
        .collect()
}

/// The most groups [`lora_row_groups`] makes of `rows` rows over `slots` slots (and rows
/// without an adapter).
pub fn lora_group_capacity(rows: usize, slots: usize) -> usize {
    rows.div_ceil(LORA_GROUP_ROWS) + slots + 1
}

/// Whether `t` lies in a buffer made by [`GpuContext::lora_uniform_scratch`] of `len` values.
fn in_uniform_scratch(t: &Tensor, len: usize) -> bool {
    t.buffer.usage().contains(wgpu::BufferUsages::UNIFORM) && t.buffer.size() == 4 * len as u64
}

/// Adapters' `A` and `B` matrices resident on the GPU for one group of targets (a layer's
/// projections): `slots` adapters, each with `targets` table entries of four words (the
/// offsets of its `A` `[rank, k]` and `B` `[n, rank]` in the data, its rank, 0 where the
/// adapter leaves the target alone, and the bits of its scale). Every `A` starts on a 16-byte
/// unit (its offset a multiple of 4), for the grouped shrink's loads.
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
        let mut data: Vec<f32> = Vec::with_capacity(self.slot_floats);
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
                    data.resize(data.len().next_multiple_of(4), 0.0);
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
        // Room to start each `A` on a unit, and each slot.
        let slot_floats = (slot_floats + 3 * targets).next_multiple_of(4);
        let data = self.tensor(Elem::F32, &[slots * slot_floats])?;
        let table = self.tensor(Elem::U32, &[slots * targets * 4])?;
        Ok(LoraBank { data, table, slots, targets, slot_floats, max_rank })
    }

    /// The row slots `u32 [4096]` and shrunk rows `f32 [rows, max_rank]` (as many rows as 16384
    /// values hold: 64 KiB, the least uniform binding every WebGPU device takes) of steps small
    /// enough for [`Step::lora_expand`] to read them as uniforms; the shrink writes them as
    /// storage.
    pub fn lora_uniform_scratch(&self, max_rank: usize) -> Result<(Tensor, Tensor), GpuError> {
        let usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::UNIFORM
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST;
        let rows = self.create_buffer("lora rows", 4 * LORA_UNIFORM_ROWS as u64, usage)?;
        let shrunk = self.create_buffer("lora shrunk", 4 * LORA_UNIFORM_FLOATS as u64, usage)?;
        let shrunk_rows = LORA_UNIFORM_FLOATS / max_rank.max(1);
        Ok((
            Tensor::from_buffer(rows, &[LORA_UNIFORM_ROWS], Elem::U32),
            Tensor::from_buffer(shrunk, &[shrunk_rows, max_rank], Elem::F32),
        ))
    }
}

/// Where a LoRA product reads and writes: the bank, the row slots `u32 [M]` and their groups,
/// the target.
#[derive(Debug, Clone, Copy)]
pub struct LoraSite<'a> {
    /// The adapters.
    pub bank: &'a LoraBank,
    /// Each row's slot, or [`NO_LORA`].
    pub rows: &'a Tensor,
    /// The rows' [`lora_row_groups`], `u32 [groups, LORA_GROUP_ROWS]` (the shrink's where `K`
    /// is a multiple of 4).
    pub groups: &'a Tensor,
    /// Which of the bank's targets.
    pub target: usize,
}

impl Step<'_> {
    /// `t[r, j] = Σ_k x[r, k] · A[j, k]` for the adapter of each row `r` (0 for `j` past its
    /// rank and for rows without one); `x: f32 [M, K]`, `t: f32 [M, max_rank]`. Each output
    /// one fma chain, `k` ascending: over the rows' groups four rows and four columns an
    /// invocation where `K` is a multiple of 4 (`lora_shrink_groups.wgsl`), else one output an
    /// invocation; the same bits either way.
    pub fn lora_shrink(&mut self, site: LoraSite<'_>, x: &Tensor, t: &Tensor) -> Result<(), GpuError> {
        let (m, k) = match *x.shape() {
            [m, k] => (m, k),
            _ => return Err(GpuError::Shape(format!("lora_shrink x: {:?} is not 2-D", x.shape()))),
        };
        let r = site.bank.max_rank;
        t.expect("lora_shrink t", Elem::F32, &[m, r])?;
        let groups = match *site.groups.shape() {
            [g, LORA_GROUP_ROWS] if g <= lora_group_capacity(m, site.bank.slots) => g,
            _ => {
                return Err(GpuError::Shape(format!(
                    "lora_shrink groups: {:?} for {m} rows",
                    site.groups.shape()
                )));
            }
        };
        let mut params = self.lora_params(site, m, k, 0, 0, 0)?;
        if m == 0 {
            return Ok(());
        }
        if k % 4 == 0 {
            params.groups = groups as u32;
            let bindings = [
                Binding::tensor("X4", x),
                Binding::tensor("T", t),
                Binding::tensor("AB", &site.bank.data),
                Binding::tensor("TABLE", &site.bank.table),
                Binding::tensor("ROWS", site.rows),
                Binding::tensor("GROUPS", site.groups),
            ];
            let grid = self.grid_1d(KernelVariant::LoraShrinkGroups, groups * r.div_ceil(4));
            return self.dispatch(KernelVariant::LoraShrinkGroups, &params, bindings, grid);
        }
        let bindings = [
            Binding::tensor("X", x),
            Binding::tensor("T", t),
            Binding::tensor("AB", &site.bank.data),
            Binding::tensor("TABLE", &site.bank.table),
            Binding::tensor("ROWS", site.rows),
        ];
        let grid = self.grid_1d(KernelVariant::LoraShrink, m * r);
        self.dispatch(KernelVariant::LoraShrink, &params, bindings, grid)
    }

    /// `y[r, col0 + c] += scale · Σ_j t[r, j] · B[c, j]` for `c < n` and the adapter of each row
    /// `r` touching the target (other rows untouched); `t: f32 [M, max_rank]`, `y: f32 [M, W]`.
    /// Where `t` and the rows lie in [`GpuContext::lora_uniform_scratch`], one invocation adds
    /// a column into every row of its adapter (`lora_expand_rows.wgsl`), else one an output;
    /// the same bits either way.
    pub fn lora_expand(
        &mut self,
        site: LoraSite<'_>,
        t: &Tensor,
        y: &Tensor,
        col0: usize,
        n: usize,
    ) -> Result<(), GpuError> {
        let (m, width) = match *y.shape() {
            [m, w] => (m, w),
            _ => return Err(GpuError::Shape(format!("lora_expand y: {:?} is not 2-D", y.shape()))),
        };
        if col0 + n > width {
            return Err(GpuError::Shape(format!("lora_expand: columns {col0}..{} of {width}", col0 + n)));
        }
        t.expect("lora_expand t", Elem::F32, &[m, site.bank.max_rank])?;
        let params = self.lora_params(site, m, 0, n, width, col0)?;
        let bindings = [
            Binding::tensor("T", t),
            Binding::tensor("Y", y),
            Binding::tensor("AB", &site.bank.data),
            Binding::tensor("TABLE", &site.bank.table),
            Binding::tensor("ROWS", site.rows),
        ];
        if m == 0 || n == 0 {
            return Ok(());
        }
        let max_groups = self.ctx.capabilities().limits.max_compute_workgroups_per_dimension as usize;
        let columns = n.div_ceil(LORA_EXPAND_COLS * KernelVariant::LoraExpandRows.workgroup_size() as usize);
        if in_uniform_scratch(t, LORA_UNIFORM_FLOATS)
            && in_uniform_scratch(site.rows, LORA_UNIFORM_ROWS)
            && columns.max(site.bank.slots) <= max_groups
        {
            let grid = [columns as u32, site.bank.slots as u32, 1];
            return self.dispatch(KernelVariant::LoraExpandRows, &params, bindings, grid);
        }
        let grid = self.grid_1d(KernelVariant::LoraExpand, m * n);
        self.dispatch(KernelVariant::LoraExpand, &params, bindings, grid)
    }

    fn lora_params(
        &self,
        site: LoraSite<'_>,
        m: usize,
        k: usize,
        n: usize,
        ldy: usize,
        y0: usize,
    ) -> Result<LoraParams, GpuError> {
        site.rows.expect("lora rows", Elem::U32, &[m])?;
        if site.target >= site.bank.targets {
            return Err(GpuError::Shape(format!(
                "LoRA target {} of a bank of {}",
                site.target, site.bank.targets
            )));
        }
        let u = |v: usize| v as u32;
        Ok(LoraParams {
            m: u(m),
            k: u(k),
            n: u(n),
            max_rank: u(site.bank.max_rank),
            ldy: u(ldy),
            y0: u(y0),
            which: u(site.target),
            targets: u(site.bank.targets),
            groups: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{NO_LORA, NO_ROW, lora_group_capacity, lora_row_groups};

    #[test]
    fn row_groups_hold_up_to_four_rows_of_one_slot_by_slot() {
        let slots = [2, NO_LORA, 0, 2, 2, 0, 2, 2, NO_LORA];
        let groups = lora_row_groups(&slots);
        let none = NO_ROW;
        assert_eq!(groups, [[2, 5, none, none], [0, 3, 4, 6], [7, none, none, none], [1, 8, none, none]]);
        assert!(groups.len() <= lora_group_capacity(slots.len(), 3));
        assert_eq!(lora_row_groups(&[]), Vec::<[u32; 4]>::new());
    }
}
