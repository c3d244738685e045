//! The scheduling queue: pending pods by priority then arrival; pods that failed wait either for
//! a cluster change (unschedulable) or for their backoff (1 s doubling to 10 s) to expire.
//!
//! Mirrors upstream `pkg/scheduler/backend/queue` (`PriorityQueue` with its activeQ, backoffQ and
//! unschedulablePods, `podInitialBackoffDuration` 1 s, `podMaxBackoffDuration` 10 s,
//! `podMaxInUnschedulablePodsDuration` 5 min). Pure: the caller passes the time, so tests run on
//! a clock they control.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use crate::snapshot::PodKey;

/// Upstream `podInitialBackoffDuration`.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Upstream `podMaxBackoffDuration`.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Upstream `podMaxInUnschedulablePodsDuration`: an unschedulable pod is retried at least this
/// often even when nothing seems to change.
pub const MAX_UNSCHEDULABLE_WAIT: Duration = Duration::from_secs(300);

/// The backoff after `attempts` failed attempts: 1 s, 2 s, 4 s, 8 s, then 10 s.
pub fn backoff(attempts: u32) -> Duration {
    let shift = attempts.saturating_sub(1).min(16);
    INITIAL_BACKOFF.saturating_mul(1 << shift).min(MAX_BACKOFF)
}

#[derive(Debug, Clone, Copy)]
struct Record {
    priority: i32,
    attempts: u32,
    last_attempt: Option<Instant>,
}

/// Where a pod waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    Active,
    Backoff,
    Unschedulable,
    /// Popped and being scheduled or bound.
    InFlight,
}

/// Where a pod waits, its order key (priority, arrival) and, when waiting on time, since when.
type Slot = (Waiting, (Reverse<i32>, u64), Option<Instant>);

/// The queue.
#[derive(Debug, Default)]
pub struct SchedulingQueue {
    seq: u64,
    records: HashMap<PodKey, Record>,
    state: HashMap<PodKey, Slot>,
    active: BTreeMap<(Reverse<i32>, u64), PodKey>,
    backoff: BTreeMap<(Instant, u64), PodKey>,
    unschedulable: BTreeMap<(Instant, u64), PodKey>,
}

impl SchedulingQueue {
    /// An empty queue.
    pub fn new() -> SchedulingQueue {
        SchedulingQueue::default()
    }

    /// Pods waiting anywhere (not in flight).
    pub fn len(&self) -> usize {
        self.active.len() + self.backoff.len() + self.unschedulable.len()
    }

    /// Pods waiting in the active queue, in back-off and as unschedulable.
    pub fn pending_counts(&self) -> (usize, usize, usize) {
        (
            self.active.len(),
            self.backoff.len(),
            self.unschedulable.len(),
        )
    }

    /// Whether no pod waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where `key` is, if tracked.
    pub fn waiting(&self, key: &str) -> Option<Waiting> {
        self.state.get(key).map(|s| s.0)
    }

    fn unlink(&mut self, key: &str) {
        if let Some((w, order, at)) = self.state.remove(key) {
            match (w, at) {
                (Waiting::Active, _) => {
                    self.active.remove(&order);
                }
                (Waiting::Backoff, Some(at)) => {
                    self.backoff.remove(&(at, order.1));
                }
                (Waiting::Unschedulable, Some(at)) => {
                    self.unschedulable.remove(&(at, order.1));
                }
                _ => {}
            }
        }
    }

    fn push_active(&mut self, key: PodKey, priority: i32) {
        self.seq += 1;
        let order = (Reverse(priority), self.seq);
        self.state
            .insert(key.clone(), (Waiting::Active, order, None));
        self.active.insert(order, key);
    }

    fn push_backoff(&mut self, key: PodKey, priority: i32, at: Instant) {
        self.seq += 1;
        let order = (Reverse(priority), self.seq);
        self.state
            .insert(key.clone(), (Waiting::Backoff, order, Some(at)));
        self.backoff.insert((at, self.seq), key);
    }

    /// A new pending pod: queued unless already tracked.
    pub fn add(&mut self, key: PodKey, priority: i32) {
        if self.state.contains_key(&key) {
            return;
        }
        self.records.insert(
            key.clone(),
            Record {
                priority,
                attempts: 0,
                last_attempt: None,
            },
        );
        self.push_active(key, priority);
    }

    /// A pending pod changed in a way that may make it schedulable: retry it after its backoff.
    pub fn update(&mut self, key: &str, now: Instant) {
        if matches!(self.waiting(key), Some(Waiting::Unschedulable)) {
            self.unlink(key);
            self.requeue_after_backoff(key.to_string(), now);
        }
    }

    /// Forgets a pod (scheduled, deleted, or no longer ours).
    pub fn remove(&mut self, key: &str) {
        self.unlink(key);
        self.records.remove(key);
    }

    /// The next pod to schedule, moving expired backoffs to the active queue first.
    pub fn pop(&mut self, now: Instant) -> Option<PodKey> {
        self.flush(now);
        let (_, key) = self.active.pop_first()?;
        if let Some(s) = self.state.get_mut(&key) {
            s.0 = Waiting::InFlight;
        }
        if let Some(r) = self.records.get_mut(&key) {
            r.attempts += 1;
            r.last_attempt = Some(now);
        }
        Some(key)
    }

