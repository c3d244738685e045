//! End-to-end: more entries of the Kubernetes conformance list (docs/conformance.md), shown
//! with raw API requests and kubectl. One test runs against a control plane without nodes
//! (`tandem server`): status, scale and finalize subresources, namespace deletion, quota usage
//! and scopes, label-selected watches, the full verb set of several kinds (CronJobs, CSRs,
//! events.k8s.io Events, EndpointSlices, Ingresses, IngressClasses, RuntimeClasses, Nodes,
//! CSINodes, CSIDrivers, PVs, PVCs, suspended Jobs), CRD status, listing, discovery and watches,
//! aggregated discovery, strict field validation, ServiceAccount token automount and
//! kube-root-ca.crt, garbage collection of ReplicationControllers and pod cycles, and kubectl's
//! run, patch, replace, diff, expose and proxy. The other runs workloads on the emulated nodes
//! of `tandem up`: ReplicationController, Deployment, Job, DaemonSet and pod lifecycles, pod
//! adoption and release, RuntimeClass scheduling, Service endpoints following pods, and
//! kubectl describe.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;
mod raw_api;

use std::io::{ErrorKind, Read, Write};
use std::thread;
use std::time::{Duration, Instant};

use common::Server;
use raw_api::{Api, Conn, Reply};
use serde_json::{Value, json};

const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
/// The longest any single wait for a controller may take.
const WAIT: Duration = Duration::from_secs(60);
const IMAGE: &str = "tandem.local/busybox:1";

fn api(s: &Server) -> Api {
    Api::new(&s.data_dir(), &s.url()).unwrap()
}

#[track_caller]
fn expect(reply: Reply, code: u16) -> Value {
    assert_eq!(reply.code, code, "{}", reply.body);
    reply.json()
}

#[track_caller]
fn get(api: &Api, path: &str) -> Value {
    expect(api.request("GET", path, None).unwrap(), 200)
}

#[track_caller]
fn post(api: &Api, path: &str, body: &Value) -> Value {
    expect(
        api.request("POST", path, Some(&body.to_string())).unwrap(),
        201,
    )
}

#[track_caller]
fn merge(api: &Api, path: &str, body: &Value) -> Value {
    expect(
        api.request_as("PATCH", path, MERGE, &body.to_string())
            .unwrap(),
        200,
    )
}

/// A merge patch of a scale subresource. tandem answers 409 when a controller writes the object
/// between its read and its write (upstream re-applies such a patch), so a conflict is retried.
#[track_caller]
fn merge_scale(api: &Api, path: &str, body: &Value) -> Value {
    for _ in 0..10 {
        let reply = api
            .request_as("PATCH", path, MERGE, &body.to_string())
            .unwrap();
        match reply.code {
            200 => return reply.json(),
            409 => thread::sleep(Duration::from_millis(200)),
            code => panic!("PATCH {path} answered {code}: {}", reply.body),
        }
    }
    panic!("PATCH {path} kept conflicting");
}

fn code(api: &Api, method: &str, path: &str) -> u16 {
    api.request(method, path, None).unwrap().code
}

/// DELETE `path` (with optional DeleteOptions), which must be accepted.
#[track_caller]
fn delete(api: &Api, path: &str, options: Option<Value>) {
    let body = options.map(|o| o.to_string());
    let reply = api.request("DELETE", path, body.as_deref()).unwrap();
    assert!(
        reply.code == 200 || reply.code == 202,
        "DELETE {path}: {} {}",
        reply.code,
        reply.body
    );
}

/// Polls `check` every 200 ms until it gives `Some`, for at most [`WAIT`].
#[track_caller]
fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(200));
    }
}

#[track_caller]
fn wait_gone(api: &Api, path: &str) {
    wait_for(&format!("{path} to be gone"), || {
        (code(api, "GET", path) == 404).then_some(())
    });
}

/// Reads `read`, applies `change`, PUTs the result to `write`; a conflict (a controller wrote
/// meanwhile) reads again, a few times at most.
#[track_caller]
fn replace_at(api: &Api, read: &str, write: &str, change: impl Fn(&mut Value)) -> Value {
    for _ in 0..10 {
        let mut obj = get(api, read);
        change(&mut obj);
        let reply = api.request("PUT", write, Some(&obj.to_string())).unwrap();
        match reply.code {
            200 => return reply.json(),
            409 => thread::sleep(Duration::from_millis(200)),
            code => panic!("PUT {write} answered {code}: {}", reply.body),
        }
    }
    panic!("PUT {write} kept conflicting");
}

#[track_caller]
fn replace(api: &Api, path: &str, change: impl Fn(&mut Value)) -> Value {
    replace_at(api, path, path, change)
}

/// The names in a list answer, sorted.
fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

/// Creates namespace `name` and waits for its default ServiceAccount (pods need it).
fn namespace(api: &Api, name: &str) {
    post(
        api,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    );
    let sa = format!("/api/v1/namespaces/{name}/serviceaccounts/default");
    wait_for(&sa, || (code(api, "GET", &sa) == 200).then_some(()));
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": IMAGE}]}})
}

fn template(app: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}},
           "spec": {"containers": [{"name": "c", "image": IMAGE}]}})
}

fn rc(name: &str, replicas: u32, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": name},
           "spec": {"replicas": replicas, "selector": {"app": app}, "template": template(app)}})
}

fn apps(kind: &str, name: &str, replicas: u32) -> Value {
    let mut spec = json!({"selector": {"matchLabels": {"app": name}}, "template": template(name)});
    if kind != "DaemonSet" {
        spec["replicas"] = json!(replicas);
    }
    if kind == "StatefulSet" {
        spec["serviceName"] = json!(name);
    }
    json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec})
}

fn condition(kind: &str) -> Value {
    json!({"type": kind, "status": "True", "reason": "E2E", "message": format!("{kind} by the e2e test"),
           "lastTransitionTime": "2024-01-01T00:00:00Z"})
}

fn has_condition(obj: &Value, kind: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == kind))
}

fn push_condition(obj: &mut Value, cond: Value) {
    if !obj["status"]["conditions"].is_array() {
        obj["status"]["conditions"] = json!([]);
    }
    obj["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(cond);
}

/// An open watch and its not yet parsed bytes.
struct Watch {
    conn: Conn,
    pending: Vec<u8>,
}

impl Watch {
    #[track_caller]
    fn start(api: &Api, path: &str) -> Watch {
        let mut conn = api.connect(WAIT).unwrap();
        let sep = if path.contains('?') { '&' } else { '?' };
        let code = conn.start_stream(&format!("{path}{sep}watch=1")).unwrap();
        assert_eq!(code, 200, "watch {path}");
        Watch {
            conn,
            pending: Vec::new(),
        }
    }

    fn next(&mut self) -> Value {
        loop {
            if let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return serde_json::from_slice(&line).unwrap();
            }
            let chunk = self
                .conn
                .next_chunk()
                .unwrap()
                .expect("the watch stays open");
            self.pending.extend_from_slice(&chunk);
        }
    }

    /// The next event of type `kind` for `name`, skipping others.
    fn until(&mut self, kind: &str, name: &str) -> Value {
        for _ in 0..10_000 {
            let event = self.next();
            if event["type"] == kind && event["object"]["metadata"]["name"] == name {
                return event;
            }
        }
        panic!("no {kind} event for {name}");
    }

    /// `(type, name)` of the next `n` events.
    fn take(&mut self, n: usize) -> Vec<(String, String)> {
        (0..n)
            .map(|_| {
                let e = self.next();
                (
                    e["type"].as_str().unwrap().to_string(),
                    e["object"]["metadata"]["name"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            })
            .collect()
    }

    /// No further event arrives within `quiet`.
    fn assert_quiet(&mut self, quiet: Duration) {
        assert!(
            !self.pending.contains(&b'\n'),
            "unexpected event: {}",
            String::from_utf8_lossy(&self.pending)
        );
        self.conn.set_read_timeout(quiet).unwrap();
        match self.conn.next_chunk() {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Ok(Some(chunk)) => panic!("unexpected event: {}", String::from_utf8_lossy(&chunk)),
            other => panic!("the watch ended: {other:?}"),
        }
    }
}

/// Creates three labelled objects at `collection` from `make(name)` under a watch, reads one,
/// lists them by label (across namespaces too), merge-patches one, replaces it, checks a stale
/// replace conflicts, deletes one, then deletes the rest by collection; the watch sees every
/// step.
fn lifecycle(api: &Api, collection: &str, make: impl Fn(&str) -> Value) {
    let selector = "labelSelector=suite%3Dmore";
    let mut watch = Watch::start(api, &format!("{collection}?{selector}"));
    let all = ["more-a", "more-b", "more-c"];
    for name in all {
        let mut obj = make(name);
        obj["metadata"]["labels"]["suite"] = json!("more");
        let created = post(api, collection, &obj);
        assert_eq!(created["metadata"]["name"], name);
    }
    for name in all {
        watch.until("ADDED", name);
    }
    let item = |name: &str| format!("{collection}/{name}");
    let got = get(api, &item("more-a"));
    assert_eq!(got["metadata"]["labels"]["suite"], "more");
    let listed = get(api, &format!("{collection}?{selector}"));
    assert_eq!(names(&listed), all);
    if let Some((group, rest)) = collection.split_once("/namespaces/") {
        let plural = rest.split_once('/').unwrap().1;
        let across = get(api, &format!("{group}/{plural}?{selector}"));
        assert_eq!(names(&across), all);
    }
    let patched = merge(
        api,
        &item("more-a"),
        &json!({"metadata": {"labels": {"patched": "yes"}}}),
    );
    assert_eq!(
        patched["metadata"]["labels"]["patched"], "yes",
        "{collection}"
    );
    assert_eq!(
        patched["metadata"]["labels"]["suite"], "more",
        "{collection}"
    );
    // (A controller may write the object first: look for the patched copy.)
    loop {
        let event = watch.until("MODIFIED", "more-a");
        if event["object"]["metadata"]["labels"]["patched"] == "yes" {
            break;
        }
    }

    let replaced = replace(api, &item("more-a"), |o| {
        o["metadata"]["annotations"]["replaced"] = json!("true");
    });
    assert_eq!(replaced["metadata"]["annotations"]["replaced"], "true");
    assert_eq!(replaced["metadata"]["labels"]["patched"], "yes");
    assert_ne!(
        replaced["metadata"]["resourceVersion"],
        patched["metadata"]["resourceVersion"]
    );
    assert_eq!(
        get(api, &item("more-a"))["metadata"]["annotations"]["replaced"],
        "true"
    );
    let stale = api
        .request("PUT", &item("more-a"), Some(&patched.to_string()))
        .unwrap();
    assert_eq!(stale.code, 409, "{}", stale.body);

    delete(api, &item("more-b"), None);
    wait_gone(api, &item("more-b"));
    watch.until("DELETED", "more-b");
    delete(api, &format!("{collection}?{selector}"), None);
    wait_for(&format!("{collection} emptied by deletecollection"), || {
        names(&get(api, &format!("{collection}?{selector}")))
            .is_empty()
            .then_some(())
    });
    let mut deleted = Vec::new();
    while deleted.len() < 2 {
        let event = watch.next();
        if event["type"] == "DELETED" {
            deleted.push(
                event["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
    }
    deleted.sort();
    assert_eq!(deleted, ["more-a", "more-c"]);
}

/// Reads `item`/status, replaces the status with one more condition and merge-patches another
/// (with an annotation): both answers carry them, and the spec does not change.
fn status_conditions(api: &Api, item: &str) {
    let status = format!("{item}/status");
    let read = get(api, &status);
    assert_eq!(read["metadata"]["name"], get(api, item)["metadata"]["name"]);
    let spec = read["spec"].clone();
    let updated = replace(api, &status, |o| {
        push_condition(o, condition("StatusUpdate"))
    });
    assert!(has_condition(&updated, "StatusUpdate"), "{updated}");
    let patched = merge(
        api,
        &status,
        &json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"conditions": [condition("StatusPatched")]}}),
    );
    assert!(has_condition(&patched, "StatusPatched"), "{patched}");
    assert_eq!(patched["metadata"]["annotations"]["patchedstatus"], "true");
    assert_eq!(patched["spec"], spec);
}

/// The scale subresource of `item` (made with one replica): read, replaced, patched.
fn scale_roundtrip(api: &Api, item: &str) {
    let path = format!("{item}/scale");
    let scale = get(api, &path);
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 1);
    let updated = replace(api, &path, |s| s["spec"]["replicas"] = json!(2));
    assert_eq!(updated["spec"]["replicas"], 2);
    assert_eq!(get(api, item)["spec"]["replicas"], 2);
    let patched = merge_scale(api, &path, &json!({"spec": {"replicas": 3}}));
    assert_eq!(patched["spec"]["replicas"], 3);
    assert_eq!(get(api, item)["spec"]["replicas"], 3);
    // The controller's pods show in the scale's status.
    wait_for(&format!("{path} status.replicas"), || {
        (get(api, &path)["status"]["replicas"].as_u64().unwrap_or(0) >= 1).then_some(())
    });
}

/// `group/version` discovery lists `resources`.
fn discovery_lists(api: &Api, group_version: &str, resources: &[&str]) {
    let path = if group_version == "v1" {
        "/api/v1".to_string()
    } else {
        format!("/apis/{group_version}")
    };
    let doc = get(api, &path);
    let served: Vec<&str> = doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for r in resources {
        assert!(served.contains(r), "{group_version} lacks {r}: {served:?}");
    }
}

/// [sig-api-machinery] Namespaces: update, status, finalize, and Services removed with it.
fn namespaces(_s: &Server, api: &Api) {
    let ns = "more-ns-life";
    let item = format!("/api/v1/namespaces/{ns}");
    namespace(api, ns);
    // Update (PUT).
    let updated = replace(api, &item, |o| {
        o["metadata"]["labels"]["e2e-update"] = json!("yes");
    });
    assert_eq!(updated["metadata"]["labels"]["e2e-update"], "yes");
    assert_eq!(get(api, &item)["metadata"]["labels"]["e2e-update"], "yes");
    // Status subresource.
    assert_eq!(
        get(api, &format!("{item}/status"))["status"]["phase"],
        "Active"
    );
    status_conditions(api, &item);
    assert!(has_condition(&get(api, &item), "StatusPatched"));
    // Finalize: a finalizer is added to the spec through /finalize, then removed.
    let fake = "e2e.example.com/fakeFinalizer";
    let finalized = replace_at(api, &item, &format!("{item}/finalize"), |o| {
        o["spec"]["finalizers"]
            .as_array_mut()
            .unwrap()
            .push(json!(fake));
    });
    assert!(
        finalized["spec"]["finalizers"]
            .as_array()
            .unwrap()
            .contains(&json!(fake))
    );
    let read = get(api, &item);
    assert_eq!(read["spec"]["finalizers"], json!(["kubernetes", fake]));
    let unfinalized = replace_at(api, &item, &format!("{item}/finalize"), |o| {
        o["spec"]["finalizers"] = json!(["kubernetes"]);
    });
    assert_eq!(unfinalized["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(get(api, &item)["spec"]["finalizers"], json!(["kubernetes"]));
    // Deleting the namespace removes its Services; a namespace of the same name starts empty.
    post(
        api,
        &format!("{item}/services"),
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "doomed"},
                "spec": {"ports": [{"port": 80}], "selector": {"app": "doomed"}}}),
    );
    delete(api, &item, None);
    wait_gone(api, &item);
    assert_eq!(code(api, "GET", &format!("{item}/services/doomed")), 404);
    namespace(api, ns);
    assert!(names(&get(api, &format!("{item}/services"))).is_empty());
}

