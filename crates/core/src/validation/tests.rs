//! Behaviour tests for validation, run after defaults and strategies as the API server does.

use serde_json::{Value, json};

use super::*;
use crate::defaults::apply_defaults;
use crate::field::ErrorKind;
use crate::registry::Registry;
use crate::strategy::{prepare_for_create, prepare_for_status_update, prepare_for_update};

fn rt(api_version: &str, kind: &str) -> std::sync::Arc<ResourceType> {
    Registry::builtin()
        .by_kind(api_version, kind)
        .expect("registered kind")
}

/// Defaults, prepares and validates an object for create, as the API server does.
fn create(obj: Value) -> (Value, Vec<String>) {
    let api_version = obj["apiVersion"].as_str().unwrap_or("v1").to_string();
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    let t = rt(&api_version, &kind);
    let mut obj = obj;
    if t.namespaced && obj["metadata"].get("namespace").is_none() {
        obj["metadata"]["namespace"] = json!("default");
    }
    apply_defaults(&t, &mut obj);
    prepare_for_create(&t, &mut obj, "7d0c1a52-0000-4000-8000-000000000001");
    let errs = validate_create(&t, &obj)
        .iter()
        .map(ToString::to_string)
        .collect();
    (obj, errs)
}

fn update(old: &Value, new: Value) -> Vec<String> {
    let t = rt(
        old["apiVersion"].as_str().unwrap_or("v1"),
        old["kind"].as_str().unwrap_or_default(),
    );
    let mut new = new;
    apply_defaults(&t, &mut new);
    prepare_for_update(&t, &mut new, old);
    validate_update(&t, &new, old)
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn pod(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": spec})
}

fn deployment(labels: Value, selector: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": selector, "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    })
}

fn assert_has(errs: &[String], want: &str) {
    assert!(
        errs.iter().any(|e| e == want),
        "expected {want:?} in {errs:#?}"
    );
}

#[test]
fn seed_manifests_are_valid_after_defaults() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/seed-manifests");
    let dir = if dir.exists() {
        dir
    } else {
        std::path::PathBuf::from("/work/shared/fixtures/seed-manifests")
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("seed manifests not found at {}; skipping", dir.display());
        return;
    };
    let mut seen = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if !(name.ends_with(".yaml") || name.ends_with(".yml"))
            || name == "iis-2019-as-published.yaml"
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable manifest");
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(doc).expect("valid YAML");
            if value.is_null() {
                continue;
            }
            let (obj, errs) = create(value);
            assert!(
                errs.is_empty(),
                "{name}: {} {}: {errs:#?}",
                obj["kind"],
                obj["metadata"]["name"]
            );
            seen += 1;
        }
    }
    assert!(seen >= 12, "expected the seed manifests, validated {seen}");
}

#[test]
fn mis_indented_manifest_is_not_valid_yaml() {
    let path =
        std::path::Path::new("/work/shared/fixtures/seed-manifests/iis-2019-as-published.yaml");
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let parsed: Result<Vec<Value>, _> = serde_yaml::Deserializer::from_str(&text)
        .map(<Value as serde::Deserialize>::deserialize)
        .collect();
    assert!(parsed.is_err());
}

#[test]
fn pod_without_containers_is_required_at_spec_containers() {
    let (_, errs) = create(pod(json!({})));
    assert_eq!(errs, vec!["spec.containers: Required value".to_string()]);
}

