//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `tools/leaderelection` (`LeaderElector`) with its `resourcelock.LeaseLock` does it for
//! kube-scheduler and kube-controller-manager.
//!
//! The algorithm, as upstream's:
//! - A candidate has an identity (`<hostname>_<uuid>`, see [`identity`]) and tries, every retry
//!   period with jitter, to take the Lease: it creates it when it does not exist, and takes it
//!   over when nobody holds it (`holderIdentity` empty) or when the record has not changed for
//!   the record's `leaseDurationSeconds`. "Not changed" is measured on the candidate's own
//!   monotonic clock from the moment it last saw the record change (client-go's
//!   `observedTime`), never from the holder's `renewTime`, so clock skew between machines does
//!   not matter; only their rates do.
//! - Every write is an update with the Lease's `resourceVersion` (optimistic concurrency): of
//!   two candidates racing for one expired Lease the API server accepts exactly one.
//! - A takeover increments `leaseTransitions` and sets `acquireTime`; a renewal keeps both and
//!   moves `renewTime` (both MicroTime).
//! - The leader renews every retry period; when it cannot renew within the renew deadline it
//!   has lost the lease ([`LeaderElector::renew`] returns).
//! - With `release_on_cancel`, stopping releases the Lease (`holderIdentity` empty,
//!   `leaseDurationSeconds` 1) so another candidate takes over at once.
//! - On acquiring, the candidate records the Event `<identity> became leader` (reason
//!   `LeaderElection`) on the Lease, and `<identity> stopped leading` when it stops.
//!
//! Upstream's components exit when they lose the lease; tandem's run in the API server's
//! process, so [`LeaderElector::run`] instead stops what it started (a [`crate::scope::TaskScope`]
//! in practice) and campaigns again.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::time::Instant;

use crate::events::{self, EventType};

/// Upstream's default `--leader-elect-lease-duration`.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Upstream's default `--leader-elect-renew-deadline`.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Upstream's default `--leader-elect-retry-period`.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// client-go's `JitterFactor`: a candidate waits between one and 2.2 retry periods between
/// attempts to acquire.
pub const JITTER_FACTOR: f64 = 1.2;
/// The namespace of the components' Leases (`--leader-elect-resource-namespace`).
pub const LEASE_NAMESPACE: &str = "kube-system";
/// kube-scheduler's Lease (`--leader-elect-resource-name`).
pub const SCHEDULER_LEASE: &str = "kube-scheduler";
/// kube-controller-manager's Lease.
pub const CONTROLLER_MANAGER_LEASE: &str = "kube-controller-manager";

/// A configuration the elector refuses; the messages are client-go's `NewLeaderElector`'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("leaseDuration must be greater than renewDeadline")]
    LeaseDurationNotAboveRenewDeadline,
    #[error("renewDeadline must be greater than retryPeriod*JitterFactor")]
    RenewDeadlineNotAboveRetryPeriod,
    #[error("leaseDuration must be greater than zero")]
    ZeroLeaseDuration,
    #[error("renewDeadline must be greater than zero")]
    ZeroRenewDeadline,
    #[error("retryPeriod must be greater than zero")]
    ZeroRetryPeriod,
    /// A Lease counts whole seconds (`leaseDurationSeconds`), and the API server refuses 0.
    #[error("leaseDuration must be at least 1s: a Lease holds whole seconds")]
    SubSecondLeaseDuration,
    #[error("Lock identity is empty")]
    EmptyIdentity,
}

/// Who campaigns for which Lease, and how often.
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This candidate's identity, written to `holderIdentity`.
    pub identity: String,
    /// How long a record must stay unchanged before another candidate may take the Lease.
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a renewal before it gives up leadership.
    pub renew_deadline: Duration,
    /// The interval between attempts.
    pub retry_period: Duration,
    /// Release the Lease when [`LeaderElector::run`]'s shutdown completes.
    pub release_on_cancel: bool,
    /// `source.component` of the Events the elector records.
    pub component: String,
}