/// [sig-api-machinery] ResourceQuota: status subresource; update and delete.
fn quota_status_update_delete(_s: &Server, api: &Api) {
    let ns = "more-quota";
    namespace(api, ns);
    let quotas = format!("/api/v1/namespaces/{ns}/resourcequotas");
    let item = format!("{quotas}/status-quota");
    post(
        api,
        &quotas,
        &json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "status-quota"},
                "spec": {"hard": {"cpu": "500m", "memory": "500Mi"}}}),
    );
    wait_for("the quota's status", || {
        (get(api, &item)["status"]["hard"]["cpu"] == "500m").then_some(())
    });
    let status = format!("{item}/status");
    assert_eq!(get(api, &status)["status"]["hard"]["memory"], "500Mi");
    let patched = merge(
        api,
        &status,
        &json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"hard": {"cpu": "1", "memory": "1Gi"}}}),
    );
    assert_eq!(patched["status"]["hard"]["cpu"], "1");
    assert_eq!(patched["spec"]["hard"]["cpu"], "500m");
    assert_eq!(patched["metadata"]["annotations"]["patchedstatus"], "true");
    let updated = replace(api, &status, |o| {
        o["status"]["hard"] = json!({"cpu": "2", "memory": "2Gi"});
        o["spec"]["hard"]["cpu"] = json!("3");
    });
    assert_eq!(updated["status"]["hard"]["cpu"], "2");
    assert_eq!(updated["spec"]["hard"]["cpu"], "500m");
    let read = get(api, &status);
    assert_eq!(read["status"]["hard"]["memory"], "2Gi");
    assert_eq!(
        read["spec"]["hard"],
        json!({"cpu": "500m", "memory": "500Mi"})
    );

    // Update the limits, then delete.
    let item = format!("{quotas}/update-quota");
    post(
        api,
        &quotas,
        &json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "update-quota"},
                "spec": {"hard": {"cpu": "1", "memory": "500Mi"}}}),
    );
    let updated = replace(api, &item, |o| {
        o["spec"]["hard"]["cpu"] = json!("2");
    });
    assert_eq!(updated["spec"]["hard"]["cpu"], "2");
    wait_for("the quota's status to follow", || {
        (get(api, &item)["status"]["hard"]["cpu"] == "2").then_some(())
    });
    delete(api, &item, None);
    assert_eq!(code(api, "GET", &item), 404);
}

fn used(api: &Api, quota: &str, key: &str) -> Option<String> {
    get(api, quota)["status"]["used"][key]
        .as_str()
        .map(str::to_string)
}

#[track_caller]
fn wait_used(api: &Api, quota: &str, key: &str, want: &str) {
    wait_for(&format!("{quota} used {key}={want}"), || {
        (used(api, quota, key).as_deref() == Some(want)).then_some(())
    });
}

/// [sig-api-machinery] ResourceQuota captures the life of ConfigMaps, Services and
/// ReplicationControllers.
fn quota_counts_objects(_s: &Server, api: &Api) {
    let ns = "more-usage";
    namespace(api, ns);
    let base = format!("/api/v1/namespaces/{ns}");
    let quota = format!("{base}/resourcequotas/usage");
    post(
        api,
        &format!("{base}/resourcequotas"),
        &json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "usage"},
                "spec": {"hard": {"configmaps": "10", "services": "10", "services.nodeports": "10",
                                  "services.loadbalancers": "10", "replicationcontrollers": "10"}}}),
    );
    let configmaps: u64 = wait_for("the quota's usage", || used(api, &quota, "configmaps"))
        .parse()
        .unwrap();
    wait_used(api, &quota, "services", "0");
    wait_used(api, &quota, "replicationcontrollers", "0");

    post(
        api,
        &format!("{base}/configmaps"),
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "counted"},
                "data": {"k": "v"}}),
    );
    wait_used(api, &quota, "configmaps", &(configmaps + 1).to_string());
    delete(api, &format!("{base}/configmaps/counted"), None);
    wait_used(api, &quota, "configmaps", &configmaps.to_string());

    for (name, kind) in [("counted-ip", "ClusterIP"), ("counted-np", "NodePort")] {
        post(
            api,
            &format!("{base}/services"),
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                    "spec": {"type": kind, "ports": [{"port": 80}], "selector": {"app": name}}}),
        );
    }
    wait_used(api, &quota, "services", "2");
    wait_used(api, &quota, "services.nodeports", "1");
    wait_used(api, &quota, "services.loadbalancers", "0");
    for name in ["counted-ip", "counted-np"] {
        delete(api, &format!("{base}/services/{name}"), None);
    }
    wait_used(api, &quota, "services", "0");
    wait_used(api, &quota, "services.nodeports", "0");

    post(
        api,
        &format!("{base}/replicationcontrollers"),
        &rc("counted-rc", 0, "counted-rc"),
    );
    wait_used(api, &quota, "replicationcontrollers", "1");
    delete(
        api,
        &format!("{base}/replicationcontrollers/counted-rc"),
        None,
    );
    wait_used(api, &quota, "replicationcontrollers", "0");
}

