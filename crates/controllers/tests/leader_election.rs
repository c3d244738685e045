//! Leader election on a Lease against a real API server (client-go's `leaderelection`
//! semantics, see `tandem_controllers::leader_election`), with short durations: a 2 s lease,
//! 1.5 s renew deadline and 0.3 s retry period unless a test needs otherwise. And the controllers'
//! task scope: stopped controllers no longer act.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tandem_controllers::leader_election::{
    LeaderElectionConfig, LeaderElectionRecord, LeaderElector, Stopped,
};
use tandem_test_support::eventually;
use tokio::sync::oneshot;
use tokio::time::Instant;

const NS: &str = "kube-system";

fn config(lease: &str, identity: &str) -> LeaderElectionConfig {
    let mut c = LeaderElectionConfig::new(NS, lease, identity, "test-component");
    c.lease_duration = Duration::from_secs(2);
    c.renew_deadline = Duration::from_millis(1500);
    c.retry_period = Duration::from_millis(300);
    c
}

async fn record(client: &kube::Client, lease: &str) -> Result<LeaderElectionRecord> {
    let lease = Api::<Lease>::namespaced(client.clone(), NS)
        .get(lease)
        .await
        .context("get lease")?;
    Ok(LeaderElectionRecord::from_spec(lease.spec.as_ref()))
}

/// What one candidate saw while it ran: how often it started and why it stopped.
#[derive(Default)]
struct Log {
    started: AtomicUsize,
    stopped: std::sync::Mutex<Vec<Stopped>>,
}

