//! The Job controller — upstream's `pkg/controller/job` — with the TTL-after-finished controller
//! (`pkg/controller/ttlafterfinished`) folded in.
//!
//! A Job runs pods until `completions` of them succeed (or, without `completions`, until one
//! succeeds and the rest finish), at most `parallelism` at a time. It fails when more than
//! `backoffLimit` pods failed (`BackoffLimitExceeded`) or it ran longer than
//! `activeDeadlineSeconds` (`DeadlineExceeded`). Indexed Jobs give each pod a completion index
//! (annotation, label, `JOB_COMPLETION_INDEX`, hostname `<job>-<index>`) and finish when every
//! index succeeded. A finished Job with `ttlSecondsAfterFinished` is deleted (foreground) once
//! the TTL has passed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::{EnvVar, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::controller_utils::{
    self as cu, Expectations, SyncResult, controller_of, controller_ref, pod_is_ready,
};
use crate::informer::{Informer, split_key};
use crate::replicaset::{BURST_REPLICAS, pod_from_template};
use crate::workqueue::WorkQueue;

/// Annotation and label holding an Indexed Job pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

struct Ctx {
    client: kube::Client,
    jobs: Informer<Job>,
    pods: Informer<Pod>,
    expectations: Expectations,
    queue: WorkQueue,
}

/// Runs the Job controller until the runtime stops.
pub async fn run(client: kube::Client, pods: Informer<Pod>) {
    let jobs = Informer::<Job>::start(client.clone());
    let ctx = Arc::new(Ctx {
        client,
        jobs,
        pods,
        expectations: Expectations::default(),
        queue: WorkQueue::named("job"),
    });
    let mut job_events = ctx.jobs.subscribe();
    let mut pod_events = ctx.pods.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.jobs, &ctx.pods]).await;
    ctx.queue.add_keys(&ctx.jobs.list());
    ctx.queue.run_workers_for(
        4,
        "job",
        &ctx,
        |ctx, key| async move { sync(&ctx, &key).await },
    );
    loop {
        tokio::select! {
            Some(change) = job_events.recv() => {
                ctx.queue.add_keys(change.objects());
            }
            Some(change) = pod_events.recv() => {
                ctx.queue.add_controller_keys(change.objects(), "Job");
            }
            else => return,
        }
    }
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn index_of(p: &Pod) -> Option<i32> {
    p.annotations()
        .get(COMPLETION_INDEX)
        .and_then(|v| v.parse().ok())
}

fn finished_condition(job: &Job) -> Option<&JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
}

