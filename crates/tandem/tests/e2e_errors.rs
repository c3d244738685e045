//! End-to-end: bad input gets upstream's status code and a clear `Status` message, and leaves
//! the stored state exactly as it was.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use common::{Server, configmap, deployment};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// name → (uid, resourceVersion, data) of every ConfigMap in `default` the tests made (the
/// root CA publisher's `kube-root-ca.crt` is the cluster's, and appears a moment after start).
fn snapshot(s: &Server) -> BTreeMap<String, (String, String, String)> {
    let list = s.kubectl(&["get", "--raw", CONFIGMAPS]).json();
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|i| i["metadata"]["name"] != "kube-root-ca.crt")
        .map(|i| {
            let m = &i["metadata"];
            (
                m["name"].as_str().unwrap_or_default().to_string(),
                (
                    m["uid"].as_str().unwrap_or_default().to_string(),
                    m["resourceVersion"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    i["data"].to_string(),
                ),
            )
        })
        .collect()
}

/// A server holding two ConfigMaps, and the snapshot of them.
fn seeded() -> (Server, BTreeMap<String, (String, String, String)>) {
    let s = Server::start();
    s.create(&configmap("keep-1", &[]));
    s.create(&configmap("keep-2", &[("tier", "web")]));
    let before = snapshot(&s);
    assert_eq!(before.len(), 2);
    (s, before)
}

#[track_caller]
fn assert_code(codes: &[u16], want: u16, out: &common::Output) {
    assert_eq!(
        codes.last(),
        Some(&want),
        "`{}`: responses {codes:?}\n{}",
        out.command,
        out.stderr
    );
}

#[test]
fn malformed_json_body_is_a_400_bad_request_and_stores_nothing() {
    let (mut s, before) = seeded();
    let body = s.write_file(
        "bad.json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x""#,
    );
    let (out, codes) = s.kubectl_codes(
        &["create", "--raw", CONFIGMAPS, "-f", body.to_str().unwrap()],
        None,
    );
    assert_code(&codes, 400, &out);
    assert!(
        out.stderr.contains("Error from server (BadRequest)"),
        "{}",
        out.stderr
    );
    let garbage = s.write_file("garbage.json", "\u{0}\u{1}not json at all [[[");
    let (out, codes) = s.kubectl_codes(
        &[
            "create",
            "--raw",
            CONFIGMAPS,
            "-f",
            garbage.to_str().unwrap(),
        ],
        None,
    );
    assert_code(&codes, 400, &out);
    let wrong_shape = s.write_file("shape.json", r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":["not","a","map"]}"#);
    let (out, codes) = s.kubectl_codes(
        &[
            "create",
            "--raw",
            CONFIGMAPS,
            "-f",
            wrong_shape.to_str().unwrap(),
        ],
        None,
    );
    assert_code(&codes, 400, &out);
    s.assert_alive();
    assert_eq!(snapshot(&s), before);
}

#[test]
fn body_whose_kind_or_api_version_does_not_match_the_url_is_a_400() {
    let (mut s, before) = seeded();
    let secret = s.write_file(
        "secret.json",
        r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}"#,
    );
    let (out, codes) = s.kubectl_codes(
        &[
            "create",
            "--raw",
            CONFIGMAPS,
            "-f",
            secret.to_str().unwrap(),
        ],
        None,
    );
    assert_code(&codes, 400, &out);
    assert!(
        out.stderr.contains("Secret"),
        "message should name the wrong kind: {}",
        out.stderr
    );
    let apps = s.write_file(
        "apps.json",
        r#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"x"}}"#,
    );
    let (out, codes) = s.kubectl_codes(
        &["create", "--raw", CONFIGMAPS, "-f", apps.to_str().unwrap()],
        None,
    );
    assert_code(&codes, 400, &out);
    assert!(
        out.stderr.contains("apps/v1"),
        "message should name the wrong apiVersion: {}",
        out.stderr
    );
    // A body naming another namespace than the URL.
    let other = s.write_file(
        "other-ns.json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"kube-system"}}"#,
    );
    let (out, codes) = s.kubectl_codes(
        &["create", "--raw", CONFIGMAPS, "-f", other.to_str().unwrap()],
        None,
    );
    assert_code(&codes, 400, &out);
    // A PUT whose body names another object than the URL.
    let renamed = s.write_file(
        "renamed.json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"keep-2"}}"#,
    );
    let (out, codes) = s.kubectl_codes(
        &[
            "replace",
            "--raw",
            &format!("{CONFIGMAPS}/keep-1"),
            "-f",
            renamed.to_str().unwrap(),
        ],
        None,
    );
    assert_code(&codes, 400, &out);
    s.assert_alive();
    assert_eq!(snapshot(&s), before);
    assert!(s.get_json(&["secret", "x"]).is_none());
    assert!(s.get_json(&["cm", "x", "-n", "kube-system"]).is_none());
}

