//! Draft-model speculation's executor side: a second, smaller model with the target's
//! vocabulary that follows every step the target computes (its own paged KV cache, indexed
//! by the same block ids, so the scheduler's block accounting counts, preempts and frees its
//! KV with the request's) and then proposes each sampling request's next tokens greedily,
//! one single-token pass per proposed position.

use std::path::Path;

use super::ExecutorError;
use crate::gpu::{GpuContext, KvCache, KvCacheShape, KvPrecision};
use crate::ids::TokenId;
use crate::model::ModelFiles;
use crate::model::llama::{ForwardBatch, LlamaModel, Workspace, WorkspaceLimits};

/// The draft model, its KV cache and its step workspace.
pub struct DraftModel {
    model: LlamaModel,
    workspace: Workspace,
    cache: KvCache,
    block_size: usize,
}

/// One sequence the draft proposes for: its last token (sampled by the target, not yet
/// computed) at `position`, and its block table, which covers `position + num_proposals - 1`.
#[derive(Debug, Clone)]
pub struct DraftSeq<'a> {
    /// The token the proposals follow.
    pub token: TokenId,
    /// Its position.
    pub position: usize,
    /// How many tokens to propose.
    pub num_proposals: usize,
    /// The sequence's blocks.
    pub block_ids: &'a [u32],
}

fn draft_error(what: impl std::fmt::Display) -> ExecutorError {
    ExecutorError::DraftModel(what.to_string())
}

impl DraftModel {
    /// Opens the draft model's files at `path`, refusing one whose vocabulary size is not
    /// `target_vocab_size`.
    pub fn open(path: &Path, target_vocab_size: usize) -> Result<ModelFiles, ExecutorError> {
        let files =
            ModelFiles::open(path).map_err(|e| draft_error(format!("opening {}: {e}", path.display())))?;
        let vocab_size = files.config.vocab_size;
        if vocab_size != target_vocab_size {
            return Err(draft_error(format!(
                "{} has a vocabulary of {vocab_size} tokens, the model {target_vocab_size}: a draft model must share the model's vocabulary",
                path.display()
            )));
        }
        Ok(files)
    }

    /// Loads `files` on `ctx` with a KV cache of `shape.num_blocks` blocks of
    /// `shape.block_size` tokens (its own layers and heads) and a workspace for `limits`.
    pub fn load(
        ctx: &GpuContext,
        files: &ModelFiles,
        shape: KvCacheShape,
        precision: KvPrecision,
        limits: WorkspaceLimits,
        max_model_len: usize,
        progress: bool,
    ) -> Result<Self, ExecutorError> {
        let model = LlamaModel::load_for_context(ctx, files, max_model_len, progress).map_err(draft_error)?;
        let c = model.config();
        let shape = KvCacheShape {
            num_layers: c.num_hidden_layers,
            num_kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            ..shape
        };
        let cache = ctx.kv_cache(shape, precision).map_err(draft_error)?;
        let workspace = Workspace::new(ctx, &model, limits).map_err(draft_error)?;
        Ok(Self { model, workspace, cache, block_size: shape.block_size })
    }

    /// Computes the draft's KV for the tokens of `batch` (the step the target runs), so its
    /// cache holds every position the target's does.
    pub fn follow(&self, ctx: &GpuContext, batch: &ForwardBatch) -> Result<(), ExecutorError> {
        // The LM head on one row per sequence: the forward pass needs some; none is read.
        let last_rows = batch.query_start_loc[1..].iter().map(|&end| end - 1).collect();
        let batch = ForwardBatch { logits_indices: last_rows, ..batch.clone() };
        self.model.forward(ctx, &self.workspace, &self.cache, &batch, 1, false).map_err(draft_error)?;
        Ok(())
    }

    /// Each sequence's proposals: its draft model's argmax after its token, then after each
    /// proposal, `num_proposals` of them (a pass over every sequence still proposing per
    /// position, writing the draft's KV at `position..position + num_proposals - 1`).
    pub fn propose(
        &self,
        ctx: &GpuContext,
        seqs: &[DraftSeq<'_>],
    ) -> Result<Vec<Vec<TokenId>>, ExecutorError> {
        let mb = self.workspace.limits().max_blocks_per_seq;
        let bs = self.block_size;
        let mut proposals: Vec<Vec<TokenId>> =
            seqs.iter().map(|s| Vec::with_capacity(s.num_proposals)).collect();
        let rounds = seqs.iter().map(|s| s.num_proposals).max().unwrap_or(0);
        for round in 0..rounds {
            let mut batch = ForwardBatch { query_start_loc: vec![0], ..Default::default() };
            let mut members = Vec::new();
            for (i, s) in seqs.iter().enumerate().filter(|(_, s)| s.num_proposals > round) {
                let pos = s.position + round;
                let block = *s.block_ids.get(pos / bs).ok_or_else(|| {
                    ExecutorError::InvalidBatch(format!(
                        "draft position {pos} past its {} blocks",
                        s.block_ids.len()
                    ))
                })?;
                batch.input_ids.push(if round == 0 { s.token } else { proposals[i][round - 1] });
                batch.positions.push(pos as u32);
                batch.slot_mapping.push(block * bs as u32 + (pos % bs) as u32);
                batch.logits_indices.push(members.len() as u32);
                batch.query_start_loc.push(members.len() as u32 + 1);
                batch.seq_lens.push(pos as u32 + 1);
                batch.block_table.extend_from_slice(s.block_ids);
                batch.block_table.resize(batch.block_table.len() + mb - s.block_ids.len(), 0);
                members.push(i);
            }
            let out = self
                .model
                .forward(ctx, &self.workspace, &self.cache, &batch, 1, false)
                .map_err(draft_error)?;
            for (row, &i) in members.iter().enumerate() {
                proposals[i].push(out.top_ids[row * out.k]);
            }
        }
        Ok(proposals)
    }
}
