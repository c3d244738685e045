//! The CronJob controller — upstream's `pkg/controller/cronjob` (`ControllerV2.syncCronJob`).
//!
//! Each sync: reconcile `status.active` with the Jobs the CronJob owns (finished ones leave it
//! with a `SawCompletedJob` event; `lastSuccessfulTime` follows successful completions), delete
//! finished Jobs beyond `successfulJobsHistoryLimit`/`failedJobsHistoryLimit` (3 and 1 by
//! default), then — unless `suspend` — find the most recent unmet schedule time since
//! `lastScheduleTime` (or creation), no earlier than `startingDeadlineSeconds` ago
//! (`mostRecentScheduleTime`). More than 100 missed times give the `TooManyMissedTimes`
//! warning; a time older than the deadline is skipped with `MissSchedule`. `Forbid` skips while a
//! Job is active (`JobAlreadyActive`), `Replace` deletes the active Jobs first, `Allow` just runs.
//! The Job is named `<cronjob>-<scheduled unix time in minutes>` (so a start is never made twice)
//! and annotated `batch.kubernetes.io/cronjob-scheduled-timestamp`. Schedules are evaluated in
//! `spec.timeZone` (or a `TZ=` prefix, or UTC as tandem's controller manager runs in UTC).
//!
//! The controller reads time only from its [`Clock`](crate::clock::Clock) and, besides
//! requeueing each CronJob for its next time, re-examines every CronJob each `resync_period`, so
//! tests can move a fake clock.

use std::sync::Arc;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::clock::{self, SharedClock};
use crate::controller_utils::{self as cu, SyncResult, controller_of, controller_ref};
use crate::cron_schedule::{self, Schedule};
use crate::events::{self, EventType};
use crate::informer::{Informer, split_key};
use crate::workqueue::WorkQueue;

/// Annotation with the time a Job was scheduled for, RFC 3339 in the CronJob's time zone.
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// Missed start times above which the `TooManyMissedTimes` warning is given.
pub const MAX_MISSED_WARNING: usize = 100;
/// Missed start times counted at most (beyond this only the most recent one matters).
const MAX_MISSED_COUNT: usize = 100_000;
const COMPONENT: &str = "cronjob-controller";

/// How the controller keeps time.
#[derive(Clone)]
pub struct CronJobOptions {
    pub clock: SharedClock,
    /// How often every CronJob is re-examined regardless of its next time.
    pub resync_period: Duration,
}

impl Default for CronJobOptions {
    fn default() -> Self {
        CronJobOptions {
            clock: clock::system(),
            resync_period: Duration::from_secs(10),
        }
    }
}

struct Ctx {
    client: kube::Client,
    cronjobs: Informer<CronJob>,
    jobs: Informer<Job>,
    queue: WorkQueue,
    clock: SharedClock,
}

/// Runs the CronJob controller until the runtime stops.
pub async fn run(client: kube::Client, options: CronJobOptions) {
    let ctx = Arc::new(Ctx {
        cronjobs: Informer::start(client.clone()),
        jobs: Informer::start(client.clone()),
        client,
        queue: WorkQueue::named("cronjob"),
        clock: options.clock,
    });
    let mut cj_events = ctx.cronjobs.subscribe();
    let mut job_events = ctx.jobs.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.cronjobs, &ctx.jobs]).await;
    ctx.queue
        .run_workers_for(2, "cronjob", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    let mut resync = tokio::time::interval(options.resync_period);
    loop {
        tokio::select! {
            _ = resync.tick() => {
                ctx.queue.add_keys(&ctx.cronjobs.list());
            }
            Some(change) = cj_events.recv() => {
                ctx.queue.add_keys(change.objects());
            }
            Some(change) = job_events.recv() => {
                ctx.queue.add_controller_keys(change.objects(), "CronJob");
            }
            else => return,
        }
    }
}

/// The Job name for a scheduled time — upstream `getJobName`.
pub fn job_name(cronjob: &str, scheduled: Timestamp) -> String {
    format!("{cronjob}-{}", scheduled.as_second().div_euclid(60))
}