/// [sig-api-machinery] ResourceQuota scopes: BestEffort/NotBestEffort and
/// Terminating/NotTerminating quotas each count only their pods.
fn quota_scopes(_s: &Server, api: &Api) {
    let resources = json!({"requests": {"cpu": "100m", "memory": "64Mi"},
                           "limits": {"cpu": "100m", "memory": "64Mi"}});
    // Scoped quotas in namespace `ns`, waited for until counted.
    let quota = |ns: &str, name: &str, scope: &str, hard: Value| {
        let base = format!("/api/v1/namespaces/{ns}");
        post(
            api,
            &format!("{base}/resourcequotas"),
            &json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name},
                    "spec": {"hard": hard, "scopes": [scope]}}),
        );
        let path = format!("{base}/resourcequotas/{name}");
        wait_used(api, &path, "pods", "0");
        path
    };
    let create = |ns: &str, name: &str, resources: Option<&Value>, deadline: bool| {
        let mut p = pod(name);
        if let Some(r) = resources {
            p["spec"]["containers"][0]["resources"] = r.clone();
        }
        if deadline {
            p["spec"]["activeDeadlineSeconds"] = json!(3600);
        }
        post(api, &format!("/api/v1/namespaces/{ns}/pods"), &p);
    };
    let remove = |ns: &str, name: &str| {
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
        delete(api, &format!("{path}?gracePeriodSeconds=0"), None);
        wait_gone(api, &path);
    };

    // BestEffort and NotBestEffort.
    let ns = "more-scope-qos";
    namespace(api, ns);
    let best = quota(ns, "best-effort", "BestEffort", json!({"pods": "5"}));
    let not_best = quota(ns, "not-best-effort", "NotBestEffort", json!({"pods": "5"}));
    create(ns, "best-effort", None, false);
    wait_used(api, &best, "pods", "1");
    assert_eq!(used(api, &not_best, "pods").as_deref(), Some("0"));
    remove(ns, "best-effort");
    wait_used(api, &best, "pods", "0");
    create(ns, "burstable", Some(&resources), false);
    wait_used(api, &not_best, "pods", "1");
    assert_eq!(used(api, &best, "pods").as_deref(), Some("0"));
    remove(ns, "burstable");
    wait_used(api, &not_best, "pods", "0");

    // Terminating (with activeDeadlineSeconds) and NotTerminating.
    let ns = "more-scope-deadline";
    namespace(api, ns);
    let hard = json!({"pods": "5", "requests.cpu": "1", "requests.memory": "1Gi",
                      "limits.cpu": "1", "limits.memory": "1Gi"});
    let terminating = quota(ns, "terminating", "Terminating", hard.clone());
    let not_terminating = quota(ns, "not-terminating", "NotTerminating", hard);
    create(ns, "long-running", Some(&resources), false);
    wait_used(api, &not_terminating, "pods", "1");
    wait_used(api, &not_terminating, "requests.cpu", "100m");
    wait_used(api, &not_terminating, "limits.memory", "64Mi");
    assert_eq!(used(api, &terminating, "pods").as_deref(), Some("0"));
    assert_eq!(
        used(api, &terminating, "requests.cpu").as_deref(),
        Some("0")
    );
    remove(ns, "long-running");
    wait_used(api, &not_terminating, "pods", "0");
    wait_used(api, &not_terminating, "requests.cpu", "0");
    create(ns, "terminating", Some(&resources), true);
    wait_used(api, &terminating, "pods", "1");
    wait_used(api, &terminating, "requests.memory", "64Mi");
    wait_used(api, &terminating, "limits.cpu", "100m");
    assert_eq!(used(api, &not_terminating, "pods").as_deref(), Some("0"));
    remove(ns, "terminating");
    wait_used(api, &terminating, "pods", "0");
    wait_used(api, &terminating, "limits.cpu", "0");
}

/// [sig-api-machinery] Watchers: label-selected watches each see only their ConfigMaps.
fn label_selected_watchers(_s: &Server, api: &Api) {
    let ns = "more-watch";
    namespace(api, ns);
    let cms = format!("/api/v1/namespaces/{ns}/configmaps");
    let key = "watch-this-configmap";
    let mut a = Watch::start(
        api,
        &format!("{cms}?labelSelector={key}%3Dmultiple-watchers-A"),
    );
    let mut b = Watch::start(
        api,
        &format!("{cms}?labelSelector={key}%3Dmultiple-watchers-B"),
    );
    let mut ab = Watch::start(
        api,
        &format!(
            "{cms}?labelSelector={key}%20in%20%28multiple-watchers-A%2Cmultiple-watchers-B%29"
        ),
    );
    let cm = |name: &str, label: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "labels": {key: label}}})
    };
    // A ConfigMap nobody selects.
    post(api, &cms, &cm("unwatched", "multiple-watchers-C"));
    post(api, &cms, &cm("cm-a", "multiple-watchers-A"));
    merge(
        api,
        &format!("{cms}/cm-a"),
        &json!({"data": {"mutation": "1"}}),
    );
    merge(
        api,
        &format!("{cms}/cm-a"),
        &json!({"data": {"mutation": "2"}}),
    );
    delete(api, &format!("{cms}/cm-a"), None);
    post(api, &cms, &cm("cm-b", "multiple-watchers-B"));
    delete(api, &format!("{cms}/cm-b"), None);

    let ev = |t: &str, n: &str| (t.to_string(), n.to_string());
    let a_events = vec![
        ev("ADDED", "cm-a"),
        ev("MODIFIED", "cm-a"),
        ev("MODIFIED", "cm-a"),
        ev("DELETED", "cm-a"),
    ];
    let b_events = vec![ev("ADDED", "cm-b"), ev("DELETED", "cm-b")];
    let mut ab_events = a_events.clone();
    ab_events.extend(b_events.clone());
    assert_eq!(a.take(4), a_events);
    assert_eq!(b.take(2), b_events);
    assert_eq!(ab.take(6), ab_events);
    for w in [&mut a, &mut b, &mut ab] {
        w.assert_quiet(Duration::from_secs(1));
    }
}

/// [sig-apps] CronJob API operations, status included.
fn cronjob_api(_s: &Server, api: &Api) {
    let ns = "more-cron";
    namespace(api, ns);
    let collection = format!("/apis/batch/v1/namespaces/{ns}/cronjobs");
    let cronjob = |name: &str| {
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
               "spec": {"schedule": "*/1 * * * *", "suspend": true, "jobTemplate": {"spec": {"template": {
                   "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": IMAGE}]}}}}}})
    };
    lifecycle(api, &collection, cronjob);
    post(api, &collection, &cronjob("cj-status"));
    let item = format!("{collection}/cj-status");
    let status = format!("{item}/status");
    assert_eq!(get(api, &status)["metadata"]["name"], "cj-status");
    let patched = merge(
        api,
        &status,
        &json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"lastScheduleTime": "2024-05-01T10:00:00Z"}}),
    );
    assert_eq!(
        patched["status"]["lastScheduleTime"],
        "2024-05-01T10:00:00Z"
    );
    assert_eq!(patched["metadata"]["annotations"]["patchedstatus"], "true");
    let updated = replace(api, &status, |o| {
        o["status"]["lastSuccessfulTime"] = json!("2024-05-01T10:01:00Z");
        o["spec"]["schedule"] = json!("*/5 * * * *");
    });
    assert_eq!(
        updated["status"]["lastSuccessfulTime"],
        "2024-05-01T10:01:00Z"
    );
    let read = get(api, &item);
    assert_eq!(read["status"]["lastScheduleTime"], "2024-05-01T10:00:00Z");
    assert_eq!(read["status"]["lastSuccessfulTime"], "2024-05-01T10:01:00Z");
    assert_eq!(read["spec"]["schedule"], "*/1 * * * *");
    delete(api, &item, None);
    wait_gone(api, &item);
}

fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Runs `openssl ARGS` in `dir`.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [sig-auth] Certificates API: CSRs and their approval and status subresources.
fn csr_api(s: &Server, api: &Api) {
    let dir = s.dir();
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "csr.key",
            "-out",
            "csr.pem",
            "-subj",
            "/CN=e2e-more",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "csr.key",
            "-out",
            "cert.pem",
            "-subj",
            "/CN=e2e-more",
            "-days",
            "1",
        ],
    );
    let request = base64(&std::fs::read(dir.join("csr.pem")).unwrap());
    let certificate = base64(&std::fs::read(dir.join("cert.pem")).unwrap());
    discovery_lists(
        api,
        "certificates.k8s.io/v1",
        &[
            "certificatesigningrequests",
            "certificatesigningrequests/approval",
            "certificatesigningrequests/status",
        ],
    );
    let collection = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let csr = |name: &str| {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
               "metadata": {"name": name},
               "spec": {"request": request, "signerName": "e2e.example.com/more",
                        "usages": ["digital signature", "client auth"]}})
    };
    lifecycle(api, collection, csr);
    post(api, collection, &csr("csr-more"));
    let item = format!("{collection}/csr-more");
    let approval = format!("{item}/approval");
    let approved = replace_at(api, &item, &approval, |o| {
        push_condition(
            o,
            json!({"type": "Approved", "status": "True", "reason": "E2E", "message": "approved by e2e"}),
        );
    });
    assert!(has_condition(&approved, "Approved"), "{approved}");
    assert!(has_condition(&get(api, &item), "Approved"));
    let status = format!("{item}/status");
    assert_eq!(get(api, &status)["metadata"]["name"], "csr-more");
    let patched = merge(
        api,
        &status,
        &json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"certificate": certificate}}),
    );
    assert_eq!(patched["status"]["certificate"], certificate);
    assert_eq!(patched["metadata"]["annotations"]["patchedstatus"], "true");
    let updated = replace(api, &status, |o| {
        push_condition(
            o,
            json!({"type": "StatusUpdate", "status": "True", "reason": "E2E", "message": "set by e2e"}),
        );
    });
    assert!(has_condition(&updated, "StatusUpdate"), "{updated}");
    assert!(has_condition(&updated, "Approved"), "{updated}");
    assert_eq!(get(api, &item)["status"]["certificate"], certificate);
    delete(api, &item, None);
    wait_gone(api, &item);
}

/// [sig-apps] scale and status subresources of ReplicaSets, ReplicationControllers,
/// StatefulSets and DaemonSets; Job status and lifecycle; PodDisruptionBudget verbs and status.
fn workload_subresources(_s: &Server, api: &Api) {
    let ns = "more-apps";
    namespace(api, ns);
    let apps_base = format!("/apis/apps/v1/namespaces/{ns}");
    post(
        api,
        &format!("{apps_base}/replicasets"),
        &apps("ReplicaSet", "rs-more", 1),
    );
    let rs = format!("{apps_base}/replicasets/rs-more");
    scale_roundtrip(api, &rs);
    status_conditions(api, &rs);

    let rcs = format!("/api/v1/namespaces/{ns}/replicationcontrollers");
    post(api, &rcs, &rc("rc-more", 1, "rc-more"));
    scale_roundtrip(api, &format!("{rcs}/rc-more"));

    post(
        api,
        &format!("{apps_base}/statefulsets"),
        &apps("StatefulSet", "ss-more", 1),
    );
    let ss = format!("{apps_base}/statefulsets/ss-more");
    scale_roundtrip(api, &ss);
    status_conditions(api, &ss);

    post(
        api,
        &format!("{apps_base}/daemonsets"),
        &apps("DaemonSet", "ds-more", 0),
    );
    status_conditions(api, &format!("{apps_base}/daemonsets/ds-more"));

    // Job status.
    let jobs = format!("/apis/batch/v1/namespaces/{ns}/jobs");
    let job = |name: &str, suspend: bool| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
               "spec": {"suspend": suspend, "template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": "c", "image": IMAGE}]}}}})
    };
    post(api, &jobs, &job("job-status", false));
    let item = format!("{jobs}/job-status");
    let status = format!("{item}/status");
    assert_eq!(get(api, &status)["metadata"]["name"], "job-status");
    let patched = merge(
        api,
        &status,
        &json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"startTime": "2024-05-01T10:00:00Z"}}),
    );
    assert_eq!(patched["status"]["startTime"], "2024-05-01T10:00:00Z");
    assert_eq!(patched["metadata"]["annotations"]["patchedstatus"], "true");
    let updated = replace(api, &status, |o| {
        o["status"]["startTime"] = json!("2024-05-01T10:05:00Z");
    });
    assert_eq!(updated["status"]["startTime"], "2024-05-01T10:05:00Z");
    assert_eq!(
        get(api, &status)["status"]["startTime"],
        "2024-05-01T10:05:00Z"
    );
    // A suspended Job's lifecycle.
    let suspended = format!("/apis/batch/v1/namespaces/{ns}/jobs");
    lifecycle(api, &suspended, |name| job(name, true));

    // PodDisruptionBudgets: create, update, patch, status, delete.
    let pdbs = format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets");
    post(
        api,
        &pdbs,
        &json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb-more"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "pdb-more"}}}}),
    );
    let item = format!("{pdbs}/pdb-more");
    let updated = replace(api, &item, |o| o["spec"]["minAvailable"] = json!(2));
    assert_eq!(updated["spec"]["minAvailable"], 2);
    let patched = merge(api, &item, &json!({"spec": {"minAvailable": 3}}));
    assert_eq!(patched["spec"]["minAvailable"], 3);
    assert_eq!(get(api, &item)["spec"]["minAvailable"], 3);
    status_conditions(api, &item);
    delete(api, &item, None);
    wait_gone(api, &item);
}