#[test]
fn unknown_resource_path_is_a_404_not_found() {
    let (mut s, before) = seeded();
    for path in [
        "/api/v1/namespaces/default/widgets",
        "/apis/example.com/v1/widgets",
        "/apis/apps/v9/deployments",
        "/api/v1/namespaces/default/configmaps/keep-1/nosuchsubresource",
    ] {
        let (out, codes) = s.kubectl_codes(&["get", "--raw", path], None);
        assert_code(&codes, 404, &out);
        assert!(out.stderr.contains("NotFound"), "{path}: {}", out.stderr);
    }
    let body = s.write_file(
        "w.json",
        r#"{"apiVersion":"v1","kind":"Widget","metadata":{"name":"x"}}"#,
    );
    let (out, codes) = s.kubectl_codes(
        &[
            "create",
            "--raw",
            "/api/v1/namespaces/default/widgets",
            "-f",
            body.to_str().unwrap(),
        ],
        None,
    );
    assert_code(&codes, 404, &out);
    let missing = s.kubectl(&["get", "cm", "nope"]);
    assert!(
        missing
            .err()
            .contains("(NotFound): configmaps \"nope\" not found"),
        "{}",
        missing.stderr
    );
    s.assert_alive();
    assert_eq!(snapshot(&s), before);
}

#[test]
fn body_over_three_mebibytes_is_a_413_and_stores_nothing() {
    let (mut s, before) = seeded();
    let big = "a".repeat(3 * 1024 * 1024 + 512 * 1024);
    let body = s.write_file(
        "big.json",
        &format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big"}},"data":{{"blob":"{big}"}}}}"#),
    );
    let (out, codes) = s.kubectl_codes(
        &["create", "--raw", CONFIGMAPS, "-f", body.to_str().unwrap()],
        None,
    );
    assert_code(&codes, 413, &out);
    s.assert_alive();
    assert_eq!(snapshot(&s), before);
    assert!(s.get_json(&["cm", "big"]).is_none());
}

#[test]
fn name_that_is_not_a_dns_subdomain_is_a_422_invalid_naming_metadata_name() {
    let (mut s, before) = seeded();
    let (out, codes) = s.kubectl_codes(&["create", "-f", "-"], Some(&configmap("Bad_Name", &[])));
    assert_code(&codes, 422, &out);
    let err = &out.stderr;
    // kubectl renders an Invalid status as `The ConfigMap "Bad_Name" is invalid: <causes>`.
    assert!(
        err.contains("The ConfigMap \"Bad_Name\" is invalid"),
        "{err}"
    );
    assert!(
        err.contains("metadata.name: Invalid value: \"Bad_Name\""),
        "{err}"
    );
    assert!(err.contains("RFC 1123 subdomain"), "{err}");
    assert!(
        err.contains("\"field\": \"metadata.name\"") || err.contains("metadata.name"),
        "{err}"
    );
    let long = "a".repeat(254);
    let (out, codes) = s.kubectl_codes(&["create", "-f", "-"], Some(&configmap(&long, &[])));
    assert_code(&codes, 422, &out);
    s.assert_alive();
    assert_eq!(snapshot(&s), before);
}