/// `Complete` or `Failed`, when the Job has finished.
fn finished(job: &Job) -> Option<&str> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| c.type_.as_str())
}

/// The most recent schedule time in `(earliest, now]` and how many there were — upstream
/// `mostRecentScheduleTime`.
pub fn most_recent(
    schedule: &Schedule,
    tz: &TimeZone,
    earliest: Timestamp,
    now: Timestamp,
) -> (Option<Timestamp>, usize) {
    let mut t = earliest;
    let mut last = None;
    let mut count = 0;
    while let Some(n) = schedule.next(t, tz) {
        if n > now {
            break;
        }
        count += 1;
        last = Some(n);
        t = n;
        if count >= MAX_MISSED_COUNT {
            // Only the latest matters from here on: restart a day before now.
            let day_ago = now
                .saturating_sub(SignedDuration::from_hours(24))
                .unwrap_or(now);
            if day_ago > t {
                t = day_ago;
            }
        }
    }
    (last, count)
}

fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        field_path: None,
    }
}

async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let Some(cj) = ctx.cronjobs.get(ns, name) else {
        return Ok(None);
    };
    if cj.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let spec = cj.spec.clone().unwrap_or_default();
    let status = cj.status.clone().unwrap_or_default();
    let uid = cj.uid().unwrap_or_default();
    let now = ctx.clock.now();
    let job_api: Api<Job> = Api::namespaced(ctx.client.clone(), ns);

    let jobs: Vec<Arc<Job>> = ctx
        .jobs
        .list_namespace(ns)
        .into_iter()
        .filter(|j| controller_of(&j.metadata).is_some_and(|r| r.uid == uid))
        .collect();

    // Reconcile `active` with the Jobs that exist.
    let mut active: Vec<ObjectReference> = Vec::new();
    for r in status.active.iter().flatten() {
        let rname = r.name.clone().unwrap_or_default();
        match jobs.iter().find(|j| j.name_any() == rname) {
            Some(j) if finished(j).is_some() => {
                events::record(
                    &ctx.client,
                    COMPONENT,
                    cj.as_ref(),
                    EventType::Normal,
                    "SawCompletedJob",
                    &format!(
                        "Saw completed job: {rname}, status: {}",
                        finished(j).unwrap_or_default()
                    ),
                )
                .await;
            }
            Some(_) => active.push(r.clone()),
            // Not in the cache: it may be new, ask the server.
            None => {
                if job_api
                    .get_opt(&rname)
                    .await?
                    .is_some_and(|j| finished(&j).is_none())
                {
                    active.push(r.clone());
                }
            }
        }
    }
    for j in &jobs {
        if finished(j).is_none()
            && j.metadata.deletion_timestamp.is_none()
            && !active.iter().any(|r| r.uid == j.metadata.uid)
        {
            active.push(job_ref(j));
        }
    }
    let mut last_successful = status.last_successful_time.clone();
    for j in jobs.iter().filter(|j| finished(j) == Some("Complete")) {
        if let Some(ct) = j.status.as_ref().and_then(|s| s.completion_time.clone())
            && last_successful.as_ref().is_none_or(|l| l.0 < ct.0)
        {
            last_successful = Some(ct);
        }
    }

    // History limits.
    for (kind, limit) in [
        ("Complete", spec.successful_jobs_history_limit.unwrap_or(3)),
        ("Failed", spec.failed_jobs_history_limit.unwrap_or(1)),
    ] {
        let mut done: Vec<&Arc<Job>> = jobs
            .iter()
            .filter(|j| finished(j) == Some(kind) && j.metadata.deletion_timestamp.is_none())
            .collect();
        let keep = usize::try_from(limit.max(0)).unwrap_or(0);
        if done.len() <= keep {
            continue;
        }
        done.sort_by_key(|j| {
            j.status
                .as_ref()
                .and_then(|s| s.start_time.clone())
                .or_else(|| j.metadata.creation_timestamp.clone())
                .map(|t| t.0)
        });
        let excess = done.len() - keep;
        for j in done.into_iter().take(excess) {
            delete_job(ctx, &job_api, &cj, j).await?;
        }
    }

    let mut last_schedule = status.last_schedule_time.clone();
    let mut requeue = None;
    if spec.suspend != Some(true) {
        let (outcome, next) = schedule(ctx, &cj, &job_api, &mut active, now).await?;
        if let Some(t) = outcome {
            last_schedule = Some(Time(t));
        }
        requeue = next;
    }

    let new_status = json!({
        "active": active,
        "lastScheduleTime": last_schedule,
        "lastSuccessfulTime": last_successful,
    });
    let old_status = json!({
        "active": status.active.clone().unwrap_or_default(),
        "lastScheduleTime": status.last_schedule_time,
        "lastSuccessfulTime": status.last_successful_time,
    });
    if new_status != old_status {
        let api: Api<CronJob> = Api::namespaced(ctx.client.clone(), ns);
        cu::merge_patch_status(&api, name, &json!({ "status": new_status })).await?;
    }
    Ok(requeue)
}

