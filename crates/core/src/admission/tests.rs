//! Tests of the whole admission pass ([`super::admit`]) and of the seed manifests.

use serde_json::{Value, json};

use super::*;
use crate::registry::Registry;

fn rt(api_version: &str, kind: &str) -> std::sync::Arc<ResourceType> {
    Registry::builtin()
        .by_kind(api_version, kind)
        .unwrap_or_else(|| panic!("{api_version} {kind} registered"))
}

fn admit_create(obj: &mut Value, lookups: &MapLookups) -> Result<Vec<String>, AdmissionError> {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("v1")
        .to_string();
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("Pod")
        .to_string();
    let rt = rt(&api_version, &kind);
    crate::defaults::apply_defaults(&rt, obj);
    admit(
        Operation::Create,
        &rt,
        obj,
        None,
        lookups,
        &AdmissionOptions::default(),
    )
}

fn windows_pod(container: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"os": {"name": "windows"}, "nodeSelector": {"kubernetes.io/os": "windows"}, "containers": [container]}})
}

#[test]
fn admission_windows_pod_with_privileged_container_is_invalid() {
    let mut pod = windows_pod(
        json!({"name": "c", "image": "mcr.microsoft.com/windows/nanoserver:1809", "securityContext": {"privileged": true}}),
    );
    match admit_create(&mut pod, &MapLookups::default()) {
        Err(AdmissionError::Invalid(errs)) => {
            assert_eq!(errs.len(), 1, "{errs:?}");
            assert_eq!(
                errs[0].to_string(),
                "spec.containers[0].securityContext.privileged: Forbidden: cannot be set for a windows pod"
            );
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn admission_linux_pod_with_windows_options_is_invalid() {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"os": {"name": "linux"}, "containers": [{"name": "c", "image": "nginx", "securityContext": {"windowsOptions": {"runAsUserName": "u"}}}]}});
    let err = admit_create(&mut pod, &MapLookups::default()).expect_err("refused");
    assert_eq!(err.code(), 422);
    assert_eq!(err.reason(), "Invalid");
    assert_eq!(
        err.to_string(),
        "invalid: spec.containers[0].securityContext.windowsOptions: Forbidden: windows options cannot be set for a linux pod"
    );
}

#[test]
fn admission_windows_pod_with_sub_path_is_accepted_with_a_warning() {
    let mut pod = windows_pod(
        json!({"name": "c", "image": "mcr.microsoft.com/windows/nanoserver:1809",
        "volumeMounts": [{"name": "cfg", "mountPath": "C:\\cfg", "subPath": "app.config"}]}),
    );
    pod["spec"]["nodeSelector"]["node.kubernetes.io/windows-build"] = json!("10.0.17763");
    pod["spec"]["volumes"] = json!([{"name": "cfg", "configMap": {"name": "cfg"}}]);
    let warnings = admit_create(&mut pod, &MapLookups::default()).expect("accepted");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].starts_with("spec.containers[0].volumeMounts[0].subPath: "),
        "{}",
        warnings[0]
    );
}

#[test]
fn admission_pod_create_runs_runtime_class_gmsa_and_default_tolerations() {
    let mut lookups = MapLookups::default();
    lookups.insert(json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "win"}, "handler": "h",
        "scheduling": {"nodeSelector": {"kubernetes.io/os": "windows", "node.kubernetes.io/windows-build": "10.0.20348"}}}));
    lookups.insert(json!({"apiVersion": "windows.k8s.io/v1", "kind": "GMSACredentialSpec", "metadata": {"name": "g"}, "credspec": {"a": 1}}));
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"os": {"name": "windows"}, "runtimeClassName": "win",
                 "securityContext": {"windowsOptions": {"gmsaCredentialSpecName": "g"}},
                 "containers": [{"name": "c", "image": "mcr.microsoft.com/windows/servercore:ltsc2022"}]}});
    let warnings = admit_create(&mut pod, &lookups).expect("admitted");
    assert_eq!(warnings, Vec::<String>::new());
    assert_eq!(
        pod["spec"]["nodeSelector"]["node.kubernetes.io/windows-build"],
        json!("10.0.20348")
    );
    assert_eq!(
        pod["spec"]["securityContext"]["windowsOptions"]["gmsaCredentialSpec"],
        json!("{\"a\":1}")
    );
    let keys: Vec<&str> = pod["spec"]["tolerations"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["key"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        vec![
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable"
        ]
    );
}

