//! The bounded hand-over between the engine thread and the publisher: pushing never waits;
//! when the publisher lags, the oldest batch is dropped and counted.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// A bounded FIFO of batches that drops its oldest entry instead of blocking.
#[derive(Debug)]
pub struct DropOldestQueue<T> {
    state: Mutex<QueueState<T>>,
    ready: Notify,
    capacity: usize,
    pushed: AtomicU64,
    dropped: AtomicU64,
}

#[derive(Debug)]
struct QueueState<T> {
    items: VecDeque<T>,
    closed: bool,
}

impl<T> DropOldestQueue<T> {
    /// A queue holding at most `capacity` items (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(QueueState { items: VecDeque::new(), closed: false }),
            ready: Notify::new(),
            capacity: capacity.max(1),
            pushed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Appends `item`, dropping the oldest one when full; ignored once closed.
    pub fn push(&self, item: T) {
        {
            let mut state = self.lock();
            if state.closed {
                return;
            }
            if state.items.len() == self.capacity {
                state.items.pop_front();
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            state.items.push_back(item);
            self.pushed.fetch_add(1, Ordering::Release);
        }
        self.ready.notify_one();
    }

    /// The oldest item, waiting for one; `None` once closed and empty. One consumer.
    pub async fn pop(&self) -> Option<T> {
        loop {
            {
                let mut state = self.lock();
                if let Some(item) = state.items.pop_front() {
                    return Some(item);
                }
                if state.closed {
                    return None;
                }
            }
            self.ready.notified().await;
        }
    }

    /// Refuses further pushes; `pop` drains what is queued, then ends.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    /// Items accepted so far (those dropped later included).
    pub fn pushed(&self) -> u64 {
        self.pushed.load(Ordering::Acquire)
    }

    /// Items dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState<T>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drops_the_oldest_when_full_and_drains_after_close() {
        let queue = DropOldestQueue::new(2);
        for item in 1..=4 {
            queue.push(item);
        }
        assert_eq!((queue.pushed(), queue.dropped()), (4, 2));
        queue.close();
        queue.push(5);
        assert_eq!(queue.pop().await, Some(3));
        assert_eq!(queue.pop().await, Some(4));
        assert_eq!(queue.pop().await, None);
    }

    #[tokio::test]
    async fn pop_waits_for_a_push() {
        let queue = std::sync::Arc::new(DropOldestQueue::new(4));
        let consumer = tokio::spawn({
            let queue = std::sync::Arc::clone(&queue);
            async move { queue.pop().await }
        });
        queue.push(9);
        assert_eq!(consumer.await.unwrap(), Some(9));
    }
}
