//! End-to-end: the API server under overload and hostile sizes (issue 22). Requests past the
//! bounds get kube-apiserver's `429 TooManyRequests` with `Retry-After`; a node's traffic is
//! still served while a user floods (API Priority and Fairness gives it its own seats);
//! watches hold no seat; over-large bodies get a `413` Status that curl and kubectl see;
//! ConfigMap data over 1 MiB, long names and selector values get upstream's 422/400; very long
//! URIs and header sets get 414/431.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use common::Server;

const WAIT: Duration = Duration::from_secs(60);

/// A server whose bounds are one seat per priority level and no queue: the second request of
/// a level at once is refused.
fn tiny_server() -> Server {
    Server::start_with(&[
        "server",
        "--max-requests-inflight",
        "1",
        "--max-mutating-requests-inflight",
        "1",
        "--flow-control-queue-wait",
        "0s",
    ])
}

fn have_curl() -> bool {
    Command::new("curl").arg("--version").output().is_ok()
}

/// A client certificate and key for `user` in `groups`, as PEM files for curl.
fn identity(s: &Server, user: &str, groups: &[&str]) -> (PathBuf, PathBuf) {
    let name = user.replace(':', "-");
    let path = s.dir().join(format!("{name}.kubeconfig"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tandem"));
    cmd.arg("kubeconfig")
        .arg("--data-dir")
        .arg(s.data_dir())
        .args(["--server", &s.url(), "--user", user, "-o"])
        .arg(&path);
    for g in groups {
        cmd.args(["--group", g]);
    }
    common::run(cmd, format!("tandem kubeconfig --user {user}"), None, WAIT).ok();
    pem_files(s, &path, &name)
}

/// The admin's client certificate and key (`system:masters`), as PEM files for curl.
fn admin_identity(s: &Server) -> (PathBuf, PathBuf) {
    pem_files(s, &s.kubeconfig(), "admin")
}

/// The client certificate and key of a kubeconfig, written as PEM files named `name`.
fn pem_files(s: &Server, kubeconfig: &std::path::Path, name: &str) -> (PathBuf, PathBuf) {
    let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
    let kc: serde_yaml::Value = serde_yaml::from_str(&text).expect("kubeconfig is YAML");
    let user_entry = &kc["users"][0]["user"];
    let decode = |field: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(user_entry[field].as_str().expect("PEM data field"))
            .expect("base64 PEM")
    };
    let cert = s.dir().join(format!("{name}.crt"));
    let key = s.dir().join(format!("{name}.key"));
    std::fs::write(&cert, decode("client-certificate-data")).expect("write cert");
    std::fs::write(&key, decode("client-key-data")).expect("write key");
    (cert, key)
}

/// Lets `user` list, watch and create ConfigMaps everywhere.
fn grant_configmaps(s: &Server, user: &str) {
    s.kubectl(&[
        "create",
        "clusterrole",
        "cm-user",
        "--verb=get,list,watch,create",
        "--resource=configmaps",
    ])
    .ok();
    s.kubectl(&[
        "create",
        "clusterrolebinding",
        "cm-user",
        "--clusterrole=cm-user",
        &format!("--user={user}"),
    ])
    .ok();
}

/// Creates `n` ConfigMaps (as the admin), so that a LIST takes a moment.
fn seed_configmaps(s: &Server, n: usize) {
    let mut manifest = String::new();
    for i in 0..n {
        manifest.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: seed-{i:04}\ndata:\n  k: \"{}\"\n",
            "v".repeat(200)
        ));
    }
    s.kubectl_stdin(&["create", "-f", "-"], &manifest).ok();
}

fn curl(cert: &PathBuf, key: &PathBuf) -> Command {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", "--cert"]).arg(cert).arg("--key").arg(key);
    cmd
}

