//! Defaulting of objects on create and update, as upstream `pkg/apis/*/v1/defaults.go` does.
//!
//! [`apply_defaults`] fills what upstream's generated `SetObjectDefaults_<Kind>` functions fill
//! when an object is decoded: `pkg/apis/core/v1/defaults.go` (`SetDefaults_Pod`,
//! `SetDefaults_PodSpec`, `SetDefaults_Container`, `SetDefaults_Probe`, `SetDefaults_Service`,
//! `SetDefaults_Volume`, …), `pkg/apis/apps/v1/defaults.go`, `pkg/apis/batch/v1/defaults.go`
//! and the other groups' `defaults.go` (in the matching `crate::validation` modules),
//! plus the single-stack IP family fields the service REST storage fills. It is idempotent and
//! tolerates any JSON shape (wrong types are left alone).

use serde_json::{Map, Value, json};

use crate::registry::ResourceType;
use crate::validation::admissionregistration;
use crate::validation::json::{each_mut, ensure_obj, set_default, set_default_str, str_at};

/// Upstream `v1.DefaultTerminationGracePeriodSeconds`.
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;
/// Upstream `v1.DefaultSchedulerName`.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
/// Octal 0644, the default file mode of projected, secret, configMap and downwardAPI volumes.
pub const DEFAULT_MODE: i64 = 0o644;

/// Applies upstream defaults for the object's kind, including every embedded pod template.
pub fn apply_defaults(rt: &ResourceType, obj: &mut Value) {
    if !obj.is_object() {
        return;
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => pod(obj),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            crate::apiextensions::crd::default_crd(obj)
        }
        ("", "PodTemplate") => pod_template(obj.get_mut("template")),
        ("", "ReplicationController") => replication_controller(obj),
        ("", "Service") => service(obj),
        ("", "Endpoints") => each_mut(obj, "subsets", |s| {
            each_mut(s, "ports", |p| set_default_str(p, "protocol", "TCP"))
        }),
        ("", "Namespace") => namespace(obj),
        ("", "Node") => node(obj),
        ("", "Secret") => set_default_str(obj, "type", "Opaque"),
        ("", "PersistentVolumeClaim") => pvc(obj),
        ("", "PersistentVolume") => pv(obj),
        ("", "LimitRange") => limit_range(obj),
        ("apps", "Deployment") => deployment(obj),
        ("apps", "ReplicaSet") => {
            with_spec(obj, |spec| set_default(spec, "replicas", json!(1)));
            pod_template(spec_template(obj));
        }
        ("apps", "DaemonSet") => daemon_set(obj),
        ("apps", "StatefulSet") => stateful_set(obj),
        ("batch", "Job") => job(obj),
        ("batch", "CronJob") => cron_job(obj),
        ("discovery.k8s.io", "EndpointSlice") => each_mut(obj, "ports", |p| {
            set_default(p, "name", json!(""));
            set_default(p, "protocol", json!("TCP"));
        }),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => rbac_binding(obj),
        ("networking.k8s.io", "NetworkPolicy") => {
            crate::validation::networking::default_network_policy(obj)
        }
        ("networking.k8s.io", "IngressClass") => {
            crate::validation::networking::default_ingress_class(obj)
        }
        ("scheduling.k8s.io", "PriorityClass") => {
            crate::validation::scheduling::default_priority_class(obj)
        }
        ("storage.k8s.io", "StorageClass") => {
            crate::validation::storage_api::default_storage_class(obj)
        }
        ("storage.k8s.io", "CSIDriver") => crate::validation::storage_api::default_csi_driver(obj),
        ("apiregistration.k8s.io", "APIService") => {
            crate::validation::apiregistration::default_api_service(obj)
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            admissionregistration::default_webhook_configuration(obj, false)
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            admissionregistration::default_webhook_configuration(obj, true)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            admissionregistration::default_validating_admission_policy(obj)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            admissionregistration::default_validating_admission_policy_binding(obj)
        }
        ("autoscaling", "HorizontalPodAutoscaler") => {
            crate::validation::autoscaling::default_hpa(obj)
        }
        _ => {}
    }
}

