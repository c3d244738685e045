//! CronJob controller behaviour against a real API server with a fake clock; only the CronJob
//! controller runs, so the test decides when Jobs finish.

mod common;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tandem_controllers::clock::FakeClock;
use tandem_controllers::cronjob::{self, CronJobOptions};

fn start_controller(client: &Client) -> FakeClock {
    let clock = FakeClock::new(Timestamp::now());
    tokio::spawn(cronjob::run(
        client.clone(),
        CronJobOptions {
            clock: Arc::new(clock.clone()),
            resync_period: Duration::from_millis(100),
        },
    ));
    clock
}

fn cronjob(name: &str, spec: serde_json::Value) -> serde_json::Value {
    let mut spec = spec;
    spec["jobTemplate"] = json!({ "spec": { "template": { "spec": {
        "restartPolicy": "Never", "containers": [{ "name": "c", "image": "busybox" }] } } } });
    json!({ "apiVersion": "batch/v1", "kind": "CronJob", "metadata": { "name": name }, "spec": spec })
}

/// The next top of the hour after `t`.
fn next_hour(t: Timestamp) -> Timestamp {
    Timestamp::from_second((t.as_second() / 3600 + 1) * 3600).unwrap_or(t)
}

/// Moves the clock to `minutes` past the `n`th next top of the hour after `from`.
fn hour_after(from: Timestamp, n: i64) -> Timestamp {
    next_hour(from) + SignedDuration::from_hours(n - 1) + SignedDuration::from_secs(30)
}

async fn job_names(client: &Client, ns: &str) -> Result<Vec<String>> {
    let mut v: Vec<String> = Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .map(|j| j.name_any())
        .collect();
    v.sort();
    Ok(v)
}

async fn wait_jobs(client: &Client, ns: &str, want: &[String]) -> Result<()> {
    common::wait_for(15, &format!("jobs {want:?}"), || async {
        let n = job_names(client, ns).await?;
        Ok((n == want).then_some(()))
    })
    .await
}