#[test]
fn invalid_spec_is_a_422_with_field_paths_and_stores_nothing() {
    let (mut s, _) = seeded();
    let bad =
        deployment("web", 1).replace("      app: web\n  template", "      app: other\n  template");
    let (out, codes) = s.kubectl_codes(&["create", "-f", "-"], Some(&bad));
    assert_code(&codes, 422, &out);
    assert!(
        out.stderr.contains("spec.template.metadata.labels"),
        "{}",
        out.stderr
    );
    let negative = deployment("web", 1).replace("replicas: 1", "replicas: -1");
    let (out, codes) = s.kubectl_codes(&["create", "-f", "-"], Some(&negative));
    assert_code(&codes, 422, &out);
    assert!(out.stderr.contains("spec.replicas"), "{}", out.stderr);
    s.assert_alive();
    assert!(s.get_json(&["deploy", "web"]).is_none());
}

#[test]
fn unknown_field_is_rejected_by_strict_field_validation() {
    let (mut s, _) = seeded();
    let typo = deployment("web", 1).replace("  replicas: 1", "  replica: 1");
    let (out, codes) = s.kubectl_codes(&["create", "-f", "-"], Some(&typo));
    assert_code(&codes, 400, &out);
    assert!(
        out.stderr.contains("unknown field \"spec.replica\""),
        "{}",
        out.stderr
    );
    s.assert_alive();
    assert!(s.get_json(&["deploy", "web"]).is_none());
}

#[test]
fn creating_an_existing_name_is_a_409_already_exists() {
    let (mut s, before) = seeded();
    let (out, codes) = s.kubectl_codes(
        &["create", "-f", "-"],
        Some(&configmap("keep-1", &[("changed", "yes")])),
    );
    assert_code(&codes, 409, &out);
    assert!(
        out.stderr.contains("(AlreadyExists)") && out.stderr.contains("\"keep-1\" already exists"),
        "{}",
        out.stderr
    );
    s.assert_alive();
    assert_eq!(snapshot(&s), before);
}

#[test]
fn replace_with_a_stale_resource_version_is_a_409_conflict() {
    let (mut s, _) = seeded();
    let v1 = s.get_json(&["cm", "keep-1"]).unwrap();
    let mut first = v1.clone();
    first["data"]["key"] = "first".into();
    let first_path = s.write_file("first.json", &first.to_string());
    s.kubectl(&["replace", "-f", first_path.to_str().unwrap()])
        .ok();
    let after_first = snapshot(&s);

    let mut stale = v1.clone();
    stale["data"]["key"] = "stale".into();
    let stale_path = s.write_file("stale.json", &stale.to_string());
    let (out, codes) = s.kubectl_codes(&["replace", "-f", stale_path.to_str().unwrap()], None);
    assert_code(&codes, 409, &out);
    assert!(out.stderr.contains("(Conflict)"), "{}", out.stderr);
    assert!(
        out.stderr.contains("the object has been modified"),
        "{}",
        out.stderr
    );
    // The same through the raw PUT.
    let (out, codes) = s.kubectl_codes(
        &[
            "replace",
            "--raw",
            &format!("{CONFIGMAPS}/keep-1"),
            "-f",
            stale_path.to_str().unwrap(),
        ],
        None,
    );
    assert_code(&codes, 409, &out);
    s.assert_alive();
    assert_eq!(snapshot(&s), after_first);
    assert_eq!(
        s.get_json(&["cm", "keep-1"]).unwrap()["data"]["key"],
        "first"
    );
}

