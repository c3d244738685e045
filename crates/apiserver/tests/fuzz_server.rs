//! Every request-side parser run end to end against a live in-process API server: a few hundred
//! malformed bodies (JSON, YAML, protobuf), label and field selectors, patches of each patch
//! type, continue tokens and query parameters, each answered with a 4xx `Status` (or a success,
//! when the random input happens to be valid), never a 5xx, a reset connection or a crash; and
//! the server still serves afterwards. Upstream's API server gives the same guarantee through its
//! decoders' fuzz tests and `Status` error responses.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

mod common;

#[path = "../../core/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use std::time::Duration;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use serde_json::json;

use common::{RawResponse, raw};
use fuzz_support::hostile_text;

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn draw<S: Strategy>(runner: &mut TestRunner, strategy: S) -> S::Value {
    strategy.new_tree(runner).unwrap().current()
}

/// The answer is a success or a 4xx `Status`; never a 5xx.
fn check(what: &str, input: &str, r: &RawResponse) {
    assert!(
        r.code < 500,
        "{what} {input:?}: server error {} {}",
        r.code,
        r.text
    );
    if r.code >= 400 {
        assert_eq!(
            r.body.get("kind").and_then(|k| k.as_str()),
            Some("Status"),
            "{what} {input:?}: {} answered without a Status: {}",
            r.code,
            r.text
        );
        assert_eq!(
            r.body.get("code").and_then(serde_json::Value::as_u64),
            Some(u64::from(r.code)),
            "{what} {input:?}: {}",
            r.text
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_4xx_statuses_and_the_server_keeps_serving() {
    let server = common::start().await;
    let client = server.client.clone();
    let outcome = tokio::time::timeout(Duration::from_secs(240), async move {
        let mut runner = TestRunner::deterministic();
        let cm_path = "/api/v1/namespaces/default/configmaps";
        let created = raw(
            &client,
            "POST",
            cm_path,
            Some(
                serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "target"}, "data": {"a": "1"}}))
                .unwrap(),
            ),
            &[],
        )
        .await;
        assert_eq!(created.code, 201, "{}", created.text);
        let mut sent = 0usize;

        // Bodies in each content type.
        let content_types = [
            "application/json",
            "application/yaml",
            "application/vnd.kubernetes.protobuf",
            "text/plain",
            "application/json; charset=utf-8",
        ];
        let pieces = proptest::collection::vec(
            proptest::sample::select(vec![
                "{",
                "}",
                "[",
                "]",
                ":",
                ",",
                "\"apiVersion\"",
                "\"v1\"",
                "\"kind\"",
                "\"ConfigMap\"",
                "\"metadata\"",
                "\"name\"",
                "\"x\"",
                "\"data\"",
                "1",
                "null",
                "- ",
                "&a ",
                "*a",
                "\n",
                "k8s\0",
                "\u{0}",
                "\"\\ud800\"",
                "1e999",
            ]),
            0..20,
        )
        .prop_map(|p| p.concat());
        for i in 0..150 {
            let body = if i % 3 == 0 {
                draw(&mut runner, hostile_text(30))
            } else {
                draw(&mut runner, pieces.clone())
            };
            let ct = content_types[i % content_types.len()];
            let r = raw(
                &client,
                "POST",
                cm_path,
                Some(body.clone().into_bytes()),
                &[("content-type", ct)],
            )
            .await;
            check("POST body", &body, &r);
            sent += 1;
        }

        // Protobuf bodies: a valid ConfigMap with bytes overwritten.
        let valid = tandem_apiserver::protobuf::encode(&json!({"apiVersion": "v1",
            "kind": "ConfigMap", "metadata": {"name": "pb"}, "data": {"k": "v"}}))
        .unwrap()
        .unwrap();
        for i in 0..60 {
            let mut body = valid.clone();
            let edits = draw(
                &mut runner,
                proptest::collection::vec((0..body.len(), proptest::num::u8::ANY), 1..4),
            );
            for (at, byte) in edits {
                body[at] = byte;
            }
            if i % 4 == 0 {
                body.truncate(body.len() / 2);
            }
            let r = raw(
                &client,
                "POST",
                cm_path,
                Some(body.clone()),
                &[
                    ("content-type", "application/vnd.kubernetes.protobuf"),
                    ("accept", "application/json"),
                ],
            )
            .await;
            check("POST protobuf", &format!("{body:02x?}"), &r);
            sent += 1;
        }

        // Selectors, continue tokens and other query parameters on lists and watches.
        let params = [
            "labelSelector",
            "fieldSelector",
            "continue",
            "limit",
            "resourceVersion",
            "timeoutSeconds",
            "resourceVersionMatch",
            "allowWatchBookmarks",
        ];
        for i in 0..120 {
            let value = draw(&mut runner, hostile_text(16));
            let param = params[i % params.len()];
            let watch = if i % 10 == 9 {
                "&watch=true&timeoutSeconds=1"
            } else {
                ""
            };
            let path = format!(
                "/api/v1/namespaces/default/pods?{param}={}{watch}",
                encode(&value)
            );
            let r = raw(&client, "GET", &path, None, &[]).await;
            check(param, &value, &r);
            sent += 1;
        }

        // Patches of each type on an existing object.
        let patch_types = [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ];
        let patch = proptest::collection::vec(
            proptest::sample::select(vec![
                "{",
                "}",
                "[",
                "]",
                ":",
                ",",
                "\"op\"",
                "\"add\"",
                "\"remove\"",
                "\"move\"",
                "\"path\"",
                "\"/data/a\"",
                "\"/metadata\"",
                "\"from\"",
                "\"value\"",
                "\"data\"",
                "\"$patch\"",
                "\"delete\"",
                "\"metadata\"",
                "\"managedFields\"",
                "null",
                "1",
                "\"apiVersion\"",
                "\"v1\"",
                "\"kind\"",
                "\"ConfigMap\"",
                "\"name\"",
                "\"target\"",
            ]),
            0..16,
        )
        .prop_map(|p| p.concat());
        for i in 0..120 {
            let body = draw(&mut runner, patch.clone());
            let ct = patch_types[i % patch_types.len()];
            let r = raw(
                &client,
                "PATCH",
                &format!("{cm_path}/target?fieldManager=fuzz"),
                Some(body.clone().into_bytes()),
                &[("content-type", ct)],
            )
            .await;
            check(ct, &body, &r);
            sent += 1;
        }

        // Accept headers.
        for _ in 0..40 {
            let accept = draw(&mut runner, hostile_text(16));
            let Ok(value) = http::HeaderValue::from_str(&accept) else {
                continue;
            };
            let Ok(accept) = value.to_str() else {
                continue;
            };
            let r = raw(&client, "GET", cm_path, None, &[("accept", accept)]).await;
            check("accept", accept, &r);
            sent += 1;
        }

        // Still serving.
        let r = raw(&client, "GET", "/api/v1/namespaces/default", None, &[]).await;
        assert_eq!(r.code, 200, "{}", r.text);
        let r = raw(&client, "GET", &format!("{cm_path}/target"), None, &[]).await;
        assert_eq!(r.code, 200, "{}", r.text);
        sent
    })
    .await;
    let sent = outcome.expect("the malformed requests were answered within the time limit");
    assert!(sent >= 450, "only {sent} requests were sent");
}
