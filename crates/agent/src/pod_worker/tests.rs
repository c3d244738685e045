//! Pod worker state machine tests: the emulated runtime, a recording reporter, tokio's paused
//! clock. Each case lists checkpoints (seconds after the pod arrives → what kubectl would show).

use std::sync::Mutex;

use super::*;
use crate::runtime::emulated::{EmulatedConfig, EmulatedRuntime};
use crate::windows::{self, OS_MISMATCH_MESSAGE, WindowsVersion};

#[derive(Default)]
struct Recorder {
    statuses: Mutex<Vec<PodStatus>>,
    events: Mutex<Vec<(String, String)>>,
    deleted: Mutex<bool>,
}

#[async_trait]
impl Reporter for Recorder {
    async fn status(&self, _pod: &Pod, status: &PodStatus) -> Result<(), ReportError> {
        self.statuses.lock().expect("lock").push(status.clone());
        Ok(())
    }
    async fn event(
        &self,
        _pod: &Pod,
        _fp: Option<&str>,
        _t: EventType,
        reason: &str,
        message: &str,
    ) {
        self.events
            .lock()
            .expect("lock")
            .push((reason.to_string(), message.to_string()));
    }
    async fn delete(&self, _pod: &Pod) -> Result<(), ReportError> {
        *self.deleted.lock().expect("lock") = true;
        Ok(())
    }
}

impl Recorder {
    fn last(&self) -> PodStatus {
        self.statuses
            .lock()
            .expect("lock")
            .last()
            .cloned()
            .unwrap_or_default()
    }
    fn reasons(&self) -> Vec<String> {
        self.events
            .lock()
            .expect("lock")
            .iter()
            .map(|(r, _)| r.clone())
            .collect()
    }
}

fn context(os: NodeOs, build: Option<WindowsVersion>, rec: Arc<Recorder>) -> Arc<WorkerContext> {
    let clock = Clock::new();
    let runtime = EmulatedRuntime::new(EmulatedConfig::new(os, build), clock).expect("runtime");
    Arc::new(WorkerContext {
        node_name: "n".into(),
        node_os: os,
        host_ip: "127.0.0.11".into(),
        runtime: Arc::new(runtime),
        reporter: rec,
        secrets: Arc::new(crate::pull_secrets::NoSecrets),
        clock,
    })
}

fn pod(json: serde_json::Value) -> Pod {
    let mut p: Pod = serde_json::from_value(json).expect("pod fixture");
    p.metadata.uid = Some("uid-1".into());
    p.metadata.namespace = Some("default".into());
    p
}

/// What one checkpoint expects: phase, the first container's state (`waiting:<reason>`,
/// `running`, `terminated:<reason>`), its readiness and restart count.
struct Expect {
    at: u64,
    phase: &'static str,
    state: &'static str,
    ready: bool,
    restarts: i32,
}

fn state_of(s: &PodStatus) -> (String, bool, i32) {
    let Some(cs) = s.container_statuses.as_ref().and_then(|v| v.first()) else {
        return ("none".into(), false, 0);
    };
    let st = cs.state.clone().unwrap_or_default();
    let text = if let Some(w) = st.waiting {
        format!("waiting:{}", w.reason.unwrap_or_default())
    } else if st.running.is_some() {
        "running".to_string()
    } else if let Some(t) = st.terminated {
        format!("terminated:{}", t.reason.unwrap_or_default())
    } else {
        "unknown".into()
    };
    (text, cs.ready, cs.restart_count)
}