/// Upstream `pkg/apis/rbac/v1/defaults.go`: `SetDefaults_RoleBinding` /
/// `SetDefaults_ClusterRoleBinding` give `roleRef` the RBAC group, and `SetDefaults_Subject` gives
/// `User` and `Group` subjects the RBAC group (service accounts keep the core group, `""`).
fn rbac_binding(obj: &mut Value) {
    if let Some(role_ref) = ensure_obj(obj, "roleRef") {
        set_default_str(role_ref, "apiGroup", crate::rbac::GROUP_NAME);
    }
    each_mut(obj, "subjects", |s| {
        if matches!(str_at(s, "kind"), Some("User" | "Group")) {
            set_default_str(s, "apiGroup", crate::rbac::GROUP_NAME);
        }
    });
}

fn with_spec(obj: &mut Value, f: impl FnOnce(&mut Value)) {
    if let Some(spec) = ensure_obj(obj, "spec") {
        f(spec);
    }
}

fn spec_template(obj: &mut Value) -> Option<&mut Value> {
    obj.get_mut("spec").and_then(|s| s.get_mut("template"))
}

/// The image pull policy upstream `SetDefaults_Container` picks: `Always` when the tag is
/// `latest` or absent (and there is no digest), `IfNotPresent` otherwise.
pub fn default_pull_policy(image: &str) -> &'static str {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.split_once(':').map(|(_, t)| t);
    match (tag, digest) {
        _ if image.trim().is_empty() => "IfNotPresent",
        (Some("latest"), _) => "Always",
        (Some(_), _) => "IfNotPresent",
        (None, Some(_)) => "IfNotPresent",
        (None, None) => "Always",
    }
}

fn handler(h: &mut Value) {
    if let Some(get) = h.get_mut("httpGet").filter(|v| v.is_object()) {
        set_default_str(get, "path", "/");
        set_default_str(get, "scheme", "HTTP");
    }
}

fn probe(p: &mut Value) {
    if !p.is_object() {
        return;
    }
    handler(p);
    for (key, v) in [
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ] {
        match p.get(key).and_then(Value::as_i64) {
            Some(n) if n != 0 => {}
            _ => {
                if let Some(m) = p.as_object_mut() {
                    m.insert(key.into(), json!(v));
                }
            }
        }
    }
}

fn field_ref(v: &mut Value) {
    if let Some(fr) = v.get_mut("fieldRef").filter(|v| v.is_object()) {
        set_default_str(fr, "apiVersion", "v1");
    }
}

/// Upstream `SetDefaults_Container` and the defaults of its embedded types.
fn container(c: &mut Value, host_network: bool) {
    if !c.is_object() {
        return;
    }
    if str_at(c, "imagePullPolicy").unwrap_or_default().is_empty() {
        let policy = default_pull_policy(str_at(c, "image").unwrap_or_default());
        set_default_str(c, "imagePullPolicy", policy);
    }
    set_default_str(c, "terminationMessagePath", "/dev/termination-log");
    set_default_str(c, "terminationMessagePolicy", "File");
    each_mut(c, "ports", |p| {
        set_default_str(p, "protocol", "TCP");
        if host_network
            && p.get("hostPort").and_then(Value::as_i64).unwrap_or(0) == 0
            && let Some(cp) = p.get("containerPort").cloned()
            && let Some(m) = p.as_object_mut()
        {
            m.insert("hostPort".into(), cp);
        }
    });
    each_mut(c, "env", |e| {
        if let Some(from) = e.get_mut("valueFrom") {
            field_ref(from);
        }
    });
    for key in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(key) {
            probe(p);
        }
    }
    if let Some(lc) = c.get_mut("lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = lc.get_mut(hook) {
                handler(h);
            }
        }
    }
}

fn downward_items(src: &mut Value) {
    each_mut(src, "items", field_ref);
}

