//! The waiting queue: FCFS order, or `(priority, arrival)` order under PRIORITY.

use std::cmp::Ordering;
use std::collections::{BTreeSet, VecDeque};

use crate::core::request::Request;
use crate::core::scheduler_config::SchedulingPolicy;
use crate::ids::RequestId;

/// A request's place under PRIORITY: lower priority value first, then earlier arrival, then
/// lower id.
#[derive(Debug, Clone, Copy)]
pub struct PriorityKey {
    /// The request's priority.
    pub priority: i32,
    /// Its arrival time.
    pub arrival_time: f64,
    /// Its id (tie-break).
    pub request_id: RequestId,
}

impl PriorityKey {
    /// The key of `request`.
    pub fn of(request: &Request) -> Self {
        Self {
            priority: request.priority,
            arrival_time: request.arrival_time,
            request_id: request.request_id,
        }
    }
}

impl PartialEq for PriorityKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PriorityKey {}

impl PartialOrd for PriorityKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PriorityKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .cmp(&other.priority)
            .then(self.arrival_time.total_cmp(&other.arrival_time))
            .then(self.request_id.cmp(&other.request_id))
    }
}

/// Requests waiting for admission.
#[derive(Debug, Clone)]
pub enum WaitingQueue {
    /// Arrival order; preempted requests go to the front.
    Fcfs(VecDeque<RequestId>),
    /// Ordered by `PriorityKey`; preempted requests take their place by key.
    Priority(BTreeSet<PriorityKey>),
}

impl WaitingQueue {
    /// An empty queue for `policy`.
    pub fn new(policy: SchedulingPolicy) -> Self {
        match policy {
            SchedulingPolicy::Fcfs => Self::Fcfs(VecDeque::new()),
            SchedulingPolicy::Priority => Self::Priority(BTreeSet::new()),
        }
    }

    /// Requests waiting.
    pub fn len(&self) -> usize {
        match self {
            Self::Fcfs(queue) => queue.len(),
            Self::Priority(set) => set.len(),
        }
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues a new arrival.
    pub fn push_back(&mut self, request: &Request) {
        match self {
            Self::Fcfs(queue) => queue.push_back(request.request_id),
            Self::Priority(set) => {
                set.insert(PriorityKey::of(request));
            }
        }
    }

    /// Queues a preempted request ahead of the new arrivals (FCFS) or by its key (PRIORITY).
    pub fn push_front(&mut self, request: &Request) {
        match self {
            Self::Fcfs(queue) => queue.push_front(request.request_id),
            Self::Priority(set) => {
                set.insert(PriorityKey::of(request));
            }
        }
    }

    /// The request admitted next.
    pub fn peek(&self) -> Option<RequestId> {
        match self {
            Self::Fcfs(queue) => queue.front().copied(),
            Self::Priority(set) => set.first().map(|key| key.request_id),
        }
    }

    /// Removes the request admitted next.
    pub fn pop(&mut self) -> Option<RequestId> {
        match self {
            Self::Fcfs(queue) => queue.pop_front(),
            Self::Priority(set) => set.pop_first().map(|key| key.request_id),
        }
    }

    /// Removes `request` wherever it is; returns false when it was not queued.
    pub fn remove(&mut self, request: &Request) -> bool {
        match self {
            Self::Fcfs(queue) => match queue.iter().position(|&id| id == request.request_id) {
                Some(index) => queue.remove(index).is_some(),
                None => false,
            },
            Self::Priority(set) => set.remove(&PriorityKey::of(request)),
        }
    }

    /// The queued ids, next to be admitted first.
    pub fn ids(&self) -> Vec<RequestId> {
        match self {
            Self::Fcfs(queue) => queue.iter().copied().collect(),
            Self::Priority(set) => set.iter().map(|key| key.request_id).collect(),
        }
    }
}
