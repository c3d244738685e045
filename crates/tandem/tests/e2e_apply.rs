//! End-to-end: `kubectl apply|create|replace|delete -f` on the seed manifests.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;

use std::fs;

use common::{INVALID_SEED, Server, seed, valid_seeds};

/// Every object the valid seed manifests declare, as `kubectl get` arguments.
const SEED_OBJECTS: &[&[&str]] = &[
    &["pvc", "billing-data"],
    &["deploy", "dotnet-framework-api"],
    &["gmsacredentialspecs", "billing-gmsa"],
    &["pod", "billing-worker"],
    &["deploy", "iis-2019"],
    &["svc", "iis"],
    &["ns", "web"],
    &["deploy", "iis-webapp", "-n", "web"],
    &["ns", "billing"],
    &["deploy", "legacy-billing-app", "-n", "billing"],
    &["runtimeclass", "windows-2019"],
    &["svc", "win-webserver"],
    &["deploy", "win-webserver"],
];

/// The resourceVersion of every seed object, in `SEED_OBJECTS` order.
fn resource_versions(s: &Server) -> Vec<String> {
    SEED_OBJECTS
        .iter()
        .map(|obj| {
            let o = s.get_json(obj).unwrap_or_else(|| panic!("{obj:?} missing"));
            o["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn apply_creates_every_seed_manifest_and_reapply_reports_unchanged() {
    let s = Server::start();
    for name in valid_seeds() {
        let out = s.kubectl(&["apply", "-f", &seed(&name)]);
        let text = out.ok();
        assert!(text.lines().count() >= 1, "{name}: {text}");
        for line in text.lines() {
            assert!(
                line.ends_with(" created"),
                "{name}: first apply should create: {text}"
            );
        }
    }
    for obj in SEED_OBJECTS {
        assert!(
            s.get_json(obj).is_some(),
            "{obj:?} should exist after apply"
        );
    }
    let versions_before = resource_versions(&s);
    for name in valid_seeds() {
        let out = s.kubectl(&["apply", "-f", &seed(&name)]);
        let text = out.ok();
        for line in text.lines() {
            // Upstream quirk (kubernetes/kubernetes#66450, #116135): quantities written as bare
            // numbers (`cpu: .1`, `cpu: 1` in iis-2019.yaml) differ from the server's canonical
            // strings, so client-side apply sends a no-op patch and prints "configured". The
            // stored object must still not change (checked below).
            let quirk = name == "iis-2019.yaml" && line == "deployment.apps/iis-2019 configured";
            assert!(
                line.ends_with(" unchanged") || quirk,
                "{name}: re-apply should be unchanged: {text}"
            );
        }
    }
    assert_eq!(
        resource_versions(&s),
        versions_before,
        "re-applying unchanged files changed objects"
    );
    // The last-applied annotation records the manifest, as kubectl's three-way merge needs.
    let d = s.get_json(&["deploy", "win-webserver"]).unwrap();
    assert!(
        d["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string(),
        "{d}"
    );
}

#[test]
fn apply_of_changed_manifest_reports_configured_and_stores_the_change() {
    let s = Server::start();
    let original = fs::read_to_string(seed("win-webserver.yaml")).unwrap();
    s.kubectl(&["apply", "-f", &seed("win-webserver.yaml")])
        .ok();
    assert!(original.contains("replicas: 2"));
    let changed = s.write_file(
        "win-webserver.yaml",
        &original.replace("replicas: 2", "replicas: 5"),
    );
    let out = s.kubectl(&["apply", "-f", changed.to_str().unwrap()]);
    let text = out.ok();
    assert!(
        text.contains("deployment.apps/win-webserver configured"),
        "{text}"
    );
    assert!(text.contains("service/win-webserver unchanged"), "{text}");
    let replicas = s.kubectl(&[
        "get",
        "deploy",
        "win-webserver",
        "-o",
        "jsonpath={.spec.replicas}",
    ]);
    assert_eq!(replicas.ok(), "5");
    // Removing a label from the manifest removes it from the object (three-way merge).
    let unlabeled = original.replacen("  labels:\n    app: win-webserver\n", "", 1);
    assert_ne!(unlabeled, original);
    let path = s.write_file("win-webserver-unlabeled.yaml", &unlabeled);
    s.kubectl(&["apply", "-f", path.to_str().unwrap()]).ok();
    let labels = s.kubectl(&[
        "get",
        "svc",
        "win-webserver",
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(
        !labels.ok().contains("win-webserver"),
        "label should be gone: {}",
        labels.stdout
    );
}

#[test]
fn create_replace_and_delete_work_on_every_seed_manifest() {
    let s = Server::start();
    for name in valid_seeds() {
        let path = seed(&name);
        let created = s.kubectl(&["create", "-f", &path]);
        for line in created.ok().lines() {
            assert!(line.ends_with(" created"), "{name}: {}", created.stdout);
        }
        let again = s.kubectl(&["create", "-f", &path]);
        assert!(
            again.err().contains("AlreadyExists"),
            "{name}: {}",
            again.stderr
        );
        if name == "billing-data-pvc.yaml" {
            // The emulated SMB CSI driver binds the claim at once; a bound claim's spec is
            // immutable except its requested size, so replacing it from the manifest (which
            // does not name the bound volume) is refused, as upstream refuses it.
            s.eventually(
                "the SMB claim to be Bound",
                std::time::Duration::from_secs(30),
                || {
                    let pvc = s.get_json(&["pvc", "billing-data"])?;
                    (pvc["status"]["phase"] == "Bound").then_some(())
                },
            );
            let replaced = s.kubectl(&["replace", "-f", &path]);
            assert!(
                replaced
                    .stderr
                    .contains("spec is immutable after creation except resources.requests"),
                "{name}: {}",
                replaced.combined()
            );
            continue;
        }
        let replaced = s.kubectl(&["replace", "-f", &path]);
        if name == "gmsa-billing.yaml" {
            // The pod's gMSA credential spec content was filled in at create, as upstream's
            // windows-gmsa webhook does; the manifest does not carry it, so replacing the pod
            // changes its GMSA settings, which that webhook (and tandem) refuse. The
            // GMSACredentialSpec itself is replaced.
            assert!(
                replaced
                    .stdout
                    .contains("gmsacredentialspec.windows.k8s.io/billing-gmsa replaced"),
                "{name}: {}",
                replaced.stdout
            );
            assert!(
                replaced
                    .stderr
                    .contains("cannot update an existing pod's GMSA settings"),
                "{name}: {}",
                replaced.stderr
            );
            continue;
        }
        for line in replaced.ok().lines() {
            assert!(line.ends_with(" replaced"), "{name}: {}", replaced.stdout);
        }
    }
    for obj in SEED_OBJECTS {
        assert!(
            s.get_json(obj).is_some(),
            "{obj:?} should exist after create/replace"
        );
    }
    for name in valid_seeds() {
        let deleted = s.kubectl(&["delete", "-f", &seed(&name), "--timeout=45s"]);
        for line in deleted.ok().lines() {
            assert!(line.ends_with(" deleted"), "{name}: {}", deleted.stdout);
        }
    }
    for obj in SEED_OBJECTS {
        s.eventually(
            &format!("{obj:?} to be gone"),
            std::time::Duration::from_secs(30),
            || s.get_json(obj).is_none().then_some(()),
        );
    }
}

#[test]
fn replace_of_a_changed_manifest_stores_the_new_spec() {
    let s = Server::start();
    let original = fs::read_to_string(seed("legacy-billing-app.yaml")).unwrap();
    s.kubectl(&["create", "-f", &seed("legacy-billing-app.yaml")])
        .ok();
    let changed = s.write_file(
        "legacy.yaml",
        &original.replace("replicas: 3", "replicas: 1"),
    );
    s.kubectl(&["replace", "-f", changed.to_str().unwrap()])
        .ok();
    let out = s.kubectl(&[
        "get",
        "deploy",
        "legacy-billing-app",
        "-n",
        "billing",
        "-o",
        "jsonpath={.spec.replicas}",
    ]);
    assert_eq!(out.ok(), "1");
}

#[test]
fn mis_indented_manifest_fails_with_a_clear_error_and_creates_nothing() {
    let s = Server::start();
    for verb in ["apply", "create"] {
        let out = s.kubectl(&[verb, "-f", &seed(INVALID_SEED)]);
        let err = out.err();
        assert!(
            err.contains(INVALID_SEED),
            "{verb}: error should name the file: {err}"
        );
        assert!(
            err.contains("yaml") || err.contains("YAML"),
            "{verb}: {err}"
        );
        assert!(
            err.contains("line 28"),
            "{verb}: error should point at the bad line: {err}"
        );
        let deploy = s.kubectl(&["get", "deploy", "iis-2019"]);
        assert!(deploy.err().contains("NotFound"), "{}", deploy.stderr);
        let svc = s.kubectl(&["get", "svc", "iis"]);
        assert!(svc.err().contains("NotFound"), "{}", svc.stderr);
    }
    let all = s.kubectl(&["get", "deploy,svc", "-o", "name"]);
    let names = all.ok();
    assert!(
        !names.contains("iis"),
        "nothing from the bad file may exist: {names}"
    );
}

#[test]
fn server_side_apply_creates_then_reports_serverside_applied() {
    let s = Server::start();
    let out = s.kubectl(&["apply", "--server-side", "-f", &seed("win-webserver.yaml")]);
    for line in out.ok().lines() {
        assert!(line.ends_with(" serverside-applied"), "{}", out.stdout);
    }
    let d = s
        .get_json(&["deploy", "win-webserver", "--show-managed-fields"])
        .expect("deployment exists");
    let managers: Vec<&str> = d["metadata"]["managedFields"]
        .as_array()
        .map(|m| m.iter().filter_map(|f| f["manager"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        managers.contains(&"kubectl"),
        "managedFields should name kubectl: {d}"
    );
    let again = s.kubectl(&["apply", "--server-side", "-f", &seed("win-webserver.yaml")]);
    again.ok();
}

#[test]
fn apply_with_server_dry_run_stores_nothing() {
    let s = Server::start();
    let out = s.kubectl(&["apply", "--dry-run=server", "-f", &seed("iis-2019.yaml")]);
    assert!(out.ok().contains("(server dry run)"), "{}", out.stdout);
    assert!(s.get_json(&["deploy", "iis-2019"]).is_none());
    assert!(s.get_json(&["svc", "iis"]).is_none());
}

#[test]
fn apply_from_stdin_with_namespace_flag_creates_in_that_namespace() {
    let s = Server::start();
    let out = s.kubectl_stdin(
        &["apply", "-n", "kube-public", "-f", "-"],
        &common::configmap("settings", &[]),
    );
    assert!(
        out.ok().contains("configmap/settings created"),
        "{}",
        out.stdout
    );
    assert!(
        s.get_json(&["cm", "settings", "-n", "kube-public"])
            .is_some()
    );
    assert!(s.get_json(&["cm", "settings"]).is_none());
}