/// Upstream `SetDefaults_Volume` and the per-source volume defaults.
fn volume(v: &mut Value) {
    let Some(m) = v.as_object_mut() else { return };
    let has_source = m.iter().any(|(k, v)| k != "name" && !v.is_null());
    if !has_source {
        m.insert("emptyDir".into(), json!({}));
    }
    for key in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(src) = m.get_mut(key).filter(|v| v.is_object()) {
            set_default(src, "defaultMode", json!(DEFAULT_MODE));
        }
    }
    if let Some(src) = m.get_mut("downwardAPI") {
        downward_items(src);
    }
    if let Some(src) = m.get_mut("projected") {
        each_mut(src, "sources", |s| {
            if let Some(t) = s.get_mut("serviceAccountToken").filter(|v| v.is_object()) {
                set_default(t, "expirationSeconds", json!(3600));
            }
            if let Some(d) = s.get_mut("downwardAPI") {
                downward_items(d);
            }
        });
    }
    if let Some(src) = m.get_mut("hostPath").filter(|v| v.is_object()) {
        set_default(src, "type", json!(""));
    }
    if let Some(src) = m.get_mut("iscsi").filter(|v| v.is_object()) {
        set_default_str(src, "iscsiInterface", "default");
    }
    if let Some(src) = m.get_mut("rbd").filter(|v| v.is_object()) {
        set_default_str(src, "pool", "rbd");
        set_default_str(src, "user", "admin");
        set_default_str(src, "keyring", "/etc/ceph/keyring");
    }
    if let Some(src) = m.get_mut("azureDisk").filter(|v| v.is_object()) {
        set_default(src, "cachingMode", json!("ReadWrite"));
        set_default(src, "fsType", json!("ext4"));
        set_default(src, "readOnly", json!(false));
        set_default(src, "kind", json!("Shared"));
    }
    if let Some(spec) = m
        .get_mut("ephemeral")
        .and_then(|e| e.get_mut("volumeClaimTemplate"))
        .and_then(|t| t.get_mut("spec"))
        .filter(|v| v.is_object())
    {
        set_default(spec, "volumeMode", json!("Filesystem"));
    }
}

/// Upstream `SetDefaults_PodSpec` plus the defaults of every embedded type: what a PodSpec
/// gets wherever it appears (Pods and templates).
pub fn pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default_str(spec, "dnsPolicy", "ClusterFirst");
    set_default_str(spec, "restartPolicy", "Always");
    set_default(spec, "securityContext", json!({}));
    set_default(
        spec,
        "terminationGracePeriodSeconds",
        json!(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS),
    );
    set_default_str(spec, "schedulerName", DEFAULT_SCHEDULER_NAME);
    // v1 conversion mirrors serviceAccountName into the deprecated serviceAccount field.
    if let Some(sa) = str_at(spec, "serviceAccount")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
    {
        set_default_str(spec, "serviceAccountName", &sa);
    }
    if let Some(san) = str_at(spec, "serviceAccountName")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        && let Some(m) = spec.as_object_mut()
    {
        m.insert("serviceAccount".into(), json!(san));
    }
    let host_network = spec
        .get("hostNetwork")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    each_mut(spec, "volumes", volume);
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        each_mut(spec, key, |c| container(c, host_network));
    }
}

/// Defaults of a `PodTemplateSpec` (`template` of a workload).
pub fn pod_template(template: Option<&mut Value>) {
    if let Some(spec) = template.and_then(|t| t.get_mut("spec")) {
        pod_spec(spec);
    }
}

/// Upstream `SetDefaults_Pod` + `SetDefaults_PodSpec`, plus the ServiceAccount admission
/// plugin's `default` service account.
fn pod(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    set_default(spec, "enableServiceLinks", json!(true));
    if str_at(spec, "serviceAccountName")
        .unwrap_or_default()
        .is_empty()
        && str_at(spec, "serviceAccount")
            .unwrap_or_default()
            .is_empty()
    {
        set_default_str(spec, "serviceAccountName", "default");
    }
    for key in ["containers", "initContainers"] {
        each_mut(spec, key, |c| {
            let Some(limits) = c
                .get("resources")
                .and_then(|r| r.get("limits"))
                .and_then(Value::as_object)
                .cloned()
            else {
                return;
            };
            let Some(res) = ensure_obj(c, "resources") else {
                return;
            };
            let Some(requests) = ensure_obj(res, "requests").and_then(Value::as_object_mut) else {
                return;
            };
            for (k, v) in limits {
                requests.entry(k).or_insert(v);
            }
        });
    }
    pod_spec(spec);
}

/// Upstream `SetDefaults_ReplicationController`.
fn replication_controller(obj: &mut Value) {
    let labels = obj
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"))
        .cloned();
    if let Some(labels) = labels.filter(Value::is_object) {
        if let Some(spec) = obj.get_mut("spec")
            && spec
                .get("selector")
                .and_then(Value::as_object)
                .is_none_or(Map::is_empty)
            && let Some(m) = spec.as_object_mut()
        {
            m.insert("selector".into(), labels.clone());
        }
        if let Some(meta) = ensure_obj(obj, "metadata")
            && meta
                .get("labels")
                .and_then(Value::as_object)
                .is_none_or(Map::is_empty)
            && let Some(m) = meta.as_object_mut()
        {
            m.insert("labels".into(), labels);
        }
    }
    with_spec(obj, |spec| set_default(spec, "replicas", json!(1)));
    pod_template(spec_template(obj));
}