async fn run_case(
    name: &str,
    os: NodeOs,
    build: Option<WindowsVersion>,
    p: Pod,
    expects: &[Expect],
) -> Arc<Recorder> {
    let rec = Arc::new(Recorder::default());
    let worker = PodWorker::new(
        context(os, build, rec.clone()),
        p,
        Some("10.244.0.2".into()),
    );
    let (tx, rx) = mpsc::channel(8);
    let handle = tokio::spawn(worker.run(rx));
    let start = Instant::now();
    for e in expects {
        tokio::time::sleep_until(start + Duration::from_secs(e.at) + Duration::from_millis(1))
            .await;
        let s = rec.last();
        let (state, ready, restarts) = state_of(&s);
        assert_eq!(
            (
                s.phase.as_deref().unwrap_or_default(),
                state.as_str(),
                ready,
                restarts
            ),
            (e.phase, e.state, e.ready, e.restarts),
            "{name} at {}s (events: {:?})",
            e.at,
            rec.reasons()
        );
    }
    drop(tx);
    let _ = handle.await;
    rec
}

fn simple(annotations: serde_json::Value, extra_spec: serde_json::Value) -> Pod {
    let mut spec = serde_json::json!({"containers": [{"name": "app", "image": "busybox:1.36"}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    pod(serde_json::json!({"metadata": {"name": "p", "annotations": annotations}, "spec": spec}))
}

const fn ex(
    at: u64,
    phase: &'static str,
    state: &'static str,
    ready: bool,
    restarts: i32,
) -> Expect {
    Expect {
        at,
        phase,
        state,
        ready,
        restarts,
    }
}

#[tokio::test(start_paused = true)]
async fn pod_state_machine_transitions() {
    type Case = (
        &'static str,
        NodeOs,
        Option<WindowsVersion>,
        Pod,
        Vec<Expect>,
    );
    let cases: Vec<Case> = vec![
        (
            "default: starts and keeps running, ready",
            NodeOs::Linux,
            None,
            simple(serde_json::json!({}), serde_json::json!({})),
            vec![
                ex(1, "Running", "running", true, 0),
                ex(600, "Running", "running", true, 0),
            ],
        ),
        (
            "start delay keeps the container creating",
            NodeOs::Linux,
            None,
            simple(
                serde_json::json!({"emulated.tandem.dev/start-delay": "5s"}),
                serde_json::json!({}),
            ),
            vec![
                ex(2, "Pending", "waiting:ContainerCreating", false, 0),
                ex(6, "Running", "running", true, 0),
            ],
        ),
        (
            "readiness delay: ready only after it",
            NodeOs::Linux,
            None,
            simple(
                serde_json::json!({"emulated.tandem.dev/readiness": "pass-after:30s"}),
                serde_json::json!({}),
            ),
            vec![
                ex(10, "Running", "running", false, 0),
                ex(29, "Running", "running", false, 0),
                ex(32, "Running", "running", true, 0),
            ],
        ),
        (
            "readinessProbe initialDelaySeconds gates readiness",
            NodeOs::Linux,
            None,
            pod(
                serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "busybox:1.36",
                "readinessProbe": {"exec": {"command": ["true"]}, "initialDelaySeconds": 20, "periodSeconds": 5}}]}}),
            ),
            vec![
                ex(19, "Running", "running", false, 0),
                ex(21, "Running", "running", true, 0),
            ],
        ),
        (
            "crash loop: immediate restart, then 10 s, 20 s back-off",
            NodeOs::Linux,
            None,
            simple(
                serde_json::json!({"emulated.tandem.dev/run-for": "1s", "emulated.tandem.dev/exit-code": "2"}),
                serde_json::json!({}),
            ),
            vec![
                // busybox pulls in 0.3 s; each run lasts 1 s.
                ex(2, "Running", "running", true, 1),
                ex(3, "Running", "waiting:CrashLoopBackOff", false, 1),
                ex(13, "Running", "running", true, 2),
                ex(15, "Running", "waiting:CrashLoopBackOff", false, 2),
                ex(25, "Running", "waiting:CrashLoopBackOff", false, 2),
                ex(34, "Running", "running", true, 3),
            ],
        ),
        (
            "restartPolicy Never with exit 0 succeeds",
            NodeOs::Linux,
            None,
            simple(
                serde_json::json!({"emulated.tandem.dev/run-for": "3s"}),
                serde_json::json!({"restartPolicy": "Never"}),
            ),
            vec![
                ex(1, "Running", "running", true, 0),
                ex(4, "Succeeded", "terminated:Completed", false, 0),
            ],
        ),
        (
            "restartPolicy OnFailure with exit 1 restarts",
            NodeOs::Linux,
            None,
            simple(
                serde_json::json!({"emulated.tandem.dev/run-for": "3s", "emulated.tandem.dev/exit-code": "1"}),
                serde_json::json!({"restartPolicy": "OnFailure"}),
            ),
            vec![ex(4, "Running", "running", true, 1)],
        ),
        (
            "restartPolicy Never with exit 1 fails",
            NodeOs::Linux,
            None,
            simple(
                serde_json::json!({"emulated.tandem.dev/exit-code": "1"}),
                serde_json::json!({"restartPolicy": "Never"}),
            ),
            vec![ex(1, "Failed", "terminated:Error", false, 0)],
        ),
        (
            "liveness failure restarts after failureThreshold periods",
            NodeOs::Linux,
            None,
            pod(
                serde_json::json!({"metadata": {"name": "p", "annotations": {"emulated.tandem.dev/liveness": "fail-after:10s"}},
                "spec": {"containers": [{"name": "app", "image": "busybox:1.36",
                "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 5, "failureThreshold": 2}}]}}),
            ),
            vec![
                ex(9, "Running", "running", true, 0),
                ex(16, "Running", "running", true, 1),
            ],
        ),
        (
            "init containers run first, in order",
            NodeOs::Linux,
            None,
            pod(
                serde_json::json!({"metadata": {"name": "p", "annotations": {"emulated.tandem.dev/run-for.init-a": "5s"}},
                "spec": {"initContainers": [{"name": "init-a", "image": "busybox:1.36"}, {"name": "init-b", "image": "busybox:1.36"}],
                "containers": [{"name": "app", "image": "busybox:1.36"}]}}),
            ),
            vec![
                ex(3, "Pending", "waiting:PodInitializing", false, 0),
                ex(6, "Running", "running", true, 0),
            ],
        ),
        (
            "image pull follows size and bandwidth (Server Core ≈ 30 s at 100 MB/s)",
            NodeOs::Windows,
            Some(windows::SERVER_2019),
            pod(
                serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "mcr.microsoft.com/windows/servercore:ltsc2019"}]}}),
            ),
            vec![
                ex(20, "Pending", "waiting:ContainerCreating", false, 0),
                ex(31, "Running", "running", true, 0),
            ],
        ),
        (
            "Windows 2022 host: ltsc2019 image waits with the OS mismatch",
            NodeOs::Windows,
            Some(windows::SERVER_2022),
            pod(
                serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "mcr.microsoft.com/windows/nanoserver:ltsc2019", "imagePullPolicy": "IfNotPresent"}]}}),
            ),
            vec![
                ex(5, "Pending", "waiting:CreateContainerError", false, 0),
                ex(60, "Pending", "waiting:CreateContainerError", false, 0),
            ],
        ),
        (
            "Windows never OOM-kills",
            NodeOs::Windows,
            Some(windows::SERVER_2022),
            simple(
                serde_json::json!({"emulated.tandem.dev/oom-after": "5s"}),
                serde_json::json!({}),
            ),
            vec![ex(30, "Running", "running", true, 0)],
        ),
        (
            "Linux OOM-kills and restarts",
            NodeOs::Linux,
            None,
            simple(
                serde_json::json!({"emulated.tandem.dev/oom-after": "5s"}),
                serde_json::json!({"restartPolicy": "Never"}),
            ),
            vec![ex(6, "Failed", "terminated:OOMKilled", false, 0)],
        ),
        (
            "Windows memory-backed emptyDir never mounts",
            NodeOs::Windows,
            Some(windows::SERVER_2019),
            simple(
                serde_json::json!({}),
                serde_json::json!({"volumes": [{"name": "cache", "emptyDir": {"medium": "Memory"}}]}),
            ),
            vec![ex(30, "Pending", "waiting:ContainerCreating", false, 0)],
        ),
    ];
    for (name, os, build, p, expects) in cases {
        run_case(name, os, build, p, &expects).await;
    }
}

