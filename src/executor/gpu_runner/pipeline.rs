//! The wgpu executor's step pipeline (async scheduling): a step is recorded while the one
//! before it runs, and read back and sampled afterwards.
//!
//! A token the step in flight samples is unknown when the next step is recorded: the
//! request's tokens hold [`PENDING`] there until the step is collected, and the next step
//! copies its input id on the device from the sampled ids (one a logits row of the step in
//! flight). Where that step samples it on the device (a plain greedy pick: the argmax of its
//! row, which the step leaves there), the next step is submitted at once and nothing waits.
//! Where the host samples it (seeded or temperature sampling, logprobs, penalties, biases,
//! `min_tokens` masks), the next step is recorded and held: once the step in flight is
//! collected and sampled, the ids it sampled are written over its rows of the sampled ids and
//! the held step is submitted, so only that write stands between the two submits. A step that
//! cannot run behind the one in flight (prompt logprobs, whose rows are scored after the step
//! from the activations the next step would overwrite; host KV copies; a request resumed or
//! reading a token another way; a mixture of experts' step too big to route by id on the
//! device, which reads the router's choices back mid-step) collects the steps in flight first,
//! and is recorded from known tokens as in the serial loop.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use super::{Forwarded, WgpuExecutor, device, from_llama};
use crate::core::host_tier::StepTiming;
use crate::core::output::{ModelRunnerOutput, SchedulerOutput};
use crate::executor::{ExecutorError, StepMasks, StepPipeline};
use crate::gpu::{Elem, GpuContext, Tensor};
use crate::ids::{RequestId, TokenId};
use crate::model::fed_ids::IdFeed;
use crate::model::llama::{ForwardBatch, ForwardHeld, ForwardInFlight, Launch, LoraRows, WorkspaceLimits};
use crate::structured::TokenMask;

/// Stands in a request's tokens for the one a step in flight samples, until it is collected.
const PENDING: TokenId = TokenId::MAX;

/// A position a launched step samples.
#[derive(Debug, Clone, Copy)]
struct Sample {
    req_id: RequestId,
    /// Where the sampled token goes in the request's tokens.
    position: usize,
    /// Its logits row in the step.
    row: u32,
    /// True when the pick is the row's argmax, which the step leaves in the device's sampled ids.
    on_device: bool,
}

/// How a launched step was handed to the device.
enum Launched {
    /// Submitted.
    Running(ForwardInFlight),
    /// Recorded and held: it reads tokens the step before it samples on the host, and is
    /// submitted once they are written.
    Held(ForwardHeld),
}

/// A step launched and not collected.
struct Flight {
    forward: Launched,
    forwarded: Forwarded,
    masks: HashMap<RequestId, Vec<TokenMask>>,
    samples: Vec<Sample>,
    /// Requests that finished after it was launched: their states go once it is sampled.
    retired: Vec<RequestId>,
}

/// A step's output and what it took.
type Finished = (Result<ModelRunnerOutput, ExecutorError>, Option<StepTiming>);

/// A launched step: running, or collected ahead of its turn.
enum Slot {
    Flight(Box<Flight>),
    Done(Box<Finished>),
}

/// The steps launched and not collected, oldest first, and the device's sampled ids.
pub(super) struct GpuPipeline {
    /// `u32 [max_logits_rows]`: the argmax of each logits row of the last step launched.
    sampled: Tensor,
    slots: VecDeque<Slot>,
    /// The most tokens a step runs behind others with (a mixture of experts' bigger steps
    /// read the router's choices back mid-step: `LlamaModel::whole_step_tokens`).
    whole_step_tokens: usize,
}

impl GpuPipeline {
    /// True when `executor` can run steps ahead: not a mixture-of-experts model whose steps
    /// all read the router's choices back mid-step (its experts not routed by id on the
    /// device: `LlamaModel::whole_step_tokens`), no draft model (it proposes from each step
    /// read back, with steps of its own) and no kernel timing (its queries are read per
    /// step), unless `PAGODA_PIPELINE=off` keeps the serial step (for A/B runs). LoRA adapters
    /// ride along (a slot loaded for the next step is written in queue order, after the step
    /// in flight); n-gram speculation never runs ahead (the scheduler proposes from known
    /// tokens only).
    pub(super) fn fits(executor: &WgpuExecutor) -> bool {
        let off = std::env::var("PAGODA_PIPELINE").is_ok_and(|v| v.trim().eq_ignore_ascii_case("off"));
        !off && executor.model.whole_step_tokens().is_some()
            && executor.draft.is_none()
            && executor.ctx.kernel_times().is_none()
    }

