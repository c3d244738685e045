//! End-to-end with the official Kubernetes Python client (issue 17: "stock kubectl, kube-rs and
//! the Python client work unchanged"). `tests/python/client_suite.py` drives `tandem up` with
//! the client's typed APIs, watch, websocket exec, custom objects and dynamic client, and checks
//! upstream's Status texts that the client's users compare. The client is installed by
//! `scripts/install-deps.sh` into its own virtual environment.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::Server;

/// The virtual environment `scripts/install-deps.sh` installs the client into.
fn python() -> PathBuf {
    let env = std::env::var_os("TANDEM_PYTHON_ENV").map_or_else(
        || {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".cache/tandem/python-client")
        },
        PathBuf::from,
    );
    env.join("bin/python")
}

#[test]
fn the_official_python_client_works_unchanged() {
    let python = python();
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-deps.sh to install the Kubernetes Python client",
        python.display()
    );
    let s = Server::start_up(Some("linux=1"));
    s.eventually("node linux-1 registered", Duration::from_secs(60), || {
        s.get_json(&["node", "linux-1"]).map(|_| ())
    });
    let suite = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/client_suite.py");
    let mut cmd = Command::new(&python);
    cmd.arg(&suite)
        .env("KUBECONFIG", s.kubeconfig())
        .env("PYTHONUNBUFFERED", "1");
    let out = common::run(
        cmd,
        "python client suite".into(),
        None,
        Duration::from_secs(300),
    );
    assert!(
        out.success() && out.ok().contains("all checks passed"),
        "{}",
        out.combined()
    );
    // Every check ran (the script prints one line per check).
    let checks = out.ok().lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(checks, 15, "{}", out.ok());
}
