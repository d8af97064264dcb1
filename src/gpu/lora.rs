//! The batched LoRA product (punica's shrink and expand, as vLLM runs it): every row of a
//! batch names the slot of its adapter (or [`NO_LORA`]), and a target's delta
//! `scale · B (A x)` is added to the base linear's output row by row. Each output is one fma
//! chain in a fixed order over the row's own adapter, so a row's bits never depend on the other
//! rows' adapters or on the batch. Both products take each adapter's rows four at a time
//! ([`lora_row_groups`]) and four columns an invocation, so one load of `A` or `B` serves four
//! rows; one shrink serves a run of targets that read the same input (Q, K and V; gate and up).

use super::bind_cache::Binding;
use super::shader::KernelVariant;
use super::shader::params::LoraParams;
use super::step::Step;
use super::tensor::{Elem, Tensor};
use super::{GpuContext, GpuError};

/// The slot value of a row without an adapter.
pub const NO_LORA: u32 = u32::MAX;

/// Rows a group of [`lora_row_groups`] holds (the grouped kernels' `vec4<u32>`).
pub const LORA_GROUP_ROWS: usize = 4;

/// A group's entry past its last row.
const NO_ROW: u32 = u32::MAX;

/// The rows of a batch whose slots are `slots` in groups of up to [`LORA_GROUP_ROWS`] of one
/// slot (the rows without an adapter a slot of their own), each group's rows ascending, the
/// groups by slot; [`NO_ROW`] fills a group past its last row. At most
/// [`lora_group_capacity`] groups. The grouped kernels read them (`groups` of [`LoraSite`]).
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

/// Adapters' `A` and `B` matrices resident on the GPU for one group of targets (a layer's
/// projections): `slots` adapters, each with `targets` table entries of four words (the
/// offsets of its `A` `[rank, k]` and `B` `[n, rank rounded up to 4]` in the data, its rank, 0
/// where the adapter leaves the target alone, and the bits of its scale). Every `A` and `B`
/// starts on a 16-byte unit (its offset a multiple of 4) and `B`'s columns past the rank are 0,
/// for the grouped kernels' loads.
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
    /// Values a target's shrunk row holds: the largest rank rounded up to 4.
    pub fn width(&self) -> usize {
        self.max_rank.next_multiple_of(4)
    }

    /// Number of adapter slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Number of targets each slot has.
    pub fn targets(&self) -> usize {
        self.targets
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
                    if m.rank > self.max_rank || m.b.len() % m.rank != 0 {
                        return Err(GpuError::Shape(format!(
                            "LoRA rank {} (B of {} values), the bank's up to {}",
                            m.rank,
                            m.b.len(),
                            self.max_rank
                        )));
                    }
                    let rank4 = m.rank.next_multiple_of(4);
                    let a = data.len().next_multiple_of(4);
                    let b = (a + m.a.len()).next_multiple_of(4);
                    table.extend([(base + a) as u32, (base + b) as u32, m.rank as u32, m.scale.to_bits()]);
                    data.resize(a, 0.0);
                    data.extend_from_slice(m.a);
                    data.resize(b, 0.0);
                    for column in m.b.chunks(m.rank) {
                        data.extend_from_slice(column);
                        data.resize(data.len() + rank4 - m.rank, 0.0);
                    }
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
    /// An empty bank of `slots` adapters over `targets` targets whose `A` and `B` together hold
    /// up to `slot_floats` values a slot at rank `max_rank` (more where ranks round up to 4),
    /// ranks up to `max_rank`.
    pub fn lora_bank(
        &self,
        slots: usize,
        targets: usize,
        slot_floats: usize,
        max_rank: usize,
    ) -> Result<LoraBank, GpuError> {
        // `B`'s columns rounded up to 4: a rank r ≤ max_rank pads at most
        // (max_rank rounded up - max_rank) columns of each target's `n` rows, and slot_floats
        // holds max_rank · n for each; then room to start each `A` and `B` on a unit.
        let padding = (max_rank.next_multiple_of(4) - max_rank) * slot_floats.div_ceil(max_rank.max(1));
        let slot_floats = (slot_floats + padding + 6 * targets).next_multiple_of(4);
        let data = self.tensor(Elem::F32, &[slots * slot_floats])?;
        let table = self.tensor(Elem::U32, &[slots * targets * 4])?;
        Ok(LoraBank { data, table, slots, targets, slot_floats, max_rank })
    }
}