#[test]
fn json_patch_whose_test_fails_is_rejected_and_leaves_the_object_unchanged() {
    let (mut s, before) = seeded();
    let patch = r#"[{"op":"test","path":"/data/key","value":"not-the-value"},{"op":"replace","path":"/data/key","value":"changed"}]"#;
    let (out, codes) = s.kubectl_codes(
        &["patch", "cm", "keep-1", "--type", "json", "-p", patch],
        None,
    );
    // Upstream answers 422 for a JSON patch that does not apply (apiserver handlers/patch.go).
    assert_code(&codes, 422, &out);
    assert!(
        out.stderr.contains("test"),
        "message should say the test failed: {}",
        out.stderr
    );
    let missing_path = r#"[{"op":"replace","path":"/data/nothere/deeper","value":"x"}]"#;
    let (out, _) = s.kubectl_codes(
        &[
            "patch",
            "cm",
            "keep-1",
            "--type",
            "json",
            "-p",
            missing_path,
        ],
        None,
    );
    out.err();
    let not_a_patch = r#"{"op":"replace"}"#;
    let (out, codes) = s.kubectl_codes(
        &["patch", "cm", "keep-1", "--type", "json", "-p", not_a_patch],
        None,
    );
    out.err();
    assert_eq!(
        codes.last(),
        Some(&400),
        "a body that is not a JSON patch is a 400: {}",
        out.stderr
    );
    let (out, codes) = s.kubectl_codes(
        &[
            "patch",
            "cm",
            "nope",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"a":"b"}}"#,
        ],
        None,
    );
    assert_code(&codes, 404, &out);
    s.assert_alive();
    assert_eq!(snapshot(&s), before);
}

#[test]
fn request_with_an_unknown_bearer_token_is_a_401_and_stores_nothing() {
    // (A kubeconfig with no credentials at all makes kubectl prompt for a username, so the
    // no-credentials case is sent with curl below; an unknown token is refused the same way.)
    let (mut s, before) = seeded();
    let bogus = s.anonymous_kubeconfig(Some("not-a-real-token"));
    let bogus = bogus.to_str().unwrap();
    let (out, codes) = s.kubectl_codes(&["--kubeconfig", bogus, "get", "configmaps"], None);
    assert!(codes.contains(&401), "{codes:?}: {}", out.stderr);
    assert!(
        out.err()
            .contains("You must be logged in to the server (Unauthorized)"),
        "{}",
        out.stderr
    );
    let (out, codes) = s.kubectl_codes(
        &[
            "--kubeconfig",
            bogus,
            "create",
            "--raw",
            CONFIGMAPS,
            "-f",
            "-",
        ],
        Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"sneaky"}}"#),
    );
    assert_code(&codes, 401, &out);
    let (out, codes) = s.kubectl_codes(&["--kubeconfig", bogus, "delete", "cm", "keep-1"], None);
    assert!(codes.contains(&401), "{codes:?}: {}", out.stderr);
    s.assert_alive();
    assert_eq!(snapshot(&s), before);
}

#[test]
fn curl_without_credentials_gets_a_401_status_object() {
    let (mut s, before) = seeded();
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("curl not installed; the kubectl variant covers 401");
        return;
    }
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sk",
        "-w",
        "\n%{http_code}",
        &format!("{}{CONFIGMAPS}", s.url()),
    ]);
    let out = common::run(cmd, "curl".into(), None, Duration::from_secs(30));
    let text = out.ok();
    let (body, code) = text.rsplit_once('\n').expect("status code line");
    assert_eq!(code, "401", "{text}");
    let status: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["code"], 401, "{status}");
    assert_eq!(status["reason"], "Unauthorized", "{status}");
    let mut post = Command::new("curl");
    post.args([
        "-sk",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "--data",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"sneaky"}}"#,
        &format!("{}{CONFIGMAPS}", s.url()),
    ]);
    let out = common::run(post, "curl -X POST".into(), None, Duration::from_secs(30));
    assert_eq!(out.ok(), "401");
    s.assert_alive();
    assert_eq!(snapshot(&s), before);
}