impl LeaderElectionConfig {
    /// A configuration with upstream's default durations, releasing on cancel.
    pub fn new(namespace: &str, name: &str, identity: &str, component: &str) -> Self {
        LeaderElectionConfig {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
            release_on_cancel: true,
            component: component.to_string(),
        }
    }

    /// client-go's `NewLeaderElector` checks, in its order.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_durations(self.lease_duration, self.renew_deadline, self.retry_period)?;
        if self.identity.is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        Ok(())
    }

    /// `namespace/name`, as client-go's `Describe`.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Checks a lease duration, renew deadline and retry period as client-go's
/// `NewLeaderElector` does (`--leader-elect-*` flags are checked with this).
pub fn validate_durations(
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
) -> Result<(), ConfigError> {
    if lease_duration <= renew_deadline {
        return Err(ConfigError::LeaseDurationNotAboveRenewDeadline);
    }
    if renew_deadline <= retry_period.mul_f64(JITTER_FACTOR) {
        return Err(ConfigError::RenewDeadlineNotAboveRetryPeriod);
    }
    if lease_duration.is_zero() {
        return Err(ConfigError::ZeroLeaseDuration);
    }
    if renew_deadline.is_zero() {
        return Err(ConfigError::ZeroRenewDeadline);
    }
    if retry_period.is_zero() {
        return Err(ConfigError::ZeroRetryPeriod);
    }
    if lease_duration < Duration::from_secs(1) {
        return Err(ConfigError::SubSecondLeaseDuration);
    }
    Ok(())
}

/// A candidate identity as kube-scheduler and kube-controller-manager make theirs: the host
/// name, `_`, a random UUID — unique per process even when two run on one host.
pub fn identity() -> String {
    format!("{}_{}", hostname(), uuid::Uuid::new_v4())
}

/// The machine's host name (Go's `os.Hostname`), `localhost` when it cannot be read.
fn hostname() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| {
            let name = std::fs::read_to_string(p).ok()?;
            let name = name.trim();
            (!name.is_empty()).then(|| name.to_string())
        })
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "localhost".to_string())
}

/// The election state a Lease's spec holds (client-go's `LeaderElectionRecord`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderElectionRecord {
    /// Empty when nobody holds the Lease.
    pub holder_identity: String,
    pub lease_duration_seconds: i32,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    pub leader_transitions: i32,
}

impl LeaderElectionRecord {
    /// The record of a Lease spec (`LeaseSpecToLeaderElectionRecord`).
    pub fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(spec) = spec else {
            return Self::default();
        };
        LeaderElectionRecord {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or_default(),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            leader_transitions: spec.lease_transitions.unwrap_or_default(),
        }
    }

    /// The Lease spec of a record (`LeaderElectionRecordToLeaseSpec`): every field set, so a
    /// release writes an empty `holderIdentity`.
    pub fn to_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder_identity.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.leader_transitions),
            ..LeaseSpec::default()
        }
    }
}

/// A failed write of the Lease.
#[derive(Debug, thiserror::Error)]
enum LockError {
    #[error("lease not initialized, call get or create first")]
    NotInitialized,
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// Why [`LeaderElector::run`] stopped what it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The lease could not be renewed within the renew deadline; the candidate campaigns again.
    LostLease,
    /// The shutdown future completed; `run` returns.
    Shutdown,
}

/// One candidate for one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    client: kube::Client,
    config: LeaderElectionConfig,
    /// The record as last seen or written (client-go's `observedRecord`).
    observed: LeaderElectionRecord,
    /// When the record was last seen to change, on this process's monotonic clock.
    observed_time: Option<Instant>,
    /// The Lease as last read or written: its `resourceVersion` guards the next update.
    lease: Option<Lease>,
    /// The holder last reported in the log (client-go's `reportedLeader`).
    reported_leader: String,
}

