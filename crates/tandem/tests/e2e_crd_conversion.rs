//! End-to-end: CRD conversion webhooks (`conversion: strategy: Webhook`) with a real HTTPS
//! conversion webhook in the test. One cluster serves a CRD at `v1` (`spec.hostPort:
//! "host:port"`) and `v2` (`spec.host`, `spec.port`) whose webhook splits and joins the field:
//! objects created at either version read at the other with kubectl (JSON and tables) and the
//! raw API, lists converted in one review, watches, patches at the version not stored, wrong
//! answers and a webhook that is down answered with upstream's messages and no stored data
//! harmed, and a change of storage version.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;
mod webhook_server;

use std::time::Duration;

use common::Server;
use serde_json::{Value, json};
use webhook_server::conversion::{ConversionServer, Mode};

const WAIT: Duration = Duration::from_secs(30);

/// The test's conversion: `v1` `spec.hostPort: "host:port"` ⇄ `v2` `spec.host` and `spec.port`.
fn convert(object: &Value, desired: &str) -> Value {
    let mut out = object.clone();
    let from = object["apiVersion"].as_str().unwrap_or_default();
    out["apiVersion"] = json!(desired);
    let spec = &object["spec"];
    match (from, desired) {
        ("tandem.test/v1", "tandem.test/v2") => {
            let hp = spec["hostPort"].as_str().unwrap_or_default();
            let (host, port) = hp.split_once(':').unwrap_or((hp, "0"));
            out["spec"] = json!({"host": host, "port": port.parse::<i64>().unwrap_or(0)});
        }
        ("tandem.test/v2", "tandem.test/v1") => {
            out["spec"] = json!({"hostPort": format!("{}:{}", spec["host"].as_str().unwrap_or_default(), spec["port"])});
        }
        _ => {}
    }
    out
}

fn crd(webhook: &ConversionServer, storage: &str) -> String {
    let column =
        |name: &str, path: &str, ty: &str| json!({"name": name, "jsonPath": path, "type": ty});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "backends.tandem.test"},
        "spec": {
            "group": "tandem.test", "scope": "Namespaced",
            "names": {"plural": "backends", "singular": "backend", "kind": "Backend"},
            "conversion": {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": webhook.url("/convert"), "caBundle": webhook.ca_bundle()},
                "conversionReviewVersions": ["v1"]}},
            "versions": [
                {"name": "v1", "served": true, "storage": storage == "v1",
                 "additionalPrinterColumns": [column("HOSTPORT", ".spec.hostPort", "string")],
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                   "properties": {"hostPort": {"type": "string", "pattern": "^[a-z.]+:[0-9]+$"}}}}}}},
                {"name": "v2", "served": true, "storage": storage == "v2",
                 "additionalPrinterColumns": [column("HOST", ".spec.host", "string"), column("PORT", ".spec.port", "integer")],
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                   "properties": {"host": {"type": "string"}, "port": {"type": "integer", "minimum": 1}}}}}}}
            ]
        }
    })
    .to_string()
}

fn backend_v1(name: &str, host_port: &str) -> String {
    json!({"apiVersion": "tandem.test/v1", "kind": "Backend", "metadata": {"name": name, "namespace": "default"},
        "spec": {"hostPort": host_port}})
    .to_string()
}

fn backend_v2(name: &str, host: &str, port: i64) -> String {
    json!({"apiVersion": "tandem.test/v2", "kind": "Backend", "metadata": {"name": name, "namespace": "default"},
        "spec": {"host": host, "port": port}})
    .to_string()
}

fn raw(s: &Server, path: &str) -> Value {
    let out = s.kubectl(&["get", "--raw", path]);
    assert!(out.success(), "GET {path}: {}", out.combined());
    out.json()
}

/// The reviews the webhook received since `from`.
fn reviews_since(webhook: &ConversionServer, from: usize) -> Vec<Value> {
    webhook.reviews().into_iter().skip(from).collect()
}