#[test]
fn pod_field_errors_read_like_upstream() {
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"containers": [{"name": "a"}]}),
            "spec.containers[0].image: Required value",
        ),
        (
            json!({"containers": [{"name": "", "image": "i"}]}),
            "spec.containers[0].name: Required value",
        ),
        (
            json!({"containers": [{"name": "a", "image": "i"}, {"name": "a", "image": "i"}]}),
            "spec.containers[1].name: Duplicate value: \"a\"",
        ),
        (
            json!({"initContainers": [{"name": "a", "image": "i"}], "containers": [{"name": "a", "image": "i"}]}),
            "spec.containers[0].name: Duplicate value: \"a\"",
        ),
        (
            json!({"containers": [{"name": "a", "image": "i", "ports": [{"containerPort": 70000}]}]}),
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
        ),
        (
            json!({"containers": [{"name": "a", "image": "i", "ports": [{"containerPort": 80, "protocol": "HTTP"}]}]}),
            "spec.containers[0].ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
        ),
        (
            json!({"restartPolicy": "Sometimes", "containers": [{"name": "a", "image": "i"}]}),
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
        ),
        (
            json!({"terminationGracePeriodSeconds": -5, "containers": [{"name": "a", "image": "i"}]}),
            "spec.terminationGracePeriodSeconds: Invalid value: -5: must be greater than or equal to 0",
        ),
        (
            json!({"containers": [{"name": "a", "image": "i", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]}),
            "spec.containers[0].volumeMounts[0].name: Not found: \"data\"",
        ),
        (
            json!({"volumes": [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}], "containers": [{"name": "a", "image": "i"}]}),
            "spec.volumes[1].name: Duplicate value: \"v\"",
        ),
        (
            json!({"containers": [{"name": "a", "image": "i", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}}]}),
            "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
        ),
        (
            json!({"containers": [{"name": "a", "image": "i", "resources": {"limits": {"memory": "lots"}}}]}),
            "spec.containers[0].resources.limits[memory]: Invalid value: lots: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
        (
            json!({"containers": [{"name": "a", "image": "i", "livenessProbe": {"periodSeconds": 5}}]}),
            "spec.containers[0].livenessProbe: Required value: must specify a handler type",
        ),
        (
            json!({"containers": [{"name": "a", "image": "i", "livenessProbe": {"exec": {"command": ["x"]}, "tcpSocket": {"port": 80}}}]}),
            "spec.containers[0].livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type",
        ),
        (
            json!({"containers": [{"name": "a", "image": "i", "env": [{"name": "A=B", "value": "x"}]}]}),
            "spec.containers[0].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
        ),
        (
            json!({"dnsPolicy": "Google", "containers": [{"name": "a", "image": "i"}]}),
            "spec.dnsPolicy: Unsupported value: \"Google\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"",
        ),
        (
            json!({"tolerations": [{"operator": "Equal", "value": "x"}], "containers": [{"name": "a", "image": "i"}]}),
            "spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
        ),
        (
            json!({"containers": [{"name": "Web", "image": "i"}]}),
            "spec.containers[0].name: Invalid value: \"Web\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        ),
    ];
    for (spec, want) in cases {
        let (_, errs) = create(pod(spec));
        assert_has(&errs, want);
    }
}

#[test]
fn object_meta_rules_follow_kind_and_scope() {
    let (_, errs) = create(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"containers": [{"name": "a", "image": "i"}]}}),
    );
    assert_has(
        &errs,
        "metadata.name: Required value: name or generateName is required",
    );
    let (_, errs) = create(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b", "namespace": "x"}}),
    );
    assert_has(
        &errs,
        "metadata.name: Invalid value: \"a.b\": must not contain dots",
    );
    assert_has(
        &errs,
        "metadata.namespace: Forbidden: not allowed on this type",
    );
    let (_, errs) = create(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1web"}, "spec": {"ports": [{"port": 80}]}}),
    );
    assert!(
        errs.iter()
            .any(|e| e.starts_with("metadata.name: Invalid value: \"1web\": a DNS-1035 label")),
        "{errs:?}"
    );
    let t = rt("v1", "ConfigMap");
    let errs = validate_create(&t, &json!({"metadata": {"name": "c"}}));
    assert_eq!(
        errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
        vec!["metadata.namespace: Required value".to_string()]
    );
}

#[test]
fn invalid_label_value_reports_upstream_message() {
    let (_, errs) = create(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"app": "my app", "-bad": "x"}}}),
    );
    assert_has(
        &errs,
        "metadata.labels: Invalid value: \"my app\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
    );
    assert_has(
        &errs,
        "metadata.labels: Invalid value: \"-bad\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
    );
    let long = "x".repeat(64);
    let (_, errs) = create(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"k": long}}}),
    );
    assert_has(
        &errs,
        &format!("metadata.labels: Invalid value: \"{long}\": must be no more than 63 characters"),
    );
    let big = "x".repeat(256 * 1024);
    let (_, errs) = create(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "annotations": {"k": big}}}),
    );
    assert_has(
        &errs,
        "metadata.annotations: Too long: may not be more than 262144 bytes",
    );
}