#[test]
fn admission_pod_with_missing_runtime_class_is_forbidden_and_unchanged_kinds_pass() {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"runtimeClassName": "nope", "containers": [{"name": "c", "image": "nginx"}]}});
    let err = admit_create(&mut pod, &MapLookups::default()).expect_err("refused");
    assert_eq!(
        err,
        AdmissionError::Forbidden("pod rejected: RuntimeClass \"nope\" not found".into())
    );

    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}});
    let before = cm.clone();
    let rt = rt("v1", "ConfigMap");
    assert_eq!(
        admit(
            Operation::Create,
            &rt,
            &mut cm,
            None,
            &MapLookups::default(),
            &AdmissionOptions::default()
        ),
        Ok(vec![])
    );
    assert_eq!(cm, before);
}

#[test]
fn admission_workload_templates_are_validated_at_their_paths() {
    let template_spec = json!({"os": {"name": "windows"}, "hostPID": true, "containers": [{"name": "c", "image": "i"}]});
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        (
            "apps/v1",
            "Deployment",
            json!({"spec": {"template": {"spec": template_spec.clone()}}}),
            "spec.template.spec.hostPID",
        ),
        (
            "apps/v1",
            "ReplicaSet",
            json!({"spec": {"template": {"spec": template_spec.clone()}}}),
            "spec.template.spec.hostPID",
        ),
        (
            "apps/v1",
            "DaemonSet",
            json!({"spec": {"template": {"spec": template_spec.clone()}}}),
            "spec.template.spec.hostPID",
        ),
        (
            "apps/v1",
            "StatefulSet",
            json!({"spec": {"template": {"spec": template_spec.clone()}}}),
            "spec.template.spec.hostPID",
        ),
        (
            "batch/v1",
            "Job",
            json!({"spec": {"template": {"spec": template_spec.clone()}}}),
            "spec.template.spec.hostPID",
        ),
        (
            "batch/v1",
            "CronJob",
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": template_spec.clone()}}}}}),
            "spec.jobTemplate.spec.template.spec.hostPID",
        ),
        (
            "v1",
            "ReplicationController",
            json!({"spec": {"template": {"spec": template_spec.clone()}}}),
            "spec.template.spec.hostPID",
        ),
        (
            "v1",
            "PodTemplate",
            json!({"template": {"spec": template_spec.clone()}}),
            "template.spec.hostPID",
        ),
    ];
    for (api_version, kind, mut obj, field) in cases {
        let rt = rt(api_version, kind);
        let err = admit(
            Operation::Create,
            &rt,
            &mut obj,
            None,
            &MapLookups::default(),
            &AdmissionOptions::default(),
        )
        .expect_err(kind);
        match err {
            AdmissionError::Invalid(errs) => assert_eq!(
                errs.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(),
                vec![field],
                "{kind}"
            ),
            other => panic!("{kind}: {other:?}"),
        }
    }
}

#[test]
fn admission_workload_templates_skip_runtime_class_and_gmsa() {
    // A template naming a missing RuntimeClass or gMSA is not refused (upstream admits pods only).
    let mut deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
            "spec": {"runtimeClassName": "nope", "securityContext": {"windowsOptions": {"gmsaCredentialSpecName": "nope"}},
                     "containers": [{"name": "c", "image": "nginx"}]}}}});
    let warnings = admit_create(&mut deploy, &MapLookups::default()).expect("admitted");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(
        deploy["spec"]["template"]["spec"]
            .get("tolerations")
            .is_none()
    );
}

#[test]
fn admission_host_process_pod_is_forbidden_when_privileged_is_disallowed() {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"os": {"name": "windows"}, "hostNetwork": true,
                 "securityContext": {"windowsOptions": {"hostProcess": true, "runAsUserName": "NT AUTHORITY\\SYSTEM"}},
                 "containers": [{"name": "c", "image": "mcr.microsoft.com/windows/nanoserver:1809"}]}});
    let rt = rt("v1", "Pod");
    crate::defaults::apply_defaults(&rt, &mut pod);
    let options = AdmissionOptions {
        privileged_allowed: false,
        ..AdmissionOptions::default()
    };
    let err = admit(
        Operation::Create,
        &rt,
        &mut pod.clone(),
        None,
        &MapLookups::default(),
        &options,
    )
    .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "invalid: spec: Forbidden: hostProcess containers are disallowed by cluster policy"
    );
    assert!(
        admit(
            Operation::Create,
            &rt,
            &mut pod,
            None,
            &MapLookups::default(),
            &AdmissionOptions::default()
        )
        .is_ok()
    );
}