async fn complete(client: &Client, ns: &str, name: &str, condition: &str) -> Result<()> {
    let now = Timestamp::now().to_string();
    let mut status = json!({ "conditions": [{ "type": condition, "status": "True", "lastTransitionTime": now }],
                             "startTime": now });
    if condition == "Complete" {
        status["completionTime"] = json!(now);
        status["succeeded"] = json!(1);
        status["conditions"] = json!([
            { "type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now },
            { "type": "Complete", "status": "True", "lastTransitionTime": now }]);
    } else {
        status["failed"] = json!(1);
        status["conditions"] = json!([
            { "type": "FailureTarget", "status": "True", "lastTransitionTime": now },
            { "type": "Failed", "status": "True", "lastTransitionTime": now }]);
    }
    Api::<Job>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await?;
    Ok(())
}

async fn event_reasons(client: &Client, ns: &str) -> Result<Vec<String>> {
    Ok(Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hourly_cronjob_creates_a_job_named_for_its_scheduled_minute() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    common::namespace(&s.client, "c1").await?;
    let clock = start_controller(&s.client);
    let t0 = clock.now_for_test();
    let _: CronJob = common::create(
        &s.client,
        "c1",
        cronjob("tick", json!({ "schedule": "@hourly" })),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        job_names(&s.client, "c1").await?.is_empty(),
        "nothing before the first hour"
    );
    clock.set(hour_after(t0, 1));
    let scheduled = next_hour(t0);
    let name = cronjob::job_name("tick", scheduled);
    wait_jobs(&s.client, "c1", std::slice::from_ref(&name)).await?;
    let job = Api::<Job>::namespaced(s.client.clone(), "c1")
        .get(&name)
        .await?;
    assert!(job.annotations().contains_key(cronjob::SCHEDULED_TIMESTAMP));
    let cjs: Api<CronJob> = Api::namespaced(s.client.clone(), "c1");
    common::wait_for(10, "status", || async {
        let st = cjs.get("tick").await?.status.unwrap_or_default();
        Ok((st.last_schedule_time.map(|t| t.0) == Some(scheduled)
            && st.active.unwrap_or_default().len() == 1)
            .then_some(()))
    })
    .await?;
    complete(&s.client, "c1", &name, "Complete").await?;
    common::wait_for(10, "completed job leaves active", || async {
        let st = cjs.get("tick").await?.status.unwrap_or_default();
        Ok(
            (st.active.unwrap_or_default().is_empty() && st.last_successful_time.is_some())
                .then_some(()),
        )
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbid_skips_while_a_job_runs_and_replace_replaces_it() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    common::namespace(&s.client, "c2").await?;
    let clock = start_controller(&s.client);
    let t0 = clock.now_for_test();
    let _: CronJob = common::create(
        &s.client,
        "c2",
        cronjob(
            "forbid",
            json!({ "schedule": "0 * * * *", "concurrencyPolicy": "Forbid" }),
        ),
    )
    .await?;
    let _: CronJob = common::create(
        &s.client,
        "c2",
        cronjob(
            "replace",
            json!({ "schedule": "0 * * * *", "concurrencyPolicy": "Replace" }),
        ),
    )
    .await?;
    clock.set(hour_after(t0, 1));
    let h1 = next_hour(t0);
    let first = [
        cronjob::job_name("forbid", h1),
        cronjob::job_name("replace", h1),
    ];
    wait_jobs(&s.client, "c2", &first).await?;
    clock.set(hour_after(t0, 2));
    let h2 = h1 + SignedDuration::from_hours(1);
    let mut want = vec![
        cronjob::job_name("forbid", h1),
        cronjob::job_name("replace", h2),
    ];
    want.sort();
    wait_jobs(&s.client, "c2", &want).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        job_names(&s.client, "c2").await?,
        want,
        "Forbid started nothing while its job runs"
    );
    assert!(
        event_reasons(&s.client, "c2")
            .await?
            .iter()
            .any(|r| r == "JobAlreadyActive")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_cronjob_and_starts_missed_beyond_the_deadline_create_nothing() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    common::namespace(&s.client, "c3").await?;
    let clock = start_controller(&s.client);
    let t0 = clock.now_for_test();
    let _: CronJob = common::create(
        &s.client,
        "c3",
        cronjob("paused", json!({ "schedule": "@hourly", "suspend": true })),
    )
    .await?;
    let _: CronJob = common::create(
        &s.client,
        "c3",
        cronjob(
            "late",
            json!({ "schedule": "@hourly", "startingDeadlineSeconds": 60 }),
        ),
    )
    .await?;
    // 30 minutes after the hour: the start is 29 minutes beyond its 60 s deadline.
    clock.set(next_hour(t0) + SignedDuration::from_mins(30));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(job_names(&s.client, "c3").await?.is_empty());
    // The next hour, on time: the late CronJob runs; the suspended one still does not.
    clock.set(hour_after(t0, 2));
    wait_jobs(
        &s.client,
        "c3",
        &[cronjob::job_name(
            "late",
            next_hour(t0) + SignedDuration::from_hours(1),
        )],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_missed_starts_warn_and_run_only_the_latest() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    common::namespace(&s.client, "c4").await?;
    let clock = start_controller(&s.client);
    let t0 = clock.now_for_test();
    let _: CronJob = common::create(
        &s.client,
        "c4",
        cronjob("often", json!({ "schedule": "* * * * *" })),
    )
    .await?;
    clock.set(t0 + SignedDuration::from_mins(180));
    let latest =
        Timestamp::from_second((t0 + SignedDuration::from_mins(180)).as_second() / 60 * 60)?;
    wait_jobs(&s.client, "c4", &[cronjob::job_name("often", latest)]).await?;
    common::wait_for(10, "TooManyMissedTimes warning", || async {
        Ok(event_reasons(&s.client, "c4")
            .await?
            .iter()
            .any(|r| r == "TooManyMissedTimes")
            .then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_beyond_the_history_limits_are_deleted() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    common::namespace(&s.client, "c5").await?;
    let clock = start_controller(&s.client);
    let t0 = clock.now_for_test();
    let _: CronJob = common::create(
        &s.client,
        "c5",
        cronjob(
            "hist",
            json!({
        "schedule": "@hourly", "successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1 }),
        ),
    )
    .await?;
    let mut names = Vec::new();
    for (i, outcome) in [
        (1, "Complete"),
        (2, "Complete"),
        (3, "Failed"),
        (4, "Failed"),
    ] {
        clock.set(hour_after(t0, i));
        let name = cronjob::job_name("hist", next_hour(t0) + SignedDuration::from_hours(i - 1));
        common::wait_for(10, &format!("job {name}"), || async {
            Ok(job_names(&s.client, "c5")
                .await?
                .contains(&name)
                .then_some(()))
        })
        .await?;
        complete(&s.client, "c5", &name, outcome).await?;
        names.push(name);
    }
    // One of each kind is kept: the newest.
    let mut want = vec![names[1].clone(), names[3].clone()];
    want.sort();
    wait_jobs(&s.client, "c5", &want).await?;
    Ok(())
}

trait NowForTest {
    fn now_for_test(&self) -> Timestamp;
}

impl NowForTest for FakeClock {
    fn now_for_test(&self) -> Timestamp {
        use tandem_controllers::clock::Clock;
        self.now()
    }
}