/// [sig-network], [sig-node], [sig-instrumentation]: lifecycles of ConfigMaps, Secrets,
/// events.k8s.io Events, EndpointSlices, Ingresses and IngressClasses; Service
/// status; the API server's endpoints; the EndpointSlice of a Service that selects no pods.
fn network_and_config_kinds(_s: &Server, api: &Api) {
    let ns = "more-net";
    namespace(api, ns);
    let core = format!("/api/v1/namespaces/{ns}");
    lifecycle(
        api,
        &format!("{core}/configmaps"),
        |name| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}),
    );
    lifecycle(
        api,
        &format!("{core}/secrets"),
        |name| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {"k": "dg=="}}),
    );
    lifecycle(
        api,
        &format!("/apis/events.k8s.io/v1/namespaces/{ns}/events"),
        |name| {
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name},
                   "eventTime": "2024-05-01T10:00:00.000000Z", "reportingController": "e2e.example.com/more",
                   "reportingInstance": "e2e", "action": "Testing", "reason": "Testing", "type": "Normal",
                   "note": "an e2e event", "regarding": {"kind": "Pod", "namespace": ns, "name": "somepod"}})
        },
    );
    discovery_lists(api, "discovery.k8s.io/v1", &["endpointslices"]);
    lifecycle(
        api,
        &format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"),
        |name| {
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": name},
                   "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}],
                   "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]})
        },
    );
    discovery_lists(
        api,
        "networking.k8s.io/v1",
        &["ingresses", "ingresses/status", "ingressclasses"],
    );
    let ingresses = format!("/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses");
    let ingress = |name: &str| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": name},
               "spec": {"ingressClassName": "e2e-unhandled",
                        "defaultBackend": {"service": {"name": "backend", "port": {"number": 80}}}}})
    };
    lifecycle(api, &ingresses, ingress);
    post(api, &ingresses, &ingress("ing-status"));
    let status = format!("{ingresses}/ing-status/status");
    assert_eq!(get(api, &status)["metadata"]["name"], "ing-status");
    let patched = merge(
        api,
        &status,
        &json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}),
    );
    assert_eq!(
        patched["status"]["loadBalancer"]["ingress"][0]["ip"],
        "203.0.113.7"
    );
    let updated = replace(api, &status, |o| {
        o["status"]["loadBalancer"]["ingress"] = json!([{"hostname": "lb.example.com"}]);
        o["spec"]["ingressClassName"] = json!("changed");
    });
    assert_eq!(
        updated["status"]["loadBalancer"]["ingress"][0]["hostname"],
        "lb.example.com"
    );
    assert_eq!(updated["spec"]["ingressClassName"], "e2e-unhandled");
    lifecycle(api, "/apis/networking.k8s.io/v1/ingressclasses", |name| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": name},
                   "spec": {"controller": "e2e.example.com/more"}})
    });

    // Service status.
    let services = format!("{core}/services");
    post(
        api,
        &services,
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc-status"},
                "spec": {"ports": [{"port": 80}], "selector": {"app": "svc-status"}}}),
    );
    status_conditions(api, &format!("{services}/svc-status"));
    let patched = merge(
        api,
        &format!("{services}/svc-status"),
        &json!({"spec": {"ports": [{"port": 8080}]}}),
    );
    assert_eq!(patched["spec"]["ports"][0]["port"], 8080);
    assert!(has_condition(&patched, "StatusPatched"));
    delete(api, &format!("{services}/svc-status"), None);
    wait_gone(api, &format!("{services}/svc-status"));

    // Services listed across namespaces include default/kubernetes.
    let all = get(api, "/api/v1/services");
    assert!(
        items(&all)
            .iter()
            .any(|s| s["metadata"]["namespace"] == "default"
                && s["metadata"]["name"] == "kubernetes"),
        "{all}"
    );

    // The API server's Endpoints and EndpointSlice agree.
    let endpoints = get(api, "/api/v1/namespaces/default/endpoints/kubernetes");
    let subsets = endpoints["subsets"].as_array().unwrap();
    assert_eq!(subsets.len(), 1, "{endpoints}");
    let ips: Vec<&Value> = subsets[0]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["ip"])
        .collect();
    assert!(!ips.is_empty());
    let slice = get(
        api,
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes",
    );
    let slice_ips: Vec<&Value> = slice["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["addresses"].as_array().unwrap())
        .collect();
    assert_eq!(slice_ips, ips, "{slice}");
    assert_eq!(slice["ports"][0]["port"], subsets[0]["ports"][0]["port"]);

    // A Service that selects no pods gets an empty EndpointSlice, which goes with it.
    post(
        api,
        &services,
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "no-pods"},
                "spec": {"ports": [{"port": 80}], "selector": {"app": "nothing-matches"}}}),
    );
    let slices = format!(
        "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dno-pods"
    );
    let slice = wait_for("the EndpointSlice of no-pods", || {
        items(&get(api, &slices)).into_iter().next()
    });
    assert!(
        slice["endpoints"].as_array().is_none_or(Vec::is_empty),
        "{slice}"
    );
    delete(api, &format!("{services}/no-pods"), None);
    wait_for("the EndpointSlice of no-pods to go", || {
        items(&get(api, &slices)).is_empty().then_some(())
    });
}

/// [sig-storage], [sig-node], [sig-apps]: lifecycles of PVs, PVCs, CSINodes, CSIDrivers,
/// RuntimeClasses and Nodes; PV and PVC status.
fn storage_and_node_kinds(_s: &Server, api: &Api) {
    let ns = "more-storage";
    namespace(api, ns);
    let pv = |name: &str, class: &str| {
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
               "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                        "hostPath": {"path": "/tmp/e2e-more"}, "storageClassName": class,
                        "persistentVolumeReclaimPolicy": "Retain"}})
    };
    let pvc = |name: &str| {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                        "storageClassName": "e2e-no-such-class"}})
    };
    lifecycle(api, "/api/v1/persistentvolumes", |name| {
        pv(name, "e2e-lifecycle")
    });
    let claims = format!("/api/v1/namespaces/{ns}/persistentvolumeclaims");
    lifecycle(api, &claims, pvc);
    // PV status.
    post(
        api,
        "/api/v1/persistentvolumes",
        &pv("pv-status", "e2e-status"),
    );
    let status = "/api/v1/persistentvolumes/pv-status/status";
    assert_eq!(get(api, status)["metadata"]["name"], "pv-status");
    let patched = merge(
        api,
        status,
        &json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"message": "StatusPatched"}}),
    );
    assert_eq!(patched["status"]["message"], "StatusPatched");
    let updated = replace(api, status, |o| {
        o["status"]["message"] = json!("StatusUpdated");
        o["spec"]["capacity"]["storage"] = json!("2Gi");
    });
    assert_eq!(updated["status"]["message"], "StatusUpdated");
    assert_eq!(updated["spec"]["capacity"]["storage"], "1Gi");
    delete(api, "/api/v1/persistentvolumes/pv-status", None);
    wait_gone(api, "/api/v1/persistentvolumes/pv-status");
    // PVC status.
    post(api, &claims, &pvc("pvc-status"));
    status_conditions(api, &format!("{claims}/pvc-status"));
    delete(api, &format!("{claims}/pvc-status"), None);
    wait_gone(api, &format!("{claims}/pvc-status"));

    lifecycle(api, "/apis/storage.k8s.io/v1/csinodes", |name| {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": name},
               "spec": {"drivers": [{"name": "e2e.example.com", "nodeID": name}]}})
    });
    lifecycle(api, "/apis/storage.k8s.io/v1/csidrivers", |name| {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": name},
               "spec": {"attachRequired": false}})
    });
    discovery_lists(api, "node.k8s.io/v1", &["runtimeclasses"]);
    lifecycle(api, "/apis/node.k8s.io/v1/runtimeclasses", |name| {
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
               "handler": "e2e"})
    });
    // Nodes that nothing is scheduled to.
    lifecycle(api, "/api/v1/nodes", |name| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
               "spec": {"unschedulable": true,
                        "taints": [{"key": "e2e.example.com/fake", "effect": "NoSchedule"}]}})
    });
}

/// [sig-node] Pods: QoS class; a RuntimeClass that is gone.
fn pod_admission(_s: &Server, api: &Api) {
    let ns = "more-pods";
    namespace(api, ns);
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let mut guaranteed = pod("guaranteed");
    guaranteed["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}});
    let created = post(api, &pods, &guaranteed);
    assert_eq!(created["status"]["qosClass"], "Guaranteed", "{created}");
    assert_eq!(
        get(api, &format!("{pods}/guaranteed"))["status"]["qosClass"],
        "Guaranteed"
    );

    let classes = "/apis/node.k8s.io/v1/runtimeclasses";
    post(
        api,
        classes,
        &json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": {"name": "gone-class"}, "handler": "e2e"}),
    );
    delete(api, &format!("{classes}/gone-class"), None);
    wait_gone(api, &format!("{classes}/gone-class"));
    let mut p = pod("gone-class");
    p["spec"]["runtimeClassName"] = json!("gone-class");
    let refused = api.request("POST", &pods, Some(&p.to_string())).unwrap();
    assert_eq!(refused.code, 403, "{}", refused.body);
    assert!(refused.body.contains("gone-class"), "{}", refused.body);
}

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const GROUP: &str = "more.e2e.example.com";

fn crd(group: &str, kind: &str, plural: &str, schema: Value) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": format!("{plural}.{group}")},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind,
                              "listKind": format!("{kind}List")},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                                  "schema": {"openAPIV3Schema": schema},
                                  "subresources": {"status": {}}}]}})
}

