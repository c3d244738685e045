//! Job controller behaviour against a real API server; the test plays the node agent by setting
//! pod phases.

mod common;

use std::collections::BTreeSet;

use anyhow::Result;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;

fn job(name: &str, spec: serde_json::Value) -> serde_json::Value {
    let mut spec = spec;
    spec["template"] = json!({
        "spec": { "restartPolicy": "Never", "containers": [{ "name": "work", "image": "busybox" }] }
    });
    json!({ "apiVersion": "batch/v1", "kind": "Job", "metadata": { "name": name }, "spec": spec })
}

async fn condition(api: &Api<Job>, name: &str, type_: &str) -> Result<Option<(String, Job)>> {
    let j = api.get(name).await?;
    let reason = j
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_ && c.status == "True"))
        .and_then(|c| c.reason.clone());
    Ok(reason.map(|r| (r, j)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_runs_to_completion() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "j1").await?;
    let _: Job = common::create(
        &c.client,
        "j1",
        job("work", json!({ "completions": 3, "parallelism": 2 })),
    )
    .await?;
    let api: Api<Job> = Api::namespaced(c.client.clone(), "j1");
    let mut max_active = 0;
    let mut finished = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let (reason, j) = loop {
        if let Some(done) = condition(&api, "work", "Complete").await? {
            break done;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "job did not complete"
        );
        let pods = common::live_pods(&c.client, "j1", "job-name=work").await?;
        let running: Vec<_> = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Succeeded"))
            .collect();
        max_active = max_active.max(running.len());
        if let Some(p) = running.first() {
            common::finish_pod(&c.client, p, "Succeeded").await?;
            finished.insert(p.name_any());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(reason, "CompletionsReached");
    let s = j.status.unwrap_or_default();
    assert_eq!((s.succeeded, s.active.unwrap_or(0)), (Some(3), 0));
    assert!(s.completion_time.is_some() && s.start_time.is_some());
    assert!(
        max_active <= 2,
        "parallelism 2 but saw {max_active} active pods"
    );
    assert_eq!(finished.len(), 3, "exactly `completions` pods ran");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_fails_when_backoff_limit_is_exceeded() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "j2").await?;
    let _: Job =
        common::create(&c.client, "j2", job("flaky", json!({ "backoffLimit": 1 }))).await?;
    let api: Api<Job> = Api::namespaced(c.client.clone(), "j2");
    let (reason, j) = common::wait_for(60, "job failed", || async {
        if let Some(done) = condition(&api, "flaky", "Failed").await? {
            return Ok(Some(done));
        }
        for p in common::live_pods(&c.client, "j2", "job-name=flaky").await? {
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Failed") {
                common::finish_pod(&c.client, &p, "Failed").await?;
            }
        }
        Ok(None)
    })
    .await?;
    assert_eq!(reason, "BackoffLimitExceeded");
    assert_eq!(j.status.unwrap_or_default().failed, Some(2));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexed_job_gives_each_pod_an_index_and_finishes_when_all_succeed() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "j3").await?;
    let spec = json!({ "completions": 3, "parallelism": 3, "completionMode": "Indexed", "ttlSecondsAfterFinished": 0 });
    let _: Job = common::create(&c.client, "j3", job("idx", spec)).await?;
    let pods = common::wait_for(20, "3 indexed pods", || async {
        let p = common::live_pods(&c.client, "j3", "job-name=idx").await?;
        Ok((p.len() == 3).then_some(p))
    })
    .await?;
    let indexes: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| {
            p.annotations()
                .get("batch.kubernetes.io/job-completion-index")
                .cloned()
        })
        .collect();
    assert_eq!(
        indexes,
        BTreeSet::from(["0".into(), "1".into(), "2".into()])
    );
    for p in &pods {
        let i = p
            .annotations()
            .get("batch.kubernetes.io/job-completion-index")
            .cloned()
            .unwrap_or_default();
        let spec = p.spec.clone().unwrap_or_default();
        assert_eq!(spec.hostname, Some(format!("idx-{i}")));
        let env = spec.containers[0].env.clone().unwrap_or_default();
        assert!(env.iter().any(|e| e.name == "JOB_COMPLETION_INDEX" && e.value.as_deref() == Some(i.as_str())));
        common::finish_pod(&c.client, p, "Succeeded").await?;
    }
    // ttlSecondsAfterFinished: 0 deletes the Job as soon as it is complete.
    let api: Api<Job> = Api::namespaced(c.client.clone(), "j3");
    common::wait_for(30, "finished job deleted by TTL", || async {
        Ok(api.get_opt("idx").await?.is_none().then_some(()))
    })
    .await?;
    Ok(())
}