    /// An empty pipeline with sampled ids for `limits.max_logits_rows` rows, running steps of
    /// at most `whole_step_tokens` tokens behind others.
    pub(super) fn new(
        ctx: &GpuContext,
        limits: WorkspaceLimits,
        whole_step_tokens: usize,
    ) -> Result<Self, ExecutorError> {
        let sampled = ctx
            .tensor(Elem::U32, &[limits.max_logits_rows])
            .map_err(|e| device(e, "allocating the sampled ids"))?;
        Ok(Self { sampled, slots: VecDeque::new(), whole_step_tokens })
    }

    /// The last step launched that is still running.
    fn latest_flight(&self) -> Option<&Flight> {
        self.slots.iter().rev().find_map(|slot| match slot {
            Slot::Flight(flight) => Some(flight.as_ref()),
            Slot::Done(_) => None,
        })
    }

    fn flights(&self) -> impl Iterator<Item = &Flight> {
        self.slots.iter().filter_map(|slot| match slot {
            Slot::Flight(flight) => Some(flight.as_ref()),
            Slot::Done(_) => None,
        })
    }

    /// True when `next` cannot be recorded behind the steps in flight: a step is held (its
    /// parameters wait for its submit), it is a mixture of experts' step that reads the
    /// router's choices back mid-step (more than `whole_step_tokens`), it copies KV blocks to
    /// or from the host, a step in
    /// flight scores prompt rows (after it runs, from the activations the next step would
    /// overwrite), or one of its requests reads a token a step in flight samples other than
    /// exactly as its next input of the last step launched.
    fn must_settle_before(&self, next: &SchedulerOutput) -> bool {
        let Some(latest) = self.latest_flight() else {
            return false;
        };
        if self.flights().any(|f| matches!(f.forward, Launched::Held(_)))
            || next.total_num_scheduled_tokens > self.whole_step_tokens
            || !next.kv_transfers.is_empty()
            || self.flights().any(|f| !f.forwarded.scored.rows.is_empty())
        {
            return true;
        }
        let mut pending: HashMap<RequestId, Vec<(Sample, bool)>> = HashMap::new();
        for flight in self.flights() {
            let is_latest = std::ptr::eq(flight, latest);
            for sample in &flight.samples {
                pending.entry(sample.req_id).or_default().push((*sample, is_latest));
            }
        }
        next.scheduled_cached_reqs.iter().any(|r| {
            let Some(samples) = pending.get(&r.req_id) else {
                return false;
            };
            let n = next.num_scheduled_tokens.get(&r.req_id).copied().unwrap_or(0);
            match samples.as_slice() {
                [(sample, true)] if !r.resumed_from_preemption => {
                    !(r.num_computed_tokens <= sample.position
                        && r.num_computed_tokens + n == sample.position + 1)
                }
                _ => true,
            }
        })
    }
}

impl WgpuExecutor {
    /// Builds the pipeline's kernels (the sampled ids copied in and out) before the first
    /// request, with a one-token step on the null block.
    pub(super) fn warm_up_pipeline(&self) -> Result<(), ExecutorError> {
        let Some(pipeline) = &self.pipeline else {
            return Ok(());
        };
        let batch = ForwardBatch {
            input_ids: vec![0],
            positions: vec![0],
            slot_mapping: vec![0],
            query_start_loc: vec![0, 1],
            seq_lens: vec![1],
            block_table: vec![0; self.workspace.limits().max_blocks_per_seq],
            logits_indices: vec![0],
        };
        let feed = IdFeed { sampled: &pipeline.sampled, inputs: &[(0, 0)] };
        let launch = Launch { top_k: 1, full_logits: false, feed, lora: None };
        self.model
            .forward_launch(&self.ctx, &self.workspace, &self.cache, &batch, launch)
            .and_then(|flight| flight.wait(&self.ctx))
            .map_err(from_llama)?;
        Ok(())
    }

    /// The pipeline, which [`StepPipeline`]'s methods are only called with.
    fn steps(&mut self) -> Result<&mut GpuPipeline, ExecutorError> {
        self.pipeline
            .as_mut()
            .ok_or_else(|| ExecutorError::Config("this executor does not pipeline steps".into()))
    }

