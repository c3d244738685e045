//! End-to-end: API aggregation (issue 32). A real aggregated API server in the test (HTTPS,
//! requiring the front proxy's client certificate) registered with an `APIService` through a
//! Service: the API server publishes the front proxy's CA, checks the APIService's availability
//! with upstream's reasons, merges the group into discovery (`kubectl api-resources`), proxies
//! gets, lists and watches with the requester's identity in the front-proxy headers (never their
//! credentials), refuses what RBAC forbids before proxying, and answers 503 once the Service is
//! gone. With `--disable metrics-server` the built-in metrics API steps aside, and a
//! metrics-server of the user's own serves `kubectl top`; a custom metrics adapter's
//! `custom.metrics.k8s.io` and `external.metrics.k8s.io` drive an HPA's Object and External
//! metrics.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod aggregated_server;
mod common;

use std::time::Duration;

use aggregated_server::AggregatedServer;
use common::Server;
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(60);

/// A Deployment (its pods stay Pending: `server` runs no node) and an HPA on a custom metrics
/// adapter's Object and External metrics.
const ADAPTED_WORKLOAD: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: tandem.local/busybox:1}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: default}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 5
  metrics:
  - type: Object
    object:
      describedObject: {apiVersion: v1, kind: Service, name: web}
      metric: {name: requests}
      target: {type: AverageValue, averageValue: "100"}
  - type: External
    external:
      metric: {name: queue_depth, selector: {matchLabels: {queue: a}}}
      target: {type: AverageValue, averageValue: "10"}
"#;

fn available(s: &Server, name: &str) -> Option<(String, String, String)> {
    let svc = s.get_json(&["apiservice", name])?;
    let c = svc["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Available")?
        .clone();
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

fn api_service(name: &str, group: &str, version: &str, port: u16, ca: &str) -> String {
    json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": 1000, "versionPriority": 15,
                 "service": {"namespace": "wardle", "name": "api", "port": port}, "caBundle": ca},
    })
    .to_string()
}