/// Creates `crd` and waits until it is Established and its resource answers.
fn establish(api: &Api, crd: &Value, resource: &str) {
    post(api, CRDS, crd);
    let item = format!("{CRDS}/{}", crd["metadata"]["name"].as_str().unwrap());
    wait_for(&format!("{item} Established"), || {
        let c = get(api, &item);
        let established = c["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        });
        (established && code(api, "GET", resource) == 200).then_some(())
    });
}

/// [sig-api-machinery] CustomResourceDefinitions: status subresource, list and
/// deletecollection, discovery, aggregated discovery through kubectl, watches of custom
/// objects, and strict field validation of typed and custom objects.
fn custom_resources(s: &Server, api: &Api) {
    let ns = "more-crd";
    namespace(api, ns);
    let widgets = format!("/apis/{GROUP}/v1/namespaces/{ns}/widgets");
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "size": {"type": "integer"},
        "color": {"type": "string"},
        "embedded": {"type": "object", "x-kubernetes-embedded-resource": true,
                     "x-kubernetes-preserve-unknown-fields": true}}}}});
    establish(api, &crd(GROUP, "Widget", "widgets", schema), &widgets);
    let widget_crd = format!("{CRDS}/widgets.{GROUP}");

    // Discovery.
    let groups = get(api, "/apis");
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "apiextensions.k8s.io"
                && g["versions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v["groupVersion"] == "apiextensions.k8s.io/v1")),
        "{groups}"
    );
    discovery_lists(
        api,
        "apiextensions.k8s.io/v1",
        &[
            "customresourcedefinitions",
            "customresourcedefinitions/status",
        ],
    );
    // kubectl's aggregated discovery (APIGroupDiscoveryList) lists the new resource.
    let out = s.kubectl(&["api-resources", &format!("--api-group={GROUP}"), "-v=8"]);
    assert!(out.ok().contains("widgets"), "{}", out.stdout);
    assert!(
        out.stderr
            .lines()
            .any(|l| l.contains("Content-Type") && l.contains("as=APIGroupDiscoveryList")),
        "no aggregated discovery answer:\n{}",
        out.stderr
    );

    // A raw aggregated /apis request lists the new group, its version and resource.
    let (answered, _, body) = request_accepting(s, "GET", "/apis", AGGREGATED_V2, None);
    assert_eq!(answered, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    let group = items(&doc)
        .into_iter()
        .find(|g| g["metadata"]["name"] == GROUP)
        .unwrap_or_else(|| panic!("{GROUP} not in {body}"));
    assert_eq!(group["versions"][0]["version"], "v1", "{group}");
    assert!(
        group["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resource"] == "widgets" && r["responseKind"]["kind"] == "Widget"),
        "{group}"
    );

    // CRD status: read, replaced and patched.
    let status = format!("{widget_crd}/status");
    assert_eq!(
        get(api, &status)["metadata"]["name"],
        format!("widgets.{GROUP}")
    );
    let updated = replace(api, &status, |o| {
        push_condition(o, condition("StatusUpdate"))
    });
    assert!(has_condition(&updated, "StatusUpdate"), "{updated}");
    assert!(has_condition(&updated, "Established"), "{updated}");
    let patched = expect(
        api.request_as(
            "PATCH",
            &status,
            JSON_PATCH,
            &json!([{"op": "add", "path": "/status/conditions/-", "value": condition("StatusPatched")},
                    {"op": "add", "path": "/metadata/annotations", "value": {"patchedstatus": "true"}}])
            .to_string(),
        )
        .unwrap(),
        200,
    );
    assert!(has_condition(&patched, "StatusPatched"), "{patched}");
    assert_eq!(patched["metadata"]["annotations"]["patchedstatus"], "true");

    // CRDs listed by label and deleted by collection; others stay.
    for group in ["list1.more.e2e.example.com", "list2.more.e2e.example.com"] {
        let mut c = crd(group, "Lister", "listers", json!({"type": "object"}));
        c["metadata"]["labels"] = json!({"e2e-list": "yes"});
        post(api, CRDS, &c);
    }
    let selected = format!("{CRDS}?labelSelector=e2e-list%3Dyes");
    assert_eq!(
        names(&get(api, &selected)),
        [
            "listers.list1.more.e2e.example.com",
            "listers.list2.more.e2e.example.com"
        ]
    );
    delete(api, &selected, None);
    wait_for("the labelled CRDs to go", || {
        names(&get(api, &selected)).is_empty().then_some(())
    });
    assert_eq!(code(api, "GET", &widget_crd), 200);

    // A watch on custom objects.
    let mut watch = Watch::start(api, &widgets);
    let widget = |name: &str, spec: Value| {
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
               "metadata": {"name": name}, "spec": spec})
    };
    post(api, &widgets, &widget("watched", json!({"size": 1})));
    let added = watch.until("ADDED", "watched");
    assert_eq!(added["object"]["spec"]["size"], 1);
    merge(
        api,
        &format!("{widgets}/watched"),
        &json!({"spec": {"size": 2}}),
    );
    let modified = watch.until("MODIFIED", "watched");
    assert_eq!(modified["object"]["spec"]["size"], 2);
    delete(api, &format!("{widgets}/watched"), None);
    watch.until("DELETED", "watched");

    let strict = |collection: &str, body: &str| {
        api.request(
            "POST",
            &format!("{collection}?fieldValidation=Strict"),
            Some(body),
        )
        .unwrap()
    };
    // A CRD without a schema keeps unknown fields, in strict create and in apply.
    let gadgets = format!("/apis/{GROUP}/v1/namespaces/{ns}/gadgets");
    establish(
        api,
        &crd(
            GROUP,
            "Gadget",
            "gadgets",
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        ),
        &gadgets,
    );
    let gadget = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Gadget",
                        "metadata": {"name": "free-form"}, "spec": {"anything": {"deep": 1}},
                        "extra": "kept"});
    let created = strict(&gadgets, &gadget.to_string());
    assert_eq!(created.code, 201, "{}", created.body);
    let created = created.json();
    assert_eq!(created["spec"]["anything"]["deep"], 1);
    assert_eq!(created["extra"], "kept");
    let applied = api
        .request_as(
            "PATCH",
            &format!("{gadgets}/applied?fieldManager=e2e&fieldValidation=Strict"),
            "application/apply-patch+yaml",
            &format!(
                "apiVersion: {GROUP}/v1\nkind: Gadget\nmetadata:\n  name: applied\nspec:\n  unknown: field\nextra: kept\n"
            ),
        )
        .unwrap();
    assert!(
        applied.code == 200 || applied.code == 201,
        "{}",
        applied.body
    );
    assert_eq!(applied.json()["spec"]["unknown"], "field");
    assert_eq!(get(api, &format!("{gadgets}/applied"))["extra"], "kept");

    // Typed objects: unknown metadata and spec fields are refused.
    let deployments = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    let mut deployment = apps("Deployment", "strict", 1);
    deployment["metadata"]["unknownMeta"] = json!("x");
    deployment["spec"]["unknownSpec"] = json!("y");
    let refused = strict(&deployments, &deployment.to_string());
    assert_eq!(refused.code, 400, "{}", refused.body);
    assert!(
        refused
            .body
            .contains(r#"unknown field \"metadata.unknownMeta\""#),
        "{}",
        refused.body
    );
    assert!(
        refused
            .body
            .contains(r#"unknown field \"spec.unknownSpec\""#),
        "{}",
        refused.body
    );
    assert_eq!(code(api, "GET", &format!("{deployments}/strict")), 404);
}

fn pods_of(api: &Api, ns: &str, app: &str) -> Vec<Value> {
    items(&get(
        api,
        &format!("/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{app}"),
    ))
}

/// Waits for `n` pods of `app`, each owned by its controller.
fn wait_pods(api: &Api, ns: &str, app: &str, n: usize) -> Vec<Value> {
    wait_for(&format!("{n} pods of {app}"), || {
        let pods = pods_of(api, ns, app);
        (pods.len() == n
            && pods
                .iter()
                .all(|p| p["metadata"]["ownerReferences"][0]["controller"] == true))
        .then_some(pods)
    })
}

/// [sig-api-machinery] Garbage collector: ReplicationControllers deleted in the background,
/// orphaning and in the foreground; a cycle of owners.
fn garbage_collection(_s: &Server, api: &Api) {
    let ns = "more-gc";
    namespace(api, ns);
    let rcs = format!("/api/v1/namespaces/{ns}/replicationcontrollers");
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let policy = |p: &str| {
        Some(json!({"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": p}))
    };

    // Background: the pods go.
    post(api, &rcs, &rc("gc-bg", 2, "gc-bg"));
    wait_pods(api, ns, "gc-bg", 2);
    delete(api, &format!("{rcs}/gc-bg"), policy("Background"));
    wait_gone(api, &format!("{rcs}/gc-bg"));
    wait_for("the background-deleted RC's pods to go", || {
        pods_of(api, ns, "gc-bg").is_empty().then_some(())
    });

    // Orphan: the pods stay, without their owner.
    post(api, &rcs, &rc("gc-orphan", 2, "gc-orphan"));
    wait_pods(api, ns, "gc-orphan", 2);
    delete(api, &format!("{rcs}/gc-orphan"), policy("Orphan"));
    wait_gone(api, &format!("{rcs}/gc-orphan"));
    wait_for("the orphans to lose their owner", || {
        let pods = pods_of(api, ns, "gc-orphan");
        pods.iter()
            .all(|p| {
                p["metadata"]["ownerReferences"]
                    .as_array()
                    .is_none_or(Vec::is_empty)
            })
            .then_some(())
    });
    thread::sleep(Duration::from_secs(2));
    assert_eq!(pods_of(api, ns, "gc-orphan").len(), 2);

    // Foreground: the RC stays until its last pod is gone.
    post(api, &rcs, &rc("gc-fg", 2, "gc-fg"));
    let fg = wait_pods(api, ns, "gc-fg", 2);
    let held = fg[0]["metadata"]["name"].as_str().unwrap().to_string();
    merge(
        api,
        &format!("{pods}/{held}"),
        &json!({"metadata": {"finalizers": ["e2e.example.com/hold"]}}),
    );
    delete(api, &format!("{rcs}/gc-fg"), policy("Foreground"));
    wait_for("the held pod alone and marked for deletion", || {
        let left = pods_of(api, ns, "gc-fg");
        (left.len() == 1
            && left[0]["metadata"]["name"] == held.as_str()
            && left[0]["metadata"]["deletionTimestamp"].is_string())
        .then_some(())
    });
    let waiting = get(api, &format!("{rcs}/gc-fg"));
    assert!(
        waiting["metadata"]["deletionTimestamp"].is_string(),
        "{waiting}"
    );
    assert!(
        waiting["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .contains(&json!("foregroundDeletion")),
        "{waiting}"
    );
    thread::sleep(Duration::from_secs(2));
    assert_eq!(code(api, "GET", &format!("{rcs}/gc-fg")), 200);
    merge(
        api,
        &format!("{pods}/{held}"),
        &json!({"metadata": {"finalizers": null}}),
    );
    wait_gone(api, &format!("{rcs}/gc-fg"));
    assert!(pods_of(api, ns, "gc-fg").is_empty());

    // Pods that own each other in a cycle all go.
    let uids: Vec<Value> = ["cycle-1", "cycle-2", "cycle-3"]
        .iter()
        .map(|n| post(api, &pods, &pod(n))["metadata"]["uid"].clone())
        .collect();
    for (i, owner) in [(0, 2), (1, 0), (2, 1)] {
        merge(
            api,
            &format!("{pods}/cycle-{}", i + 1),
            &json!({"metadata": {"ownerReferences": [{
                "apiVersion": "v1", "kind": "Pod", "name": format!("cycle-{}", owner + 1),
                "uid": uids[owner], "blockOwnerDeletion": true}]}}),
        );
    }
    delete(api, &format!("{pods}/cycle-1"), None);
    for n in ["cycle-1", "cycle-2", "cycle-3"] {
        wait_gone(api, &format!("{pods}/{n}"));
    }
}

/// [sig-cli] kubectl run, patch --dry-run=server, replace, diff, expose, patch of an RC's pods,
/// and proxy on a random port and on a unix socket.
fn kubectl_commands(s: &Server, api: &Api) {
    let ns = "more-kubectl";
    namespace(api, ns);
    let pod_path = format!("/api/v1/namespaces/{ns}/pods/e2e-run");
    s.kubectl(&[
        "run",
        "e2e-run",
        "-n",
        ns,
        "--restart=Never",
        &format!("--image={IMAGE}"),
    ])
    .ok();
    let created = get(api, &pod_path);
    assert_eq!(created["spec"]["containers"][0]["image"], IMAGE);
    assert_eq!(created["spec"]["restartPolicy"], "Never");

    let pause = "tandem.local/pause:1";
    let dry = s
        .kubectl(&[
            "patch",
            "pod",
            "e2e-run",
            "-n",
            ns,
            "--dry-run=server",
            "-o",
            "json",
            "-p",
            &json!({"spec": {"containers": [{"name": "e2e-run", "image": pause}]}}).to_string(),
        ])
        .json();
    assert_eq!(dry["spec"]["containers"][0]["image"], pause);
    assert_eq!(get(api, &pod_path)["spec"]["containers"][0]["image"], IMAGE);

    let mut replacement = get(api, &pod_path);
    replacement["spec"]["containers"][0]["image"] = json!(pause);
    s.kubectl_stdin(&["replace", "-f", "-"], &replacement.to_string())
        .ok();
    assert_eq!(get(api, &pod_path)["spec"]["containers"][0]["image"], pause);

    let mut deployment = apps("Deployment", "diffed", 1);
    deployment["metadata"]["namespace"] = json!(ns);
    s.kubectl_stdin(&["create", "-f", "-"], &deployment.to_string())
        .ok();
    let same = s.kubectl_stdin(&["diff", "-f", "-"], &deployment.to_string());
    assert_eq!(same.status.code(), Some(0), "{}", same.combined());
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = json!(pause);
    let diff = s.kubectl_stdin(&["diff", "-f", "-"], &deployment.to_string());
    assert_eq!(diff.status.code(), Some(1), "{}", diff.combined());
    assert!(
        diff.stdout
            .lines()
            .any(|l| l.starts_with('+') && l.contains(pause)),
        "{}",
        diff.stdout
    );
    assert!(
        diff.stdout
            .lines()
            .any(|l| l.starts_with('-') && l.contains(IMAGE)),
        "{}",
        diff.stdout
    );

    let mut exposed = rc("rc-expose", 1, "expose");
    exposed["metadata"]["namespace"] = json!(ns);
    s.kubectl_stdin(&["create", "-f", "-"], &exposed.to_string())
        .ok();
    s.kubectl(&[
        "expose",
        "rc",
        "rc-expose",
        "-n",
        ns,
        "--name=rm2",
        "--port=1234",
        "--target-port=6379",
    ])
    .ok();
    let rm2 = get(api, &format!("/api/v1/namespaces/{ns}/services/rm2"));
    assert_eq!(rm2["spec"]["ports"][0]["port"], 1234);
    assert_eq!(rm2["spec"]["ports"][0]["targetPort"], 6379);
    assert_eq!(rm2["spec"]["selector"], json!({"app": "expose"}));
    s.kubectl(&[
        "expose",
        "service",
        "rm2",
        "-n",
        ns,
        "--name=rm3",
        "--port=2345",
        "--target-port=6379",
    ])
    .ok();
    let rm3 = get(api, &format!("/api/v1/namespaces/{ns}/services/rm3"));
    assert_eq!(rm3["spec"]["ports"][0]["port"], 2345);
    assert_eq!(rm3["spec"]["ports"][0]["targetPort"], 6379);
    assert_eq!(rm3["spec"]["selector"], json!({"app": "expose"}));

    for p in wait_pods(api, ns, "expose", 1) {
        let name = p["metadata"]["name"].as_str().unwrap();
        s.kubectl(&[
            "patch",
            "pod",
            name,
            "-n",
            ns,
            "-p",
            r#"{"metadata":{"annotations":{"x":"y"}}}"#,
        ])
        .ok();
        let read = get(api, &format!("/api/v1/namespaces/{ns}/pods/{name}"));
        assert_eq!(read["metadata"]["annotations"]["x"], "y");
    }

    // kubectl proxy on a port of its choosing.
    let mut proxy = s.kubectl_stream(&["proxy", "--port=0"]);
    let line = proxy.wait_for("the proxy's address", WAIT, |l| {
        l.starts_with("Starting to serve on ")
    });
    let addr = line.trim_start_matches("Starting to serve on ").trim();
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    let answer = http_get(&mut tcp);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("APIVersions"), "{answer}");
    drop(proxy);
    // And on a unix socket.
    let socket = s.dir().join("proxy.sock");
    let socket_arg = format!("--unix-socket={}", socket.display());
    let mut proxy = s.kubectl_stream(&["proxy", &socket_arg]);
    proxy.wait_for("the proxy's socket", WAIT, |l| {
        l.starts_with("Starting to serve on ")
    });
    let mut unix = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    let answer = http_get(&mut unix);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("APIVersions"), "{answer}");
}