#[tokio::test(start_paused = true)]
async fn os_mismatch_message_and_events_are_the_windows_ones() {
    let p = pod(
        serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "mcr.microsoft.com/windows/servercore:ltsc2019"}]}}),
    );
    let rec = run_case(
        "mismatch",
        NodeOs::Windows,
        Some(windows::SERVER_2022),
        p,
        &[ex(40, "Pending", "waiting:CreateContainerError", false, 0)],
    )
    .await;
    let s = rec.last();
    let msg = s
        .container_statuses
        .and_then(|v| v.first().cloned())
        .and_then(|c| c.state)
        .and_then(|s| s.waiting)
        .and_then(|w| w.message);
    assert_eq!(msg.as_deref(), Some(OS_MISMATCH_MESSAGE));
    let events = rec.events.lock().expect("lock").clone();
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Failed" && m == &format!("Error: {OS_MISMATCH_MESSAGE}")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Pulling" && m.contains("servercore:ltsc2019"))
    );
}

#[tokio::test(start_paused = true)]
async fn memory_empty_dir_on_windows_reports_failed_mount() {
    let p = simple(
        serde_json::json!({}),
        serde_json::json!({"volumes": [{"name": "cache", "emptyDir": {"medium": "Memory"}}]}),
    );
    let rec = run_case(
        "mount",
        NodeOs::Windows,
        Some(windows::SERVER_2019),
        p,
        &[ex(5, "Pending", "waiting:ContainerCreating", false, 0)],
    )
    .await;
    assert!(rec.reasons().contains(&"FailedMount".to_string()));
}