#[test]
fn deployment_selector_must_match_template_labels() {
    let (_, errs) = create(deployment(
        json!({"app": "web"}),
        json!({"matchLabels": {"app": "api"}}),
    ));
    assert_eq!(errs, vec!["spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`".to_string()]);
    let (_, errs) = create(deployment(json!({"app": "web"}), json!({})));
    assert!(
        errs.iter()
            .any(|e| e.starts_with("spec.selector: Invalid value:")
                && e.ends_with("empty selector is invalid for deployment")),
        "{errs:?}"
    );
    let (_, errs) = create(deployment(
        json!({"app": "web", "tier": "fe"}),
        json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe"]}]}),
    ));
    assert!(errs.is_empty(), "{errs:?}");
}

#[test]
fn workload_rules_read_like_upstream() {
    let mut d = deployment(
        json!({"app": "web"}),
        json!({"matchLabels": {"app": "web"}}),
    );
    d["spec"]["replicas"] = json!(-1);
    d["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    let (_, errs) = create(d);
    assert_has(
        &errs,
        "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
    );
    assert_has(
        &errs,
        "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
    );
    let mut d = deployment(
        json!({"app": "web"}),
        json!({"matchLabels": {"app": "web"}}),
    );
    d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
    let (_, errs) = create(d);
    assert_has(
        &errs,
        "spec.template.spec.containers[0].image: Required value",
    );
    let mut d = deployment(
        json!({"app": "web"}),
        json!({"matchLabels": {"app": "web"}}),
    );
    d["spec"]["strategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}});
    let (_, errs) = create(d);
    assert_has(
        &errs,
        "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0",
    );

    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"}, "spec": {"template": {"spec": {"containers": [{"name": "pi", "image": "perl"}]}}}});
    let (_, errs) = create(job.clone());
    assert_eq!(errs, vec!["spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"".to_string()]);
    let mut ok_job = job;
    ok_job["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    let (_, errs) = create(ok_job);
    assert!(errs.is_empty(), "{errs:?}");

    let cron = |schedule: &str| {
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"}, "spec": {"schedule": schedule,
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "a", "image": "i"}]}}}}}})
    };
    assert!(create(cron("*/5 * * * *")).1.is_empty());
    assert!(create(cron("@hourly")).1.is_empty());
    assert_has(
        &create(cron("* * *")).1,
        "spec.schedule: Invalid value: \"* * *\": expected exactly 5 fields, found 3: [* * *]",
    );
    assert_has(&create(cron("")).1, "spec.schedule: Required value");
    assert_has(
        &create(cron("TZ=UTC 0 * * * *")).1,
        "spec.schedule: Invalid value: \"TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
    );
    let mut bad_tz = cron("0 * * * *");
    bad_tz["spec"]["timeZone"] = json!("Local");
    assert_has(
        &create(bad_tz).1,
        "spec.timeZone: Invalid value: \"Local\": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
    );

    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"}, "spec": {"selector": {"matchLabels": {"app": "db"}},
        "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "a", "image": "i"}]}},
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}});
    let (sts, errs) = create(sts);
    assert!(errs.is_empty(), "{errs:?}");
    let mut changed = sts.clone();
    changed["spec"]["podManagementPolicy"] = json!("Parallel");
    assert_has(
        &update(&sts, changed),
        "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
    );
}

#[test]
fn apps_selector_is_immutable_on_update() {
    let (old, errs) = create(deployment(
        json!({"app": "web", "v": "1"}),
        json!({"matchLabels": {"app": "web"}}),
    ));
    assert!(errs.is_empty(), "{errs:?}");
    let mut new = old.clone();
    new["spec"]["selector"] = json!({"matchLabels": {"app": "web", "v": "1"}});
    let errs = update(&old, new);
    assert!(
        errs.iter()
            .any(|e| e.starts_with("spec.selector: Invalid value:")
                && e.ends_with("field is immutable")),
        "{errs:?}"
    );
    let mut renamed = old.clone();
    renamed["metadata"]["name"] = json!("other");
    assert_has(
        &update(&old, renamed),
        "metadata.name: Invalid value: \"other\": field is immutable",
    );
}