impl LeaderElector {
    /// A candidate with `config`, writing through `client`.
    pub fn new(client: kube::Client, config: LeaderElectionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(LeaderElector {
            api: Api::namespaced(client.clone(), &config.namespace),
            client,
            config,
            observed: LeaderElectionRecord::default(),
            observed_time: None,
            lease: None,
            reported_leader: String::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// The identity of the last observed leader; empty when none was seen.
    pub fn leader(&self) -> &str {
        &self.observed.holder_identity
    }

    /// Whether the last observed leader is this candidate.
    pub fn is_leader(&self) -> bool {
        self.observed.holder_identity == self.config.identity
    }

    /// Campaigns until `shutdown` completes: whenever this candidate acquires the Lease it
    /// calls `start` and keeps what it returns; when leadership is lost, or at shutdown, it
    /// hands that back to `stop` (which must end everything the lease guards) and, with
    /// `release_on_cancel`, releases the Lease. After a loss it campaigns again.
    pub async fn run<G>(
        &mut self,
        shutdown: impl Future<Output = ()>,
        mut start: impl FnMut() -> G,
        mut stop: impl FnMut(G, Stopped),
    ) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = self.acquire() => {}
                () = &mut shutdown => return,
            }
            let leading = start();
            let why = tokio::select! {
                () = self.renew() => Stopped::LostLease,
                () = &mut shutdown => Stopped::Shutdown,
            };
            // What the lease guards ends before the lease is given up, as client-go's
            // ReleaseOnCancel requires of its callers.
            stop(leading, why);
            self.record_event("stopped leading").await;
            if self.config.release_on_cancel {
                self.release().await;
            }
            if why == Stopped::Shutdown {
                return;
            }
        }
    }

    /// Tries to acquire the Lease every retry period (with jitter) and returns once this
    /// candidate holds it, having recorded the `became leader` Event.
    pub async fn acquire(&mut self) {
        tracing::info!(lease = %self.config.describe(), "attempting to acquire leader lease");
        loop {
            let acquired = self.try_acquire_or_renew().await;
            self.maybe_report_transition();
            if acquired {
                self.record_event("became leader").await;
                tracing::info!(lease = %self.config.describe(), "successfully acquired lease");
                return;
            }
            tokio::time::sleep(jittered(self.config.retry_period)).await;
        }
    }

