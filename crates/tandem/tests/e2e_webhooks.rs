//! End-to-end: admission webhooks (issue 32) with a real HTTPS webhook server in the test,
//! reached by `url` and through a Service, driven by the stock kubectl — denials with
//! upstream's messages, JSONPatch mutations and reinvocation, failure policies on a dead and a
//! slow webhook, selectors, dry runs, deletes carrying the old object, the scale subresource,
//! warnings, and the webhook metrics.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;
mod webhook_server;

use std::time::{Duration, Instant};

use common::Server;
use serde_json::{Value, json};
use webhook_server::{Answer, WebhookServer};

/// A webhook configuration of `kind` with one webhook, as YAML-compatible JSON.
fn configuration(kind: &str, name: &str, webhooks: Vec<Value>) -> String {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": webhooks,
    })
    .to_string()
}

fn rule(ops: &[&str], group: &str, resources: &[&str]) -> Value {
    json!({"operations": ops, "apiGroups": [group], "apiVersions": ["*"], "resources": resources})
}

/// A webhook reached at `url`, trusting `ca`.
fn hook(name: &str, url: &str, ca: &str, rules: Vec<Value>) -> Value {
    json!({
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca},
        "rules": rules,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    })
}

/// Applies a manifest until the webhooks it depends on are in place: retries while `check`
/// says the answer is not the one expected yet (the configuration reaches the server's cache
/// a moment after it is written).
#[track_caller]
fn until(s: &Server, what: &str, mut check: impl FnMut() -> bool) {
    s.eventually(what, Duration::from_secs(20), || check().then_some(()));
}

fn pod(name: &str, labels: Value) -> String {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "tandem.local/busybox:1"}]},
    })
    .to_string()
}