#[test]
fn pod_spec_update_of_other_fields_is_forbidden() {
    let (old, errs) = create(pod(
        json!({"containers": [{"name": "a", "image": "nginx:1"}], "tolerations": [{"key": "k", "operator": "Exists"}]}),
    ));
    assert!(errs.is_empty(), "{errs:?}");
    let mut image = old.clone();
    image["spec"]["containers"][0]["image"] = json!("nginx:2");
    image["spec"]["tolerations"] = json!([{"key": "k", "operator": "Exists"}, {"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}]);
    image["spec"]["activeDeadlineSeconds"] = json!(60);
    assert!(update(&old, image).is_empty());
    let mut ports = old.clone();
    ports["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
    let errs = update(&old, ports);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"),
        "{errs:?}"
    );
    let mut removed = old.clone();
    removed["spec"]["tolerations"] = json!([]);
    assert_has(
        &update(&old, removed),
        "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds",
    );
    let mut more = old.clone();
    more["spec"]["containers"] = json!([{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]);
    assert_has(
        &update(&old, more),
        "spec.containers: Forbidden: pod updates may not add or remove containers",
    );
}

#[test]
fn service_nodeport_out_of_range_is_invalid() {
    let svc = |ty: &str, node_port: i64| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"type": ty, "selector": {"app": "web"}, "ports": [{"port": 80, "nodePort": node_port}]}});
    assert_has(
        &create(svc("NodePort", 40000)).1,
        "spec.ports[0].nodePort: Invalid value: 40000: provided port is not in the valid range. The range of valid ports is 30000-32767",
    );
    assert!(create(svc("NodePort", 30080)).1.is_empty());
    assert_has(
        &create(svc("ClusterIP", 30080)).1,
        "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'",
    );
}

#[test]
fn service_rules_read_like_upstream() {
    let base = |spec: Value| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": spec});
    assert_has(&create(base(json!({}))).1, "spec.ports: Required value");
    assert!(
        create(base(
            json!({"type": "ExternalName", "externalName": "example.com"})
        ))
        .1
        .is_empty()
    );
    assert!(
        create(base(json!({"clusterIP": "None", "selector": {"a": "b"}})))
            .1
            .is_empty()
    );
    assert_has(
        &create(base(json!({"ports": [{"port": 80}, {"port": 81}]}))).1,
        "spec.ports[0].name: Required value",
    );
    assert_has(
        &create(base(json!({"ports": [{"port": 0}]}))).1,
        "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
    );
    assert_has(
        &create(base(json!({"type": "Internal", "ports": [{"port": 80}]}))).1,
        "spec.type: Unsupported value: \"Internal\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
    );
    let (old, errs) = create(base(
        json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}),
    ));
    assert!(errs.is_empty(), "{errs:?}");
    let mut new = old.clone();
    new["spec"]["clusterIP"] = json!("None");
    new["spec"]["clusterIPs"] = json!(["None"]);
    assert_has(
        &update(&old, new),
        "spec.clusterIPs[0]: Invalid value: [\"None\"]: may not change once set",
    );
    let mut kept = old.clone();
    if let Some(spec) = kept["spec"].as_object_mut() {
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
    }
    assert!(update(&old, kept).is_empty());
}

#[test]
fn config_and_cluster_kinds_read_like_upstream() {
    let (_, errs) = create(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"bad key": "v"}}),
    );
    assert_has(
        &errs,
        "data[bad key]: Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
    );
    let (_, errs) = create(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "x".repeat(1024 * 1024 + 1)}}),
    );
    assert_has(&errs, ": Too long: may not be more than 1048576 bytes");
    let (_, errs) = create(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "kubernetes.io/tls", "data": {}}),
    );
    assert_has(&errs, "data[tls.crt]: Required value");
    let (old, _) = create(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "immutable": true, "data": {"a": "YQ=="}}),
    );
    let mut new = old.clone();
    new["data"] = json!({"a": "Yg=="});
    assert_has(
        &update(&old, new),
        "data: Forbidden: field is immutable when `immutable` is set",
    );
    let (_, errs) = create(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {"taints": [{"key": "os", "value": "windows", "effect": "NoRun"}]}}),
    );
    assert_has(
        &errs,
        "spec.taints[0].effect: Unsupported value: \"NoRun\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
    );
    let (_, errs) = create(
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "r"}, "handler": "Bad_Handler"}),
    );
    assert!(
        errs.iter().any(|e| e
            .starts_with("handler: Invalid value: \"Bad_Handler\": a lowercase RFC 1123 label")),
        "{errs:?}"
    );
    let (_, errs) = create(
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "p"}, "spec": {}}),
    );
    assert_has(
        &errs,
        "spec.accessModes: Required value: at least 1 access mode is required",
    );
    assert_has(&errs, "spec.resources[storage]: Required value");
    let (old, errs) = create(
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "p"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    );
    assert!(errs.is_empty(), "{errs:?}");
    let mut new = old.clone();
    new["spec"]["accessModes"] = json!(["ReadWriteMany"]);
    assert_has(
        &update(&old, new),
        "spec: Forbidden: spec is immutable after creation except resources.requests for bound claims",
    );
    let (_, errs) = create(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "e"}, "addressType": "IPv5", "endpoints": []}),
    );
    assert_has(
        &errs,
        "addressType: Unsupported value: \"IPv5\": supported values: \"FQDN\", \"IPv4\", \"IPv6\"",
    );
    let (_, errs) = create(
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0}}),
    );
    assert_has(
        &errs,
        "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
    );
    let (_, errs) = create(
        json!({"apiVersion": "windows.k8s.io/v1", "kind": "GMSACredentialSpec", "metadata": {"name": "g"}}),
    );
    assert_has(&errs, "credspec: Required value");
    let (_, errs) = create(
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e.1", "namespace": "a"}, "involvedObject": {"namespace": "b"}}),
    );
    assert_has(
        &errs,
        "involvedObject.namespace: Invalid value: \"b\": does not match event.namespace",
    );
}