    /// Renews the Lease every retry period; returns when a renewal did not succeed within the
    /// renew deadline, i.e. leadership is lost.
    pub async fn renew(&mut self) {
        loop {
            let deadline = Instant::now() + self.config.renew_deadline;
            let renewed = loop {
                // Each attempt, requests included, is bounded by the deadline (client-go's
                // timeout context).
                if let Ok(true) =
                    tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await
                {
                    break true;
                }
                let next = Instant::now() + self.config.retry_period;
                if next >= deadline {
                    tokio::time::sleep_until(deadline).await;
                    break false;
                }
                tokio::time::sleep_until(next).await;
            };
            self.maybe_report_transition();
            if !renewed {
                tracing::info!(lease = %self.config.describe(), "failed to renew lease: timed out waiting for the condition");
                return;
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Gives the Lease up if this candidate holds it (`holderIdentity` empty,
    /// `leaseDurationSeconds` 1), so another takes over at its next attempt. Returns whether
    /// the Lease is not held by this candidate afterwards.
    pub async fn release(&mut self) -> bool {
        if !self.is_leader() {
            return true;
        }
        let now = now_micro();
        let record = LeaderElectionRecord {
            holder_identity: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(now),
            renew_time: Some(now),
            leader_transitions: self.observed.leader_transitions,
        };
        match self.update(&record).await {
            Ok(()) => {
                self.set_observed(record);
                true
            }
            Err(e) => {
                tracing::error!(lease = %self.config.describe(), error = %e, "failed to release lock");
                false
            }
        }
    }

    /// One attempt (client-go's `tryAcquireOrRenew`): renews when this candidate holds the
    /// Lease, acquires it when it is free or expired. Returns whether this candidate holds the
    /// Lease afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> bool {
        let now = now_micro();
        let mut record = LeaderElectionRecord {
            holder_identity: self.config.identity.clone(),
            lease_duration_seconds: whole_seconds(self.config.lease_duration),
            acquire_time: Some(now),
            renew_time: Some(now),
            leader_transitions: 0,
        };

        // 1. The leader's fast path: update on the version it last wrote.
        if self.is_leader() && self.is_lease_valid(Instant::now()) {
            record.acquire_time = self.observed.acquire_time;
            record.leader_transitions = self.observed.leader_transitions;
            match self.update(&record).await {
                Ok(()) => {
                    self.set_observed(record);
                    return true;
                }
                Err(e) => tracing::debug!(
                    lease = %self.config.describe(),
                    error = %e,
                    "failed to update lock optimistically, falling back to slow path"
                ),
            }
        }

        // 2. Read the Lease, or create it.
        let lease = match self.api.get_opt(&self.config.name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(record.to_spec()),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(created) => {
                        self.lease = Some(created);
                        self.set_observed(record);
                        true
                    }
                    Err(e) => {
                        tracing::debug!(lease = %self.config.describe(), error = %e, "error initially creating leader election record");
                        false
                    }
                };
            }
            Err(e) => {
                tracing::debug!(lease = %self.config.describe(), error = %e, "error retrieving resource lock");
                return false;
            }
        };
        let old = LeaderElectionRecord::from_spec(lease.spec.as_ref());
        self.lease = Some(lease);

        // 3. A changed record restarts this candidate's clock for it.
        if old != self.observed {
            self.set_observed(old.clone());
        }
        if !old.holder_identity.is_empty()
            && self.is_lease_valid(Instant::now())
            && !self.is_leader()
        {
            tracing::trace!(holder = %old.holder_identity, "lock is held and has not yet expired");
            return false;
        }

        // 4. Take over (a transition) or renew, on the version just read.
        if self.is_leader() {
            record.acquire_time = old.acquire_time;
            record.leader_transitions = old.leader_transitions;
        } else {
            record.leader_transitions = old.leader_transitions.saturating_add(1);
        }
        match self.update(&record).await {
            Ok(()) => {
                self.set_observed(record);
                true
            }
            Err(e) => {
                tracing::debug!(lease = %self.config.describe(), error = %e, "failed to update lock");
                false
            }
        }
    }

    /// Whether the observed record is still within its lease duration of when it was seen.
    fn is_lease_valid(&self, now: Instant) -> bool {
        let Some(seen) = self.observed_time else {
            return false;
        };
        let secs = u64::try_from(self.observed.lease_duration_seconds).unwrap_or(0);
        seen + Duration::from_secs(secs) > now
    }

    fn set_observed(&mut self, record: LeaderElectionRecord) {
        self.observed = record;
        self.observed_time = Some(Instant::now());
    }

    /// Writes `record` over the Lease last read or written, on its `resourceVersion`.
    async fn update(&mut self, record: &LeaderElectionRecord) -> Result<(), LockError> {
        let Some(mut lease) = self.lease.clone() else {
            return Err(LockError::NotInitialized);
        };
        lease.spec = Some(record.to_spec());
        let updated = self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await?;
        self.lease = Some(updated);
        Ok(())
    }

    /// Logs a change of leader once (client-go's `maybeReportTransition`, whose
    /// `OnNewLeader` callback components log).
    fn maybe_report_transition(&mut self) {
        if self.observed.holder_identity == self.reported_leader {
            return;
        }
        self.reported_leader = self.observed.holder_identity.clone();
        if !self.reported_leader.is_empty() {
            tracing::info!(lease = %self.config.describe(), leader = %self.reported_leader, "new leader elected");
        }
    }

    /// The `LeaderElection` Event on the Lease (`LeaseLock.RecordEvent`).
    async fn record_event(&self, what: &str) {
        let Some(lease) = &self.lease else {
            return;
        };
        let subject = Lease {
            metadata: lease.metadata.clone(),
            spec: None,
        };
        let message = format!("{} {what}", self.config.identity);
        events::record(
            &self.client,
            &self.config.component,
            &subject,
            EventType::Normal,
            "LeaderElection",
            &message,
        )
        .await;
    }
}

/// A duration in whole seconds, as client-go's `int(LeaseDuration / time.Second)`.
fn whole_seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX)
}