#[test]
fn admission_pod_update_checks_gmsa_and_warns_only_on_spec_change() {
    let rt = rt("v1", "Pod");
    let old = json!({"metadata": {"name": "p"}, "spec": {"os": {"name": "windows"}, "hostNetwork": true,
        "containers": [{"name": "c", "image": "mcr.microsoft.com/windows/nanoserver:1809",
                        "securityContext": {"windowsOptions": {"gmsaCredentialSpecName": "g", "gmsaCredentialSpec": "{}"}}}]}});
    let mut same = old.clone();
    same["metadata"]["labels"] = json!({"a": "b"});
    let lookups = MapLookups::default();
    let opts = AdmissionOptions::default();
    assert_eq!(
        admit(
            Operation::Update,
            &rt,
            &mut same,
            Some(&old),
            &lookups,
            &opts
        ),
        Ok(vec![])
    );
    let mut changed = old.clone();
    changed["spec"]["containers"][0]["image"] =
        json!("mcr.microsoft.com/windows/nanoserver:ltsc2022");
    let warnings = admit(
        Operation::Update,
        &rt,
        &mut changed,
        Some(&old),
        &lookups,
        &opts,
    )
    .expect("admitted");
    assert!(
        warnings.iter().any(|w| w.starts_with("spec.hostNetwork: ")),
        "{warnings:?}"
    );
    let mut regmsa = old.clone();
    regmsa["spec"]["containers"][0]["securityContext"]["windowsOptions"]["gmsaCredentialSpecName"] =
        json!("h");
    let err = admit(
        Operation::Update,
        &rt,
        &mut regmsa,
        Some(&old),
        &lookups,
        &opts,
    )
    .expect_err("refused");
    assert_eq!(err.code(), 403);
}

#[test]
fn admission_never_panics_on_odd_shapes() {
    let registry = Registry::builtin();
    let shapes = [
        json!(null),
        json!(1),
        json!([]),
        json!({"spec": 1}),
        json!({"spec": {"template": []}, "template": 3}),
        json!({"metadata": [], "spec": {"runtimeClassName": 3, "containers": [null], "securityContext": {"windowsOptions": 1}}}),
    ];
    for rt in registry.all() {
        for shape in &shapes {
            let mut obj = shape.clone();
            let _ = admit(
                Operation::Create,
                rt,
                &mut obj,
                None,
                &MapLookups::default(),
                &AdmissionOptions::default(),
            );
            let mut obj = shape.clone();
            let _ = admit(
                Operation::Update,
                rt,
                &mut obj,
                Some(shape),
                &MapLookups::default(),
                &AdmissionOptions::default(),
            );
        }
    }
}

// ---- seed manifests ----

fn seed_dir() -> Option<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/seed-manifests");
    let dir = if dir.exists() {
        dir
    } else {
        std::path::PathBuf::from("/work/shared/fixtures/seed-manifests")
    };
    dir.exists().then_some(dir)
}

fn seed(name: &str) -> Option<Vec<Value>> {
    let dir = seed_dir()?;
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc).ok()?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Some(docs)
}

fn by_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == json!(kind))
        .unwrap_or_else(|| panic!("{kind} in seed"))
}

/// The pod a workload controller would create from a Deployment's template.
fn pod_from_template(workload: &Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "from-template", "namespace": "default", "labels": workload["spec"]["template"]["metadata"]["labels"].clone()},
        "spec": workload["spec"]["template"]["spec"].clone()})
}