/// Where a LoRA product reads and writes: the bank, the row slots `u32 [M]` and their groups.
#[derive(Debug, Clone, Copy)]
pub struct LoraSite<'a> {
    /// The adapters.
    pub bank: &'a LoraBank,
    /// Each row's slot, or [`NO_LORA`].
    pub rows: &'a Tensor,
    /// The rows' [`lora_row_groups`], `u32 [groups, LORA_GROUP_ROWS]`.
    pub groups: &'a Tensor,
}

/// Rows shrunk for a run of the bank's targets: `t: f32 [M, W]` holds target `targets.start +
/// i`'s values in columns `i · width .. (i + 1) · width` ([`LoraBank::width`]), `W` at least
/// `targets.len() · width` and a multiple of 4.
#[derive(Debug, Clone)]
pub struct LoraShrunk<'a> {
    /// The shrunk rows.
    pub t: &'a Tensor,
    /// The bank's targets the run holds, consecutive.
    pub targets: std::ops::Range<usize>,
}

/// Where [`Step::lora_expand`] adds a run of targets' products: side by side in the output
/// from column `col0`, the first target `first` columns wide and each other `rest`.
#[derive(Debug, Clone, Copy)]
pub struct LoraColumns {
    /// The first target's first column.
    pub col0: usize,
    /// The first target's columns.
    pub first: usize,
    /// Each other target's columns.
    pub rest: usize,
}

impl LoraColumns {
    /// One target's `n` columns from `col0`.
    pub fn one(col0: usize, n: usize) -> Self {
        Self { col0, first: n, rest: 0 }
    }
}

