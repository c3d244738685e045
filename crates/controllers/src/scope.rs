//! Stoppable groups of tasks: everything the controllers spawn while started inside a
//! [`TaskScope`] — their watches, workers and delayed requeues, however deeply nested — belongs
//! to that scope, and [`TaskScope::stop`] aborts all of it at once.
//!
//! Upstream's kube-controller-manager and kube-scheduler exit when they lose their leader lease
//! (client-go `leaderelection`'s `OnStoppedLeading` calls `klog.FlushAndExit`), which ends every
//! goroutine of the process. tandem runs them in the API server's process, so losing the lease
//! must instead end exactly the tasks the component started and leave the API server serving;
//! a scope is that boundary. The controllers spawn through [`spawn`], which joins the scope of
//! the task (or the [`TaskScope::enter`] call) it runs in and behaves as `tokio::spawn` outside
//! any scope.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::task::JoinSet;

tokio::task_local! {
    /// The scope the running task belongs to.
    static CURRENT: TaskScope;
}

/// A group of tasks that stop together. Cheap to clone; clones name the same group. Dropping a
/// handle does not stop the tasks (they may run detached, as `tokio::spawn`'s do); [`stop`]
/// does.
///
/// [`stop`]: TaskScope::stop
#[derive(Clone, Default)]
pub struct TaskScope {
    /// The group's tasks; `None` once stopped, after which nothing more starts in it.
    tasks: Arc<Mutex<Option<JoinSet<()>>>>,
}

impl std::fmt::Debug for TaskScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskScope")
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

impl TaskScope {
    /// An empty, running scope.
    pub fn new() -> Self {
        TaskScope {
            tasks: Arc::new(Mutex::new(Some(JoinSet::new()))),
        }
    }

    /// Runs `f` (which starts controllers) so that whatever it spawns through [`spawn`] joins
    /// this scope, and so do the tasks those tasks spawn.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        CURRENT.sync_scope(self.clone(), f)
    }

    /// Starts `future` as a task of this scope (its output is dropped). After
    /// [`stop`](TaskScope::stop) it is dropped unstarted.
    pub fn spawn<F>(&self, future: F)
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let mut tasks = self.lock();
        let Some(set) = tasks.as_mut() else {
            return;
        };
        // Finished tasks leave their handles behind until reaped; reaping here keeps the set
        // as large as the live tasks (delayed requeues come and go by the thousand).
        while set.try_join_next().is_some() {}
        set.spawn(CURRENT.scope(self.clone(), async move {
            let _ = future.await;
        }));
    }

    /// Aborts every task of the scope; tasks they would start later are not started.
    pub fn stop(&self) {
        let set = self.lock().take();
        // Dropping the set aborts its tasks.
        drop(set);
    }

    /// Whether [`stop`](TaskScope::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.lock().is_none()
    }

    /// How many tasks of the scope are still running.
    pub fn running(&self) -> usize {
        let mut tasks = self.lock();
        match tasks.as_mut() {
            Some(set) => {
                while set.try_join_next().is_some() {}
                set.len()
            }
            None => 0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<JoinSet<()>>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Starts `future` in the current task's scope (see [`TaskScope::enter`]), or as a plain
/// `tokio::spawn` task outside any scope. The controllers spawn every task through this.
pub fn spawn<F>(future: F)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match CURRENT.try_with(TaskScope::clone) {
        Ok(scope) => scope.spawn(future),
        Err(_) => {
            tokio::spawn(future);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// Counts ticks forever.
    async fn tick(ticks: Arc<AtomicUsize>) {
        loop {
            ticks.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Counts ticks forever and, when `nest`, first starts a task that does the same: a
    /// controller's watch starting its workers.
    async fn ticker(ticks: Arc<AtomicUsize>, nest: bool) {
        if nest {
            spawn(tick(ticks.clone()));
        }
        tick(ticks).await;
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_a_scope_aborts_the_tasks_its_tasks_started() {
        let ticks = Arc::new(AtomicUsize::new(0));
        let scope = TaskScope::new();
        scope.enter(|| spawn(ticker(ticks.clone(), true)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(scope.running(), 2, "the task and the one it started");
        scope.stop();
        tokio::task::yield_now().await;
        let after_stop = ticks.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            ticks.load(Ordering::SeqCst),
            after_stop,
            "nothing ticks after stop"
        );
        assert!(scope.is_stopped());
        assert_eq!(scope.running(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_scope_starts_nothing() {
        let ticks = Arc::new(AtomicUsize::new(0));
        let scope = TaskScope::new();
        scope.stop();
        scope.enter(|| spawn(ticker(ticks.clone(), true)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_handle_leaves_the_tasks_running() {
        let ticks = Arc::new(AtomicUsize::new(0));
        TaskScope::new().enter(|| spawn(ticker(ticks.clone(), true)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = ticks.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(ticks.load(Ordering::SeqCst) > before);
    }

    #[tokio::test(start_paused = true)]
    async fn outside_a_scope_spawn_is_a_plain_task() {
        let ticks = Arc::new(AtomicUsize::new(0));
        spawn(ticker(ticks.clone(), false));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(ticks.load(Ordering::SeqCst) > 0);
    }
}