#[test]
fn validating_and_mutating_webhooks_by_url() {
    let s = Server::start();
    let server = WebhookServer::start("hook.webhook-test.svc", |path, review| {
        let req = &review["request"];
        match path {
            "/validate" => {
                if req["kind"]["kind"] == "PodExecOptions" {
                    Answer::Deny(403, format!("no exec of {}", req["object"]["command"]))
                } else if req["object"]["metadata"]["labels"]["deny"] == "yes" {
                    Answer::Deny(403, "pods labelled deny=yes are refused".into())
                } else if req["object"]["metadata"]["labels"]["warn"] == "yes" {
                    Answer::AllowWarn(vec!["this pod is watched".into()])
                } else {
                    Answer::Allow
                }
            }
            "/label" => Answer::Patch(if req["object"]["metadata"]["labels"].is_object() {
                json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "by-webhook"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "by-webhook"}}])
            }),
            "/annotate" => {
                // Adds an annotation counting the labels it saw: reinvoked after /label.
                let n = req["object"]["metadata"]["labels"]
                    .as_object()
                    .map_or(0, |m| m.len());
                let value = json!(n.to_string());
                let op = if req["object"]["metadata"]["annotations"].is_object() {
                    json!({"op": "add", "path": "/metadata/annotations/seen-labels", "value": value})
                } else {
                    json!({"op": "add", "path": "/metadata/annotations", "value": {"seen-labels": value}})
                };
                Answer::Patch(json!([op]))
            }
            "/conditional" => Answer::Deny(403, "checked and refused".into()),
            _ => Answer::Allow,
        }
    });
    let ca = server.ca_bundle();
    // Called only for configmaps whose name starts with checked- (matchConditions in CEL).
    let mut conditional = hook(
        "conditional.tandem.test",
        &server.url("/conditional"),
        &ca,
        vec![rule(&["CREATE"], "", &["configmaps"])],
    );
    conditional["matchConditions"] = json!([
        {"name": "checked-only", "expression": "object.metadata.name.startsWith('checked-')"},
        {"name": "not-by-nobody", "expression": "request.userInfo.username != 'nobody'"},
    ]);
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "conditional",
            vec![conditional],
        ),
    )
    .ok();
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "deny-pods",
            vec![hook(
                "deny.tandem.test",
                &server.url("/validate"),
                &ca,
                vec![
                    rule(&["CREATE", "UPDATE", "DELETE"], "", &["pods"]),
                    rule(&["CONNECT"], "", &["pods/exec"]),
                ],
            )],
        ),
    )
    .ok();
    // Configurations are ordered by name: "a-annotate" runs before "b-label" and is reinvoked
    // because "b-label" changed the object after it.
    let mut annotate = hook(
        "annotate.tandem.test",
        &server.url("/annotate"),
        &ca,
        vec![rule(&["CREATE"], "", &["configmaps"])],
    );
    annotate["reinvocationPolicy"] = json!("IfNeeded");
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &configuration("MutatingWebhookConfiguration", "a-annotate", vec![annotate]),
    )
    .ok();
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &configuration(
            "MutatingWebhookConfiguration",
            "b-label",
            vec![hook(
                "label.tandem.test",
                &server.url("/label"),
                &ca,
                vec![rule(&["CREATE"], "", &["configmaps"])],
            )],
        ),
    )
    .ok();

    // A denial reads as upstream's and stores nothing.
    let mut denial = String::new();
    until(&s, "the validating webhook denies", || {
        let out = s.kubectl_stdin(
            &["create", "-f", "-"],
            &pod("denied", json!({"deny": "yes"})),
        );
        denial = out.stderr.clone();
        !out.success()
    });
    assert!(
        denial.contains(
            "admission webhook \"deny.tandem.test\" denied the request: pods labelled deny=yes are refused"
        ),
        "{denial}"
    );
    assert!(s.get_json(&["pod", "denied"]).is_none());
    let review = server.reviews("/validate").pop().unwrap();
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["request"]["operation"], "CREATE");
    assert_eq!(
        review["request"]["resource"],
        json!({"group": "", "version": "v1", "resource": "pods"})
    );
    assert_eq!(review["request"]["namespace"], "default");
    assert_eq!(review["request"]["name"], "denied");
    assert_eq!(review["request"]["oldObject"], Value::Null);
    assert_eq!(review["request"]["options"]["kind"], "CreateOptions");
    assert!(
        review["request"]["userInfo"]["username"].is_string(),
        "{review}"
    );

    // An allowed pod with a warning: kubectl prints it.
    let out = s.kubectl_stdin(
        &["create", "-f", "-"],
        &pod("watched", json!({"warn": "yes"})),
    );
    assert!(out.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("Warning: this pod is watched"),
        "{}",
        out.stderr
    );

    // An update is reviewed with the old object; a delete with the old object and no object.
    let out = s.kubectl(&["label", "pod", "watched", "deny=yes"]);
    assert!(
        !out.success() && out.stderr.contains("denied the request"),
        "{}",
        out.stderr
    );
    let update = server.reviews("/validate").pop().unwrap();
    assert_eq!(update["request"]["operation"], "UPDATE");
    assert_eq!(
        update["request"]["oldObject"]["metadata"]["name"],
        "watched"
    );
    s.kubectl(&["delete", "pod", "watched", "--wait=false"])
        .ok();
    let delete = server.reviews("/validate").pop().unwrap();
    assert_eq!(delete["request"]["operation"], "DELETE");
    assert_eq!(delete["request"]["object"], Value::Null);
    assert_eq!(
        delete["request"]["oldObject"]["metadata"]["name"],
        "watched"
    );
    assert_eq!(delete["request"]["options"]["kind"], "DeleteOptions");

    // A dry run reaches a webhook without side effects, marked as such.
    let out = s.kubectl_stdin(
        &["create", "--dry-run=server", "-f", "-"],
        &pod("dry", json!({})),
    );
    assert!(out.success(), "{}", out.stderr);
    let dry = server.reviews("/validate").pop().unwrap();
    assert_eq!(dry["request"]["dryRun"], true, "{dry}");

    // Mutations: the label patch is applied, and the IfNeeded webhook ran again after it.
    let out = s.kubectl(&["create", "configmap", "mutated", "--from-literal=k=v"]);
    assert!(out.success(), "{}", out.stderr);
    let cm = s.get_json(&["configmap", "mutated"]).unwrap();
    assert_eq!(cm["metadata"]["labels"]["mutated"], "by-webhook", "{cm}");
    assert_eq!(
        cm["metadata"]["annotations"]["seen-labels"], "1",
        "the reinvoked webhook saw the label the later one added: {cm}"
    );
    assert_eq!(
        server.reviews("/annotate").len(),
        2,
        "called, then reinvoked once"
    );
    assert_eq!(server.reviews("/label").len(), 1);

    // matchConditions: only the configmap whose name matches reaches the webhook.
    let out = s.kubectl(&["create", "configmap", "checked-one"]);
    assert!(
        out.stderr.contains(
            "admission webhook \"conditional.tandem.test\" denied the request: checked and refused"
        ),
        "{}",
        out.stderr
    );
    assert_eq!(
        server.reviews("/conditional").len(),
        1,
        "mutated and other configmaps skipped it"
    );

    // The webhook configurations themselves are never sent to webhooks: a webhook on
    // everything does not stop its own removal.
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "deny-everything",
            vec![hook(
                "everything.tandem.test",
                "https://127.0.0.1:1/dead",
                &ca,
                vec![json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]})],
            )],
        ),
    )
    .ok();
    until(&s, "the dead catch-all webhook fails requests", || {
        !s.kubectl(&["create", "configmap", "blocked"]).success()
    });
    let out = s.kubectl(&[
        "delete",
        "validatingwebhookconfiguration",
        "deny-everything",
    ]);
    assert!(out.success(), "{}", out.stderr);

    // The calls were measured.
    let metrics = s.kubectl(&["get", "--raw", "/metrics"]);
    let text = metrics.ok();
    assert!(
        text.lines().any(|l| l
            .starts_with("apiserver_admission_webhook_admission_duration_seconds_count{")
            && l.contains("name=\"deny.tandem.test\"")
            && l.contains("type=\"validating\"")),
        "no webhook latency for deny.tandem.test"
    );
    assert!(
        text.lines().any(
            |l| l.starts_with("apiserver_admission_webhook_rejection_count{")
                && l.contains("name=\"deny.tandem.test\"")
                && l.contains("rejection_code=\"403\"")
        ),
        "no rejection counted for deny.tandem.test"
    );
}