/// GET /api/ on a fresh plain-HTTP connection; the whole answer.
fn http_get(stream: &mut (impl Read + Write)) -> String {
    stream
        .write_all(b"GET /api/ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// One request with a chosen `Accept` header, on a fresh HTTP/1.0 connection (raw_api always
/// asks for JSON): the status code, the `Content-Type` and the body.
fn request_accepting(
    s: &Server,
    method: &str,
    path: &str,
    accept: &str,
    body: Option<&str>,
) -> (u16, String, String) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use std::sync::Arc;
    let pki = s.data_dir().join("pki");
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&std::fs::read(pki.join("ca.crt")).unwrap()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tokens = std::fs::read_to_string(pki.join("tokens.csv")).unwrap();
    let token = tokens.split(',').next().unwrap().trim().to_string();
    let addr = s.url().trim_start_matches("https://").to_string();
    let tcp = std::net::TcpStream::connect(&addr).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    let conn =
        rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("127.0.0.1").unwrap())
            .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let body = body.unwrap_or("");
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Accept: {accept}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(head.as_bytes()).unwrap();
    tls.flush().unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        match tls.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (code, content_type, body.to_string())
}

const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const AGGREGATED_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// [sig-api-machinery] AggregatedDiscovery: /api and /apis answer APIGroupDiscoveryList in the
/// version the Accept header prefers.
fn aggregated_discovery(s: &Server, _api: &Api) {
    for path in ["/api", "/apis"] {
        for (accept, version) in [
            (AGGREGATED_V2, "v2"),
            (AGGREGATED_V2BETA1, "v2beta1"),
            (&*format!("{AGGREGATED_V2},{AGGREGATED_V2BETA1}"), "v2"),
            (
                &*format!("{AGGREGATED_V2BETA1};q=0.9,{AGGREGATED_V2}"),
                "v2",
            ),
        ] {
            let (code, content_type, body) = request_accepting(s, "GET", path, accept, None);
            assert_eq!(code, 200, "{path} {accept}: {body}");
            assert!(
                content_type.contains(&format!("v={version};"))
                    && content_type.contains("as=APIGroupDiscoveryList"),
                "{path} {accept}: {content_type}"
            );
            let doc: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(doc["kind"], "APIGroupDiscoveryList", "{body}");
            assert_eq!(
                doc["apiVersion"],
                format!("apidiscovery.k8s.io/{version}"),
                "{body}"
            );
            assert!(!items(&doc).is_empty(), "{body}");
        }
    }
    // Plain JSON still gets the legacy documents.
    let (code, _, body) = request_accepting(s, "GET", "/apis", "application/json", None);
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["kind"],
        "APIGroupList"
    );
}

/// [sig-auth] ServiceAccounts: kube-root-ca.crt is restored after deletion and edits; token
/// automount follows the pod's setting, else the account's.
fn service_account_tokens(_s: &Server, api: &Api) {
    let ns = "more-sa";
    namespace(api, ns);
    let core = format!("/api/v1/namespaces/{ns}");
    let ca = format!("{core}/configmaps/kube-root-ca.crt");
    let original = wait_for("kube-root-ca.crt", || {
        let r = api.request("GET", &ca, None).unwrap();
        (r.code == 200).then(|| r.json())
    });
    let cert = original["data"]["ca.crt"].as_str().unwrap().to_string();
    assert!(cert.contains("BEGIN CERTIFICATE"), "{original}");
    delete(api, &ca, None);
    wait_for("kube-root-ca.crt recreated", || {
        let r = api.request("GET", &ca, None).unwrap();
        (r.code == 200 && r.json()["data"]["ca.crt"] == cert.as_str()).then_some(())
    });
    merge(api, &ca, &json!({"data": {"ca.crt": "changed"}}));
    wait_for("kube-root-ca.crt reconciled", || {
        (get(api, &ca)["data"]["ca.crt"] == cert.as_str()).then_some(())
    });

    for (name, automount) in [
        ("mount", Some(true)),
        ("nomount", Some(false)),
        ("unset", None),
    ] {
        let mut sa =
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}});
        if let Some(a) = automount {
            sa["automountServiceAccountToken"] = json!(a);
        }
        post(api, &format!("{core}/serviceaccounts"), &sa);
    }
    for (account, account_setting) in [
        ("mount", Some(true)),
        ("nomount", Some(false)),
        ("unset", None),
    ] {
        for (label, pod_setting) in [("t", Some(true)), ("f", Some(false)), ("n", None)] {
            let name = format!("{account}-{label}");
            let mut p = pod(&name);
            p["spec"]["serviceAccountName"] = json!(account);
            if let Some(a) = pod_setting {
                p["spec"]["automountServiceAccountToken"] = json!(a);
            }
            let created = post(api, &format!("{core}/pods"), &p);
            let want = pod_setting.or(account_setting).unwrap_or(true);
            let volume = created["spec"]["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| {
                    v["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("kube-api-access-"))
                        && v["projected"]["sources"]
                            .as_array()
                            .is_some_and(|s| s.iter().any(|s| s["serviceAccountToken"].is_object()))
                });
            let mounted = created["spec"]["containers"][0]["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount");
            assert_eq!(volume, want, "{name}: {created}");
            assert_eq!(mounted, want, "{name}: {created}");
        }
    }
}