#[test]
fn admission_seed_iis_2019_pods_get_the_runtime_class_node_selector_and_toleration() {
    let (Some(rcs), Some(iis)) = (seed("runtimeClasses.yml"), seed("iis-2019.yaml")) else {
        eprintln!("seed manifests not found; skipping");
        return;
    };
    let mut lookups = MapLookups::default();
    for rc in rcs {
        lookups.insert(rc);
    }
    let mut deployment = by_kind(&iis, "Deployment").clone();
    let deployment_warnings = admit_create(&mut deployment, &lookups).expect("deployment admitted");
    // The template selects Windows only through its RuntimeClass and does not set spec.os.name.
    assert!(deployment_warnings.iter().any(|w| w.starts_with("spec.template.spec.os.name: the pod selects Windows nodes (RuntimeClass \"windows-2019\"")), "{deployment_warnings:#?}");

    let mut pod = pod_from_template(&deployment);
    let warnings = admit_create(&mut pod, &lookups).expect("pod admitted");
    assert_eq!(
        pod["spec"]["nodeSelector"],
        json!({"kubernetes.io/os": "windows", "kubernetes.io/arch": "amd64", "node.kubernetes.io/windows-build": "10.0.17763"})
    );
    let tolerations = pod["spec"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        tolerations.contains(
            &json!({"effect": "NoSchedule", "key": "os", "operator": "Equal", "value": "windows"})
        ),
        "{tolerations:?}"
    );
    assert_eq!(tolerations.len(), 3, "{tolerations:?}");
    // requests 300Mi vs limits 800Mi: Windows cannot guarantee the difference.
    assert!(warnings.iter().any(|w| w.starts_with("spec.containers[0].resources.requests[memory]: 300Mi differs from the memory limit 800Mi")), "{warnings:#?}");
    // The ltsc2019 image is pinned by the RuntimeClass's windows-build: no build warning.
    assert!(
        !warnings
            .iter()
            .any(|w| w.contains("no node selector or RuntimeClass pins")),
        "{warnings:#?}"
    );
}

#[test]
fn admission_seed_gmsa_billing_pod_gets_the_credential_spec_content() {
    let Some(docs) = seed("gmsa-billing.yaml") else {
        eprintln!("seed manifests not found; skipping");
        return;
    };
    let mut lookups = MapLookups::default();
    lookups.insert(by_kind(&docs, "GMSACredentialSpec").clone());
    let mut pod = by_kind(&docs, "Pod").clone();
    admit_create(&mut pod, &lookups).expect("pod admitted");
    let content = pod["spec"]["securityContext"]["windowsOptions"]["gmsaCredentialSpec"]
        .as_str()
        .expect("content filled");
    let parsed: Value = serde_json::from_str(content).expect("content is JSON");
    assert_eq!(parsed, by_kind(&docs, "GMSACredentialSpec")["credspec"]);
    assert!(
        content.starts_with(
            "{\"ActiveDirectoryConfig\":{\"GroupManagedServiceAccounts\":[{\"Name\":\"billing-svc\""
        ),
        "{content}"
    );
}

#[test]
fn admission_seed_win_webserver_is_warned_that_spec_os_name_is_not_set() {
    let Some(docs) = seed("win-webserver.yaml") else {
        eprintln!("seed manifests not found; skipping");
        return;
    };
    let mut deployment = by_kind(&docs, "Deployment").clone();
    let warnings = admit_create(&mut deployment, &MapLookups::default()).expect("admitted");
    assert!(
        warnings.contains(&"spec.template.spec.os.name: the pod selects Windows nodes (spec.template.spec.nodeSelector[kubernetes.io/os]) but does not set spec.template.spec.os.name: windows, so fields Windows cannot honour are not rejected; set it to windows".to_string()),
        "{warnings:#?}"
    );
    // servercore:ltsc2019 with only an OS selector: the build is left to chance.
    assert!(warnings.iter().any(|w| w.starts_with("spec.template.spec.containers[0].image: tag ltsc2019 names Windows Server 2019 (10.0.17763) but no node selector")), "{warnings:#?}");
}

#[test]
fn admission_seed_manifests_all_pass_admission() {
    let Some(dir) = seed_dir() else {
        eprintln!("seed manifests not found; skipping");
        return;
    };
    let mut lookups = MapLookups::default();
    let mut objects = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !(name.ends_with(".yaml") || name.ends_with(".yml")) || name.contains("as-published") {
            continue;
        }
        for doc in seed(&name).unwrap_or_default() {
            if !lookups.insert(doc.clone()) {
                objects.push((name.clone(), doc));
            }
        }
    }
    assert!(!objects.is_empty());
    for (file, mut obj) in objects {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let Some(rt) = Registry::builtin().by_kind(&api_version, &kind) else {
            continue;
        };
        crate::defaults::apply_defaults(&rt, &mut obj);
        let result = admit(
            Operation::Create,
            &rt,
            &mut obj,
            None,
            &lookups,
            &AdmissionOptions::default(),
        );
        assert!(result.is_ok(), "{file} {kind}: {result:?}");
    }
}