    /// The attempt count of a pod (1 during its first attempt).
    pub fn attempts(&self, key: &str) -> u32 {
        self.records.get(key).map_or(0, |r| r.attempts)
    }

    /// The popped pod fits nowhere: it waits for a cluster change.
    pub fn unschedulable(&mut self, key: PodKey, now: Instant) {
        if !self.records.contains_key(&key) {
            return;
        }
        self.unlink(&key);
        self.seq += 1;
        let priority = self.records.get(&key).map_or(0, |r| r.priority);
        self.state.insert(
            key.clone(),
            (
                Waiting::Unschedulable,
                (Reverse(priority), self.seq),
                Some(now),
            ),
        );
        self.unschedulable.insert((now, self.seq), key);
    }

    /// The popped pod hit an error (binding failed): retry after its backoff.
    pub fn error(&mut self, key: PodKey, now: Instant) {
        if !self.records.contains_key(&key) {
            return;
        }
        self.unlink(&key);
        self.requeue_after_backoff(key, now);
    }

    fn requeue_after_backoff(&mut self, key: PodKey, now: Instant) {
        let Some(r) = self.records.get(&key).copied() else {
            return;
        };
        let at = r.last_attempt.map_or(now, |t| t + backoff(r.attempts));
        if at <= now {
            self.push_active(key, r.priority);
        } else {
            self.push_backoff(key, r.priority, at);
        }
    }

    /// Something changed that may let unschedulable pods fit (node added or updated, pod
    /// deleted): every unschedulable pod is retried once its backoff has passed.
    pub fn cluster_changed(&mut self, now: Instant) {
        let keys: Vec<PodKey> = std::mem::take(&mut self.unschedulable)
            .into_values()
            .collect();
        for key in keys {
            self.state.remove(&key);
            self.requeue_after_backoff(key, now);
        }
    }

    fn flush(&mut self, now: Instant) {
        while let Some(entry) = self.backoff.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.state.remove(&key);
            let priority = self.records.get(&key).map_or(0, |r| r.priority);
            self.push_active(key, priority);
        }
        while let Some(entry) = self.unschedulable.first_entry() {
            if entry.key().0 + MAX_UNSCHEDULABLE_WAIT > now {
                break;
            }
            let key = entry.remove();
            self.state.remove(&key);
            let priority = self.records.get(&key).map_or(0, |r| r.priority);
            self.push_active(key, priority);
        }
    }

    /// Whether a pod is ready to pop now.
    pub fn has_ready(&mut self, now: Instant) -> bool {
        self.flush(now);
        !self.active.is_empty()
    }

    /// When the next waiting pod becomes ready by itself (backoff expiry or the unschedulable
    /// flush), if any.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let b = self.backoff.first_key_value().map(|(k, _)| k.0);
        let u = self
            .unschedulable
            .first_key_value()
            .map(|(k, _)| k.0 + MAX_UNSCHEDULABLE_WAIT);
        match (b, u) {
            (Some(b), Some(u)) => Some(b.min(u)),
            (b, u) => b.or(u),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_to_ten() {
        let secs: Vec<u64> = (1..=6).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn higher_priority_pods_pop_first_then_fifo() {
        let now = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add("ns/a".into(), 0);
        q.add("ns/b".into(), 10);
        q.add("ns/c".into(), 0);
        let order: Vec<_> = std::iter::from_fn(|| q.pop(now)).collect();
        assert_eq!(order, vec!["ns/b", "ns/a", "ns/c"]);
    }

    #[test]
    fn unschedulable_pods_wait_for_a_cluster_change_and_their_backoff() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add("ns/a".into(), 0);
        assert_eq!(q.pop(t0).as_deref(), Some("ns/a"));
        q.unschedulable("ns/a".into(), t0);
        // Nothing changed: it does not come back (no spinning).
        assert_eq!(q.pop(t0 + Duration::from_secs(30)), None);
        // A change half a second after the attempt: it waits out the rest of its 1 s backoff.
        q.cluster_changed(t0 + Duration::from_millis(500));
        assert_eq!(q.pop(t0 + Duration::from_millis(600)), None);
        assert_eq!(q.next_wakeup(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(q.pop(t0 + Duration::from_secs(1)).as_deref(), Some("ns/a"));
        assert_eq!(q.attempts("ns/a"), 2);
    }

    #[test]
    fn unschedulable_pods_are_retried_after_five_minutes_anyway() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add("ns/a".into(), 0);
        q.pop(t0);
        q.unschedulable("ns/a".into(), t0);
        assert_eq!(q.pop(t0 + Duration::from_secs(299)), None);
        assert_eq!(q.pop(t0 + MAX_UNSCHEDULABLE_WAIT).as_deref(), Some("ns/a"));
    }

    #[test]
    fn removed_pods_never_pop() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add("ns/a".into(), 0);
        q.remove("ns/a");
        assert_eq!(q.pop(t0), None);
        assert!(q.is_empty());
    }
}
