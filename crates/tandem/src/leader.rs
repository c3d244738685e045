//! The `--leader-elect*` flags of `tandem server`, `tandem up` and `tandem scheduler`, and
//! running a component only while this process holds its Lease.
//!
//! The flags are kube-scheduler's and kube-controller-manager's (component-base's
//! `BindLeaderElectionFlags`): `--leader-elect` (default true), `--leader-elect-lease-duration`
//! (15s), `--leader-elect-renew-deadline` (10s), `--leader-elect-retry-period` (2s), durations
//! written as Go writes them, checked as client-go's `NewLeaderElector` checks them. Several
//! `tandem server`s on one store elect one scheduler (Lease `kube-system/kube-scheduler`) and one
//! controller manager (all the controllers together, `kube-system/kube-controller-manager`),
//! independently. Upstream's components exit when they lose their lease; here the API server
//! lives in the same process, so losing the lease stops the component and the process campaigns
//! again (see `tandem_controllers::leader_election`).

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tandem_controllers::leader_election::{
    self, LeaderElectionConfig, LeaderElector, Stopped, validate_durations,
};
use tokio::sync::oneshot;

/// The leader election flags, as upstream spells them.
#[derive(Args, Clone, Debug)]
pub struct LeaderElectionArgs {
    /// Start a leader election client and gain leadership before running the scheduler and
    /// controllers, so several servers on one etcd run one of each. On the SQLite store (one
    /// server only) `tandem server` skips the election.
    #[arg(
        long = "leader-elect",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub leader_elect: bool,
    /// How long a candidate waits after the last observed renewal before it takes the lease
    /// over (a Go duration, e.g. `15s`).
    #[arg(long = "leader-elect-lease-duration", default_value = "15s", value_parser = parse_go_duration)]
    pub lease_duration: Duration,
    /// How long the leader keeps retrying to renew before it gives up leading; less than the
    /// lease duration.
    #[arg(long = "leader-elect-renew-deadline", default_value = "10s", value_parser = parse_go_duration)]
    pub renew_deadline: Duration,
    /// How long candidates wait between attempts to acquire and renew.
    #[arg(long = "leader-elect-retry-period", default_value = "2s", value_parser = parse_go_duration)]
    pub retry_period: Duration,
}

impl Default for LeaderElectionArgs {
    fn default() -> Self {
        LeaderElectionArgs {
            leader_elect: true,
            lease_duration: leader_election::DEFAULT_LEASE_DURATION,
            renew_deadline: leader_election::DEFAULT_RENEW_DEADLINE,
            retry_period: leader_election::DEFAULT_RETRY_PERIOD,
        }
    }
}

impl LeaderElectionArgs {
    /// Checks the durations, as the components do at start.
    pub fn validate(&self) -> anyhow::Result<()> {
        if !self.leader_elect {
            return Ok(());
        }
        validate_durations(self.lease_duration, self.renew_deadline, self.retry_period)
            .context("invalid --leader-elect-* flags")
    }

    fn config(&self, name: &str, identity: &str, component: &str) -> LeaderElectionConfig {
        let mut c =
            LeaderElectionConfig::new(leader_election::LEASE_NAMESPACE, name, identity, component);
        c.lease_duration = self.lease_duration;
        c.renew_deadline = self.renew_deadline;
        c.retry_period = self.retry_period;
        c.release_on_cancel = true;
        c
    }
}

