//! Token ids that stay on the device between steps (async scheduling): a launched step copies
//! each logits row's argmax into a buffer of sampled ids, and the step launched after it
//! copies from there the input ids of tokens that were not known when it was recorded, so no
//! host round trip stands between the two submits.

use crate::gpu::{Elem, GpuError, Step, Tensor};

/// The device's sampled ids and the tokens of a step that read them.
#[derive(Debug, Clone, Copy)]
pub struct IdFeed<'a> {
    /// `u32 [rows]`: the argmax of each logits row of the last step launched, in row order
    /// (the host may overwrite a row with the id it sampled itself before the next submit).
    pub sampled: &'a Tensor,
    /// `(row of the last step, index in this step's input ids)` of each token read from it.
    pub inputs: &'a [(u32, u32)],
}

/// An [`IdFeed`] written into a step: its index pairs uploaded with the step's inputs.
pub(super) struct FedIds {
    sampled: Tensor,
    inputs: Tensor,
    /// Per head tile, `(tile row * k, row)` for each of its rows.
    rows: Vec<Tensor>,
}

impl FedIds {
    /// Uploads `feed`'s pairs into `step` (before its first dispatch) for a batch of `tokens`
    /// tokens whose head tiles hold `tile_rows` rows each and take `k` candidates a row.
    pub(super) fn write(
        step: &mut Step<'_>,
        feed: IdFeed<'_>,
        tokens: usize,
        tile_rows: &[usize],
        k: usize,
    ) -> Result<Self, GpuError> {
        let capacity = feed.sampled.len();
        if let Some(&(row, index)) =
            feed.inputs.iter().find(|&&(row, index)| row as usize >= capacity || index as usize >= tokens)
        {
            return Err(GpuError::Shape(format!(
                "input {index} of {tokens} fed from sampled row {row} of {capacity}"
            )));
        }
        if tile_rows.iter().sum::<usize>() > capacity {
            return Err(GpuError::Shape(format!("more logits rows than the {capacity} sampled ids")));
        }
        let inputs = Self::pairs(step, feed.inputs.iter().flat_map(|&(row, index)| [row, index]).collect())?;
        let mut first = 0;
        let mut rows = Vec::with_capacity(tile_rows.len());
        for &n in tile_rows {
            let pairs = (0..n).flat_map(|r| [(r * k) as u32, (first + r) as u32]).collect();
            rows.push(Self::pairs(step, pairs)?);
            first += n;
        }
        Ok(Self { sampled: feed.sampled.clone(), inputs, rows })
    }

    /// `flat` (pairs, one after another) in a scratch tensor of the step.
    fn pairs(step: &mut Step<'_>, flat: Vec<u32>) -> Result<Tensor, GpuError> {
        let t = step.scratch(Elem::U32, &[flat.len() / 2, 2])?;
        step.write_u32(&t, &flat)?;
        Ok(t)
    }

    /// Copies the fed tokens' ids into the step's input ids.
    pub(super) fn copy_in(&self, step: &mut Step<'_>, ids: &Tensor) -> Result<(), GpuError> {
        step.copy_ids(&self.sampled, &self.inputs, ids)
    }

    /// Copies head tile `tile`'s argmaxes (the first of each row's `k` top ids) into the
    /// sampled ids.
    pub(super) fn copy_out(
        &self,
        step: &mut Step<'_>,
        tile: usize,
        top_ids: &Tensor,
    ) -> Result<(), GpuError> {
        match self.rows.get(tile) {
            Some(pairs) => step.copy_ids(top_ids, pairs, &self.sampled),
            None => Err(GpuError::Shape(format!("head tile {tile} has no sampled-id rows"))),
        }
    }
}