    /// Reads `flight` back and samples it: its requests' pending tokens become the ones sampled.
    fn collect_flight(&mut self, flight: Flight) -> Result<ModelRunnerOutput, ExecutorError> {
        let Flight { forward, forwarded, masks, samples, retired } = flight;
        let waited = match forward {
            Launched::Running(forward) => forward.wait(&self.ctx).map_err(from_llama),
            Launched::Held(_) => Err(ExecutorError::InvalidBatch(
                "a held step was collected before the step it reads tokens from".into(),
            )),
        };
        let result = waited.and_then(|out| {
            let argmax = |s: &Sample| out.top_ids.get(s.row as usize * out.k).copied();
            let fed: Vec<(RequestId, Option<TokenId>)> =
                samples.iter().filter(|s| s.on_device).map(|s| (s.req_id, argmax(s))).collect();
            // Sampled as in the serial loop: each request's tokens up to the one it samples.
            let mut tails = Vec::new();
            for s in &samples {
                if let Some(state) = self.requests.get_mut(&s.req_id)
                    && state.tokens.get(s.position) == Some(&PENDING)
                {
                    tails.push((s.req_id, s.position, state.tokens.split_off(s.position)));
                }
            }
            let result = self.finish_forward(forwarded, out, &mut StepMasks::ready(masks));
            for (req_id, position, tail) in tails {
                if let Some(state) = self.requests.get_mut(&req_id) {
                    match state.tokens.len() == position + 1 {
                        true => state.tokens.extend_from_slice(&tail[1..]),
                        false => {
                            state.tokens.truncate(position);
                            state.tokens.extend(tail);
                        }
                    }
                }
            }
            let result = result?;
            for (req_id, device_id) in fed {
                let host_id = result.sampled_token_ids.get(&req_id).and_then(|ids| ids.first().copied());
                if host_id.is_some() && host_id != device_id {
                    return Err(ExecutorError::Device(format!(
                        "request {req_id}: the next step was fed token {device_id:?} but {host_id:?} was sampled"
                    )));
                }
            }
            Ok(result)
        });
        self.release_held(result.as_ref().ok(), &samples);
        for req_id in retired {
            self.requests.remove(&req_id);
        }
        result
    }

    /// Submits the step held behind the one just collected (whose `samples` produced
    /// `collected`), the ids it sampled written over its rows of the sampled ids first; where
    /// that step failed, the held one fails without running.
    fn release_held(&mut self, collected: Option<&ModelRunnerOutput>, samples: &[Sample]) {
        let Some(pipeline) = self.pipeline.as_mut() else {
            return;
        };
        let Some(index) = pipeline.slots.iter().position(|slot| matches!(slot, Slot::Flight(_))) else {
            return;
        };
        if !matches!(&pipeline.slots[index], Slot::Flight(f) if matches!(f.forward, Launched::Held(_))) {
            return;
        }
        let Some(Slot::Flight(held)) = pipeline.slots.remove(index) else {
            return;
        };
        let Flight { forward, forwarded, masks, samples: held_samples, retired } = *held;
        let ids = collected.map(|out| {
            let mut ids = vec![0; samples.iter().map(|s| s.row as usize + 1).max().unwrap_or(0)];
            for s in samples {
                if let Some(&id) = out.sampled_token_ids.get(&s.req_id).and_then(|ids| ids.first()) {
                    ids[s.row as usize] = id;
                }
            }
            ids
        });
        let submitted = match (forward, ids) {
            (Launched::Held(held), Some(ids)) => self
                .write_sampled(&ids)
                .and_then(|()| held.submit(&self.ctx).map(Launched::Running).map_err(from_llama)),
            (Launched::Held(_), None) => {
                Err(ExecutorError::Device("the step before it, which it reads tokens from, failed".into()))
            }
            (running, _) => Ok(running),
        };
        let slot = match submitted {
            Ok(forward) => {
                Slot::Flight(Box::new(Flight { forward, forwarded, masks, samples: held_samples, retired }))
            }
            Err(error) => {
                for req_id in retired {
                    self.requests.remove(&req_id);
                }
                Slot::Done(Box::new((Err(error), None)))
            }
        };
        if let Some(pipeline) = self.pipeline.as_mut() {
            pipeline.slots.insert(index, slot);
        }
    }

    /// Writes `ids` over the first rows of the device's sampled ids (before the next submit).
    fn write_sampled(&self, ids: &[TokenId]) -> Result<(), ExecutorError> {
        let pipeline = self.pipeline.as_ref().ok_or(ExecutorError::Config("no pipeline".into()))?;
        let rows = pipeline.sampled.rows(ids.len()).map_err(|e| device(e, "the sampled ids"))?;
        self.ctx.write_u32(&rows, ids).map_err(|e| device(e, "writing the sampled ids"))
    }
}