#[test]
fn failure_policies_selectors_and_services() {
    let s = Server::start();
    let server = WebhookServer::start("hook.webhook-test.svc", |path, _review| match path {
        "/slow" => Answer::Slow(Duration::from_secs(3)),
        "/garbage" => Answer::Garbage,
        "/deny" => Answer::Deny(400, "denied through the service".into()),
        "/scale" => Answer::Patch(json!([{"op": "replace", "path": "/spec/replicas", "value": 2}])),
        _ => Answer::Allow,
    });
    let ca = server.ca_bundle();
    let with = |mut h: Value, key: &str, v: Value| {
        h[key] = v;
        h
    };
    // Secrets named dead-*: a webhook on a port nobody listens on, failing closed; configmaps:
    // the same webhook failing open; services: a slow webhook with a 1 s timeout, both ways.
    let webhooks = vec![
        with(
            with(
                hook(
                    "dead-fail.tandem.test",
                    "https://127.0.0.1:1/dead",
                    &ca,
                    vec![rule(&["CREATE"], "", &["secrets"])],
                ),
                "objectSelector",
                json!({"matchLabels": {"policy": "fail"}}),
            ),
            "failurePolicy",
            json!("Fail"),
        ),
        with(
            with(
                hook(
                    "dead-ignore.tandem.test",
                    "https://127.0.0.1:1/dead",
                    &ca,
                    vec![rule(&["CREATE"], "", &["secrets"])],
                ),
                "objectSelector",
                json!({"matchLabels": {"policy": "ignore"}}),
            ),
            "failurePolicy",
            json!("Ignore"),
        ),
        with(
            with(
                with(
                    hook(
                        "slow.tandem.test",
                        &server.url("/slow"),
                        &ca,
                        vec![rule(&["CREATE"], "", &["configmaps"])],
                    ),
                    "timeoutSeconds",
                    json!(1),
                ),
                "failurePolicy",
                json!("Fail"),
            ),
            "objectSelector",
            json!({"matchLabels": {"slow": "fail"}}),
        ),
        with(
            with(
                with(
                    hook(
                        "slow-ignore.tandem.test",
                        &server.url("/slow"),
                        &ca,
                        vec![rule(&["CREATE"], "", &["configmaps"])],
                    ),
                    "timeoutSeconds",
                    json!(1),
                ),
                "failurePolicy",
                json!("Ignore"),
            ),
            "objectSelector",
            json!({"matchLabels": {"slow": "ignore"}}),
        ),
        with(
            hook(
                "garbage.tandem.test",
                &server.url("/garbage"),
                &ca,
                vec![rule(&["CREATE"], "", &["configmaps"])],
            ),
            "objectSelector",
            json!({"matchLabels": {"garbage": "yes"}}),
        ),
        // Only namespaces labelled team=a are seen by this one.
        with(
            hook(
                "team.tandem.test",
                &server.url("/deny"),
                &ca,
                vec![rule(&["CREATE"], "", &["serviceaccounts"])],
            ),
            "namespaceSelector",
            json!({"matchLabels": {"team": "a"}}),
        ),
    ];
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &configuration("ValidatingWebhookConfiguration", "policies", webhooks),
    )
    .ok();

    let secret = |name: &str, policy: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": {"policy": policy}}})
            .to_string()
    };
    let mut failed = String::new();
    until(&s, "the dead webhook fails closed", || {
        let out = s.kubectl_stdin(&["create", "-f", "-"], &secret("closed", "fail"));
        failed = out.stderr.clone();
        !out.success()
    });
    assert!(
        failed.contains("Internal error occurred: failed calling webhook \"dead-fail.tandem.test\": failed to call webhook: Post \"https://127.0.0.1:1/dead?timeout=10s\""),
        "{failed}"
    );
    let out = s.kubectl_stdin(&["create", "-f", "-"], &secret("open", "ignore"));
    assert!(
        out.success(),
        "failurePolicy Ignore lets it through: {}",
        out.stderr
    );

    let cm = |name: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}}).to_string()
    };
    let started = Instant::now();
    let out = s.kubectl_stdin(
        &["create", "-f", "-"],
        &cm("slow-fail", json!({"slow": "fail"})),
    );
    assert!(!out.success());
    assert!(
        out.stderr
            .contains("failed calling webhook \"slow.tandem.test\"")
            && out.stderr.contains("context deadline exceeded"),
        "{}",
        out.stderr
    );
    let out = s.kubectl_stdin(
        &["create", "-f", "-"],
        &cm("slow-ignore", json!({"slow": "ignore"})),
    );
    assert!(out.success(), "{}", out.stderr);
    // Two calls cut at their 1 s timeout, not the webhook's 3 s.
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "took {:?}",
        started.elapsed()
    );
    let out = s.kubectl_stdin(
        &["create", "-f", "-"],
        &cm("garbage", json!({"garbage": "yes"})),
    );
    assert!(
        out.stderr
            .contains("expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview"),
        "{}",
        out.stderr
    );
    // Unrelated requests never wait for the slow webhook.
    let out = s.kubectl_stdin(&["create", "-f", "-"], &cm("plain", json!({})));
    assert!(out.success(), "{}", out.stderr);

    // The namespace selector: namespace b is not seen, namespace a is denied.
    s.kubectl(&["create", "namespace", "team-a"]).ok();
    s.kubectl(&["label", "namespace", "team-a", "team=a"]).ok();
    s.kubectl(&["create", "namespace", "team-b"]).ok();
    let out = s.kubectl(&["create", "serviceaccount", "robot", "-n", "team-b"]);
    assert!(out.success(), "{}", out.stderr);
    let out = s.kubectl(&["create", "serviceaccount", "robot", "-n", "team-a"]);
    assert!(
        out.stderr.contains(
            "admission webhook \"team.tandem.test\" denied the request: denied through the service"
        ),
        "{}",
        out.stderr
    );

    // Through a Service: the webhook's certificate names hook.webhook-test.svc, the Service
    // (ExternalName) leads to it.
    s.kubectl(&["create", "namespace", "webhook-test"]).ok();
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hook", "namespace": "webhook-test"},
            "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": server.port}]}})
        .to_string(),
    )
    .ok();
    let service_hook = json!({
        "name": "service.tandem.test",
        "clientConfig": {"service": {"namespace": "webhook-test", "name": "hook", "port": server.port, "path": "/scale"}, "caBundle": ca},
        "rules": [rule(&["UPDATE"], "apps", &["deployments/scale"])],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &configuration("MutatingWebhookConfiguration", "scale", vec![service_hook]),
    )
    .ok();
    s.kubectl(&[
        "create",
        "deployment",
        "web",
        "--image=tandem.local/busybox:1",
        "--replicas=1",
    ])
    .ok();
    until(&s, "the scale webhook sets two replicas", || {
        s.kubectl(&["scale", "deployment", "web", "--replicas=5"])
            .ok();
        s.get_json(&["deployment", "web"])
            .is_some_and(|d| d["spec"]["replicas"] == 2)
    });
    let review = server.reviews("/scale").pop().unwrap();
    assert_eq!(
        review["request"]["kind"],
        json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    );
    assert_eq!(review["request"]["subResource"], "scale");
    assert_eq!(review["request"]["object"]["spec"]["replicas"], 5);
    assert_eq!(review["request"]["oldObject"]["kind"], "Scale", "{review}");
    assert!(
        review["request"]["oldObject"]["spec"]["replicas"].is_i64(),
        "{review}"
    );
}

