//! End-to-end: older kubectl releases, which read the OpenAPI v2 document only as protobuf
//! (`/openapi/v2` with Accept `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`),
//! can client-side apply (a three-way strategic merge that looks kinds up in that document) and
//! explain. Each release is the Google Cloud SDK's `kubectl.1.NN` binary; a release that is not
//! installed is skipped with a note.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Output, Server};

/// Where the Google Cloud SDK installs one kubectl per minor release.
const SDK_BIN: &str = "/usr/lib/google-cloud-sdk/bin";
/// How long one kubectl invocation may run.
const TIMEOUT: Duration = Duration::from_secs(90);

/// A specific kubectl binary pointed at a server, with a discovery cache of its own.
struct Kubectl<'a> {
    bin: PathBuf,
    label: String,
    server: &'a Server,
    home: PathBuf,
}

impl<'a> Kubectl<'a> {
    /// The binary at `path`, or `None` (after printing why) when it is not installed.
    fn find(path: &Path, server: &'a Server) -> Option<Self> {
        if !path.is_file() {
            eprintln!("skipping: {} is not installed", path.display());
            return None;
        }
        let label = path.file_name().unwrap().to_string_lossy().into_owned();
        // A home (and so a `~/.kube/cache`) per binary: each release fetches the documents
        // itself instead of reading another's cached copy.
        let home = server.dir().join(format!("home-{label}"));
        std::fs::create_dir_all(&home).unwrap();
        Some(Kubectl {
            bin: path.to_path_buf(),
            label,
            server,
            home,
        })
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("KUBECONFIG", self.server.kubeconfig())
            .env("HOME", &self.home)
            .env_remove("KUBECTL_EXPLAIN_OPENAPIV3");
        common::run(
            cmd,
            format!("{} {}", self.label, args.join(" ")),
            stdin,
            TIMEOUT,
        )
    }
}

/// The HTTP statuses kubectl's `-v=6` log reports for `/openapi/v2`, in either log format
/// (`GET https://…/openapi/v2?timeout=32s 200 OK in 5 milliseconds` up to 1.29,
/// `"Response" verb="GET" url="https://…/openapi/v2?timeout=32s" status="200 OK"` since).
fn openapi_v2_statuses(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("/openapi/v2?"))
        .filter_map(|l| {
            let after = l
                .split_once("status=\"")
                .or_else(|| l.split_once("timeout=32s "))?
                .1;
            let code: String = after.chars().take(3).collect();
            (code.len() == 3 && code.chars().all(|c| c.is_ascii_digit())).then_some(code)
        })
        .collect()
}

fn configmap(name: &str, label: Option<&str>, data: &[(&str, &str)]) -> String {
    let labels = label
        .map(|l| format!("  labels:\n    release: \"{l}\"\n"))
        .unwrap_or_default();
    let data: String = data
        .iter()
        .map(|(k, v)| format!("  {k}: \"{v}\"\n"))
        .collect();
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{labels}data:\n{data}")
}

/// Applies a ConfigMap, re-applies it changed (a key dropped, one added, a label added: the
/// dropped key only disappears through the three-way merge with the last-applied annotation),
/// and explains `pods.spec.containers` from both OpenAPI v3 and the protobuf v2 document.
fn apply_and_explain(kubectl: &Kubectl) {
    let name = "versions-cm";
    let out = kubectl.run(
        &["apply", "-f", "-", "-v=6"],
        Some(&configmap(name, None, &[("kept", "1"), ("dropped", "2")])),
    );
    assert!(
        out.ok().contains(&format!("configmap/{name} created")),
        "{}",
        out.stdout
    );
    for status in openapi_v2_statuses(&out.stderr) {
        assert_eq!(
            status, "200",
            "{}: /openapi/v2 refused:\n{}",
            kubectl.label, out.stderr
        );
    }

    let out = kubectl.run(
        &["apply", "-f", "-"],
        Some(&configmap(
            name,
            Some("two"),
            &[("kept", "1"), ("added", "3")],
        )),
    );
    assert!(
        out.ok().contains(&format!("configmap/{name} configured")),
        "{}",
        out.stdout
    );
    let cm = kubectl
        .run(&["get", "configmap", name, "-o", "json"], None)
        .json();
    assert_eq!(
        cm["data"],
        serde_json::json!({"kept": "1", "added": "3"}),
        "{}: re-apply should drop `dropped` and add `added`: {cm}",
        kubectl.label
    );
    assert_eq!(cm["metadata"]["labels"]["release"], "two", "{cm}");
    assert!(
        cm["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .is_some_and(|a| a.contains("added")),
        "{cm}"
    );

    let out = kubectl.run(&["explain", "pods.spec.containers"], None);
    let text = out.ok();
    assert!(text.contains("image"), "{}: {text}", kubectl.label);

    let out = kubectl.run(
        &[
            "explain",
            "pods.spec.containers",
            "--output=plaintext-openapiv2",
            "-v=6",
        ],
        None,
    );
    let text = out.ok();
    assert!(
        text.contains("image\t<string>") && text.contains("Container image name"),
        "{}: {text}",
        kubectl.label
    );
    assert_eq!(
        openapi_v2_statuses(&out.stderr),
        ["200"],
        "{}: explain should read the protobuf v2 document:\n{}",
        kubectl.label,
        out.stderr
    );
}

fn check_release(path: &Path) {
    let s = Server::start();
    if let Some(kubectl) = Kubectl::find(path, &s) {
        apply_and_explain(&kubectl);
    }
}

#[test]
fn kubectl_1_27_applies_twice_and_explains_from_protobuf_openapi() {
    check_release(&Path::new(SDK_BIN).join("kubectl.1.27"));
}

#[test]
fn kubectl_1_28_applies_twice_and_explains_from_protobuf_openapi() {
    check_release(&Path::new(SDK_BIN).join("kubectl.1.28"));
}

#[test]
fn default_kubectl_applies_twice_and_explains_from_protobuf_openapi() {
    check_release(Path::new("/usr/bin/kubectl"));
}

/// JSON stays the answer to clients that ask for nothing in particular; the legacy path serves
/// the protobuf document (gnostic `Document`: field 1, `swagger`, first).
#[test]
fn openapi_v2_is_json_by_default_and_protobuf_on_the_legacy_path() {
    let s = Server::start();
    let doc = s.kubectl(&["get", "--raw", "/openapi/v2"]).json();
    assert_eq!(doc["swagger"], "2.0");
    let out = s.kubectl(&["get", "--raw", "/swagger-2.0.0.pb-v1"]);
    assert!(
        out.ok().starts_with("\n\u{3}2.0\u{12}"),
        "not a protobuf Document: {:?}",
        out.stdout.chars().take(40).collect::<String>()
    );
}
