//! Which LoRA adapter a request runs with, the per-step limit on distinct adapters (vLLM's
//! `max_loras` rule) and the least-recently-used placement of adapters in GPU slots.

use std::collections::BTreeSet;

/// A request's adapter: the id the engine gave it when it was registered (vLLM's
/// `lora_int_id`, what KV events carry as `lora_id`) and its name (what the prefix-cache
/// hash and the metrics use).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LoraRequest {
    /// Unique, from 1, for the engine's lifetime.
    pub id: u32,
    /// The name requests use in `model`.
    pub name: String,
}

/// The adapters of one step's scheduled requests, up to `max_loras` distinct ones: a request
/// of another adapter waits while the step already holds `max_loras` (vLLM's rule; requests
/// without an adapter are never held back by it).
#[derive(Debug, Clone)]
pub struct StepLoras {
    max_loras: usize,
    ids: BTreeSet<u32>,
}

impl StepLoras {
    /// An empty step allowing `max_loras` distinct adapters.
    pub fn new(max_loras: usize) -> Self {
        Self { max_loras, ids: BTreeSet::new() }
    }

    /// True when a request of `lora` may join the step.
    pub fn admits(&self, lora: Option<&LoraRequest>) -> bool {
        match lora {
            None => true,
            Some(l) => self.ids.contains(&l.id) || self.ids.len() < self.max_loras,
        }
    }

    /// Counts `lora` as scheduled in the step.
    pub fn add(&mut self, lora: Option<&LoraRequest>) {
        if let Some(l) = lora {
            self.ids.insert(l.id);
        }
    }

    /// The distinct adapters scheduled so far.
    pub fn ids(&self) -> &BTreeSet<u32> {
        &self.ids
    }
}

/// Adapters in a fixed number of GPU slots, the least recently used one replaced when an
/// adapter that is not resident is needed.
#[derive(Debug, Clone)]
pub struct SlotLru {
    /// Each slot's adapter id and the tick it was last used at.
    slots: Vec<Option<(u32, u64)>>,
    tick: u64,
}

/// Where a step's adapter went: its slot, and whether its matrices must be written there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The slot.
    pub slot: usize,
    /// True when the adapter was not resident (it replaced the slot's previous one).
    pub load: bool,
}

impl SlotLru {
    /// `slots` empty slots.
    pub fn new(slots: usize) -> Self {
        Self { slots: vec![None; slots], tick: 0 }
    }

    /// The slots of one step's adapters `ids` (distinct), in order: resident ones stay, the
    /// others take empty slots or those least recently used by adapters outside `ids`.
    /// `None` when `ids` are more than the slots.
    pub fn place(&mut self, ids: &[u32]) -> Option<Vec<Placement>> {
        if ids.len() > self.slots.len() {
            return None;
        }
        self.tick += 1;
        let tick = self.tick;
        let mut out = vec![Placement { slot: 0, load: false }; ids.len()];
        let mut missing = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            match self.slots.iter().position(|s| s.is_some_and(|(held, _)| held == id)) {
                Some(slot) => {
                    self.slots[slot] = Some((id, tick));
                    out[i] = Placement { slot, load: false };
                }
                None => missing.push(i),
            }
        }
        for i in missing {
            let slot = (0..self.slots.len())
                .filter(|&s| self.slots[s].is_none_or(|(_, used)| used < tick))
                .min_by_key(|&s| self.slots[s].map_or(0, |(_, used)| used + 1))?;
            self.slots[slot] = Some((ids[i], tick));
            out[i] = Placement { slot, load: true };
        }
        Some(out)
    }

    /// Forgets adapter `id` (unloaded); returns the slot it held.
    pub fn evict(&mut self, id: u32) -> Option<usize> {
        let slot = self.slots.iter().position(|s| s.is_some_and(|(held, _)| held == id))?;
        self.slots[slot] = None;
        Some(slot)
    }

    /// The adapter in each slot.
    pub fn resident(&self) -> Vec<Option<u32>> {
        self.slots.iter().map(|s| s.map(|(id, _)| id)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lora(id: u32) -> LoraRequest {
        LoraRequest { id, name: format!("a{id}") }
    }

    #[test]
    fn a_step_holds_at_most_max_loras_adapters_and_any_base_request() {
        let mut step = StepLoras::new(2);
        for id in [1, 2, 1] {
            assert!(step.admits(Some(&lora(id))));
            step.add(Some(&lora(id)));
        }
        assert!(!step.admits(Some(&lora(3))));
        assert!(step.admits(Some(&lora(2))));
        assert!(step.admits(None));
        assert_eq!(step.ids().iter().copied().collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn slots_keep_resident_adapters_and_replace_the_least_recently_used() {
        let mut lru = SlotLru::new(2);
        let p = |slot, load| Placement { slot, load };
        assert_eq!(lru.place(&[7, 8]).unwrap(), [p(0, true), p(1, true)]);
        assert_eq!(lru.place(&[8]).unwrap(), [p(1, false)]);
        // 7 was used longest ago: 9 replaces it.
        assert_eq!(lru.place(&[9]).unwrap(), [p(0, true)]);
        assert_eq!(lru.resident(), [Some(9), Some(8)]);
        // A step's own adapters are never replaced by each other.
        assert_eq!(lru.place(&[8, 7]).unwrap(), [p(1, false), p(0, true)]);
        assert!(lru.place(&[1, 2, 3]).is_none());
        assert_eq!(lru.evict(8), Some(1));
        assert_eq!(lru.place(&[10]).unwrap(), [p(1, true)]);
    }
}