#[test]
fn a_conversion_webhook_converts_every_read_and_write() {
    let s = Server::start();
    let webhook = ConversionServer::start(convert);

    // Validation: a webhook needs review versions tandem speaks.
    let mut bad: Value = serde_json::from_str(&crd(&webhook, "v1")).unwrap();
    bad["spec"]["conversion"]["webhook"]["conversionReviewVersions"] = json!(["v9"]);
    let out = s.kubectl_stdin(&["create", "-f", "-"], &bad.to_string());
    assert!(
        out.stderr.contains("spec.conversion.conversionReviewVersions: Invalid value: []string{\"v9\"}: must include at least one of v1, v1beta1"),
        "{}",
        out.combined()
    );

    s.create(&crd(&webhook, "v1"));
    let out = s.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/backends.tandem.test",
        "--timeout=30s",
    ]);
    assert!(out.success(), "{}", out.combined());

    // Created at v1 (the storage version), read at v2: kubectl, a table and the raw API.
    s.eventually("the v1 object is created", WAIT, || {
        s.kubectl_stdin(&["create", "-f", "-"], &backend_v1("db", "db.example:5432"))
            .success()
            .then_some(())
    });
    let db = s.get_json(&["backends.v2.tandem.test", "db"]).unwrap();
    assert_eq!(db["apiVersion"], "tandem.test/v2");
    assert_eq!(db["spec"], json!({"host": "db.example", "port": 5432}));
    assert_eq!(db["metadata"]["name"], "db");
    let raw_db = raw(&s, "/apis/tandem.test/v2/namespaces/default/backends/db");
    assert_eq!(raw_db["spec"], json!({"host": "db.example", "port": 5432}));
    let sent = webhook.reviews();
    assert!(!sent.is_empty(), "the webhook was called");
    let last = sent.last().unwrap();
    assert_eq!(last["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(last["kind"], "ConversionReview");
    assert_eq!(last["request"]["desiredAPIVersion"], "tandem.test/v2");
    let v1 = raw(&s, "/apis/tandem.test/v1/namespaces/default/backends/db");
    assert_eq!(v1["spec"], json!({"hostPort": "db.example:5432"}));

    // Created at v2, stored at v1 (the webhook was asked for v1), read at v1.
    let before = webhook.reviews().len();
    s.create(&backend_v2("cache", "cache", 6379));
    assert!(
        reviews_since(&webhook, before)
            .iter()
            .any(|r| r["request"]["desiredAPIVersion"] == "tandem.test/v1"),
        "a write at v2 is converted to the storage version"
    );
    let cache = s.get_json(&["backends.v1.tandem.test", "cache"]).unwrap();
    assert_eq!(cache["apiVersion"], "tandem.test/v1");
    assert_eq!(cache["spec"], json!({"hostPort": "cache:6379"}));
    // The request's version's schema validates the write (v2: port at least 1).
    let out = s.kubectl_stdin(&["create", "-f", "-"], &backend_v2("zero", "z", 0));
    assert!(
        !out.success() && out.stderr.contains("spec.port: Invalid value: 0: spec.port in body should be greater than or equal to 1"),
        "{}",
        out.combined()
    );

    // A list at v2 converts its items in one review; the table has v2's columns.
    let before = webhook.reviews().len();
    let list = raw(&s, "/apis/tandem.test/v2/namespaces/default/backends");
    let specs: Vec<&Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["spec"])
        .collect();
    assert_eq!(
        specs,
        [
            &json!({"host": "cache", "port": 6379}),
            &json!({"host": "db.example", "port": 5432})
        ]
    );
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["apiVersion"] == "tandem.test/v2")
    );
    let new_reviews = reviews_since(&webhook, before);
    assert_eq!(
        new_reviews.len(),
        1,
        "one review for the list: {new_reviews:?}"
    );
    assert_eq!(
        new_reviews[0]["request"]["objects"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    let table = s.kubectl(&["get", "backends.v2.tandem.test"]);
    assert!(table.success(), "{}", table.combined());
    assert!(
        table.stdout.contains("HOST")
            && table.stdout.contains("PORT")
            && table.stdout.contains("db.example")
            && table.stdout.contains("5432"),
        "{}",
        table.stdout
    );
    let table = s.kubectl(&["get", "backends.v1.tandem.test", "cache"]);
    assert!(
        table.stdout.contains("HOSTPORT") && table.stdout.contains("cache:6379"),
        "{}",
        table.combined()
    );

    // A watch at v2 sees objects and their changes at v2.
    let mut watch = s.kubectl_stream(&[
        "get",
        "backends.v2.tandem.test",
        "--watch",
        "-o",
        "json",
        "--output-watch-events",
    ]);
    watch.wait_for("the initial db at v2", WAIT, |l| {
        l.replace(' ', "").contains(r#""host":"db.example""#)
    });
    let out = s.kubectl(&[
        "patch",
        "backends.v1.tandem.test",
        "db",
        "--type=merge",
        "-p",
        r#"{"spec":{"hostPort":"db.example:5433"}}"#,
    ]);
    assert!(out.success(), "{}", out.combined());
    watch.wait_for("the change at v2", WAIT, |l| {
        l.replace(' ', "").contains(r#""port":5433"#)
    });

    // Patches at v2 (not stored) apply to the object at v2, then go back to v1.
    let out = s.kubectl(&[
        "patch",
        "backends.v2.tandem.test",
        "db",
        "--type=merge",
        "-p",
        r#"{"spec":{"port":6000}}"#,
        "-o",
        "json",
    ]);
    assert!(out.success(), "{}", out.combined());
    let patched = out.json();
    assert_eq!(patched["apiVersion"], "tandem.test/v2");
    assert_eq!(patched["spec"], json!({"host": "db.example", "port": 6000}));
    let out = s.kubectl(&[
        "patch",
        "backends.v2.tandem.test",
        "db",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/host","value":"db.internal"}]"#,
    ]);
    assert!(out.success(), "{}", out.combined());
    let db = s.get_json(&["backends.v1.tandem.test", "db"]).unwrap();
    assert_eq!(db["spec"], json!({"hostPort": "db.internal:6000"}));
    assert_eq!(
        db["metadata"]["generation"], 4,
        "each patch changed the spec once"
    );
    // Labels go through at any version.
    let out = s.kubectl(&["label", "backends.v2.tandem.test", "db", "tier=data"]);
    assert!(out.success(), "{}", out.combined());
    let db = s.get_json(&["backends.v1.tandem.test", "db"]).unwrap();
    assert_eq!(db["metadata"]["labels"]["tier"], "data");
    drop(watch);

    // Wrong answers: upstream's messages, 500, nothing written.
    webhook.set_mode(Mode::WrongUid);
    let (out, codes) = s.kubectl_codes(
        &["get", "backends.v2.tandem.test", "db", "-o", "json"],
        None,
    );
    assert!(
        out.stderr.contains("Error from server: conversion webhook for tandem.test/v1, Kind=Backend failed: expected response.uid="),
        "{}",
        out.combined()
    );
    assert!(codes.contains(&500), "{codes:?}");
    webhook.set_mode(Mode::WrongCount);
    let out = s.kubectl(&["get", "backends.v2.tandem.test"]);
    assert!(
        out.stderr.contains(
            "conversion webhook for tandem.test/v1, Kind=Backend returned 1 objects, expected 2"
        ),
        "{}",
        out.combined()
    );
    let out = s.kubectl(&[
        "patch",
        "backends.v2.tandem.test",
        "db",
        "--type=merge",
        "-p",
        r#"{"spec":{"port":7000}}"#,
    ]);
    assert!(!out.success(), "{}", out.combined());
    let db = s.get_json(&["backends.v1.tandem.test", "db"]).unwrap();
    assert_eq!(
        db["spec"],
        json!({"hostPort": "db.internal:6000"}),
        "a failed conversion wrote nothing"
    );
    webhook.set_mode(Mode::Convert);

    // The storage version moves to v2: new writes are stored at v2, older objects stay
    // readable at both versions, and both versions are recorded as stored.
    let mut moved: Value = serde_json::from_str(&crd(&webhook, "v2")).unwrap();
    let current = s.get_json(&["crd", "backends.tandem.test"]).unwrap();
    moved["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    let out = s.kubectl_stdin(&["replace", "-f", "-"], &moved.to_string());
    assert!(out.success(), "{}", out.combined());
    s.eventually("both versions are stored", WAIT, || {
        let crd = s.get_json(&["crd", "backends.tandem.test"])?;
        (crd["status"]["storedVersions"] == json!(["v1", "v2"])).then_some(())
    });
    let before = webhook.reviews().len();
    s.eventually("a v1 write is stored at v2", WAIT, || {
        let _ = s.kubectl(&[
            "delete",
            "backends.v1.tandem.test",
            "web",
            "--ignore-not-found",
        ]);
        s.kubectl_stdin(&["create", "-f", "-"], &backend_v1("web", "web.example:80"))
            .success()
            .then_some(())?;
        reviews_since(&webhook, before)
            .iter()
            .any(|r| r["request"]["desiredAPIVersion"] == "tandem.test/v2")
            .then_some(())
    });
    let web = s.get_json(&["backends.v1.tandem.test", "web"]).unwrap();
    assert_eq!(web["spec"], json!({"hostPort": "web.example:80"}));
    let list = raw(&s, "/apis/tandem.test/v1/namespaces/default/backends");
    let specs: Vec<&Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["spec"])
        .collect();
    assert_eq!(
        specs,
        [
            &json!({"hostPort": "cache:6379"}),
            &json!({"hostPort": "db.internal:6000"}),
            &json!({"hostPort": "web.example:80"})
        ]
    );

    // The same mixed list at v2: the two objects stored at v1 go in one review, the one
    // stored at v2 is not sent.
    let before = webhook.reviews().len();
    let list = raw(&s, "/apis/tandem.test/v2/namespaces/default/backends");
    let specs: Vec<&Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["spec"])
        .collect();
    assert_eq!(
        specs,
        [
            &json!({"host": "cache", "port": 6379}),
            &json!({"host": "db.internal", "port": 6000}),
            &json!({"host": "web.example", "port": 80})
        ]
    );
    let new_reviews = reviews_since(&webhook, before);
    assert_eq!(new_reviews.len(), 1, "{new_reviews:?}");
    let sent: Vec<&Value> = new_reviews[0]["request"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["metadata"]["name"])
        .collect();
    assert_eq!(sent, [&json!("cache"), &json!("db")]);

    // The webhook goes down: reads that need it answer 500 with upstream's message, reads that
    // do not still work, and a write that fails leaves the stored object as it was.
    webhook.stop();
    let port = webhook.port;
    s.eventually("the webhook is down", WAIT, || {
        let (out, codes) = s.kubectl_codes(&["get", "backends.v2.tandem.test", "db"], None);
        let prefix = format!(
            "Error from server: conversion webhook for tandem.test/v1, Kind=Backend failed: Post \"https://127.0.0.1:{port}/convert?timeout=30s\": "
        );
        (out.stderr.contains(&prefix) && codes.contains(&500)).then_some(())
    });
    let out = s.kubectl(&[
        "patch",
        "backends.v2.tandem.test",
        "db",
        "--type=merge",
        "-p",
        r#"{"spec":{"port":8000}}"#,
    ]);
    assert!(
        !out.success() && out.stderr.contains("conversion webhook for"),
        "{}",
        out.combined()
    );
    let db = raw(&s, "/apis/tandem.test/v1/namespaces/default/backends/db");
    assert_eq!(
        db["spec"],
        json!({"hostPort": "db.internal:6000"}),
        "stored data is intact"
    );
    let web = raw(&s, "/apis/tandem.test/v2/namespaces/default/backends/web");
    assert_eq!(
        web["spec"],
        json!({"host": "web.example", "port": 80}),
        "stored at v2: no call needed"
    );
}
