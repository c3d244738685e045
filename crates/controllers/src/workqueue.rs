//! A rate-limited work queue of object keys — client-go's `workqueue`: a key is queued at most
//! once, is never processed by two workers at the same time (a key added while it is processed is
//! processed again afterwards), failures are retried with per-key exponential back-off, and a
//! worker can ask to see a key again after a delay. A queue made with [`WorkQueue::named`]
//! reports client-go's workqueue metrics under its upstream name (see `crate::metrics`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use kube::Resource;

use crate::informer::queue_key;
use crate::metrics::{QueueMetrics, WorkqueueMetrics};

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    queued: HashSet<String>,
    processing: HashSet<String>,
    dirty: HashSet<String>,
    failures: HashMap<String, u32>,
    /// With metrics: when each waiting key was first added, and when each key in processing
    /// was taken.
    added_at: HashMap<String, Instant>,
    taken_at: HashMap<String, Instant>,
}

/// A shared queue of keys; cheap to clone.
#[derive(Clone, Default)]
pub struct WorkQueue {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
    metrics: Option<QueueMetrics>,
}

/// First retry delay after a failure; doubles per consecutive failure of the same key.
const BASE_DELAY: Duration = Duration::from_millis(50);
/// Longest retry delay.
const MAX_DELAY: Duration = Duration::from_secs(60);

impl WorkQueue {
    /// A queue called `name` (upstream's queue name, e.g. `deployment`), measured when the
    /// process has a workqueue metrics provider (`crate::metrics::set_provider`).
    pub fn named(name: &str) -> WorkQueue {
        match crate::metrics::provider() {
            Some(m) => WorkQueue::with_metrics(name, m),
            None => WorkQueue::default(),
        }
    }

    /// A queue called `name` reporting to `metrics`.
    pub fn with_metrics(name: &str, metrics: &WorkqueueMetrics) -> WorkQueue {
        WorkQueue {
            metrics: Some(metrics.queue(name)),
            ..WorkQueue::default()
        }
    }