async fn delete_job(ctx: &Ctx, api: &Api<Job>, cj: &CronJob, job: &Job) -> Result<(), cu::Error> {
    match api
        .delete(&job.name_any(), &DeleteParams::background())
        .await
    {
        Ok(_) => {
            events::record(
                &ctx.client,
                COMPONENT,
                cj,
                EventType::Normal,
                "SuccessfulDelete",
                &format!("Deleted job {}", job.name_any()),
            )
            .await;
            Ok(())
        }
        Err(e) if cu::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Starts the Job for the most recent unmet schedule time, if any; returns the time it was
/// scheduled for (when a Job now exists for it) and when to look again.
async fn schedule(
    ctx: &Ctx,
    cj: &CronJob,
    api: &Api<Job>,
    active: &mut Vec<ObjectReference>,
    now: Timestamp,
) -> Result<(Option<Timestamp>, Option<Duration>), cu::Error> {
    let spec = cj.spec.clone().unwrap_or_default();
    let parsed = match cron_schedule::parse(&spec.schedule) {
        Ok(p) => p,
        Err(e) => {
            warn_once(
                ctx,
                cj,
                "InvalidSchedule",
                &format!("invalid schedule: {}: {e}", spec.schedule),
            )
            .await;
            return Ok((None, None));
        }
    };
    let tz = match spec.time_zone.as_deref() {
        Some(name) => match TimeZone::get(name) {
            Ok(tz) => tz,
            Err(_) => {
                warn_once(
                    ctx,
                    cj,
                    "UnknownTimeZone",
                    &format!("invalid timeZone: {name:?}"),
                )
                .await;
                return Ok((None, None));
            }
        },
        None => parsed.time_zone.clone().unwrap_or(TimeZone::UTC),
    };
    let until_next = |from: Timestamp| {
        parsed.schedule.next(from, &tz).map(|n| {
            let d = now.duration_until(n).unsigned_abs();
            d + Duration::from_millis(100)
        })
    };
    let created = cj.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
    let mut earliest = cj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map_or(created, |t| t.0);
    if let Some(d) = spec.starting_deadline_seconds {
        let deadline = now
            .saturating_sub(SignedDuration::from_secs(d))
            .unwrap_or(now);
        if deadline > earliest {
            earliest = deadline;
        }
    }
    let (recent, missed) = most_recent(&parsed.schedule, &tz, earliest, now);
    let Some(scheduled) = recent else {
        return Ok((None, until_next(now)));
    };
    if missed > MAX_MISSED_WARNING {
        events::record(&ctx.client, COMPONENT, cj, EventType::Warning, "TooManyMissedTimes",
            &format!("too many missed start times: {missed}. Set or decrease .spec.startingDeadlineSeconds or check clock skew")).await;
    }
    if let Some(d) = spec.starting_deadline_seconds
        && scheduled
            .saturating_add(SignedDuration::from_secs(d))
            .unwrap_or(scheduled)
            < now
    {
        events::record(
            &ctx.client,
            COMPONENT,
            cj,
            EventType::Warning,
            "MissSchedule",
            &format!(
                "Missed scheduled time to start a job: {}",
                scheduled.strftime("%a, %d %b %Y %H:%M:%S %z")
            ),
        )
        .await;
        return Ok((None, until_next(now)));
    }
    let name = job_name(&cj.name_any(), scheduled);
    if active
        .iter()
        .any(|r| r.name.as_deref() == Some(name.as_str()))
        || ctx
            .jobs
            .get(&cj.namespace().unwrap_or_default(), &name)
            .is_some()
    {
        return Ok((Some(scheduled), until_next(now)));
    }
    match spec.concurrency_policy.as_deref() {
        Some("Forbid") if !active.is_empty() => {
            events::record(&ctx.client, COMPONENT, cj, EventType::Normal, "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid").await;
            return Ok((None, until_next(now)));
        }
        Some("Replace") => {
            for r in active.drain(..) {
                let rname = r.name.clone().unwrap_or_default();
                if let Some(j) = api.get_opt(&rname).await? {
                    delete_job(ctx, api, cj, &j).await?;
                }
            }
        }
        _ => {}
    }
    let template = spec.job_template;
    let tm = template.metadata.clone().unwrap_or_default();
    let mut annotations = tm.annotations.unwrap_or_default();
    annotations.insert(
        SCHEDULED_TIMESTAMP.into(),
        scheduled
            .to_zoned(tz.clone())
            .strftime("%Y-%m-%dT%H:%M:%S%:z")
            .to_string(),
    );
    let job = Job {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: cj.namespace(),
            labels: tm.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![controller_ref(
                "batch/v1",
                "CronJob",
                &cj.name_any(),
                &cj.uid().unwrap_or_default(),
            )]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    };
    match api.create(&PostParams::default(), &job).await {
        Ok(j) => {
            events::record(
                &ctx.client,
                COMPONENT,
                cj,
                EventType::Normal,
                "SuccessfulCreate",
                &format!("Created job {name}"),
            )
            .await;
            active.push(job_ref(&j));
        }
        Err(e) if cu::is_already_exists(&e) => {}
        Err(e) => {
            events::record(
                &ctx.client,
                COMPONENT,
                cj,
                EventType::Warning,
                "FailedCreate",
                &format!("Error creating job: {e}"),
            )
            .await;
            return Err(e.into());
        }
    }
    Ok((Some(scheduled), until_next(now)))
}

/// A warning for a spec problem, recorded once per CronJob generation.
async fn warn_once(ctx: &Ctx, cj: &CronJob, reason: &str, message: &str) {
    static SEEN: std::sync::Mutex<Vec<(String, i64, String)>> = std::sync::Mutex::new(Vec::new());
    let key = (
        cj.uid().unwrap_or_default(),
        cj.metadata.generation.unwrap_or(0),
        reason.to_string(),
    );
    {
        let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        if seen.contains(&key) {
            return;
        }
        seen.push(key);
    }
    events::record(
        &ctx.client,
        COMPONENT,
        cj,
        EventType::Warning,
        reason,
        message,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missed_times_are_counted_and_the_latest_is_chosen() -> Result<(), cron_schedule::CronError> {
        let p = cron_schedule::parse("* * * * *")?;
        let t0: Timestamp = "2024-01-01T00:00:30Z"
            .parse()
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let now = t0
            .saturating_add(SignedDuration::from_mins(180))
            .unwrap_or(t0);
        let (last, n) = most_recent(&p.schedule, &TimeZone::UTC, t0, now);
        assert_eq!(n, 180);
        assert_eq!(
            last.map(|t| t.to_string()).as_deref(),
            Some("2024-01-01T03:00:00Z")
        );
        assert_eq!(
            job_name(
                "cj",
                "2024-01-01T03:00:00Z"
                    .parse()
                    .unwrap_or(Timestamp::UNIX_EPOCH)
            ),
            "cj-28401300"
        );
        Ok(())
    }
}
