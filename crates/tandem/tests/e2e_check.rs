//! `tandem check` against golden files: each input in `tests/check/` (bad manifests written for
//! the rules) and the seed manifests of the reference documents, with the expected report beside
//! it (`<input>.golden`: the text report, then the exit status). `TANDEM_UPDATE_GOLDEN=1`
//! rewrites the golden files from the current output (review the diff before committing).

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `tandem check ARGS` in `dir` with `stdin`; returns the standard output followed by an
/// `exit N` line.
fn check_in(dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tandem"));
    cmd.arg("check").args(args).current_dir(dir);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!(
        "{}exit {}\n",
        String::from_utf8_lossy(&out.stdout),
        out.status.code().unwrap_or(-1)
    )
}

/// Compares `actual` with the golden file, or rewrites it when asked to.
fn golden(name: &str, actual: &str) {
    let path = crate_dir()
        .join("tests/check")
        .join(format!("{name}.golden"));
    if std::env::var_os("TANDEM_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (TANDEM_UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        actual,
        expected,
        "tandem check output differs from {}",
        path.display()
    );
}

#[test]
fn each_rule_reports_its_pitfall_with_file_line_and_rule_id() {
    for input in [
        "os-selection.yaml",
        "windows-limits.yaml",
        "references.json",
        "services.yaml",
        "tolerations.yaml",
        "storage.yaml",
    ] {
        let actual = check_in(&crate_dir(), &["-f", &format!("tests/check/{input}")], None);
        golden(input, &actual);
    }
}

#[test]
fn seed_manifests_report_the_documents_pitfalls_and_the_broken_yaml() {
    let actual = check_in(&common::seed_dir(), &["-f", "."], None);
    golden("seed-manifests", &actual);
    // The mis-indented manifest is the only error; the rest are pitfalls upstream accepts.
    assert!(
        actual.contains("./iis-2019-as-published.yaml:29: error: error converting YAML to JSON")
    );
    assert!(actual.ends_with("exit 1\n"), "{actual}");
    // Scheduled with the scheduler's own filters on `tandem up`'s pools: the 2019 workloads on
    // the 2019 node, the pinned 2022 ones on the 2022 node.
    assert!(actual.contains("./win-webserver.yaml:17: note[TDM171]: Deployment win-webserver: schedulable on 1 of 3 nodes of the described cluster (linux=1,windows-2019=1,windows-2022=1): windows-2019-1"), "{actual}");
    assert!(actual.contains("./iis-2019.yaml:2: note[TDM171]: Deployment iis-2019: schedulable on 1 of 3 nodes of the described cluster (linux=1,windows-2019=1,windows-2022=1): windows-2019-1"), "{actual}");

    // A cluster without Windows nodes: every Windows workload would stay Pending, and the
    // scheduler says why.
    let linux_only = check_in(
        &common::seed_dir(),
        &["-f", ".", "--nodes", "linux=2"],
        None,
    );
    let pending: Vec<&str> = linux_only
        .lines()
        .filter(|l| l.contains("warning[TDM170]"))
        .collect();
    assert_eq!(pending.len(), 6, "{linux_only}");
    assert!(
        pending.iter().all(|l| l.contains(
            "would stay Pending on the described cluster (linux=2): 0/2 nodes are available: 2 node(s) run linux, pod requires windows"
        )),
        "{linux_only}"
    );
}