#[test]
fn status_update_validates_counters_and_namespace_phase() {
    let t = rt("apps/v1", "Deployment");
    let (old, _) = create(deployment(
        json!({"app": "web"}),
        json!({"matchLabels": {"app": "web"}}),
    ));
    let mut new = old.clone();
    new["status"] = json!({"replicas": -1});
    prepare_for_status_update(&t, &mut new, &old);
    let errs: Vec<String> = validate_status_update(&t, &new, &old)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errs,
        vec!["status.replicas: Invalid value: -1: must be greater than or equal to 0".to_string()]
    );
    let ns = rt("v1", "Namespace");
    let old = json!({"metadata": {"name": "web"}, "status": {"phase": "Active"}});
    let new = json!({"metadata": {"name": "web"}, "status": {"phase": "Terminating"}});
    assert_eq!(
        validate_status_update(&ns, &new, &old)[0].kind,
        ErrorKind::Invalid
    );
}

fn odd_shapes() -> Vec<Value> {
    let weird = json!({"spec": [], "metadata": "x", "template": 3, "data": [1], "status": "s"});
    let nested = json!({
        "metadata": {"name": 5, "labels": [], "annotations": {"a": 1}, "ownerReferences": {}, "finalizers": "f"},
        "spec": {
            "containers": {"a": 1}, "initContainers": [1, null, "x", {"ports": "p", "env": [{"valueFrom": 1}], "resources": {"limits": []}}],
            "volumes": [null, {"name": 1, "secret": "s"}], "template": {"metadata": 1, "spec": {"containers": [{"livenessProbe": {"httpGet": 1}}]}},
            "selector": "x", "strategy": [], "updateStrategy": {"rollingUpdate": "x"}, "jobTemplate": {"spec": 1}, "ports": [{"port": "x", "targetPort": []}],
            "taints": [1], "tolerations": {"k": 1}, "replicas": "3", "schedule": 5, "accessModes": "RWO", "resources": 1, "capacity": []
        },
        "status": {"phase": 1}, "subsets": [{"addresses": "a", "ports": [1]}], "endpoints": [{"addresses": 1}], "ports": [null], "handler": 1,
        "scheduling": {"tolerations": "t"}, "data": {"k": 1}, "stringData": {"a": 1}, "credspec": 1, "involvedObject": [], "type": 1
    });
    vec![
        Value::Null,
        json!(1),
        json!("s"),
        json!([]),
        json!({}),
        weird,
        nested,
    ]
}

#[test]
fn never_panics_on_odd_shapes() {
    let registry = Registry::builtin();
    for t in registry.all() {
        for a in odd_shapes() {
            for b in odd_shapes() {
                let mut x = a.clone();
                apply_defaults(t, &mut x);
                prepare_for_create(t, &mut x, "u");
                let _ = validate_create(t, &x);
                let mut y = b.clone();
                apply_defaults(t, &mut y);
                prepare_for_update(t, &mut y, &x);
                let _ = validate_update(t, &y, &x);
                let mut z = b.clone();
                prepare_for_status_update(t, &mut z, &a);
                let _ = validate_status_update(t, &z, &a);
                let _ = crate::strategy::has_status_subresource(t);
            }
        }
    }
}