    /// Counts an add that made `key` waiting (client-go's `metrics.add`).
    fn note_add(&self, s: &mut State, key: &str) {
        if let Some(m) = &self.metrics {
            m.added();
            if !s.added_at.contains_key(key) {
                s.added_at.insert(key.to_string(), Instant::now());
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `key` unless it is already waiting.
    pub fn add(&self, key: impl Into<String>) {
        let key = key.into();
        let mut s = self.lock();
        if s.processing.contains(&key) {
            if !s.dirty.contains(&key) {
                self.note_add(&mut s, &key);
                s.dirty.insert(key);
            }
            return;
        }
        if s.queued.insert(key.clone()) {
            self.note_add(&mut s, &key);
            s.queue.push_back(key);
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Queues `key` after `delay`.
    pub fn add_after(&self, key: impl Into<String>, delay: Duration) {
        let key = key.into();
        if let Some(m) = &self.metrics {
            m.retried();
        }
        let q = self.clone();
        crate::scope::spawn(async move {
            tokio::time::sleep(delay).await;
            q.add(key);
        });
    }

    /// Queues `key` after its back-off delay, which grows with each consecutive failure.
    pub fn add_rate_limited(&self, key: &str) {
        let n = {
            let mut s = self.lock();
            let n = s.failures.entry(key.to_string()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        let delay = BASE_DELAY
            .saturating_mul(1u32 << (n - 1).min(20))
            .min(MAX_DELAY);
        self.add_after(key, delay);
    }

    /// Forgets the failure history of `key` (after a successful sync).
    pub fn forget(&self, key: &str) {
        self.lock().failures.remove(key);
    }

    /// Waits for the next key and marks it as being processed.
    pub async fn next(&self) -> String {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.lock();
                if let Some(key) = s.queue.pop_front() {
                    s.queued.remove(&key);
                    s.processing.insert(key.clone());
                    if let Some(m) = &self.metrics {
                        let now = Instant::now();
                        let waited = s.added_at.remove(&key).map(|t| (now - t).as_secs_f64());
                        m.taken(waited);
                        s.taken_at.insert(key.clone(), now);
                    }
                    if !s.queue.is_empty() {
                        self.notify.notify_one();
                    }
                    return key;
                }
            }
            notified.await;
        }
    }

    /// Marks `key` as processed; if it was added meanwhile it is queued again.
    pub fn done(&self, key: &str) {
        let mut s = self.lock();
        s.processing.remove(key);
        if let Some(m) = &self.metrics
            && let Some(t) = s.taken_at.remove(key)
        {
            m.worked(t.elapsed().as_secs_f64());
        }
        if s.dirty.remove(key) && s.queued.insert(key.to_string()) {
            s.queue.push_back(key.to_string());
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Queues every object's [`queue_key`] (a list from an informer, or a change's objects).
    pub fn add_keys<'a, K: Resource + 'a>(&self, objects: impl IntoIterator<Item = &'a Arc<K>>) {
        for obj in objects {
            self.add(queue_key(obj.as_ref()));
        }
    }

    /// Queues the key of each object's controller when it is a `kind`
    /// ([`controller_key`](crate::controller_utils::controller_key)): how a workload controller
    /// reacts to changes of the objects it owns (a Job's pods, a CronJob's Jobs).
    pub fn add_controller_keys<'a, K: Resource + 'a>(
        &self,
        objects: impl IntoIterator<Item = &'a Arc<K>>,
        kind: &str,
    ) {
        for obj in objects {
            if let Some(key) = crate::controller_utils::controller_key(obj.as_ref(), kind) {
                self.add(key);
            }
        }
    }

    /// [`run_workers`](Self::run_workers) for a controller's usual shape: each worker holds the
    /// shared context `ctx` and calls `sync(ctx, key)`, e.g.
    /// `queue.run_workers_for(2, "job", &ctx, |ctx, key| async move { sync(&ctx, &key).await })`.
    pub fn run_workers_for<C, F, Fut, E>(
        &self,
        workers: usize,
        name: &'static str,
        ctx: &Arc<C>,
        sync: F,
    ) where
        C: Send + Sync + 'static,
        F: Fn(Arc<C>, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<Duration>, E>> + Send,
        E: std::fmt::Display,
    {
        let ctx = ctx.clone();
        self.run_workers(workers, name, move |key| sync(ctx.clone(), key));
    }

    /// Runs `workers` loops that take keys and call `sync`. `Ok(Some(d))` asks to see the key
    /// again after `d`; an error retries it with back-off.
    pub fn run_workers<F, Fut, E>(&self, workers: usize, name: &'static str, sync: F)
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<Duration>, E>> + Send,
        E: std::fmt::Display,
    {
        let sync = Arc::new(sync);
        for _ in 0..workers {
            let (q, sync) = (self.clone(), sync.clone());
            crate::scope::spawn(async move {
                loop {
                    let key = q.next().await;
                    match sync(key.clone()).await {
                        Ok(requeue) => {
                            q.forget(&key);
                            if let Some(d) = requeue {
                                q.add_after(key.clone(), d);
                            }
                        }
                        Err(e) => {
                            tracing::debug!(controller = name, key = %key, error = %e, "sync failed; will retry");
                            q.add_rate_limited(&key);
                        }
                    }
                    q.done(&key);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_added_twice_is_queued_once() {
        let q = WorkQueue::default();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.next().await, "a");
        assert_eq!(q.next().await, "b");
        assert!(q.lock().queue.is_empty());
    }

    #[tokio::test]
    async fn a_key_added_while_processing_is_processed_again() {
        let q = WorkQueue::default();
        q.add("a");
        let k = q.next().await;
        q.add("a");
        assert!(
            q.lock().queue.is_empty(),
            "not queued while being processed"
        );
        q.done(&k);
        assert_eq!(q.next().await, "a");
    }
}