#[test]
fn validating_admission_policies_deny_and_warn_with_params() {
    let s = Server::start();
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "replica-limit"},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["deployments"],
            }]},
            "variables": [{"name": "limit", "expression": "int(params.data.maxReplicas)"}],
            "validations": [{
                "expression": "object.spec.replicas <= variables.limit",
                "messageExpression": "'replicas ' + string(object.spec.replicas) + ' exceed ' + string(variables.limit)",
                "reason": "Invalid",
            }],
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "replica-limit-default"},
        "spec": {
            "policyName": "replica-limit",
            "validationActions": ["Deny"],
            "paramRef": {"name": "limits", "namespace": "default", "parameterNotFoundAction": "Deny"},
        },
    });
    let warn_policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "no-latest"},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["deployments"],
            }]},
            "validations": [{
                "expression": "!object.spec.template.spec.containers.exists(c, c.image.endsWith(':latest'))",
                "message": "latest images are discouraged",
            }],
        },
    });
    let warn_binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "no-latest"},
        "spec": {"policyName": "no-latest", "validationActions": ["Warn"]},
    });
    for o in [&policy, &binding, &warn_policy, &warn_binding] {
        let out = s.kubectl_stdin(&["apply", "-f", "-"], &o.to_string());
        assert!(out.success(), "{}", out.stderr);
    }
    s.kubectl(&[
        "create",
        "configmap",
        "limits",
        "--from-literal=maxReplicas=3",
    ])
    .ok();

    let mut denial = String::new();
    until(&s, "the policy denies five replicas", || {
        let out = s.kubectl(&[
            "create",
            "deployment",
            "big",
            "--image=tandem.local/busybox:1",
            "--replicas=5",
        ]);
        denial = out.stderr.clone();
        !out.success()
    });
    assert!(
        denial.contains("ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-default' denied request: replicas 5 exceed 3"),
        "{denial}"
    );
    assert!(s.get_json(&["deployment", "big"]).is_none());
    let out = s.kubectl(&[
        "create",
        "deployment",
        "small",
        "--image=tandem.local/busybox:latest",
        "--replicas=2",
    ]);
    assert!(out.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'no-latest' with binding 'no-latest': latest images are discouraged"),
        "{}",
        out.stderr
    );
    // A scale through the policy: the update of the scaled object is matched too.
    let out = s.kubectl(&[
        "patch",
        "deployment",
        "small",
        "-p",
        r#"{"spec":{"replicas":7}}"#,
    ]);
    assert!(out.stderr.contains("replicas 7 exceed 3"), "{}", out.stderr);

    // Without its param the binding denies, as parameterNotFoundAction says.
    s.kubectl(&["delete", "configmap", "limits"]).ok();
    until(&s, "the missing param denies", || {
        let out = s.kubectl(&[
            "create",
            "deployment",
            "other",
            "--image=tandem.local/busybox:1",
        ]);
        out.stderr
            .contains("no params found for policy binding with `Deny` parameterNotFoundAction")
    });
    let metrics = s.kubectl(&["get", "--raw", "/metrics"]);
    assert!(
        metrics.ok().lines().any(|l| l
            .starts_with("apiserver_validating_admission_policy_check_total{")
            && l.contains("policy=\"replica-limit\"")
            && l.contains("enforcement_action=\"deny\"")),
        "no policy check counted"
    );
}