/// Counts the candidates leading at once, and the most ever seen at once.
#[derive(Default)]
struct Leading {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// What a candidate keeps while it leads: leaving the count when stopped.
struct Term(Arc<Leading>);

impl Drop for Term {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A candidate running `LeaderElector::run` in a task until its sender fires (or it is
/// aborted, as a process killed without releasing).
struct Candidate {
    log: Arc<Log>,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Candidate {
    fn start(
        client: &kube::Client,
        config: LeaderElectionConfig,
        leading: Arc<Leading>,
    ) -> Result<Self> {
        let mut elector = LeaderElector::new(client.clone(), config)?;
        let log = Arc::new(Log::default());
        let (tx, rx) = oneshot::channel::<()>();
        let (log2, log3) = (log.clone(), log.clone());
        let task = tokio::spawn(async move {
            elector
                .run(
                    async {
                        let _ = rx.await;
                    },
                    move || {
                        log2.started.fetch_add(1, Ordering::SeqCst);
                        let n = leading.now.fetch_add(1, Ordering::SeqCst) + 1;
                        leading.most.fetch_max(n, Ordering::SeqCst);
                        Term(leading.clone())
                    },
                    move |term, why| {
                        drop(term);
                        log3.stopped
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(why);
                    },
                )
                .await;
        });
        Ok(Candidate {
            log,
            shutdown: Some(tx),
            task,
        })
    }

    fn started(&self) -> usize {
        self.log.started.load(Ordering::SeqCst)
    }

    fn stops(&self) -> Vec<Stopped> {
        self.log
            .stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Shuts the candidate down (releasing per its config) and waits for it.
    async fn shut_down(mut self) -> Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .context("candidate did not stop")??;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_candidates_on_one_lease_elect_exactly_one_leader() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let leading = Arc::new(Leading::default());
    let a = Candidate::start(&s.client, config("pair", "a_1"), leading.clone())?;
    let b = Candidate::start(&s.client, config("pair", "b_1"), leading.clone())?;
    eventually(10, "a leader", || async {
        (a.started() + b.started() > 0).then_some(())
    })
    .await;
    // Several lease durations: the leader keeps renewing, the other never takes over.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(leading.most.load(Ordering::SeqCst), 1, "never two at once");
    assert_eq!(a.started() + b.started(), 1, "one term, never interrupted");
    let leader = if a.started() == 1 { "a_1" } else { "b_1" };
    let rec = record(&s.client, "pair").await?;
    assert_eq!(rec.holder_identity, leader);
    assert_eq!(rec.lease_duration_seconds, 2);
    assert_eq!(rec.leader_transitions, 0, "created by its first holder");
    assert!(rec.renew_time > rec.acquire_time, "renewed since acquired");
    // Upstream's event on the Lease.
    let events = Api::<Event>::namespaced(s.client.clone(), NS)
        .list(&ListParams::default())
        .await?;
    let became: Vec<_> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("LeaderElection"))
        .filter(|e| e.involved_object.kind.as_deref() == Some("Lease"))
        .filter(|e| e.involved_object.name.as_deref() == Some("pair"))
        .filter_map(|e| e.message.clone())
        .collect();
    assert_eq!(became, [format!("{leader} became leader")]);
    a.shut_down().await?;
    b.shut_down().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_stops_renewing_is_replaced_after_the_lease_duration() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let leading = Arc::new(Leading::default());
    let a = Candidate::start(&s.client, config("crash", "a_1"), leading.clone())?;
    eventually(10, "a leading", || async {
        (a.started() == 1).then_some(())
    })
    .await;
    let b = Candidate::start(&s.client, config("crash", "b_1"), leading.clone())?;
    // b has seen a's record by now and waits.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(b.started(), 0);
    let before = record(&s.client, "crash").await?;
    // a dies without releasing: its task is dropped mid-term.
    a.task.abort();
    let killed = Instant::now();
    eventually(15, "b leading", || async {
        (b.started() == 1).then_some(())
    })
    .await;
    let waited = killed.elapsed();
    // b trusts its own clock of when the record last changed: a's last renewal was at most one
    // retry period (and a request) before the kill, and b waits a full lease duration after it.
    assert!(
        waited >= Duration::from_millis(2000 - 300 - 500),
        "took over after {waited:?}, before a's lease could have expired"
    );
    let after = record(&s.client, "crash").await?;
    assert_eq!(after.holder_identity, "b_1");
    assert_eq!(after.leader_transitions, before.leader_transitions + 1);
    assert!(after.acquire_time > before.acquire_time, "a new term");
    b.shut_down().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_is_taken_over_without_waiting_for_it_to_expire() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    // A lease far longer than the test waits: only a release lets b in.
    let long = |id: &str| {
        let mut c = config("release", id);
        c.lease_duration = Duration::from_secs(60);
        c.renew_deadline = Duration::from_secs(40);
        c
    };
    let leading = Arc::new(Leading::default());
    let a = Candidate::start(&s.client, long("a_1"), leading.clone())?;
    eventually(10, "a leading", || async {
        (a.started() == 1).then_some(())
    })
    .await;
    let b = Candidate::start(&s.client, long("b_1"), leading.clone())?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(b.started(), 0);
    let a_log = a.log.clone();
    a.shut_down().await?;
    assert_eq!(
        a_log
            .stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_slice(),
        [Stopped::Shutdown]
    );
    eventually(10, "b leading", || async {
        (b.started() == 1).then_some(())
    })
    .await;
    let rec = record(&s.client, "release").await?;
    assert_eq!(rec.holder_identity, "b_1");
    assert_eq!(rec.leader_transitions, 1);
    assert_eq!(leading.most.load(Ordering::SeqCst), 1);
    // b releases in turn: the Lease is left free, for one second.
    b.shut_down().await?;
    let rec = record(&s.client, "release").await?;
    assert_eq!(rec.holder_identity, "");
    assert_eq!(rec.lease_duration_seconds, 1);
    assert_eq!(rec.leader_transitions, 1, "a release is not a transition");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_candidates_on_a_free_lease_never_both_win() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let leases = Api::<Lease>::namespaced(s.client.clone(), NS);
    for round in 0..5 {
        // Free the Lease (or create it free), then let two fresh candidates race for it.
        let free = LeaderElectionRecord {
            lease_duration_seconds: 1,
            ..LeaderElectionRecord::default()
        }
        .to_spec();
        match leases.get_opt("race").await? {
            Some(mut lease) => {
                lease.spec = Some(free);
                leases
                    .replace("race", &PostParams::default(), &lease)
                    .await?;
            }
            None => {
                let lease = Lease {
                    metadata: kube::api::ObjectMeta {
                        name: Some("race".into()),
                        namespace: Some(NS.into()),
                        ..Default::default()
                    },
                    spec: Some(free),
                };
                leases.create(&PostParams::default(), &lease).await?;
            }
        }
        let mut a = LeaderElector::new(s.client.clone(), config("race", "a_1"))?;
        let mut b = LeaderElector::new(s.client.clone(), config("race", "b_1"))?;
        let (won_a, won_b) = tokio::join!(a.try_acquire_or_renew(), b.try_acquire_or_renew());
        assert!(won_a ^ won_b, "round {round}: a {won_a}, b {won_b}");
        let holder = record(&s.client, "race").await?.holder_identity;
        assert_eq!(holder, if won_a { "a_1" } else { "b_1" });
        // The loser, asking again, sees the winner's fresh record and stays out.
        let loser = if won_a { &mut b } else { &mut a };
        assert!(!loser.try_acquire_or_renew().await);
        assert!(!loser.is_leader());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_overwritten_meanwhile_does_not_renew_over_the_new_holder() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let mut a = LeaderElector::new(s.client.clone(), config("stale", "a_1"))?;
    assert!(a.try_acquire_or_renew().await, "a creates the Lease");
    assert!(a.is_leader());
    // Someone else writes the Lease: a's copy (and its resourceVersion) is now stale.
    let leases = Api::<Lease>::namespaced(s.client.clone(), NS);
    let mut lease = leases.get("stale").await?;
    let mut intruder = LeaderElectionRecord::from_spec(lease.spec.as_ref());
    intruder.holder_identity = "intruder_1".into();
    intruder.leader_transitions += 1;
    lease.spec = Some(intruder.to_spec());
    leases
        .replace("stale", &PostParams::default(), &lease)
        .await?;
    // a's optimistic renewal conflicts; it reads the Lease and finds it held.
    assert!(!a.try_acquire_or_renew().await);
    assert!(!a.is_leader());
    assert_eq!(a.leader(), "intruder_1");
    assert_eq!(
        record(&s.client, "stale").await?.holder_identity,
        "intruder_1"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_its_lease_stops_and_campaigns_again() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let leading = Arc::new(Leading::default());
    let a = Candidate::start(&s.client, config("lost", "a_1"), leading.clone())?;
    eventually(10, "a leading", || async {
        (a.started() == 1).then_some(())
    })
    .await;
    // Another holder takes the Lease by force and keeps it fresh for a while: a's renewals
    // fail past the renew deadline.
    let leases = Api::<Lease>::namespaced(s.client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(4);
    while Instant::now() < deadline {
        let mut lease = leases.get("lost").await?;
        let mut rec = LeaderElectionRecord::from_spec(lease.spec.as_ref());
        rec.holder_identity = "intruder_1".into();
        rec.renew_time = Some(k8s_openapi::jiff::Timestamp::now());
        lease.spec = Some(rec.to_spec());
        // A conflict means a wrote in between; the next round overwrites it.
        let _ = leases.replace("lost", &PostParams::default(), &lease).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(a.stops(), [Stopped::LostLease]);
    assert_eq!(
        leading.now.load(Ordering::SeqCst),
        0,
        "what a started was stopped"
    );
    // The intruder is gone: a takes the Lease again once its record expires.
    eventually(10, "a leading again", || async {
        (a.started() == 2).then_some(())
    })
    .await;
    assert_eq!(record(&s.client, "lost").await?.holder_identity, "a_1");
    a.shut_down().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_controllers_no_longer_act() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let rs = |name: &str| {
        json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": { "name": name, "namespace": "default" },
            "spec": {
                "replicas": 1,
                "selector": { "matchLabels": { "app": name } },
                "template": {
                    "metadata": { "labels": { "app": name } },
                    "spec": { "containers": [{ "name": "app", "image": "nginx" }] }
                }
            }
        })
    };
    let sets =
        Api::<k8s_openapi::api::apps::v1::ReplicaSet>::namespaced(s.client.clone(), "default");
    let pods = Api::<Pod>::namespaced(s.client.clone(), "default");
    let scope =
        tandem_controllers::start_all(s.client.clone(), tandem_core::registry::Registry::builtin());
    sets.create(
        &PostParams::default(),
        &serde_json::from_value(rs("before"))?,
    )
    .await?;
    eventually(20, "the running controller's pod", || async {
        let list = pods
            .list(&ListParams::default().labels("app=before"))
            .await
            .ok()?;
        (!list.items.is_empty()).then_some(())
    })
    .await;
    assert!(scope.running() > 0);
    scope.stop();
    assert_eq!(scope.running(), 0);
    sets.create(
        &PostParams::default(),
        &serde_json::from_value(rs("after"))?,
    )
    .await?;
    // Long enough for a running ReplicaSet controller to have acted many times over.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let list = pods
        .list(&ListParams::default().labels("app=after"))
        .await?;
    assert!(
        list.items.is_empty(),
        "a stopped controller created {:?}",
        list.items.len()
    );
    Ok(())
}