/// Upstream `SetDefaults_Service`, plus the single-stack IP family fields the service REST
/// storage fills for every non-ExternalName service.
fn service(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    set_default_str(spec, "sessionAffinity", "None");
    match str_at(spec, "sessionAffinity") {
        Some("None") => {
            if let Some(m) = spec.as_object_mut() {
                m.remove("sessionAffinityConfig");
            }
        }
        Some("ClientIP") => {
            let has_timeout = spec
                .get("sessionAffinityConfig")
                .and_then(|c| c.get("clientIP"))
                .and_then(|c| c.get("timeoutSeconds"))
                .is_some_and(|t| !t.is_null());
            if !has_timeout && let Some(m) = spec.as_object_mut() {
                m.insert(
                    "sessionAffinityConfig".into(),
                    json!({"clientIP": {"timeoutSeconds": 10800}}),
                );
            }
        }
        _ => {}
    }
    set_default_str(spec, "type", "ClusterIP");
    each_mut(spec, "ports", |p| {
        set_default_str(p, "protocol", "TCP");
        let unset = match p.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            Some(Value::String(s)) => s.is_empty(),
            _ => false,
        };
        if unset
            && let Some(port) = p.get("port").cloned()
            && let Some(m) = p.as_object_mut()
        {
            m.insert("targetPort".into(), port);
        }
    });
    let ty = str_at(spec, "type").unwrap_or_default().to_string();
    let has_external_ips = spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if ty == "NodePort" || ty == "LoadBalancer" || (ty == "ClusterIP" && has_external_ips) {
        set_default_str(spec, "externalTrafficPolicy", "Cluster");
    }
    if matches!(ty.as_str(), "NodePort" | "LoadBalancer" | "ClusterIP") {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if ty != "ExternalName" {
        let v6 = str_at(spec, "clusterIP").is_some_and(|ip| ip.contains(':'));
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
        let families_empty = spec
            .get("ipFamilies")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if families_empty && let Some(m) = spec.as_object_mut() {
            m.insert(
                "ipFamilies".into(),
                json!([if v6 { "IPv6" } else { "IPv4" }]),
            );
        }
    }
}

/// Upstream `SetDefaults_Namespace` and `SetDefaults_NamespaceStatus`.
fn namespace(obj: &mut Value) {
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(name) = name.filter(|n| !n.is_empty())
        && let Some(meta) = ensure_obj(obj, "metadata")
        && let Some(labels) = ensure_obj(meta, "labels").and_then(Value::as_object_mut)
    {
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
    if let Some(status) = ensure_obj(obj, "status") {
        set_default_str(status, "phase", "Active");
    }
}

/// Upstream `SetDefaults_NodeStatus`: allocatable defaults to capacity.
fn node(obj: &mut Value) {
    if let Some(status) = obj.get_mut("status").filter(|s| s.is_object())
        && let Some(cap) = status.get("capacity").filter(|c| c.is_object()).cloned()
    {
        set_default(status, "allocatable", cap);
    }
}

fn pvc_like(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) {
        set_default(spec, "volumeMode", json!("Filesystem"));
    }
    if let Some(status) = ensure_obj(obj, "status") {
        set_default_str(status, "phase", "Pending");
    }
}

/// Upstream `SetDefaults_PersistentVolumeClaim` and `SetDefaults_PersistentVolumeClaimSpec`.
fn pvc(obj: &mut Value) {
    ensure_obj(obj, "spec");
    pvc_like(obj);
}

/// Upstream `SetDefaults_PersistentVolume`.
fn pv(obj: &mut Value) {
    if let Some(spec) = ensure_obj(obj, "spec") {
        set_default_str(spec, "persistentVolumeReclaimPolicy", "Retain");
        set_default(spec, "volumeMode", json!("Filesystem"));
    }
    if let Some(status) = ensure_obj(obj, "status") {
        set_default_str(status, "phase", "Pending");
    }
}