/// Renders indexes as upstream's `completedIndexes`: `0-2,4`.
pub fn format_indexes(set: &BTreeSet<i32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

fn condition(type_: &str, reason: &str, message: &str) -> JobCondition {
    let now = Time(cu::now());
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let Some(job) = ctx.jobs.get(ns, name) else {
        ctx.expectations.forget(key);
        return Ok(None);
    };
    let job_api: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    if let Some(done) = finished_condition(&job) {
        return ttl_after_finished(&job_api, &job, done).await;
    }
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let uid = job.uid().unwrap_or_default();
    let spec = job.spec.clone().unwrap_or_default();
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let completions = spec.completions;
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let suspended = spec.suspend == Some(true);
    let status = job.status.clone().unwrap_or_default();
    let now = cu::now();

    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .list_namespace(ns)
        .into_iter()
        .filter(|p| controller_of(&p.metadata).is_some_and(|r| r.uid == uid))
        .collect();
    let active: Vec<&Arc<Pod>> = pods
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && !matches!(phase(p), Some("Succeeded" | "Failed"))
        })
        .collect();
    let succeeded_indexes: BTreeSet<i32> = if indexed {
        pods.iter()
            .filter(|p| phase(p) == Some("Succeeded"))
            .filter_map(|p| index_of(p))
            .filter(|i| completions.is_none_or(|c| *i < c))
            .collect()
    } else {
        BTreeSet::new()
    };
    let counted_succeeded = if indexed {
        i32::try_from(succeeded_indexes.len()).unwrap_or(i32::MAX)
    } else {
        i32::try_from(
            pods.iter()
                .filter(|p| phase(p) == Some("Succeeded"))
                .count(),
        )
        .unwrap_or(i32::MAX)
    };
    // Pods may be deleted after they finished; counts never go down.
    let succeeded = counted_succeeded.max(status.succeeded.unwrap_or(0));
    let failed = i32::try_from(pods.iter().filter(|p| phase(p) == Some("Failed")).count())
        .unwrap_or(i32::MAX)
        .max(status.failed.unwrap_or(0));
    let ready =
        i32::try_from(active.iter().filter(|p| pod_is_ready(p)).count()).unwrap_or(i32::MAX);

    let start_time = status
        .start_time
        .clone()
        .or_else(|| (!suspended).then_some(Time(now)));
    let mut conditions = status.conditions.clone().unwrap_or_default();
    let mut completion_time = status.completion_time.clone();
    let mut finished = false;
    let mut requeue: Option<Duration> = None;

    let deadline_exceeded = match (spec.active_deadline_seconds, &start_time) {
        (Some(d), Some(st)) if !suspended => {
            let elapsed = now.as_second() - st.0.as_second();
            if elapsed >= d {
                true
            } else {
                requeue = Some(Duration::from_secs((d - elapsed).unsigned_abs()));
                false
            }
        }
        _ => false,
    };
    let failure = if failed > backoff_limit {
        Some((
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        ))
    } else if deadline_exceeded {
        Some((
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        ))
    } else {
        None
    };
    let complete = match completions {
        _ if failure.is_some() => false,
        Some(c) => succeeded >= c,
        None => succeeded > 0 && active.is_empty(),
    };

    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let satisfied = ctx
        .expectations
        .satisfied(key, |n| cu::seen_in(&ctx.pods, ns, n));
    let mut sync_error = None;
    if let Some((reason, message)) = failure {
        delete_pods(&pod_api, &active).await?;
        conditions.push(condition("FailureTarget", reason, message));
        conditions.push(condition("Failed", reason, message));
        finished = true;
    } else if complete {
        delete_pods(&pod_api, &active).await?;
        let msg = "Reached expected number of succeeded pods";
        conditions.push(condition("SuccessCriteriaMet", "CompletionsReached", msg));
        conditions.push(condition("Complete", "CompletionsReached", msg));
        completion_time = Some(Time(now));
        finished = true;
    } else if satisfied {
        let want = if suspended {
            0
        } else {
            match completions {
                Some(c) => parallelism.min((c - succeeded).max(0)),
                None if succeeded > 0 => 0,
                None => parallelism,
            }
        };
        let want = usize::try_from(want).unwrap_or(0);
        if active.len() > want {
            let mut victims: Vec<&Arc<Pod>> = active.clone();
            victims.sort_by(|a, b| cu::compare_for_deletion(a, 0, b, 0));
            victims.truncate(active.len() - want);
            ctx.expectations
                .expect_deletions(key, victims.iter().map(|p| p.name_any()));
            delete_pods(&pod_api, &victims).await?;
        } else if active.len() < want {
            let mut count = (want - active.len()).min(BURST_REPLICAS);
            let mut indexes: Vec<Option<i32>> = Vec::new();
            if indexed {
                let busy: BTreeSet<i32> = active.iter().filter_map(|p| index_of(p)).collect();
                let total = completions.unwrap_or(0);
                indexes = (0..total)
                    .filter(|i| !succeeded_indexes.contains(i) && !busy.contains(i))
                    .take(count)
                    .map(Some)
                    .collect();
                count = indexes.len();
            }
            let template = spec.template.clone();
            let base = pod_from_template(
                &template,
                &job.name_any(),
                controller_ref("batch/v1", "Job", &job.name_any(), &uid),
            );
            let mut next = indexes.into_iter();
            let (created, err) = cu::slow_start_batch(count, || {
                let mut pod = base.clone();
                if let Some(Some(i)) = next.next() {
                    set_index(&mut pod, &job.name_any(), i);
                }
                let api = pod_api.clone();
                async move { api.create(&PostParams::default(), &pod).await }
            })
            .await;
            ctx.expectations
                .expect_creations(key, created.into_iter().map(|p| p.name_any()));
            if let Some(e) = err
                && !cu::is_namespace_terminating(&e)
            {
                sync_error = Some(e);
            }
        }
    }

    let active_count = if finished {
        0
    } else {
        i32::try_from(active.len()).unwrap_or(i32::MAX)
    };
    let mut new_status = json!({
        "active": active_count,
        "succeeded": succeeded,
        "failed": failed,
        "ready": if finished { 0 } else { ready },
        "conditions": conditions,
    });
    if let Some(st) = &start_time {
        new_status["startTime"] = json!(st);
    }
    if let Some(ct) = &completion_time {
        new_status["completionTime"] = json!(ct);
    }
    if indexed {
        new_status["completedIndexes"] = json!(format_indexes(&succeeded_indexes));
    }
    let old_status = serde_json::to_value(&status)?;
    let changed = [
        "active",
        "succeeded",
        "failed",
        "ready",
        "startTime",
        "completionTime",
        "completedIndexes",
    ]
    .iter()
    .any(|k| old_status.get(*k).unwrap_or(&json!(0)) != new_status.get(*k).unwrap_or(&json!(0)))
        || conditions.len() != status.conditions.as_ref().map_or(0, Vec::len);
    if changed {
        cu::merge_patch_status(&job_api, name, &json!({ "status": new_status })).await?;
    }
    if let Some(e) = sync_error {
        return Err(e.into());
    }
    Ok(requeue.map(|d| d + Duration::from_millis(100)))
}