/// `n` LISTs at once over one HTTP/2 connection; the status codes, and the directory holding
/// each response, headers and body (`r_I`).
fn flood(s: &Server, cert: &PathBuf, key: &PathBuf, n: usize, tag: &str) -> (Vec<u16>, PathBuf) {
    let dir = s.dir().join(format!("flood-{tag}"));
    std::fs::create_dir_all(&dir).expect("flood dir");
    let mut cmd = curl(cert, key);
    cmd.args([
        "--http2",
        "-Z",
        "--parallel-max",
        "100",
        "--parallel-immediate",
    ])
    .args(["-i", "-w", "%{http_code}\n"])
    .arg("-o")
    .arg(dir.join("r_#1"))
    .arg(format!(
        "{}/api/v1/namespaces/default/configmaps?n=[1-{n}]",
        s.url()
    ));
    let out = common::run(cmd, "curl flood".into(), None, WAIT);
    let codes = out
        .ok()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    (codes, dir)
}

#[test]
fn requests_past_the_bound_get_429_too_many_requests_with_retry_after() {
    if !have_curl() {
        eprintln!("curl not installed; skipping");
        return;
    }
    let s = tiny_server();
    grant_configmaps(&s, "alice");
    seed_configmaps(&s, 300);
    let (cert, key) = identity(&s, "alice", &[]);
    // Bounded: a few floods of 200 requests until one is refused.
    let mut found = None;
    for attempt in 0..5 {
        let (codes, dir) = flood(&s, &cert, &key, 200, &attempt.to_string());
        assert!(
            codes.iter().all(|c| matches!(c, 200 | 429)),
            "only 200 and 429 expected: {codes:?}"
        );
        if codes.contains(&429) && codes.contains(&200) {
            found = Some(dir);
            break;
        }
    }
    let dir = found.expect("a flood of 200 LISTs on one seat got a 429");
    let response = (1..=200)
        .filter_map(|i| std::fs::read_to_string(dir.join(format!("r_{i}"))).ok())
        .find(|r| r.starts_with("HTTP/2 429"))
        .expect("a refused response");
    let (headers, body) = response.split_once("\r\n\r\n").expect("head and body");
    let lower = headers.to_ascii_lowercase();
    assert!(lower.contains("\nretry-after: 1"), "{headers}");
    assert!(
        lower.contains("\nx-kubernetes-pf-flowschema-uid: ")
            && lower.contains("\nx-kubernetes-pf-prioritylevel-uid: "),
        "{headers}"
    );
    let status: serde_json::Value = serde_json::from_str(body).expect("a Status body");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 429);
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(
        status["message"],
        "Too many requests, please try again later."
    );
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    // The refusals are counted where upstream counts them.
    let metrics = s.kubectl(&["get", "--raw", "/metrics"]);
    assert!(
        metrics.ok().lines().any(|l| l.starts_with(
            "apiserver_flowcontrol_rejected_requests_total{priority_level=\"global-default\",flow_schema=\"global-default\",reason=\"concurrency-limit\"}"
        )),
        "no rejection counted"
    );
}