impl Step<'_> {
    /// `t[r, i · width + j] = Σ_k x[r, k] · A_i[j, k]` for each target `i` of the run and the
    /// adapter of each row `r` (0 for `j` past its rank and for rows without one); `x: f32 [M,
    /// K]`. Each output one fma chain, `k` ascending: four rows and four columns an invocation
    /// where `K` is a multiple of 4 (`lora_shrink_groups.wgsl`), else one output an invocation;
    /// the same bits either way.
    pub fn lora_shrink(
        &mut self,
        site: LoraSite<'_>,
        x: &Tensor,
        shrunk: &LoraShrunk<'_>,
    ) -> Result<(), GpuError> {
        let (m, k) = match *x.shape() {
            [m, k] => (m, k),
            _ => return Err(GpuError::Shape(format!("lora_shrink x: {:?} is not 2-D", x.shape()))),
        };
        let mut params = self.lora_params(site, m, shrunk, shrunk.targets.start)?;
        params.k = k as u32;
        params.run = shrunk.targets.len() as u32;
        if m == 0 || shrunk.targets.is_empty() {
            return Ok(());
        }
        let invocations = params.run as usize * site.bank.width();
        if k % 4 == 0 {
            let bindings = [
                Binding::tensor("X4", x),
                Binding::tensor("T4", shrunk.t),
                Binding::tensor("AB", &site.bank.data),
                Binding::tensor("TABLE", &site.bank.table),
                Binding::tensor("ROWS", site.rows),
                Binding::tensor("GROUPS", site.groups),
            ];
            let grid =
                self.grid_1d(KernelVariant::LoraShrinkGroups, params.groups as usize * invocations / 4);
            return self.dispatch(KernelVariant::LoraShrinkGroups, &params, bindings, grid);
        }
        let bindings = [
            Binding::tensor("X", x),
            Binding::tensor("T", shrunk.t),
            Binding::tensor("AB", &site.bank.data),
            Binding::tensor("TABLE", &site.bank.table),
            Binding::tensor("ROWS", site.rows),
        ];
        let grid = self.grid_1d(KernelVariant::LoraShrink, m * invocations);
        self.dispatch(KernelVariant::LoraShrink, &params, bindings, grid)
    }

    /// `y[r, col0 + c] += scale · Σ_j t[r, j] · B[c, j]` for each target of `targets` (a run
    /// within `shrunk`'s), its columns `c` and values `t` of the row's in `shrunk`, and the
    /// adapter of each row `r` touching it (other rows untouched); `y: f32 [M, W]`, the targets'
    /// columns side by side as `columns` says. Four rows of an adapter and four columns an
    /// invocation (`lora_expand_groups.wgsl`), each output one fma chain, `j` ascending, the
    /// scale applied last.
    pub fn lora_expand(
        &mut self,
        site: LoraSite<'_>,
        shrunk: &LoraShrunk<'_>,
        targets: std::ops::Range<usize>,
        y: &Tensor,
        columns: LoraColumns,
    ) -> Result<(), GpuError> {
        let (m, width) = match *y.shape() {
            [m, w] => (m, w),
            _ => return Err(GpuError::Shape(format!("lora_expand y: {:?} is not 2-D", y.shape()))),
        };
        let LoraColumns { col0, first, rest } = columns;
        let end = col0 + first + rest * targets.len().saturating_sub(1);
        let inside = targets.start >= shrunk.targets.start && targets.end <= shrunk.targets.end;
        // a run's later targets each need columns: a run with none would drop their products
        let widths = targets.len() == 1 || (first > 0 && rest > 0);
        if end > width || targets.is_empty() || !inside || !widths {
            return Err(GpuError::Shape(format!(
                "lora_expand: columns {col0}..{end} of {width} ({first}, then {rest} a target), targets \
                 {targets:?} of the shrunk {:?}",
                shrunk.targets
            )));
        }
        let mut params = self.lora_params(site, m, shrunk, targets.start)?;
        params.n = first as u32;
        params.n_rest = rest as u32;
        params.run = targets.len() as u32;
        params.t0 = ((targets.start - shrunk.targets.start) * site.bank.width()) as u32;
        params.ldy = width as u32;
        params.y0 = col0 as u32;
        let quads = first.div_ceil(4) + (targets.len() - 1) * rest.div_ceil(4);
        if m == 0 || quads == 0 {
            return Ok(());
        }
        let bindings = [
            Binding::tensor("T4", shrunk.t),
            Binding::tensor("Y", y),
            Binding::tensor("AB", &site.bank.data),
            Binding::tensor("TABLE", &site.bank.table),
            Binding::tensor("ROWS", site.rows),
            Binding::tensor("GROUPS", site.groups),
        ];
        let grid = self.grid_1d(KernelVariant::LoraExpandGroups, params.groups as usize * quads);
        self.dispatch(KernelVariant::LoraExpandGroups, &params, bindings, grid)
    }

    /// The parameters both products share, `which` the first target, after checking the
    /// shapes of the rows, their groups and the shrunk rows.
    fn lora_params(
        &self,
        site: LoraSite<'_>,
        m: usize,
        shrunk: &LoraShrunk<'_>,
        which: usize,
    ) -> Result<LoraParams, GpuError> {
        let bank = site.bank;
        site.rows.expect("lora rows", Elem::U32, &[m])?;
        let groups = match *site.groups.shape() {
            [g, LORA_GROUP_ROWS] if g <= lora_group_capacity(m, bank.slots) => g,
            _ => {
                return Err(GpuError::Shape(format!("lora groups: {:?} for {m} rows", site.groups.shape())));
            }
        };
        let ldt = match *shrunk.t.shape() {
            [rows, ldt]
                if shrunk.t.elem() == Elem::F32
                    && rows == m
                    && ldt % 4 == 0
                    && shrunk.targets.len() * bank.width() <= ldt =>
            {
                ldt
            }
            _ => {
                return Err(GpuError::Shape(format!(
                    "lora shrunk rows: {:?} {:?} for {m} rows of {} targets of {} f32 values",
                    shrunk.t.elem(),
                    shrunk.t.shape(),
                    shrunk.targets.len(),
                    bank.width()
                )));
            }
        };
        if shrunk.targets.end > bank.targets {
            return Err(GpuError::Shape(format!(
                "LoRA targets {:?} of a bank of {}",
                shrunk.targets, bank.targets
            )));
        }
        let u = |v: usize| v as u32;
        Ok(LoraParams {
            m: u(m),
            k: 0,
            n: 0,
            n_rest: 0,
            width: u(bank.width()),
            ldt: u(ldt),
            t0: 0,
            ldy: 0,
            y0: 0,
            which: u(which),
            run: 1,
            targets: u(bank.targets),
            groups: u(groups),
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
