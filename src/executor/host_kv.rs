//! The wgpu executor's side of the host KV tier: the host slots' bytes and the copies the
//! scheduler plans for each step ([`KvTransfers`]), stores before loads, both before the
//! forward pass.
//!
//! A store's bytes reach their slots a step later: it is copied into a staging buffer ahead
//! of its step and read back at the start of the next one (the step in between waited for
//! the device, so nothing waits here). A slot whose store failed is remembered, and a load
//! from it fails: the scheduler hears of both and recomputes those blocks.

use std::collections::{HashSet, VecDeque};
use std::time::Instant;

use crate::core::host_tier::{BlockCopy, HostSlot, KvTransfers, StepTiming};
use crate::gpu::{GpuContext, GpuError, KvCache, KvStore};

/// What one step's copies did.
#[derive(Debug, Default)]
pub struct CopyOutcome {
    /// Copies that failed: stores (this step's or an earlier one's, found now) and loads.
    pub failed: KvTransfers,
    /// Bytes loaded into the pools and stored from them, and the host time the copies took.
    pub timing: StepTiming,
}

/// Host memory for the tier's blocks, and the stores still on their way.
#[derive(Debug)]
pub struct HostKv {
    block_bytes: usize,
    /// Slot `s` is `bytes[s * block_bytes..][..block_bytes]`; grown as slots are first used.
    bytes: Vec<u8>,
    pending: VecDeque<(KvStore, Vec<BlockCopy>)>,
    /// Slots holding a block's bytes (their last store succeeded).
    filled: HashSet<HostSlot>,
    /// Makes the next store's command buffer invalid (for testing the failure path).
    fail_next_store: bool,
}

impl HostKv {
    /// Empty host memory for blocks of `block_bytes` bytes.
    pub fn new(block_bytes: u64) -> Self {
        Self {
            block_bytes: block_bytes as usize,
            bytes: Vec::new(),
            pending: VecDeque::new(),
            filled: HashSet::new(),
            fail_next_store: false,
        }
    }

    /// Makes the next step with stores fail them for real (their command buffer is invalid).
    pub fn fail_next_store(&mut self) {
        self.fail_next_store = true;
    }

    /// Runs `transfers` on `cache`: finishes earlier stores, starts this step's, then loads.
    /// A failed copy is reported in the outcome; only a lost device is an error.
    pub fn run(
        &mut self,
        ctx: &GpuContext,
        cache: &KvCache,
        transfers: &KvTransfers,
    ) -> Result<CopyOutcome, GpuError> {
        let started = Instant::now();
        let mut outcome = CopyOutcome::default();
        self.finish_stores(ctx, &mut outcome.failed.stores)?;
        let (loads, unheld): (Vec<BlockCopy>, Vec<BlockCopy>) =
            transfers.loads.iter().partition(|copy| self.filled.contains(&copy.slot));
        outcome.failed.loads = unheld;
        let stores: Vec<u32> = transfers.stores.iter().map(|copy| copy.block_id).collect();
        if self.fail_next_store && !stores.is_empty() {
            self.fail_next_store = false;
            ctx.fail_next_submit();
        }
        let (host_bytes, block_bytes) = (&self.bytes, self.block_bytes);
        let blocks: Vec<(u32, &[u8])> = loads
            .iter()
            .map(|copy| (copy.block_id, &host_bytes[copy.slot as usize * block_bytes..][..block_bytes]))
            .collect();
        match ctx.copy_kv_blocks(cache, &stores, &blocks) {
            Ok(store) => {
                if let Some(store) = store {
                    self.pending.push_back((store, transfers.stores.clone()));
                }
                outcome.timing.store_bytes = (stores.len() * self.block_bytes) as u64;
                outcome.timing.load_bytes = (blocks.len() * self.block_bytes) as u64;
            }
            Err(err @ GpuError::DeviceLost(_)) => return Err(err),
            Err(err) => {
                tracing::warn!(error = %err, "copying KV blocks to and from host memory failed");
                for copy in &transfers.stores {
                    self.filled.remove(&copy.slot);
                }
                outcome.failed.stores.extend_from_slice(&transfers.stores);
                outcome.failed.loads.extend(loads);
            }
        }
        if !outcome.failed.is_empty() {
            tracing::warn!(
                stores = outcome.failed.stores.len(),
                loads = outcome.failed.loads.len(),
                "host KV copies failed; their blocks will be recomputed"
            );
        }
        outcome.timing.copy_s = started.elapsed().as_secs_f64();
        Ok(outcome)
    }

    /// Reads every store in flight into its slots (oldest first, so a slot stored twice
    /// keeps the later bytes); a failed one's copies are added to `failed`.
    fn finish_stores(&mut self, ctx: &GpuContext, failed: &mut Vec<BlockCopy>) -> Result<(), GpuError> {
        while let Some((store, copies)) = self.pending.pop_front() {
            match ctx.finish_kv_store(store) {
                Ok(bytes) => {
                    for (copy, block) in copies.iter().zip(bytes.chunks_exact(self.block_bytes)) {
                        let start = copy.slot as usize * self.block_bytes;
                        if self.bytes.len() < start + self.block_bytes {
                            self.bytes.resize(start + self.block_bytes, 0);
                        }
                        self.bytes[start..start + self.block_bytes].copy_from_slice(block);
                        self.filled.insert(copy.slot);
                    }
                }
                Err(err @ GpuError::DeviceLost(_)) => return Err(err),
                Err(err) => {
                    tracing::warn!(error = %err, "reading KV blocks stored to host memory failed");
                    for copy in &copies {
                        self.filled.remove(&copy.slot);
                    }
                    failed.extend(copies);
                }
            }
        }
        Ok(())
    }
}