#[test]
fn an_aggregated_server_is_discovered_proxied_and_replaces_the_metrics_api() {
    let s = Server::start_with(&[
        "server",
        "--disable",
        "metrics-server",
        "--horizontal-pod-autoscaler-sync-period",
        "1s",
    ]);

    // The front proxy's trust, published for extension servers.
    let cm = s
        .get_json(&[
            "configmap",
            "-n",
            "kube-system",
            "extension-apiserver-authentication",
        ])
        .expect("extension-apiserver-authentication");
    let data = &cm["data"];
    assert_eq!(
        data["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );
    assert_eq!(
        data["requestheader-username-headers"],
        "[\"X-Remote-User\"]"
    );
    assert_eq!(data["requestheader-group-headers"], "[\"X-Remote-Group\"]");
    assert_eq!(
        data["requestheader-extra-headers-prefix"],
        "[\"X-Remote-Extra-\"]"
    );
    assert!(
        data["client-ca-file"]
            .as_str()
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
    let front_proxy_ca = data["requestheader-client-ca-file"].as_str().unwrap();
    assert_ne!(front_proxy_ca, data["client-ca-file"].as_str().unwrap());

    // The built-in metrics API is off: no APIService, no group, `kubectl top` has nothing.
    let missing = s.kubectl(&["get", "apiservice", "v1beta1.metrics.k8s.io"]);
    assert!(
        !missing.success() && missing.stderr.contains("NotFound"),
        "{}",
        missing.stderr
    );
    let groups = s.kubectl(&["get", "--raw", "/apis"]).json();
    assert!(!groups.to_string().contains("metrics.k8s.io"), "{groups}");

    let server = AggregatedServer::start("api.wardle.svc", front_proxy_ca);
    s.kubectl(&["create", "namespace", "wardle"]).ok();
    // Before the Service exists the APIService is unavailable, with upstream's reason.
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &api_service(
            "v1alpha1.wardle.example.com",
            "wardle.example.com",
            "v1alpha1",
            server.port,
            &server.ca_bundle(),
        ),
    )
    .ok();
    s.eventually("ServiceNotFound", Duration::from_secs(20), || {
        available(&s, "v1alpha1.wardle.example.com").filter(|(st, r, m)| {
            st == "False"
                && r == "ServiceNotFound"
                && m == "service/api in \"wardle\" is not present"
        })
    });
    let refused = s.kubectl(&["get", "flunders", "-n", "default"]);
    assert!(!refused.success(), "{}", refused.stdout);
    // The Service leads to the test's server (ExternalName to localhost; the certificate names
    // the Service).
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "wardle"},
            "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": server.port}]}})
        .to_string(),
    )
    .ok();
    s.eventually("Available", Duration::from_secs(30), || {
        available(&s, "v1alpha1.wardle.example.com")
            .filter(|(st, r, m)| st == "True" && r == "Passed" && m == "all checks passed")
    });
    // The availability check asked as the aggregator, in system:masters.
    let check = server
        .seen("/apis/wardle.example.com/v1alpha1")
        .into_iter()
        .find(|r| r.target == "/apis/wardle.example.com/v1alpha1")
        .unwrap();
    assert_eq!(
        check.header("x-remote-user"),
        vec!["system:kube-aggregator"]
    );

    // Discovery: the group is listed and kubectl finds the resource by its short name.
    s.eventually(
        "api-resources lists flunders",
        Duration::from_secs(20),
        || {
            let out = s.kubectl(&["api-resources", "--api-group", "wardle.example.com"]);
            (out.success() && out.stdout.contains("flunders") && out.stdout.contains(" fl "))
                .then_some(())
        },
    );
    let group = s
        .kubectl(&["get", "--raw", "/apis/wardle.example.com"])
        .json();
    assert_eq!(group["preferredVersion"]["version"], "v1alpha1", "{group}");

    // Reads are proxied with the requester's identity, never their credentials.
    let list = s
        .kubectl(&["get", "fl", "-n", "default", "-o", "json"])
        .json();
    let first = &list["items"][0];
    assert_eq!(first["metadata"]["name"], "first", "{list}");
    assert_eq!(first["metadata"]["annotations"]["seen-by"], "admin");
    let groups = first["metadata"]["annotations"]["seen-groups"]
        .as_str()
        .unwrap();
    assert!(
        groups.contains("system:masters") && groups.contains("system:authenticated"),
        "{groups}"
    );
    let got = s
        .kubectl(&["get", "flunder", "first", "-n", "default", "-o", "json"])
        .json();
    assert_eq!(got["spec"]["reference"], "tandem");
    let missing = s.kubectl(&["get", "flunder", "nope", "-n", "default"]);
    assert!(
        missing
            .stderr
            .contains("flunders.wardle.example.com \"nope\" not found"),
        "{}",
        missing.stderr
    );
    for request in server.seen("/apis/wardle.example.com/v1alpha1/namespaces") {
        assert!(request.header("authorization").is_empty(), "{request:?}");
        assert!(request.header("impersonate-user").is_empty(), "{request:?}");
    }
    // A client's own identity headers do not reach the server; impersonation decides who asks.
    let before = server
        .seen("/apis/wardle.example.com/v1alpha1/namespaces")
        .len();
    let as_jane = s
        .kubectl(&[
            "get",
            "fl",
            "first",
            "-n",
            "default",
            "--as",
            "jane",
            "--as-group",
            "system:masters",
            "-o",
            "json",
        ])
        .json();
    assert_eq!(as_jane["metadata"]["annotations"]["seen-by"], "jane");
    assert_eq!(
        server
            .seen("/apis/wardle.example.com/v1alpha1/namespaces")
            .len(),
        before + 1
    );

    // RBAC is decided here: a user with no grant is refused without reaching the server.
    let denied = s.kubectl(&["get", "fl", "-n", "default", "--as", "nobody"]);
    assert!(
        denied.stderr.contains("Forbidden") || denied.stderr.contains("forbidden"),
        "{}",
        denied.stderr
    );
    assert_eq!(
        server
            .seen("/apis/wardle.example.com/v1alpha1/namespaces")
            .len(),
        before + 1
    );

    // A watch streams through.
    let watch = s.kubectl(&[
        "get",
        "--raw",
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders?watch=true",
    ]);
    let events: Vec<Value> = watch
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2, "{}", watch.stdout);
    assert_eq!(events[1]["object"]["metadata"]["name"], "second");

    // A metrics-server of the user's own takes `metrics.k8s.io`: `kubectl top` goes through it.
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &api_service(
            "v1beta1.metrics.k8s.io",
            "metrics.k8s.io",
            "v1beta1",
            server.port,
            &server.ca_bundle(),
        ),
    )
    .ok();
    s.eventually(
        "kubectl top through the user's metrics server",
        Duration::from_secs(30),
        || {
            let out = s.kubectl(&["top", "pod", "-n", "default"]);
            (out.success()
                && out.stdout.contains("from-my-metrics-server")
                && out.stdout.contains("7m"))
            .then_some(())
        },
    );

    // A custom metrics adapter: an HPA scales on an Object metric (a Service's requests, per
    // pod) and an External metric (the sum of a queue's series, per pod).
    for (name, group) in [
        ("v1beta2.custom.metrics.k8s.io", "custom.metrics.k8s.io"),
        ("v1beta1.external.metrics.k8s.io", "external.metrics.k8s.io"),
    ] {
        let version = name.split('.').next().unwrap();
        s.kubectl_stdin(
            &["apply", "-f", "-"],
            &api_service(name, group, version, server.port, &server.ca_bundle()),
        )
        .ok();
    }
    s.create(ADAPTED_WORKLOAD);
    let hpa = s.eventually("the HPA scaled on the adapter's metrics", LONG, || {
        let h = s.get_json(&["hpa", "web"])?;
        (h["status"]["desiredReplicas"] == 3).then_some(h)
    });
    let current = hpa["status"]["currentMetrics"].as_array().unwrap();
    // 150 over 1 replica against 100 per pod → 2; 20 + 10 against 10 per pod → 3. The
    // averages are per replica of the scale's status (1 at first, then up to 3).
    let object = current.iter().find(|m| m["type"] == "Object").unwrap();
    let external = current.iter().find(|m| m["type"] == "External").unwrap();
    let averages = (
        object["object"]["current"]["averageValue"]
            .as_str()
            .unwrap(),
        external["external"]["current"]["averageValue"]
            .as_str()
            .unwrap(),
    );
    assert!(
        [("150", "30"), ("75", "15"), ("50", "10")].contains(&averages),
        "{hpa}"
    );
    s.eventually("the Deployment scaled to 3", LONG, || {
        let d = s.get_json(&["deployment", "web"])?;
        (d["spec"]["replicas"] == 3).then_some(())
    });
    assert!(
        !server
            .seen("/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/services/web/requests")
            .is_empty()
    );
    let queue = server.seen("/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth");
    assert!(
        queue
            .iter()
            .any(|q| q.target.ends_with("?labelSelector=queue%3Da")),
        "{queue:?}"
    );

    // The Service gone: unavailable again, and requests get 503.
    s.kubectl(&["delete", "service", "api", "-n", "wardle"])
        .ok();
    s.eventually("unavailable again", Duration::from_secs(30), || {
        available(&s, "v1alpha1.wardle.example.com")
            .filter(|(st, r, _)| st == "False" && r == "ServiceNotFound")
    });
    let gone = s.kubectl(&[
        "get",
        "--raw",
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders",
    ]);
    assert!(
        gone.stderr.contains("ServiceUnavailable")
            || gone.stderr.contains("unable to handle the request")
            || gone.stderr.contains("service unavailable"),
        "{}",
        gone.stderr
    );
    // Deleting the APIService removes the group from discovery.
    s.kubectl(&["delete", "apiservice", "v1alpha1.wardle.example.com"])
        .ok();
    s.eventually(
        "the group leaves discovery",
        Duration::from_secs(20),
        || {
            let groups = s.kubectl(&["get", "--raw", "/apis"]).json();
            (!groups.to_string().contains("wardle.example.com")).then_some(())
        },
    );
}