/// Upstream `SetDefaults_LimitRangeItem`: container defaults flow max → default →
/// defaultRequest, and min → defaultRequest.
fn limit_range(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec") else {
        return;
    };
    each_mut(spec, "limits", |item| {
        if str_at(item, "type") != Some("Container") {
            return;
        }
        let copy = |item: &mut Value, from: &str, to: &str| {
            let Some(src) = item.get(from).and_then(Value::as_object).cloned() else {
                return;
            };
            if let Some(dst) = ensure_obj(item, to).and_then(Value::as_object_mut) {
                for (k, v) in src {
                    dst.entry(k).or_insert(v);
                }
            }
        };
        ensure_obj(item, "default");
        ensure_obj(item, "defaultRequest");
        copy(item, "max", "default");
        copy(item, "default", "defaultRequest");
        copy(item, "min", "defaultRequest");
    });
}

/// Upstream `SetDefaults_Deployment`.
fn deployment(obj: &mut Value) {
    with_spec(obj, |spec| {
        set_default(spec, "replicas", json!(1));
        if let Some(strategy) = ensure_obj(spec, "strategy") {
            set_default_str(strategy, "type", "RollingUpdate");
            if str_at(strategy, "type") == Some("RollingUpdate")
                && let Some(ru) = ensure_obj(strategy, "rollingUpdate")
            {
                set_default(ru, "maxUnavailable", json!("25%"));
                set_default(ru, "maxSurge", json!("25%"));
            }
        }
        set_default(spec, "revisionHistoryLimit", json!(10));
        set_default(spec, "progressDeadlineSeconds", json!(600));
    });
    pod_template(spec_template(obj));
}

/// Upstream `SetDefaults_DaemonSet`.
fn daemon_set(obj: &mut Value) {
    with_spec(obj, |spec| {
        if let Some(us) = ensure_obj(spec, "updateStrategy") {
            set_default_str(us, "type", "RollingUpdate");
            if str_at(us, "type") == Some("RollingUpdate")
                && let Some(ru) = ensure_obj(us, "rollingUpdate")
            {
                set_default(ru, "maxUnavailable", json!(1));
                set_default(ru, "maxSurge", json!(0));
            }
        }
        set_default(spec, "revisionHistoryLimit", json!(10));
    });
    pod_template(spec_template(obj));
}

/// Upstream `SetDefaults_StatefulSet`, including the PVC defaults of volume claim templates.
fn stateful_set(obj: &mut Value) {
    with_spec(obj, |spec| {
        set_default_str(spec, "podManagementPolicy", "OrderedReady");
        if let Some(us) = ensure_obj(spec, "updateStrategy") {
            if str_at(us, "type").unwrap_or_default().is_empty() {
                set_default_str(us, "type", "RollingUpdate");
                ensure_obj(us, "rollingUpdate");
            }
            if str_at(us, "type") == Some("RollingUpdate")
                && let Some(ru) = us.get_mut("rollingUpdate").filter(|v| v.is_object())
            {
                set_default(ru, "partition", json!(0));
            }
        }
        if let Some(policy) = ensure_obj(spec, "persistentVolumeClaimRetentionPolicy") {
            set_default_str(policy, "whenDeleted", "Retain");
            set_default_str(policy, "whenScaled", "Retain");
        }
        set_default(spec, "replicas", json!(1));
        set_default(spec, "revisionHistoryLimit", json!(10));
        each_mut(spec, "volumeClaimTemplates", pvc_like);
    });
    pod_template(spec_template(obj));
}

/// Upstream `SetDefaults_Job`.
fn job(obj: &mut Value) {
    let template_labels = obj
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"))
        .cloned();
    with_spec(obj, |spec| {
        let has = |spec: &Value, k: &str| spec.get(k).is_some_and(|v| !v.is_null());
        if !has(spec, "completions") && !has(spec, "parallelism") {
            set_default(spec, "completions", json!(1));
        }
        set_default(spec, "parallelism", json!(1));
        let backoff = if has(spec, "backoffLimitPerIndex") {
            json!(i32::MAX)
        } else {
            json!(6)
        };
        set_default(spec, "backoffLimit", backoff);
        set_default(spec, "completionMode", json!("NonIndexed"));
        set_default(spec, "suspend", json!(false));
        let has_pfp = has(spec, "podFailurePolicy");
        if let Some(pfp) = spec.get_mut("podFailurePolicy") {
            each_mut(pfp, "rules", |rule| {
                each_mut(rule, "onPodConditions", |c| {
                    set_default_str(c, "status", "True")
                })
            });
        }
        set_default(
            spec,
            "podReplacementPolicy",
            json!(if has_pfp {
                "Failed"
            } else {
                "TerminatingOrFailed"
            }),
        );
    });
    if let Some(labels) = template_labels.filter(Value::is_object)
        && let Some(meta) = ensure_obj(obj, "metadata")
        && meta
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty)
        && let Some(m) = meta.as_object_mut()
    {
        m.insert("labels".into(), labels);
    }
    pod_template(spec_template(obj));
}