impl StepPipeline for WgpuExecutor {
    fn launch(
        &mut self,
        scheduled: &SchedulerOutput,
        masks: HashMap<RequestId, Vec<TokenMask>>,
    ) -> Result<(), ExecutorError> {
        if self.steps()?.must_settle_before(scheduled) {
            self.settle();
        }
        // A request that finished while a step in flight samples it keeps its state until then.
        let sampled_ahead: HashMap<RequestId, usize> = self
            .steps()?
            .slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| match slot {
                Slot::Flight(flight) => Some(flight.samples.iter().map(move |s| (s.req_id, index))),
                Slot::Done(_) => None,
            })
            .flatten()
            .collect();
        let kept: Vec<_> = scheduled
            .finished_req_ids
            .iter()
            .filter_map(|id| {
                sampled_ahead.get(id).and_then(|&slot| Some((*id, slot, self.requests.remove(id)?)))
            })
            .collect();
        let prepared = self.prepare_step(scheduled);
        for (req_id, slot, state) in kept {
            self.requests.insert(req_id, state);
            if let Some(Slot::Flight(flight)) = self.steps()?.slots.get_mut(slot) {
                flight.retired.push(req_id);
            }
        }
        let (requests, timing, result) = prepared?;
        if requests.is_empty() {
            self.steps()?.slots.push_back(Slot::Done(Box::new((Ok(result), Some(timing)))));
            return Ok(());
        }
        let started = Instant::now();
        self.inject_fault();
        let (mut batch, scored) = self.build_batch(&requests)?;
        // The tokens the step in flight samples, read from its sampled ids.
        let fed: HashMap<(RequestId, usize), (u32, bool)> = self
            .steps()?
            .latest_flight()
            .map(|f| f.samples.iter().map(|s| ((s.req_id, s.position), (s.row, s.on_device))).collect())
            .unwrap_or_default();
        let mut inputs = Vec::new();
        let mut held = false;
        let mut index = 0;
        for s in &requests {
            for position in s.start..s.start + s.len {
                if batch.input_ids[index] == PENDING {
                    let &(row, on_device) = fed.get(&(s.req_id, position)).ok_or_else(|| {
                        ExecutorError::InvalidBatch(format!(
                            "request {}: token {position} is not sampled yet and not on the device",
                            s.req_id
                        ))
                    })?;
                    inputs.push((row, index as u32));
                    held |= !on_device;
                    batch.input_ids[index] = 0;
                }
                index += 1;
            }
        }
        let (top_k, full_logits) = self.head_readback(&requests);
        let lora_rows = self.lora_rows(&requests)?;
        let pipeline = self.pipeline.as_ref().ok_or(ExecutorError::Config("no pipeline".into()))?;
        let feed = IdFeed { sampled: &pipeline.sampled, inputs: &inputs };
        let lora =
            self.lora.as_ref().zip(lora_rows.as_deref()).map(|(l, rows)| LoraRows { slots: l.slots(), rows });
        let launch = Launch { top_k, full_logits, feed, lora };
        let (ctx, ws, cache) = (&self.ctx, &self.workspace, &self.cache);
        let forward = match held {
            true => {
                Launched::Held(self.model.forward_hold(ctx, ws, cache, &batch, launch).map_err(from_llama)?)
            }
            false => Launched::Running(
                self.model.forward_launch(ctx, ws, cache, &batch, launch).map_err(from_llama)?,
            ),
        };
        let mut samples = Vec::new();
        let mut row = 0;
        for s in requests.iter().filter(|s| s.samples) {
            let state = &self.requests[&s.req_id];
            let on_device = s.num_spec == 0 && !state.needs_logits() && state.greedy_candidates() == 1;
            samples.push(Sample { req_id: s.req_id, position: state.tokens.len(), row, on_device });
            row += s.num_spec as u32 + 1;
        }
        for s in &samples {
            if let Some(state) = self.requests.get_mut(&s.req_id) {
                state.tokens.push(PENDING);
            }
        }
        let forwarded = Forwarded { scheduled: requests, batch, scored, timing, started, result };
        let flight = Flight { forward, forwarded, masks, samples, retired: Vec::new() };
        self.steps()?.slots.push_back(Slot::Flight(Box::new(flight)));
        Ok(())
    }

    fn collect(&mut self) -> Result<ModelRunnerOutput, ExecutorError> {
        match self.steps()?.slots.pop_front() {
            Some(Slot::Done(done)) => {
                let (result, timing) = *done;
                self.last_timing = timing;
                result
            }
            Some(Slot::Flight(flight)) => self.collect_flight(*flight),
            None => Err(ExecutorError::InvalidBatch("no launched step to collect".into())),
        }
    }

    fn settle(&mut self) {
        let mut settled = VecDeque::new();
        // Collected oldest first: each releases the step held behind it.
        while let Some(slot) = self.pipeline.as_mut().and_then(|p| p.slots.pop_front()) {
            settled.push_back(match slot {
                Slot::Flight(flight) => {
                    let result = self.collect_flight(*flight);
                    Slot::Done(Box::new((result, self.last_timing)))
                }
                done => done,
            });
        }
        if let Some(pipeline) = self.pipeline.as_mut() {
            pipeline.slots = settled;
        }
    }
}
