//! The tandem scheduler: upstream kube-scheduler's filter/score framework and default plugins
//! over an in-memory [`Snapshot`], tandem's OS and Windows-build placement on top, and the loop
//! ([`run`]) that watches pods and nodes through the API, binds pods, preempts pods of lower
//! priority ([`preemption`]) and explains refusals.
//!
//! The framework ([`framework`] with its [`profile`] of [`plugins`] behind the extension-point
//! traits of [`plugin`], [`snapshot`]) is pure and unit-tested; only
//! [`scheduler`] (the loop) does I/O, through kube-rs.

pub mod cycle_state;
pub mod framework;
pub mod labels;
pub mod metrics;
pub mod os;
pub mod plugin;
pub mod plugins;
pub mod preemption;
pub mod profile;
pub mod queue;
pub mod resources;
pub mod scheduler;
pub mod signature;
pub mod snapshot;

pub use framework::{FitError, Framework, FrameworkOptions, Placement, TieBreak};
pub use metrics::SchedulerMetrics;
pub use scheduler::{DEFAULT_SCHEDULER_NAME, SchedulerHandle, SchedulerOptions, Stats, run, start};
pub use snapshot::{NodeInfo, PodInfo, Snapshot};

#[cfg(test)]
mod tests;