#[tokio::test(start_paused = true)]
async fn deletion_runs_pre_stop_stops_with_grace_and_deletes() {
    let rec = Arc::new(Recorder::default());
    let p = pod(
        serde_json::json!({"metadata": {"name": "p", "annotations": {"emulated.tandem.dev/stop-delay": "5s", "emulated.tandem.dev/pre-stop": "2s"}},
        "spec": {"terminationGracePeriodSeconds": 30, "containers": [{"name": "app", "image": "busybox:1.36",
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", "2"]}}}}]}}),
    );
    let worker = PodWorker::new(
        context(NodeOs::Linux, None, rec.clone()),
        p.clone(),
        Some("10.244.0.2".into()),
    );
    let (tx, rx) = mpsc::channel(8);
    let handle = tokio::spawn(worker.run(rx));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rec.last().phase.as_deref(), Some("Running"));
    let mut deleting = p.clone();
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    deleting.metadata.deletion_grace_period_seconds = Some(30);
    let t0 = Instant::now();
    tx.send(PodUpdate::Changed(Box::new(deleting)))
        .await
        .expect("send");
    let outcome = handle.await.expect("worker");
    assert_eq!(outcome, WorkerOutcome::Deleted);
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(7) && took < Duration::from_secs(8),
        "preStop 2s + stop 5s, took {took:?}"
    );
    assert!(*rec.deleted.lock().expect("lock"));
    assert!(rec.reasons().contains(&"Killing".to_string()));
    let (state, ready, _) = state_of(&rec.last());
    assert_eq!((state.as_str(), ready), ("terminated:Completed", false));
    assert_eq!(rec.last().phase.as_deref(), Some("Succeeded"));
}

#[tokio::test(start_paused = true)]
async fn grace_period_bounds_a_slow_stop_and_kills() {
    let rec = Arc::new(Recorder::default());
    let p = pod(
        serde_json::json!({"metadata": {"name": "p", "annotations": {"emulated.tandem.dev/stop-delay": "60s"}},
        "spec": {"terminationGracePeriodSeconds": 3, "containers": [{"name": "app", "image": "busybox:1.36"}]}}),
    );
    let worker = PodWorker::new(context(NodeOs::Linux, None, rec.clone()), p.clone(), None);
    let (tx, rx) = mpsc::channel(8);
    let handle = tokio::spawn(worker.run(rx));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut deleting = p.clone();
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    deleting.metadata.deletion_grace_period_seconds = Some(3);
    let t0 = Instant::now();
    tx.send(PodUpdate::Changed(Box::new(deleting)))
        .await
        .expect("send");
    handle.await.expect("worker");
    assert!(t0.elapsed() <= Duration::from_secs(4));
    let cs = rec
        .last()
        .container_statuses
        .and_then(|v| v.first().cloned())
        .expect("status");
    let term = cs.state.and_then(|s| s.terminated).expect("terminated");
    assert_eq!(term.exit_code, 137);
    assert_eq!(rec.last().phase.as_deref(), Some("Failed"));
}

#[tokio::test(start_paused = true)]
async fn never_pull_policy_without_the_image_waits_err_image_never_pull() {
    let p = pod(
        serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "example.com/app:1", "imagePullPolicy": "Never"}]}}),
    );
    let rec = run_case(
        "never",
        NodeOs::Linux,
        None,
        p,
        &[ex(2, "Pending", "waiting:ErrImageNeverPull", false, 0)],
    )
    .await;
    assert!(rec.events.lock().expect("lock").iter().any(|(_, m)| m
        == "Container image \"example.com/app:1\" is not present with pull policy of Never"));
}