/// A component running under leader election (or unconditionally with `--leader-elect=false`).
/// [`Elected::shutdown`] stops it and releases its Lease.
pub struct Elected {
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

/// Which component, for the lines `tandem server` prints.
pub struct Component {
    /// What the lines call it (`scheduler`, `controllers`).
    pub what: &'static str,
    /// The Lease's name in `kube-system`.
    pub lease: &'static str,
    /// `source.component` of the election's Events.
    pub event_source: &'static str,
}

/// Runs `start`'s component while this process leads `component.lease` (campaigning with
/// `client`, the component's own identity), stopping what it returned with `stop` when the
/// lease is lost and starting it again when it is regained. With `--leader-elect=false` the
/// component starts at once and runs until [`Elected::shutdown`].
pub fn run<G: Send + 'static>(
    args: &LeaderElectionArgs,
    component: Component,
    identity: &str,
    client: kube::Client,
    mut start: impl FnMut() -> G + Send + 'static,
    mut stop: impl FnMut(G) + Send + 'static,
) -> anyhow::Result<Elected> {
    let (tx, rx) = oneshot::channel::<()>();
    let shutdown = async {
        let _ = rx.await;
    };
    if !args.leader_elect {
        let running = start();
        let task = tokio::spawn(async move {
            shutdown.await;
            stop(running);
        });
        return Ok(Elected {
            shutdown: Some(tx),
            task,
        });
    }
    let config = args.config(component.lease, identity, component.event_source);
    let describe = config.describe();
    let mut elector = LeaderElector::new(client, config).context("invalid leader election")?;
    let Component { what, .. } = component;
    let me = identity.to_string();
    let task = tokio::spawn(async move {
        elector
            .run(
                shutdown,
                || {
                    println!("tandem: became leader of {describe} as {me}; starting the {what}");
                    start()
                },
                |running, why| {
                    stop(running);
                    if why == Stopped::LostLease {
                        println!(
                            "tandem: lost the lease {describe}; stopped the {what}, campaigning again"
                        );
                    }
                },
            )
            .await;
    });
    Ok(Elected {
        shutdown: Some(tx),
        task,
    })
}

impl Elected {
    /// Stops the component and, if this process leads, releases the Lease so another server
    /// takes over at once. Bounded: a store that does not answer does not hold up shutdown.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if tokio::time::timeout(Duration::from_secs(5), &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
    }
}

/// Parses a duration as Go's `time.ParseDuration` does (`15s`, `1m30s`, `1.5h`, `300ms`; `0`
/// alone needs no unit). Negative durations are refused (no flag here takes one).
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    tandem_core::time::parse_go_duration_std(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        le: LeaderElectionArgs,
    }

    fn parse(args: &[&str]) -> Result<LeaderElectionArgs, clap::Error> {
        let mut argv = vec!["tandem"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map(|c| c.le)
    }

    #[test]
    fn go_durations_parse_as_go_writes_them() {
        let ok = |s: &str, d: Duration| assert_eq!(parse_go_duration(s), Ok(d), "{s}");
        ok("15s", Duration::from_secs(15));
        ok("1m", Duration::from_secs(60));
        ok("1m30s", Duration::from_secs(90));
        ok("1.5h", Duration::from_secs(5400));
        ok("300ms", Duration::from_millis(300));
        ok("0", Duration::ZERO);
        ok("2us", Duration::from_micros(2));
        for bad in ["", "15", "s", "-1s", "1x", "1.2.3s", "."] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn flags_default_to_upstreams_values() -> anyhow::Result<()> {
        let le = parse(&[])?;
        assert!(le.leader_elect);
        assert_eq!(le.lease_duration, Duration::from_secs(15));
        assert_eq!(le.renew_deadline, Duration::from_secs(10));
        assert_eq!(le.retry_period, Duration::from_secs(2));
        le.validate()
    }

    #[test]
    fn leader_elect_is_a_go_style_boolean() -> anyhow::Result<()> {
        assert!(!parse(&["--leader-elect=false"])?.leader_elect);
        assert!(parse(&["--leader-elect"])?.leader_elect);
        assert!(parse(&["--leader-elect=true"])?.leader_elect);
        Ok(())
    }

    #[test]
    fn a_renew_deadline_not_below_the_lease_duration_is_refused() -> anyhow::Result<()> {
        let le = parse(&[
            "--leader-elect-lease-duration=1s",
            "--leader-elect-renew-deadline=2s",
        ])?;
        let err = format!("{:#}", le.validate().err().context("accepted")?);
        assert!(
            err.contains("leaseDuration must be greater than renewDeadline"),
            "{err}"
        );
        let le = parse(&["--leader-elect-retry-period=9s"])?;
        let err = format!("{:#}", le.validate().err().context("accepted")?);
        assert!(
            err.contains("renewDeadline must be greater than retryPeriod*JitterFactor"),
            "{err}"
        );
        // Without leader election the durations are not used.
        parse(&["--leader-elect=false", "--leader-elect-retry-period=9s"])?.validate()
    }

    #[test]
    fn a_malformed_duration_is_a_usage_error() {
        assert!(parse(&["--leader-elect-lease-duration=15"]).is_err());
    }
}