/// Now, at the precision a MicroTime keeps.
fn now_micro() -> Timestamp {
    let now = Timestamp::now();
    Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now)
}

/// `period` stretched by a random fraction of up to [`JITTER_FACTOR`] of itself
/// (`wait.Jitter`), so candidates that started together do not keep colliding.
fn jittered(period: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // A fresh RandomState is seeded randomly: enough randomness for a jitter.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(0);
    let fraction = (h.finish() % 10_000) as f64 / 10_000.0;
    period + period.mul_f64(fraction * JITTER_FACTOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn upstream_defaults_are_valid() {
        assert_eq!(
            validate_durations(
                DEFAULT_LEASE_DURATION,
                DEFAULT_RENEW_DEADLINE,
                DEFAULT_RETRY_PERIOD
            ),
            Ok(())
        );
    }

    #[test]
    fn renew_deadline_must_be_below_lease_duration() {
        assert_eq!(
            validate_durations(secs(10.0), secs(10.0), secs(2.0)),
            Err(ConfigError::LeaseDurationNotAboveRenewDeadline)
        );
        assert_eq!(
            ConfigError::LeaseDurationNotAboveRenewDeadline.to_string(),
            "leaseDuration must be greater than renewDeadline"
        );
    }

    #[test]
    fn retry_period_with_jitter_must_be_below_renew_deadline() {
        // 2s * 1.2 = 2.4s is not below 2.4s.
        assert_eq!(
            validate_durations(secs(15.0), secs(2.4), secs(2.0)),
            Err(ConfigError::RenewDeadlineNotAboveRetryPeriod)
        );
        assert_eq!(validate_durations(secs(15.0), secs(2.5), secs(2.0)), Ok(()));
    }

    #[test]
    fn zero_and_sub_second_durations_are_refused() {
        assert_eq!(
            validate_durations(secs(2.0), secs(1.0), Duration::ZERO),
            Err(ConfigError::ZeroRetryPeriod)
        );
        assert_eq!(
            validate_durations(secs(0.9), secs(0.5), secs(0.1)),
            Err(ConfigError::SubSecondLeaseDuration)
        );
    }

    #[test]
    fn identity_is_the_host_name_and_a_uuid() {
        let id = identity();
        let (host, uuid) = id.rsplit_once('_').unwrap_or_default();
        assert!(!host.is_empty(), "{id}");
        assert!(uuid::Uuid::parse_str(uuid).is_ok(), "{id}");
        assert_ne!(identity(), id, "each process gets its own");
    }

    #[test]
    fn a_record_survives_the_lease_spec() {
        let t = Timestamp::from_microsecond(1_700_000_000_123_456).unwrap_or(Timestamp::UNIX_EPOCH);
        let record = LeaderElectionRecord {
            holder_identity: "a_1".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(t),
            renew_time: Some(t),
            leader_transitions: 3,
        };
        assert_eq!(
            LeaderElectionRecord::from_spec(Some(&record.to_spec())),
            record
        );
        // Released: the holder is written empty, not left out.
        let released = LeaderElectionRecord::default().to_spec();
        assert_eq!(released.holder_identity.as_deref(), Some(""));
    }

    #[test]
    fn jitter_stays_within_the_factor() {
        for _ in 0..100 {
            let d = jittered(secs(1.0));
            assert!(d >= secs(1.0) && d <= secs(2.2), "{d:?}");
        }
    }
}