#[test]
fn a_nodes_heartbeats_are_served_while_a_user_floods() {
    if !have_curl() {
        eprintln!("curl not installed; skipping");
        return;
    }
    let s = tiny_server();
    grant_configmaps(&s, "alice");
    seed_configmaps(&s, 300);
    s.create(&common::node("n1"));
    s.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: n1\n  namespace: kube-node-lease\nspec:\n  holderIdentity: n1\n",
    )
    .ok();
    let (cert, key) = identity(&s, "alice", &[]);
    let (node_cert, node_key) = identity(&s, "system:node:n1", &["system:nodes"]);
    let lease_url = format!(
        "{}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
        s.url()
    );
    // Bounded: up to five floods, each beside twenty sequential Lease renewals of the node.
    for attempt in 0..5 {
        let mut flooder = curl(&cert, &key);
        flooder
            .args([
                "--http2",
                "-Z",
                "--parallel-max",
                "100",
                "--parallel-immediate",
            ])
            .args(["-o", "/dev/null", "-w", "%{http_code}\n"])
            .arg(format!(
                "{}/api/v1/namespaces/default/configmaps?n=[1-1000]",
                s.url()
            ))
            .stdout(Stdio::piped());
        let child = flooder.spawn().expect("start the flood");
        let mut node_codes = Vec::new();
        for _ in 0..20 {
            let mut renew = curl(&node_cert, &node_key);
            renew
                .args(["-o", "/dev/null", "-w", "%{http_code}", "-X", "PATCH"])
                .args(["-H", "Content-Type: application/merge-patch+json"])
                .args(["--data", r#"{"spec":{"leaseDurationSeconds":40}}"#])
                .arg(&lease_url);
            let out = common::run(renew, "node lease renewal".into(), None, WAIT);
            node_codes.push(out.ok().trim().parse::<u16>().unwrap_or(0));
        }
        let flood_out = child.wait_with_output().expect("flood ends");
        let flood_codes: Vec<u16> = String::from_utf8_lossy(&flood_out.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        assert!(
            node_codes.iter().all(|c| *c == 200),
            "the node's renewals: {node_codes:?}"
        );
        if flood_codes.contains(&429) {
            return;
        }
        eprintln!("attempt {attempt}: the flood was never refused; again");
    }
    panic!("no flood saturated the user's level");
}

#[test]
fn watches_hold_no_seat() {
    if !have_curl() {
        eprintln!("curl not installed; skipping");
        return;
    }
    let s = tiny_server();
    grant_configmaps(&s, "alice");
    let (cert, key) = identity(&s, "alice", &[]);
    let mut watchers = Vec::new();
    for _ in 0..5 {
        let mut w = curl(&cert, &key);
        w.args(["-N", "--max-time", "30", "-o", "/dev/null"])
            .arg(format!(
                "{}/api/v1/namespaces/default/configmaps?watch=1",
                s.url()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        watchers.push(w.spawn().expect("start a watch"));
    }
    // Give the watches time to be established (bounded).
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    let mut code = 0;
    while started.elapsed() < Duration::from_secs(10) {
        let mut list = curl(&cert, &key);
        list.args(["-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("{}/api/v1/namespaces/default/configmaps", s.url()));
        code = common::run(list, "curl list".into(), None, WAIT)
            .ok()
            .trim()
            .parse()
            .unwrap_or(0);
        if code == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for mut w in watchers {
        let _ = w.kill();
        let _ = w.wait();
    }
    assert_eq!(code, 200, "a LIST beside five watches on a one-seat level");
}

fn big_configmap_json(s: &Server, bytes: usize) -> PathBuf {
    s.write_file(
        "big.json",
        &format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big"}},"data":{{"blob":"{}"}}}}"#,
            "a".repeat(bytes)
        ),
    )
}

#[test]
fn a_four_megabyte_body_gets_a_413_status_that_curl_and_kubectl_see() {
    let mut s = Server::start();
    let body = big_configmap_json(&s, 4 * 1024 * 1024);
    if have_curl() {
        let (cert, key) = admin_identity(&s);
        // HTTP/2, HTTP/1.1 with `Expect: 100-continue` (curl's default for big bodies), and
        // HTTP/1.1 without it (the body must be drained, not reset).
        for flags in [
            &["--http2"][..],
            &["--http1.1"][..],
            &["--http1.1", "-H", "Expect:"][..],
        ] {
            let mut cmd = curl(&cert, &key);
            cmd.args(flags)
                .args(["-X", "POST", "-H", "Content-Type: application/json"])
                .args(["-w", "\n%{http_code}", "--data-binary"])
                .arg(format!("@{}", body.display()))
                .arg(format!("{}/api/v1/namespaces/default/configmaps", s.url()));
            let out = common::run(cmd, format!("curl {flags:?}"), None, WAIT);
            let text = out.ok();
            let (json, code) = text.rsplit_once('\n').expect("status code line");
            assert_eq!(code, "413", "{flags:?}: {text}");
            let status: serde_json::Value = serde_json::from_str(json).expect("a Status");
            assert_eq!(status["reason"], "RequestEntityTooLarge", "{status}");
            assert_eq!(status["code"], 413);
        }
    }
    let out = s.kubectl(&["create", "-f", body.to_str().expect("UTF-8 temp path")]);
    assert!(!out.success());
    assert!(
        out.err()
            .contains("Request entity too large: limit is 3145728"),
        "{}",
        out.combined()
    );
    s.assert_alive();
    assert!(s.get_json(&["cm", "big"]).is_none());
}

#[test]
fn configmap_and_secret_data_over_one_mebibyte_is_a_422_too_long() {
    let s = Server::start();
    let cm = big_configmap_json(&s, 1024 * 1024 + 1);
    let out = s.kubectl(&["create", "-f", cm.to_str().expect("UTF-8 temp path")]);
    assert!(!out.success());
    assert!(
        out.err()
            .contains("Too long: may not be more than 1048576 bytes"),
        "{}",
        out.combined()
    );
    assert!(out.err().contains("is invalid"), "{}", out.combined());
    let secret = s.write_file(
        "secret.json",
        &format!(
            r#"{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"big"}},"stringData":{{"blob":"{}"}}}}"#,
            "a".repeat(1024 * 1024 + 1)
        ),
    );
    let out = s.kubectl(&["create", "-f", secret.to_str().expect("UTF-8 temp path")]);
    assert!(!out.success());
    assert!(
        out.err()
            .contains("data: Too long: may not be more than 1048576 bytes"),
        "{}",
        out.combined()
    );
}

#[test]
fn long_names_selectors_uris_and_header_sets_get_clear_4xx_answers() {
    let s = Server::start();
    // A name past 253 characters: 422 on metadata.name.
    let long_name = "n".repeat(254);
    let out = s.kubectl(&["create", "configmap", &long_name]);
    assert!(!out.success());
    assert!(
        out.err().contains("metadata.name: Invalid value")
            && out.err().contains("must be no more than 253 characters"),
        "{}",
        out.combined()
    );
    // A label value past 63 characters in a selector: 400 with the parser's message.
    let value = "b".repeat(64);
    let out = s.kubectl(&["get", "configmaps", "-l", &format!("a={value}")]);
    assert!(!out.success());
    assert!(
        out.err().contains(&format!(
            "unable to parse requirement: values[0][a]: Invalid value: \"{value}\": must be no more than 63 characters"
        )),
        "{}",
        out.combined()
    );
    if !have_curl() {
        return;
    }
    let (cert, key) = admin_identity(&s);
    let url = format!("{}/api/v1/namespaces/default/configmaps", s.url());
    let code = |args: &[String]| -> String {
        let mut cmd = curl(&cert, &key);
        cmd.args(["-o", "/dev/null", "-w", "%{http_code}"])
            .args(args);
        common::run(cmd, "curl".into(), None, WAIT)
            .ok()
            .trim()
            .to_string()
    };
    // A 100 KB selector over HTTP/1.1 is past hyper's 64 KiB request-target limit: 414.
    let long_selector = format!("{url}?labelSelector=a%3D{}", "x".repeat(100_000));
    assert_eq!(code(&["--http1.1".into(), long_selector]), "414");
    // A 60 KB one over HTTP/2 is within the head limit: the selector parser answers 400 (a
    // URI past `http::Uri`'s 64 KiB is refused by the HTTP/2 layer with REFUSED_STREAM).
    let long_selector = format!("{url}?labelSelector=a%3D{}", "x".repeat(60_000));
    assert_eq!(code(&["--http2".into(), long_selector]), "400");
    // More than 100 header fields over HTTP/1.1 (hyper's bound): 431.
    let many = s.write_file(
        "headers.txt",
        &(0..200)
            .map(|i| format!("X-Many-{i}: {}\n", "v".repeat(100)))
            .collect::<String>(),
    );
    let at = |p: &PathBuf| format!("@{}", p.display());
    assert_eq!(
        code(&["--http1.1".into(), "-H".into(), at(&many), url.clone()]),
        "431"
    );
    // Within the limit a big header set is served, over both protocols (as Go's server).
    let fine = s.write_file(
        "fine-header.txt",
        &format!("X-Fine: {}\n", "v".repeat(60 << 10)),
    );
    for proto in ["--http1.1", "--http2"] {
        assert_eq!(
            code(&[proto.into(), "-H".into(), at(&fine), url.clone()]),
            "200",
            "{proto}"
        );
    }
}
