//! When each arrival of a workload is released: at its time, or — for a turn that follows
//! another ([`super::FollowUp`], closed-loop conversations) — a think time after the turn it
//! follows finished, and never before its own time.

use std::collections::HashMap;

use super::Arrival;
use crate::ids::RequestId;

/// Arrivals not yet released, by the arrival index (the request id the runners give them).
#[derive(Debug, Default)]
pub struct Releases {
    /// Released or open-loop arrivals, latest time first (popped from the end).
    due: Vec<(RequestId, Arrival)>,
    /// Follow-up turns by the index of the turn they wait for.
    waiting: HashMap<RequestId, Vec<(RequestId, Arrival)>>,
}

impl Releases {
    /// Every arrival of `numbered`: open-loop ones are due at their time, follow-ups wait.
    pub fn new(numbered: Vec<(RequestId, Arrival)>) -> Self {
        let mut releases = Self::default();
        for (index, arrival) in numbered {
            match arrival.follows {
                Some(follow) => {
                    releases.waiting.entry(follow.previous as RequestId).or_default().push((index, arrival))
                }
                None => releases.due.push((index, arrival)),
            }
        }
        releases.sort();
        releases
    }

    /// The next arrival due at or before `now_s`, with its release time as `time_s`.
    pub fn pop_due(&mut self, now_s: f64) -> Option<(RequestId, Arrival)> {
        self.due.pop_if(|(_, arrival)| arrival.time_s <= now_s)
    }

    /// The time of the next arrival due, if one is.
    pub fn next_due_s(&self) -> Option<f64> {
        self.due.last().map(|(_, arrival)| arrival.time_s)
    }

    /// Arrival `index` finished (or was rejected) at `now_s`: the turns following it are
    /// due their think time later, and not before their own time.
    pub fn finished(&mut self, index: RequestId, now_s: f64) {
        let Some(followers) = self.waiting.remove(&index) else {
            return;
        };
        for (follower, mut arrival) in followers {
            let think_s = arrival.follows.map_or(0.0, |follow| follow.think_time_s);
            arrival.time_s = arrival.time_s.max(now_s + think_s);
            self.due.push((follower, arrival));
        }
        self.sort();
    }

    /// True when nothing is left to release.
    pub fn is_empty(&self) -> bool {
        self.due.is_empty() && self.waiting.is_empty()
    }

    fn sort(&mut self) {
        self.due.sort_by(|a, b| b.1.time_s.total_cmp(&a.1.time_s).then(b.0.cmp(&a.0)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::FollowUp;

    fn arrival(time_s: f64, follows: Option<FollowUp>) -> Arrival {
        Arrival { time_s, prompt_token_ids: vec![5], max_tokens: 1, priority: 0, ignore_eos: true, follows }
    }

    #[test]
    fn a_follow_up_is_due_its_think_time_after_the_turn_it_follows_finished() {
        let follow = |previous| Some(FollowUp { previous, think_time_s: 2.0 });
        let mut releases = Releases::new(vec![
            (0, arrival(0.0, None)),
            (1, arrival(1.0, None)),
            (2, arrival(0.0, follow(0))),
            (3, arrival(9.0, follow(1))),
        ]);
        assert_eq!(releases.pop_due(5.0).map(|(id, _)| id), Some(0));
        assert_eq!(releases.pop_due(5.0).map(|(id, _)| id), Some(1));
        assert!(releases.pop_due(100.0).is_none(), "follow-ups wait for their turn");
        assert!(!releases.is_empty());
        releases.finished(1, 6.0);
        releases.finished(0, 7.5);
        assert_eq!(releases.next_due_s(), Some(9.0));
        assert!(releases.pop_due(8.9).is_none());
        assert_eq!(releases.pop_due(9.0).map(|(id, a)| (id, a.time_s)), Some((3, 9.0)));
        assert_eq!(releases.pop_due(9.5).map(|(id, a)| (id, a.time_s)), Some((2, 9.5)));
        assert!(releases.is_empty());
    }
}