/// A webhook configuration of `kind` named `name` with label `test=<label>` and one webhook on
/// ConfigMap `operations` answered at `path`.
fn labelled(
    kind: &str,
    name: &str,
    label: &str,
    server: &WebhookServer,
    path: &str,
    ops: &[&str],
) -> String {
    let mut webhook = hook(
        &format!("{name}.tandem.test"),
        &server.url(path),
        &server.ca_bundle(),
        vec![rule(ops, "", &["configmaps"])],
    );
    // Only ConfigMaps named after the test are seen, so the test's own writes go through.
    webhook["objectSelector"] = json!({"matchLabels": {"webhook-test": label}});
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "labels": {"test": label}},
        "webhooks": [webhook],
    })
    .to_string()
}

#[test]
fn configurations_listed_patched_and_custom_resources() {
    let s = Server::start();
    let server = WebhookServer::start("hook.webhook-test.svc", |path, review| {
        let req = &review["request"];
        match path {
            "/deny" => Answer::Deny(403, "refused by the labelled webhook".into()),
            "/mutate" => Answer::Patch(json!([
                {"op": "add", "path": "/data", "value": {"mutated": "yes"}}
            ])),
            "/widgets" => {
                let object = if req["operation"] == "DELETE" {
                    &req["oldObject"]
                } else {
                    &req["object"]
                };
                if req["operation"] == "DELETE" && object["metadata"]["labels"]["protect"] == "yes"
                {
                    Answer::Deny(403, "protected widgets stay".into())
                } else if object["spec"]["bad"] == true {
                    Answer::Deny(403, "bad widgets are refused".into())
                } else {
                    Answer::Allow
                }
            }
            "/widgets-mutate" => Answer::Patch(json!([
                {"op": "add", "path": "/spec/mutatedBy", "value": "webhook"}
            ])),
            _ => Answer::Allow,
        }
    });
    let cm = |name: &str, label: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"webhook-test": label}}}).to_string()
    };

    // Listing and deleting a collection: two labelled validating configurations deny, listing
    // by label finds both, deleting the collection stops the denial.
    for name in ["list-a", "list-b"] {
        s.kubectl_stdin(
            &["apply", "-f", "-"],
            &labelled(
                "ValidatingWebhookConfiguration",
                name,
                "listing",
                &server,
                "/deny",
                &["CREATE"],
            ),
        )
        .ok();
    }
    let listed = s
        .get_json(&["validatingwebhookconfigurations", "-l", "test=listing"])
        .unwrap();
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    until(&s, "the labelled webhooks deny", || {
        !s.kubectl_stdin(&["create", "-f", "-"], &cm("listed-1", "listing"))
            .success()
    });
    s.kubectl(&[
        "delete",
        "validatingwebhookconfigurations",
        "-l",
        "test=listing",
    ])
    .ok();
    until(&s, "the deleted webhooks stop denying", || {
        s.kubectl_stdin(&["create", "-f", "-"], &cm("listed-2", "listing"))
            .success()
    });
    // The same for mutating configurations: they mutate, then stop once deleted.
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &labelled(
            "MutatingWebhookConfiguration",
            "mutate-a",
            "mutating",
            &server,
            "/mutate",
            &["CREATE"],
        ),
    )
    .ok();
    assert_eq!(
        s.get_json(&["mutatingwebhookconfigurations", "-l", "test=mutating"])
            .unwrap()["items"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    until(&s, "the labelled webhook mutates", || {
        let name = format!("mutated-{}", uuid::Uuid::new_v4().simple());
        s.kubectl_stdin(&["create", "-f", "-"], &cm(&name, "mutating"))
            .ok();
        s.get_json(&["configmap", &name])
            .is_some_and(|c| c["data"]["mutated"] == "yes")
    });
    s.kubectl(&[
        "delete",
        "mutatingwebhookconfigurations",
        "-l",
        "test=mutating",
    ])
    .ok();
    until(&s, "the deleted webhook stops mutating", || {
        let name = format!("plain-{}", uuid::Uuid::new_v4().simple());
        s.kubectl_stdin(&["create", "-f", "-"], &cm(&name, "mutating"))
            .ok();
        s.get_json(&["configmap", &name])
            .is_some_and(|c| c["data"].is_null())
    });

    // Patching a webhook's operations turns it off and on again.
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &labelled(
            "ValidatingWebhookConfiguration",
            "patched",
            "patching",
            &server,
            "/deny",
            &["CREATE"],
        ),
    )
    .ok();
    until(&s, "the webhook denies creates", || {
        !s.kubectl_stdin(&["create", "-f", "-"], &cm("patched-1", "patching"))
            .success()
    });
    let ops = |ops: &[&str]| {
        json!([{"op": "replace", "path": "/webhooks/0/rules/0/operations", "value": ops}])
            .to_string()
    };
    s.kubectl(&[
        "patch",
        "validatingwebhookconfiguration",
        "patched",
        "--type=json",
        "-p",
        &ops(&["UPDATE"]),
    ])
    .ok();
    until(
        &s,
        "creates pass once the webhook covers updates only",
        || {
            s.kubectl_stdin(&["create", "-f", "-"], &cm("patched-2", "patching"))
                .success()
        },
    );
    s.kubectl(&[
        "patch",
        "validatingwebhookconfiguration",
        "patched",
        "--type=json",
        "-p",
        &ops(&["CREATE"]),
    ])
    .ok();
    until(&s, "creates are denied again", || {
        !s.kubectl_stdin(&["create", "-f", "-"], &cm("patched-3", "patching"))
            .success()
    });
    // The same with a mutating webhook.
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &labelled(
            "MutatingWebhookConfiguration",
            "patched-mutator",
            "patching-m",
            &server,
            "/mutate",
            &["CREATE"],
        ),
    )
    .ok();
    let mutated = |name: &str| {
        s.kubectl_stdin(&["create", "-f", "-"], &cm(name, "patching-m"))
            .ok();
        s.get_json(&["configmap", name])
            .is_some_and(|c| c["data"]["mutated"] == "yes")
    };
    let mut n = 0;
    until(&s, "the mutating webhook mutates", || {
        n += 1;
        mutated(&format!("pm-a{n}"))
    });
    s.kubectl(&[
        "patch",
        "mutatingwebhookconfiguration",
        "patched-mutator",
        "--type=json",
        "-p",
        &ops(&["UPDATE"]),
    ])
    .ok();
    until(
        &s,
        "creates are not mutated once it covers updates only",
        || {
            n += 1;
            !mutated(&format!("pm-b{n}"))
        },
    );
    s.kubectl(&[
        "patch",
        "mutatingwebhookconfiguration",
        "patched-mutator",
        "--type=json",
        "-p",
        &ops(&["CREATE"]),
    ])
    .ok();
    until(&s, "creates are mutated again", || {
        n += 1;
        mutated(&format!("pm-c{n}"))
    });

    // Custom resources: a webhook refuses their creation, update and deletion, another mutates
    // them on create.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.webhook.tandem.test"},
        "spec": {"group": "webhook.tandem.test", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "properties": {"spec": {"type": "object", "properties": {
                    "bad": {"type": "boolean"}, "size": {"type": "integer"}, "mutatedBy": {"type": "string"}}}}}}}]},
    });
    s.kubectl_stdin(&["apply", "-f", "-"], &crd.to_string())
        .ok();
    s.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.webhook.tandem.test",
        "--timeout=30s",
    ])
    .ok();
    let widget_rule = |ops: &[&str]| json!({"operations": ops, "apiGroups": ["webhook.tandem.test"], "apiVersions": ["v1"], "resources": ["widgets"]});
    let ca = server.ca_bundle();
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "widgets",
            vec![hook(
                "widgets.tandem.test",
                &server.url("/widgets"),
                &ca,
                vec![widget_rule(&["CREATE", "UPDATE", "DELETE"])],
            )],
        ),
    )
    .ok();
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &configuration(
            "MutatingWebhookConfiguration",
            "widgets-mutate",
            vec![hook(
                "widgets-mutate.tandem.test",
                &server.url("/widgets-mutate"),
                &ca,
                vec![widget_rule(&["CREATE"])],
            )],
        ),
    )
    .ok();
    let widget = |name: &str, bad: bool, labels: Value| {
        json!({"apiVersion": "webhook.tandem.test/v1", "kind": "Widget",
            "metadata": {"name": name, "labels": labels}, "spec": {"bad": bad, "size": 1}})
        .to_string()
    };
    let mut refused = String::new();
    until(&s, "a bad widget is refused", || {
        let out = s.kubectl_stdin(&["create", "-f", "-"], &widget("bad", true, json!({})));
        refused = out.stderr.clone();
        !out.success()
    });
    assert!(
        refused.contains(
            "admission webhook \"widgets.tandem.test\" denied the request: bad widgets are refused"
        ),
        "{refused}"
    );
    until(&s, "a good widget is created and mutated", || {
        s.kubectl_stdin(
            &["apply", "-f", "-"],
            &widget("good", false, json!({"protect": "yes"})),
        )
        .ok();
        s.get_json(&["widget", "good"])
            .is_some_and(|w| w["spec"]["mutatedBy"] == "webhook")
    });
    let out = s.kubectl(&[
        "patch",
        "widget",
        "good",
        "--type=merge",
        "-p",
        r#"{"spec":{"bad":true}}"#,
    ]);
    assert!(
        out.stderr.contains("bad widgets are refused"),
        "{}",
        out.stderr
    );
    let out = s.kubectl(&["delete", "widget", "good"]);
    assert!(
        out.stderr.contains("protected widgets stay"),
        "{}",
        out.stderr
    );
    assert!(
        s.get_json(&["widget", "good"]).is_some(),
        "the protected widget is still there"
    );
}