/// Gives an Indexed Job pod its completion index.
fn set_index(pod: &mut Pod, job_name: &str, index: i32) {
    let i = index.to_string();
    pod.metadata.generate_name = Some(format!("{job_name}-{i}-"));
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert(COMPLETION_INDEX.into(), i.clone());
    pod.metadata
        .labels
        .get_or_insert_default()
        .insert(COMPLETION_INDEX.into(), i.clone());
    if let Some(spec) = pod.spec.as_mut() {
        if spec.hostname.is_none() {
            spec.hostname = Some(format!("{job_name}-{i}"));
        }
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            c.env.get_or_insert_default().push(EnvVar {
                name: "JOB_COMPLETION_INDEX".into(),
                value: Some(i.clone()),
                value_from: None,
            });
        }
    }
}

async fn delete_pods(api: &Api<Pod>, pods: &[&Arc<Pod>]) -> Result<(), cu::Error> {
    for r in futures::future::join_all(pods.iter().map(|p| {
        let name = p.name_any();
        async move { api.delete(&name, &DeleteParams::default()).await }
    }))
    .await
    {
        match r {
            Ok(_) => {}
            Err(e) if cu::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Upstream's TTL-after-finished controller: delete the Job (and, in the foreground, its pods)
/// `ttlSecondsAfterFinished` after it finished.
async fn ttl_after_finished(api: &Api<Job>, job: &Job, done: &JobCondition) -> SyncResult {
    let Some(ttl) = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) else {
        return Ok(None);
    };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let finished_at = job
        .status
        .as_ref()
        .and_then(|s| s.completion_time.clone())
        .or_else(|| done.last_transition_time.clone())
        .map_or(cu::now().as_second(), |t| t.0.as_second());
    let left = finished_at + i64::from(ttl) - cu::now().as_second();
    if left > 0 {
        return Ok(Some(Duration::from_secs(left.unsigned_abs())));
    }
    match api
        .delete(&job.name_any(), &DeleteParams::foreground())
        .await
    {
        Ok(_) => Ok(None),
        Err(e) if cu::is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_indexes_are_compressed_into_ranges() {
        assert_eq!(
            format_indexes(&BTreeSet::from([0, 1, 2, 4, 6, 7])),
            "0-2,4,6-7"
        );
        assert_eq!(format_indexes(&BTreeSet::new()), "");
    }
}