#[tokio::test(start_paused = true)]
async fn status_conditions_and_fields_kubectl_shows() {
    let p = simple(
        serde_json::json!({"emulated.tandem.dev/readiness": "pass-after:5s"}),
        serde_json::json!({}),
    );
    let rec = run_case(
        "fields",
        NodeOs::Linux,
        None,
        p,
        &[ex(2, "Running", "running", false, 0)],
    )
    .await;
    let s = rec.statuses.lock().expect("lock")[..]
        .iter()
        .next_back()
        .cloned()
        .unwrap_or_default();
    let conds: Vec<(String, String)> = s
        .conditions
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        conds,
        [
            ("PodReadyToStartContainers", "True"),
            ("Initialized", "True"),
            ("ContainersReady", "False"),
            ("Ready", "False"),
            ("PodScheduled", "True")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    assert_eq!(s.pod_ip.as_deref(), Some("10.244.0.2"));
    assert_eq!(s.host_ip.as_deref(), Some("127.0.0.11"));
    assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    assert!(s.start_time.is_some());
    let cs = s
        .container_statuses
        .and_then(|v| v.first().cloned())
        .expect("container status");
    assert!(
        cs.container_id
            .as_deref()
            .is_some_and(|id| id.starts_with("emulated://"))
    );
    assert!(cs.image_id.starts_with("sha256:"));
    assert_eq!(cs.started, Some(true));
    let ready = s
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .expect("ready");
    assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some("containers with unready status: [app]")
    );
}

#[test]
fn go_durations_format_like_go() {
    assert_eq!(go_duration(Duration::from_secs(10)), "10s");
    assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
    assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
    assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
    assert_eq!(go_duration(Duration::ZERO), "0s");
}

/// The named ephemeral container's state as `running`, `terminated:<exit code>` or
/// `waiting:<reason>`, with its restart count and readiness.
fn ephemeral_state(s: &PodStatus, name: &str) -> Option<(String, i32, bool)> {
    let cs = s
        .ephemeral_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)?;
    let st = cs.state.clone().unwrap_or_default();
    let text = if let Some(w) = st.waiting {
        format!("waiting:{}", w.reason.unwrap_or_default())
    } else if st.running.is_some() {
        "running".to_string()
    } else if let Some(t) = st.terminated {
        format!("terminated:{}", t.exit_code)
    } else {
        "unknown".into()
    };
    Some((text, cs.restart_count, cs.ready))
}