type Check = fn(&Server, &Api);

/// Runs every check side by side (each in its own namespace or on its own kinds) and fails
/// with the names of those that failed.
fn run_checks(s: &Server, checks: &[(&str, Check)]) {
    let api = api(s);
    let failed: Vec<&str> = thread::scope(|scope| {
        let handles: Vec<_> = checks
            .iter()
            .map(|(name, check)| {
                let api = &api;
                (
                    *name,
                    scope.spawn(move || {
                        let started = Instant::now();
                        check(s, api);
                        eprintln!("{name}: passed in {:?}", started.elapsed());
                    }),
                )
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|(name, h)| h.join().is_err().then_some(name))
            .collect()
    });
    assert!(failed.is_empty(), "failed checks: {failed:?}");
}

#[test]
fn conformance_more_api_behaviours() {
    let s = Server::start();
    run_checks(
        &s,
        &[
            ("namespaces", namespaces),
            ("quota_status_update_delete", quota_status_update_delete),
            ("quota_counts_objects", quota_counts_objects),
            ("quota_scopes", quota_scopes),
            ("label_selected_watchers", label_selected_watchers),
            ("cronjob_api", cronjob_api),
            ("csr_api", csr_api),
            ("workload_subresources", workload_subresources),
            ("network_and_config_kinds", network_and_config_kinds),
            ("storage_and_node_kinds", storage_and_node_kinds),
            ("pod_admission", pod_admission),
            ("custom_resources", custom_resources),
            ("garbage_collection", garbage_collection),
            ("kubectl_commands", kubectl_commands),
            ("aggregated_discovery", aggregated_discovery),
            ("service_account_tokens", service_account_tokens),
        ],
    );
}

/// A pod template for the Linux node of `tandem up`.
fn linux_template(app: &str) -> Value {
    let mut t = template(app);
    t["spec"]["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
    t
}

fn linux_pod(name: &str, labels: Value) -> Value {
    let mut p = pod(name);
    p["metadata"]["labels"] = labels;
    p["spec"]["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
    p
}

fn running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn controller_uid(obj: &Value) -> Option<&str> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)?["uid"]
        .as_str()
}

/// Waits until `field` of `path`'s status reaches `want`.
#[track_caller]
fn wait_status(api: &Api, path: &str, field: &str, want: u64) {
    wait_for(&format!("{path} status.{field}={want}"), || {
        (get(api, path)["status"][field].as_u64().unwrap_or(0) == want).then_some(())
    });
}

/// [sig-apps] ReplicationController lifecycle, watched: created, patched, status patched,
/// scaled, listed and deleted by collection.
fn rc_lifecycle(_s: &Server, api: &Api) {
    let ns = "more-rc-life";
    namespace(api, ns);
    let rcs = format!("/api/v1/namespaces/{ns}/replicationcontrollers");
    let item = format!("{rcs}/rc-life");
    let mut watch = Watch::start(api, &format!("{rcs}?labelSelector=test-rc-static%3Dtrue"));
    let mut obj = rc("rc-life", 1, "rc-life");
    obj["metadata"]["labels"] = json!({"test-rc-static": "true"});
    obj["spec"]["template"] = linux_template("rc-life");
    post(api, &rcs, &obj);
    watch.until("ADDED", "rc-life");
    wait_status(api, &item, "availableReplicas", 1);
    let patched = merge(
        api,
        &item,
        &json!({"metadata": {"labels": {"rc": "patched"}}}),
    );
    assert_eq!(patched["metadata"]["labels"]["rc"], "patched");
    loop {
        let e = watch.until("MODIFIED", "rc-life");
        if e["object"]["metadata"]["labels"]["rc"] == "patched" {
            break;
        }
    }
    let status = format!("{item}/status");
    let patched = merge(
        api,
        &status,
        &json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"readyReplicas": 0, "availableReplicas": 0}}),
    );
    assert_eq!(patched["metadata"]["annotations"]["patchedstatus"], "true");
    assert!(
        patched["status"]["availableReplicas"].as_u64().unwrap_or(0) == 0,
        "{patched}"
    );
    // The controller puts the truth back.
    wait_status(api, &item, "availableReplicas", 1);
    assert_eq!(get(api, &status)["status"]["replicas"], 1);
    let scaled = merge_scale(
        api,
        &format!("{item}/scale"),
        &json!({"spec": {"replicas": 2}}),
    );
    assert_eq!(scaled["spec"]["replicas"], 2);
    wait_status(api, &item, "availableReplicas", 2);
    let listed = get(
        api,
        "/api/v1/replicationcontrollers?labelSelector=test-rc-static%3Dtrue",
    );
    assert_eq!(names(&listed), ["rc-life"]);
    delete(
        api,
        &format!("{rcs}?labelSelector=test-rc-static%3Dtrue"),
        None,
    );
    watch.until("DELETED", "rc-life");
    wait_for("the RC's pods to go", || {
        pods_of(api, ns, "rc-life").is_empty().then_some(())
    });
}

/// [sig-apps] ReplicationController adopts a matching orphan and releases a pod that stops
/// matching.
fn rc_adoption_release(_s: &Server, api: &Api) {
    let ns = "more-rc-adopt";
    namespace(api, ns);
    let rcs = format!("/api/v1/namespaces/{ns}/replicationcontrollers");
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    post(
        api,
        &pods,
        &linux_pod("pod-adoption", json!({"app": "pod-adoption"})),
    );
    wait_for("the orphan running", || {
        running(&get(api, &format!("{pods}/pod-adoption"))).then_some(())
    });
    let mut adopter = rc("pod-adoption", 1, "pod-adoption");
    adopter["spec"]["template"] = linux_template("pod-adoption");
    let created = post(api, &rcs, &adopter);
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    wait_for("the orphan adopted", || {
        (controller_uid(&get(api, &format!("{pods}/pod-adoption"))) == Some(uid.as_str()))
            .then_some(())
    });
    thread::sleep(Duration::from_secs(2));
    assert_eq!(pods_of(api, ns, "pod-adoption").len(), 1, "no extra pod");

    let mut releaser = rc("pod-release", 1, "pod-release");
    releaser["spec"]["template"] = linux_template("pod-release");
    post(api, &rcs, &releaser);
    let first = wait_pods(api, ns, "pod-release", 1);
    let name = first[0]["metadata"]["name"].as_str().unwrap().to_string();
    merge(
        api,
        &format!("{pods}/{name}"),
        &json!({"metadata": {"labels": {"app": "not-matching"}}}),
    );
    wait_for("the relabelled pod released", || {
        controller_uid(&get(api, &format!("{pods}/{name}")))
            .is_none()
            .then_some(())
    });
    let replacement = wait_pods(api, ns, "pod-release", 1);
    assert_ne!(replacement[0]["metadata"]["name"], name.as_str());
}