/// Upstream `SetDefaults_CronJob` (the job template gets only pod template defaults).
fn cron_job(obj: &mut Value) {
    with_spec(obj, |spec| {
        set_default_str(spec, "concurrencyPolicy", "Allow");
        set_default(spec, "suspend", json!(false));
        set_default(spec, "successfulJobsHistoryLimit", json!(3));
        set_default(spec, "failedJobsHistoryLimit", json!(1));
    });
    let template = obj
        .get_mut("spec")
        .and_then(|s| s.get_mut("jobTemplate"))
        .and_then(|j| j.get_mut("spec"))
        .and_then(|s| s.get_mut("template"));
    pod_template(template);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn rt(api_version: &str, kind: &str) -> std::sync::Arc<ResourceType> {
        Registry::builtin()
            .by_kind(api_version, kind)
            .expect("registered kind")
    }

    #[test]
    fn pod_defaults_match_upstream() {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "volumes": [{"name": "cfg", "configMap": {"name": "c"}}, {"name": "scratch"}, {"name": "h", "hostPath": {"path": "/x"}}],
                "containers": [{
                    "name": "web", "image": "nginx:1.27",
                    "ports": [{"containerPort": 80}],
                    "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "readinessProbe": {"httpGet": {"port": 80}},
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}
                }]
            }
        });
        apply_defaults(&rt("v1", "Pod"), &mut pod);
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["securityContext"], json!({}));
        assert_eq!(spec["enableServiceLinks"], true);
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["serviceAccount"], "default");
        assert_eq!(spec["volumes"][0]["configMap"]["defaultMode"], 420);
        assert_eq!(spec["volumes"][1]["emptyDir"], json!({}));
        assert_eq!(spec["volumes"][2]["hostPath"]["type"], "");
        let c = &spec["containers"][0];
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c["terminationMessagePolicy"], "File");
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(
            c["readinessProbe"],
            json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "500m", "memory": "1Gi"})
        );
        // Idempotent.
        let before = pod.clone();
        apply_defaults(&rt("v1", "Pod"), &mut pod);
        assert_eq!(pod, before);
    }

    #[test]
    fn image_pull_policy_defaults_from_tag() {
        for (image, want) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("registry:5000/team/app", "Always"),
            ("registry:5000/team/app:v2", "IfNotPresent"),
            ("nginx@sha256:abcd", "IfNotPresent"),
            ("nginx:latest@sha256:abcd", "Always"),
            (
                "mcr.microsoft.com/windows/servercore:ltsc2019",
                "IfNotPresent",
            ),
        ] {
            assert_eq!(default_pull_policy(image), want, "{image}");
        }
    }

    #[test]
    fn deployment_defaults_fill_strategy_and_history() {
        let mut d = json!({"spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        apply_defaults(&rt("apps/v1", "Deployment"), &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        let tspec = &d["spec"]["template"]["spec"];
        assert_eq!(tspec["restartPolicy"], "Always");
        assert_eq!(tspec["containers"][0]["imagePullPolicy"], "Always");
        assert!(
            tspec.get("enableServiceLinks").is_none(),
            "templates do not get pod-only defaults"
        );
        assert!(tspec.get("serviceAccountName").is_none());
        let mut recreate = json!({"spec": {"strategy": {"type": "Recreate"}}});
        apply_defaults(&rt("apps/v1", "Deployment"), &mut recreate);
        assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn workload_and_batch_defaults() {
        let mut ds = json!({"spec": {}});
        apply_defaults(&rt("apps/v1", "DaemonSet"), &mut ds);
        assert_eq!(
            ds["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        let mut sts =
            json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": {}}]}});
        apply_defaults(&rt("apps/v1", "StatefulSet"), &mut sts);
        assert_eq!(sts["spec"]["podManagementPolicy"], "OrderedReady");
        assert_eq!(
            sts["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        assert_eq!(
            sts["spec"]["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
        );
        assert_eq!(
            sts["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"],
            "Filesystem"
        );
        let mut job =
            json!({"spec": {"template": {"metadata": {"labels": {"app": "x"}}, "spec": {}}}});
        apply_defaults(&rt("batch/v1", "Job"), &mut job);
        let s = &job["spec"];
        assert_eq!(
            (
                s["completions"].clone(),
                s["parallelism"].clone(),
                s["backoffLimit"].clone()
            ),
            (json!(1), json!(1), json!(6))
        );
        assert_eq!(s["completionMode"], "NonIndexed");
        assert_eq!(s["suspend"], false);
        assert_eq!(s["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(job["metadata"]["labels"], json!({"app": "x"}));
        let mut parallel = json!({"spec": {"parallelism": 3}});
        apply_defaults(&rt("batch/v1", "Job"), &mut parallel);
        assert!(parallel["spec"].get("completions").is_none());
        let mut cj = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}});
        apply_defaults(&rt("batch/v1", "CronJob"), &mut cj);
        assert_eq!(cj["spec"]["concurrencyPolicy"], "Allow");
        assert_eq!(cj["spec"]["successfulJobsHistoryLimit"], 3);
        assert_eq!(cj["spec"]["failedJobsHistoryLimit"], 1);
        assert!(
            cj["spec"]["jobTemplate"]["spec"]
                .get("backoffLimit")
                .is_none()
        );
        assert_eq!(
            cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["dnsPolicy"],
            "ClusterFirst"
        );
        let mut rc = json!({"spec": {"template": {"metadata": {"labels": {"app": "x"}}}}});
        apply_defaults(&rt("v1", "ReplicationController"), &mut rc);
        assert_eq!(rc["spec"]["selector"], json!({"app": "x"}));
        assert_eq!(rc["metadata"]["labels"], json!({"app": "x"}));
        assert_eq!(rc["spec"]["replicas"], 1);
    }

    #[test]
    fn service_and_core_kind_defaults() {
        let mut svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 443, "targetPort": "https"}]}});
        apply_defaults(&rt("v1", "Service"), &mut svc);
        let s = &svc["spec"];
        assert_eq!(s["sessionAffinity"], "None");
        assert_eq!(
            s["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        assert_eq!(s["ports"][1]["targetPort"], "https");
        assert_eq!(s["externalTrafficPolicy"], "Cluster");
        assert_eq!(s["internalTrafficPolicy"], "Cluster");
        assert_eq!(s["ipFamilyPolicy"], "SingleStack");
        assert_eq!(s["ipFamilies"], json!(["IPv4"]));
        let mut plain = json!({"spec": {"ports": [{"port": 80}]}});
        apply_defaults(&rt("v1", "Service"), &mut plain);
        assert_eq!(plain["spec"]["type"], "ClusterIP");
        assert!(plain["spec"].get("externalTrafficPolicy").is_none());
        let mut ns = json!({"metadata": {"name": "web"}});
        apply_defaults(&rt("v1", "Namespace"), &mut ns);
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "web"
        );
        assert_eq!(ns["status"]["phase"], "Active");
        let mut pvc = json!({"spec": {}});
        apply_defaults(&rt("v1", "PersistentVolumeClaim"), &mut pvc);
        assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
        let mut pv = json!({"spec": {}});
        apply_defaults(&rt("v1", "PersistentVolume"), &mut pv);
        assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        let mut secret = json!({});
        apply_defaults(&rt("v1", "Secret"), &mut secret);
        assert_eq!(secret["type"], "Opaque");
        let mut slice = json!({"ports": [{"port": 80}]});
        apply_defaults(&rt("discovery.k8s.io/v1", "EndpointSlice"), &mut slice);
        assert_eq!(slice["ports"][0]["protocol"], "TCP");
        let mut node = json!({"status": {"capacity": {"cpu": "4"}}});
        apply_defaults(&rt("v1", "Node"), &mut node);
        assert_eq!(node["status"]["allocatable"], json!({"cpu": "4"}));
    }
}