#[tokio::test(start_paused = true)]
async fn an_ephemeral_container_added_to_a_running_pod_runs_once_and_is_never_restarted() {
    let rec = Arc::new(Recorder::default());
    let p = simple(
        serde_json::json!({"emulated.tandem.dev/run-for.dbg": "5s",
                           "emulated.tandem.dev/exit-code.dbg": "3"}),
        serde_json::json!({}),
    );
    let worker = PodWorker::new(
        context(NodeOs::Linux, None, rec.clone()),
        p.clone(),
        Some("10.244.0.2".into()),
    );
    let (tx, rx) = mpsc::channel(8);
    let handle = tokio::spawn(worker.run(rx));
    let start = Instant::now();
    tokio::time::sleep_until(start + Duration::from_secs(2)).await;
    assert_eq!(rec.last().phase.as_deref(), Some("Running"));
    assert!(rec.last().ephemeral_container_statuses.is_none());

    // `kubectl debug` adds an ephemeral container through the subresource.
    let mut debugged = p;
    debugged.spec.as_mut().expect("spec").ephemeral_containers =
        Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
            name: "dbg".into(),
            image: Some("busybox:1.36".into()),
            target_container_name: Some("app".into()),
            ..Default::default()
        }]);
    tx.send(PodUpdate::Changed(Box::new(debugged)))
        .await
        .expect("send");
    tokio::time::sleep_until(start + Duration::from_secs(4)).await;
    let s = rec.last();
    assert_eq!(
        ephemeral_state(&s, "dbg"),
        Some(("running".into(), 0, false))
    );
    // Only the regular container counts for the pod: still Running and ready.
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(s.container_statuses.as_ref().map(Vec::len), Some(1));
    assert!(
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );

    // It exits with 3 and stays terminated: ephemeral containers are never restarted.
    tokio::time::sleep_until(start + Duration::from_secs(120)).await;
    let s = rec.last();
    assert_eq!(
        ephemeral_state(&s, "dbg"),
        Some(("terminated:3".into(), 0, false))
    );
    assert_eq!(s.phase.as_deref(), Some("Running"));
    let started = rec
        .events
        .lock()
        .expect("lock")
        .iter()
        .filter(|(r, m)| r == "Started" && m.contains("dbg"))
        .count();
    assert_eq!(started, 1, "started once: {:?}", rec.reasons());
    drop(tx);
    let _ = handle.await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_pull_shows_err_image_pull_then_backs_off_10s_doubling() {
    // A Windows image on a Linux node: every pull fails.
    let image = "mcr.microsoft.com/windows/nanoserver:ltsc2022";
    let p = pod(serde_json::json!({"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "app", "image": image}]
    }}));
    let rec = run_case(
        "pull back-off",
        NodeOs::Linux,
        None,
        p,
        &[
            ex(5, "Pending", "waiting:ImagePullBackOff", false, 0),
            ex(25, "Pending", "waiting:ImagePullBackOff", false, 0),
        ],
    )
    .await;
    let shown: Vec<String> = rec
        .statuses
        .lock()
        .expect("lock")
        .iter()
        .map(|s| state_of(s).0)
        .collect();
    assert!(
        shown.iter().any(|s| s == "waiting:ErrImagePull"),
        "{shown:?}"
    );
    let events = rec.events.lock().expect("lock").clone();
    // Pulls at 0 s and 10 s (back-off 10 s), the next one only at 30 s (20 s).
    let pulls = events.iter().filter(|(r, _)| r == "Pulling").count();
    assert_eq!(pulls, 2, "{events:?}");
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "BackOff" && m == &format!("Back-off pulling image \"{image}\"")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Failed"
                && m.starts_with(&format!("Failed to pull image \"{image}\": "))),
        "{events:?}"
    );
    let last = rec.last();
    let message = state_of_message(&last);
    assert!(
        message.starts_with(&format!(
            "Back-off pulling image \"{image}\": ErrImagePull: "
        )),
        "{message}"
    );
}

fn state_of_message(s: &PodStatus) -> String {
    s.container_statuses
        .as_ref()
        .and_then(|v| v.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|st| st.waiting.as_ref())
        .and_then(|w| w.message.clone())
        .unwrap_or_default()
}