/// [sig-apps] Deployment lifecycle, watched: created, patched, scaled, status patched, deleted;
/// old ReplicaSets beyond revisionHistoryLimit are removed.
fn deployment_lifecycle(_s: &Server, api: &Api) {
    let ns = "more-deploy";
    namespace(api, ns);
    let deployments = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    let item = format!("{deployments}/test-deployment");
    let mut watch = Watch::start(
        api,
        &format!("{deployments}?labelSelector=test-deployment-static%3Dtrue"),
    );
    let mut d = apps("Deployment", "test-deployment", 1);
    d["metadata"]["labels"] = json!({"test-deployment-static": "true"});
    d["spec"]["template"] = linux_template("test-deployment");
    d["spec"]["revisionHistoryLimit"] = json!(0);
    post(api, &deployments, &d);
    watch.until("ADDED", "test-deployment");
    wait_status(api, &item, "readyReplicas", 1);
    // Patch: a label and a new image; the rollout completes.
    let pause = "tandem.local/pause:1";
    let patched = merge(
        api,
        &item,
        &json!({"metadata": {"labels": {"test-deployment": "patched"}},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": pause}]}}}}),
    );
    assert_eq!(patched["metadata"]["labels"]["test-deployment"], "patched");
    loop {
        let e = watch.until("MODIFIED", "test-deployment");
        if e["object"]["metadata"]["labels"]["test-deployment"] == "patched" {
            break;
        }
    }
    let generation = patched["metadata"]["generation"].as_u64().unwrap();
    wait_for("the patched rollout to complete", || {
        let d = get(api, &item);
        let st = &d["status"];
        (st["observedGeneration"].as_u64() >= Some(generation)
            && st["updatedReplicas"] == 1
            && st["readyReplicas"] == 1
            && st["replicas"] == 1)
            .then_some(())
    });
    // revisionHistoryLimit 0: only the current ReplicaSet is kept.
    let sets =
        format!("/apis/apps/v1/namespaces/{ns}/replicasets?labelSelector=app%3Dtest-deployment");
    let kept = wait_for("the old ReplicaSet removed", || {
        let rs = items(&get(api, &sets));
        (rs.len() == 1).then_some(rs)
    });
    assert_eq!(
        kept[0]["spec"]["template"]["spec"]["containers"][0]["image"],
        pause
    );
    // Scale.
    let scaled = merge_scale(
        api,
        &format!("{item}/scale"),
        &json!({"spec": {"replicas": 2}}),
    );
    assert_eq!(scaled["spec"]["replicas"], 2);
    wait_status(api, &item, "readyReplicas", 2);
    // Status.
    let status = format!("{item}/status");
    assert_eq!(get(api, &status)["status"]["readyReplicas"], 2);
    let patched = merge(
        api,
        &status,
        &json!({"status": {"conditions": [condition("StatusPatched")]}}),
    );
    assert!(has_condition(&patched, "StatusPatched"), "{patched}");
    assert_eq!(patched["spec"]["replicas"], 2);
    // Delete by collection.
    delete(
        api,
        &format!("{deployments}?labelSelector=test-deployment-static%3Dtrue"),
        None,
    );
    watch.until("DELETED", "test-deployment");
    wait_for("the Deployment's pods to go", || {
        pods_of(api, ns, "test-deployment").is_empty().then_some(())
    });
}

/// [sig-apps] A Job runs as many pods as its parallelism and is deleted with them.
fn job_deletion(_s: &Server, api: &Api) {
    let ns = "more-job";
    namespace(api, ns);
    let jobs = format!("/apis/batch/v1/namespaces/{ns}/jobs");
    let job = |name: &str| {
        let mut t = linux_template(name);
        t["spec"]["restartPolicy"] = json!("Never");
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
               "spec": {"parallelism": 2, "completions": 4, "template": t}})
    };
    post(api, &jobs, &job("deleted"));
    wait_for("two running pods of the Job to delete", || {
        let p = pods_of(api, ns, "deleted");
        (p.len() == 2 && p.iter().all(running)).then_some(())
    });
    delete(
        api,
        &format!("{jobs}/deleted"),
        Some(
            json!({"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}),
        ),
    );
    wait_gone(api, &format!("{jobs}/deleted"));
    wait_for("the deleted Job's pods to go", || {
        pods_of(api, ns, "deleted").is_empty().then_some(())
    });
}

/// [sig-node] Pods: lifecycle and status, watched; host IP; RuntimeClasses with and without
/// overhead are scheduled.
fn pod_lifecycle(_s: &Server, api: &Api) {
    let ns = "more-pod-life";
    namespace(api, ns);
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let item = format!("{pods}/pod-life");
    let mut watch = Watch::start(api, &format!("{pods}?labelSelector=test-pod-static%3Dtrue"));
    post(
        api,
        &pods,
        &linux_pod("pod-life", json!({"test-pod-static": "true"})),
    );
    watch.until("ADDED", "pod-life");
    let pod = wait_for("the pod running", || {
        let p = get(api, &item);
        running(&p).then_some(p)
    });
    // Host IP: the node's internal address.
    let node = get(
        api,
        &format!(
            "/api/v1/nodes/{}",
            pod["spec"]["nodeName"].as_str().unwrap()
        ),
    );
    let internal = node["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .map(|a| a["address"].clone())
        .unwrap();
    assert_eq!(pod["status"]["hostIP"], internal, "{pod}");
    assert_eq!(pod["status"]["hostIPs"][0]["ip"], internal, "{pod}");

    let patched = merge(
        api,
        &item,
        &json!({"metadata": {"labels": {"test-pod": "patched"}}}),
    );
    assert_eq!(patched["metadata"]["labels"]["test-pod"], "patched");
    loop {
        let e = watch.until("MODIFIED", "pod-life");
        if e["object"]["metadata"]["labels"]["test-pod"] == "patched" {
            break;
        }
    }
    let status = get(api, &format!("{item}/status"));
    assert_eq!(status["status"]["phase"], "Running");
    let updated = replace(api, &format!("{item}/status"), |o| {
        push_condition(
            o,
            json!({"type": "PodStatusUpdate", "status": "True", "reason": "E2E",
                   "message": "set by e2e", "lastTransitionTime": "2024-01-01T00:00:00Z"}),
        );
    });
    assert!(has_condition(&updated, "PodStatusUpdate"), "{updated}");
    assert_eq!(updated["metadata"]["labels"]["test-pod"], "patched");
    delete(
        api,
        &format!("{pods}?labelSelector=test-pod-static%3Dtrue&gracePeriodSeconds=1"),
        None,
    );
    watch.until("DELETED", "pod-life");
    assert_eq!(code(api, "GET", &item), 404);

    // RuntimeClasses: a pod naming one is scheduled; one with overhead gets it.
    let classes = "/apis/node.k8s.io/v1/runtimeclasses";
    post(
        api,
        classes,
        &json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": {"name": "plain"}, "handler": "runc"}),
    );
    post(
        api,
        classes,
        &json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": {"name": "with-overhead"}, "handler": "runc",
                "overhead": {"podFixed": {"cpu": "10m", "memory": "1Mi"}}}),
    );
    for class in ["plain", "with-overhead"] {
        let mut p = linux_pod(&format!("rc-{class}"), json!({"app": "runtimeclass"}));
        p["spec"]["runtimeClassName"] = json!(class);
        let created = post(api, &pods, &p);
        if class == "with-overhead" {
            assert_eq!(
                created["spec"]["overhead"],
                json!({"cpu": "10m", "memory": "1Mi"})
            );
        } else {
            assert!(created["spec"]["overhead"].is_null(), "{created}");
        }
        wait_for(&format!("the pod of {class} scheduled"), || {
            get(api, &format!("{pods}/rc-{class}"))["spec"]["nodeName"]
                .is_string()
                .then_some(())
        });
    }
}

/// [sig-apps] DaemonSets: a pod on the node the template selects; a deleted daemon pod and a
/// failed one are replaced; deleting the DaemonSet removes its pod.
fn daemonset_replaces_pods(_s: &Server, api: &Api) {
    let ns = "more-ds";
    namespace(api, ns);
    let mut ds = apps("DaemonSet", "daemon-set", 0);
    ds["spec"]["template"] = linux_template("daemon-set");
    post(
        api,
        &format!("/apis/apps/v1/namespaces/{ns}/daemonsets"),
        &ds,
    );
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    // One Linux node, so one daemon pod.
    let first = wait_for("the daemon pod running", || {
        let p = pods_of(api, ns, "daemon-set");
        (p.len() == 1 && running(&p[0])).then(|| p[0].clone())
    });
    let node = first["spec"]["nodeName"].clone();
    let name = first["metadata"]["name"].as_str().unwrap().to_string();
    delete(api, &format!("{pods}/{name}"), None);
    let revived = wait_for("a new daemon pod", || {
        let p = pods_of(api, ns, "daemon-set");
        (p.len() == 1 && p[0]["metadata"]["name"] != name.as_str() && running(&p[0]))
            .then(|| p[0].clone())
    });
    assert_eq!(revived["spec"]["nodeName"], node);
    let failed = revived["metadata"]["name"].as_str().unwrap().to_string();
    merge(
        api,
        &format!("{pods}/{failed}/status"),
        &json!({"status": {"phase": "Failed"}}),
    );
    wait_for("the failed daemon pod replaced", || {
        let p = pods_of(api, ns, "daemon-set");
        (p.len() == 1 && p[0]["metadata"]["name"] != failed.as_str() && running(&p[0]))
            .then_some(())
    });
    // Stopping the daemon removes its pods.
    delete(
        api,
        &format!("/apis/apps/v1/namespaces/{ns}/daemonsets/daemon-set"),
        None,
    );
    wait_for("the daemon's pods to go", || {
        pods_of(api, ns, "daemon-set").is_empty().then_some(())
    });
}

/// [sig-network] A Service's EndpointSlice follows its pods as they come and go, down to none.
fn service_endpoints_follow_pods(_s: &Server, api: &Api) {
    let ns = "more-svc-pods";
    namespace(api, ns);
    post(
        api,
        &format!("/api/v1/namespaces/{ns}/services"),
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "endpoint-test2"},
                "spec": {"ports": [{"port": 80, "targetPort": 80}], "selector": {"app": "endpoint-test2"}}}),
    );
    let slices = format!(
        "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dendpoint-test2"
    );
    // The pod names behind the Service, from its slices.
    let backends = || -> Vec<String> {
        let mut names: Vec<String> = items(&get(api, &slices))
            .iter()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter_map(|e| e["targetRef"]["name"].as_str().map(str::to_string))
            .collect();
        names.sort();
        names
    };
    let wait_backends = |want: &[&str]| {
        wait_for(&format!("backends {want:?}"), || {
            (backends() == want).then_some(())
        });
    };
    wait_for("the Service's slice", || {
        (!items(&get(api, &slices)).is_empty()).then_some(())
    });
    wait_backends(&[]);
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    for name in ["pod1", "pod2"] {
        let mut p = linux_pod(name, json!({"app": "endpoint-test2"}));
        p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
        post(api, &pods, &p);
        if name == "pod1" {
            wait_backends(&["pod1"]);
        }
    }
    wait_backends(&["pod1", "pod2"]);
    delete(api, &format!("{pods}/pod1"), None);
    wait_backends(&["pod2"]);
    delete(api, &format!("{pods}/pod2"), None);
    wait_backends(&[]);
}

/// [sig-cli] kubectl describe shows the key facts of a pod, its RC, a Service, a node and a
/// namespace.
fn kubectl_describe(s: &Server, api: &Api) {
    let ns = "more-describe";
    namespace(api, ns);
    let mut primary = rc("agnhost-primary", 1, "agnhost");
    primary["spec"]["template"] = linux_template("agnhost");
    post(
        api,
        &format!("/api/v1/namespaces/{ns}/replicationcontrollers"),
        &primary,
    );
    post(
        api,
        &format!("/api/v1/namespaces/{ns}/services"),
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "agnhost-primary"},
                "spec": {"ports": [{"port": 6379, "targetPort": 6379}], "selector": {"app": "agnhost"}}}),
    );
    let pod = wait_for("the RC's pod running", || {
        let p = pods_of(api, ns, "agnhost");
        (p.len() == 1 && running(&p[0])).then(|| p[0].clone())
    });
    let pod_name = pod["metadata"]["name"].as_str().unwrap();
    let node = pod["spec"]["nodeName"].as_str().unwrap();
    let describe = |args: &[&str]| {
        let mut full = vec!["describe"];
        full.extend_from_slice(args);
        s.kubectl(&full).ok().to_string()
    };
    let has = |text: &str, key: &str, value: &str| {
        assert!(
            text.lines()
                .any(|l| l.starts_with(key) && l[key.len()..].trim() == value),
            "no `{key} {value}` in:\n{text}"
        );
    };
    let out = describe(&["pod", pod_name, "-n", ns]);
    has(&out, "Name:", pod_name);
    has(&out, "Namespace:", ns);
    has(&out, "Status:", "Running");
    has(
        &out,
        "Controlled By:",
        "ReplicationController/agnhost-primary",
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("Node:") && l.contains(node)),
        "{out}"
    );
    assert!(out.contains(IMAGE), "{out}");
    let out = describe(&["rc", "agnhost-primary", "-n", ns]);
    has(&out, "Name:", "agnhost-primary");
    has(&out, "Namespace:", ns);
    has(&out, "Selector:", "app=agnhost");
    has(&out, "Replicas:", "1 current / 1 desired");
    has(
        &out,
        "Pods Status:",
        "1 Running / 0 Waiting / 0 Succeeded / 0 Failed",
    );
    let out = describe(&["service", "agnhost-primary", "-n", ns]);
    has(&out, "Name:", "agnhost-primary");
    has(&out, "Selector:", "app=agnhost");
    has(&out, "Type:", "ClusterIP");
    has(&out, "TargetPort:", "6379/TCP");
    let ip = pod["status"]["podIP"].as_str().unwrap();
    assert!(
        out.lines()
            .any(|l| l.starts_with("Endpoints:") && l.contains(&format!("{ip}:6379"))),
        "{out}"
    );
    let out = describe(&["node", node]);
    has(&out, "Name:", node);
    for section in [
        "Labels:",
        "Conditions:",
        "Addresses:",
        "Capacity:",
        "Allocatable:",
        "System Info:",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(section)),
            "{section}: {out}"
        );
    }
    let out = describe(&["namespace", ns]);
    has(&out, "Name:", ns);
    has(&out, "Status:", "Active");
}

#[test]
fn conformance_more_workloads_on_nodes() {
    let s = Server::start_up(None);
    run_checks(
        &s,
        &[
            ("rc_lifecycle", rc_lifecycle),
            ("rc_adoption_release", rc_adoption_release),
            ("deployment_lifecycle", deployment_lifecycle),
            ("job_deletion", job_deletion),
            ("pod_lifecycle", pod_lifecycle),
            ("daemonset_replaces_pods", daemonset_replaces_pods),
            (
                "service_endpoints_follow_pods",
                service_endpoints_follow_pods,
            ),
            ("kubectl_describe", kubectl_describe),
        ],
    );
}