#[test]
fn json_output_flags_and_standard_input() {
    let manifest =
        std::fs::read_to_string(crate_dir().join("tests/check/windows-limits.yaml")).unwrap();
    // From standard input, as `helm template … | tandem check -f -`, in JSON.
    let out = check_in(&crate_dir(), &["-f", "-", "-o", "json"], Some(&manifest));
    let (json, exit) = out.rsplit_once("exit ").unwrap();
    let report: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(report["objects"], 2);
    assert_eq!(report["errors"], 0);
    assert_eq!(report["warnings"], 9);
    assert_eq!(report["findings"][0]["file"], "-");
    assert_eq!(report["findings"][1]["rule"], "TDM110");
    assert_eq!(report["findings"][1]["field"], "spec.dnsPolicy");
    assert_eq!(report["findings"][0]["rule"], "TDM170");
    assert_eq!(exit.trim(), "0", "warnings do not fail by default");

    // --fail-on warning fails on them; --disable drops a rule everywhere.
    let strict = check_in(
        &crate_dir(),
        &[
            "-f",
            "-",
            "--fail-on",
            "warning",
            "--disable",
            "TDM110,TDM111",
        ],
        Some(&manifest),
    );
    assert!(
        !strict.contains("TDM110") && !strict.contains("TDM111"),
        "{strict}"
    );
    assert!(strict.contains("warning[TDM121]"), "{strict}");
    assert!(strict.ends_with("exit 1\n"), "{strict}");

    // SARIF for code scanning: the rules reported, one result per finding with its location.
    let out = check_in(
        &crate_dir(),
        &["-f", "tests/check/services.yaml", "-o", "sarif"],
        None,
    );
    let (sarif, _) = out.rsplit_once("exit ").unwrap();
    let sarif: serde_json::Value = serde_json::from_str(sarif).unwrap();
    assert_eq!(sarif["version"], "2.1.0");
    let run = &sarif["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "tandem check");
    let rules: Vec<&str> = run["tool"]["driver"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(rules, ["TDM150", "TDM151", "TDM152", "TDM171"]);
    let tdm150 = run["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ruleId"] == "TDM150")
        .unwrap();
    assert_eq!(tdm150["level"], "warning");
    assert_eq!(
        tdm150["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
        "tests/check/services.yaml"
    );
    assert_eq!(
        tdm150["locations"][0]["physicalLocation"]["region"]["startLine"],
        17
    );

    // A directory is read recursively only with -R; an unreadable path is a usage error.
    let flat = check_in(&crate_dir(), &["-f", "tests"], None);
    assert!(flat.starts_with("0 objects in 0 files"), "{flat}");
    let deep = check_in(
        &crate_dir(),
        &["-f", "tests", "-R", "--fail-on", "never"],
        None,
    );
    assert!(deep.contains("tests/check/os-selection.yaml:2:"), "{deep}");
    assert!(deep.ends_with("exit 0\n"), "{deep}");
    let missing = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["check", "-f", "no/such/file.yaml"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("cannot read no/such/file.yaml"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

/// `--cluster`: the nodes, RuntimeClasses of a live `tandem up` (read only), instead of the
/// described pools: the seed Deployment that names RuntimeClass `windows-2019` finds it in the
/// cluster and is placed on the cluster's two Windows Server 2019 nodes.
#[test]
fn cluster_flag_checks_against_a_live_clusters_nodes_and_runtime_classes() {
    let s = common::Server::start_up(Some("linux=1,windows-2019=2"));
    s.eventually("three nodes", std::time::Duration::from_secs(60), || {
        let out = s.kubectl(&["get", "nodes", "--no-headers"]);
        (out.success() && out.ok().lines().count() == 3).then_some(())
    });
    let seeds = common::seed_dir();
    let kubeconfig = s.kubeconfig();
    let kubeconfig = kubeconfig.to_str().unwrap();
    // Before the RuntimeClass exists in the cluster, the check says the API server would refuse.
    let before = check_in(
        &seeds,
        &["--cluster", kubeconfig, "-f", "iis-2019.yaml"],
        None,
    );
    assert!(before.contains("warning[TDM160]"), "{before}");
    s.kubectl(&["apply", "-f", &common::seed("runtimeClasses.yml")])
        .ok();
    let after = check_in(
        &seeds,
        &["--cluster", kubeconfig, "-f", "iis-2019.yaml"],
        None,
    );
    assert!(!after.contains("TDM160"), "{after}");
    let placed = after
        .lines()
        .find(|l| l.contains("note[TDM171]: Deployment iis-2019"))
        .unwrap_or_else(|| panic!("{after}"));
    assert!(
        placed.contains(
            "schedulable on 2 of 3 nodes of the described cluster (3 nodes of https://127.0.0.1:"
        ) && placed.ends_with("windows-2019-1, windows-2019-2"),
        "{placed}"
    );
    // Nothing was written to the cluster.
    assert!(
        s.get_json(&["deployment", "iis-2019"]).is_none(),
        "check must not create anything"
    );
}
