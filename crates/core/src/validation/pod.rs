//! Pod, PodSpec and pod template validation.
//!
//! Mirrors upstream `pkg/apis/core/validation/validation.go`: `ValidatePodSpec`,
//! `validateContainers`/`validateInitContainers`, `validateContainerPorts`, `ValidateEnv`,
//! `ValidateVolumes`, `ValidateVolumeMounts`, `validateProbe`, `validateHandler`,
//! `ValidateContainerResourceRequirements`, `ValidateTolerations`, `validateOS`,
//! `ValidatePodTemplateSpec` and `ValidatePodUpdate`.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

use super::json::{arr_at, bool_at, i64_at, obj_at, present, str_at};
use super::meta::{validate_annotations, validate_labels};
use super::names;
use super::quantity::{self, QUANTITY_FORMAT_ERROR};
use crate::field::{ErrorKind, FieldError, Path};

const VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

const FILE_MODE_ERROR: &str = "must be a number between 0 and 0777 (octal), both inclusive";
const NONNEGATIVE: &str = "must be greater than or equal to 0";

/// Upstream `ValidateNonnegativeField` on an optional integer field.
pub fn nonnegative(v: &Value, key: &str, path: &Path, errs: &mut Vec<FieldError>) {
    if let Some(n) = i64_at(v, key)
        && n < 0
    {
        errs.push(FieldError::invalid(path.child(key), &json!(n), NONNEGATIVE));
    }
}

fn dns_label_field(v: &str, path: &Path, errs: &mut Vec<FieldError>) {
    for msg in names::dns1123_label(v) {
        errs.push(FieldError::invalid(path, &json!(v), msg));
    }
}

fn dns_subdomain_field(v: &str, path: &Path, errs: &mut Vec<FieldError>) {
    for msg in names::dns1123_subdomain(v) {
        errs.push(FieldError::invalid(path, &json!(v), msg));
    }
}

/// Upstream `ValidatePortNumOrName`.
pub fn port_num_or_name(v: Option<&Value>, path: &Path, errs: &mut Vec<FieldError>) {
    match v {
        Some(Value::Number(n)) => {
            let p = n.as_i64().unwrap_or(-1);
            for msg in names::port_num(p) {
                errs.push(FieldError::invalid(path, &json!(p), msg));
            }
        }
        Some(Value::String(s)) => {
            for msg in names::port_name(s) {
                errs.push(FieldError::invalid(path, &json!(s), msg));
            }
        }
        _ => {}
    }
}

/// Upstream `validateTaintEffect`.
pub fn taint_effect(effect: &str, allow_empty: bool, path: &Path, errs: &mut Vec<FieldError>) {
    match effect {
        "NoSchedule" | "PreferNoSchedule" | "NoExecute" => {}
        "" if allow_empty => {}
        "" => errs.push(FieldError::required(path, "")),
        other => errs.push(FieldError::not_supported(
            path,
            &json!(other),
            &["NoSchedule", "PreferNoSchedule", "NoExecute"],
        )),
    }
}

/// Upstream `ValidateTolerations`.
pub fn validate_tolerations(tolerations: &[Value], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, t) in tolerations.iter().enumerate() {
        let p = path.index(i);
        let key = str_at(t, "key").unwrap_or_default();
        let op = str_at(t, "operator").unwrap_or_default();
        let value = str_at(t, "value").unwrap_or_default();
        let effect = str_at(t, "effect").unwrap_or_default();
        if !key.is_empty() {
            for msg in names::qualified_name(key) {
                errs.push(FieldError::invalid(p.child("key"), &json!(key), msg));
            }
        }
        if key.is_empty() && op != "Exists" {
            errs.push(FieldError::invalid(
                p.child("operator"),
                &json!(op),
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if present(t, "tolerationSeconds") && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                p.child("effect"),
                &json!(effect),
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match op {
            "" | "Equal" => {
                for msg in names::label_value(value) {
                    errs.push(FieldError::invalid(p.child("operator"), &json!(value), msg));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errs.push(FieldError::invalid(
                        p.child("operator"),
                        t,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                p.child("operator"),
                &json!(other),
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() {
            taint_effect(effect, true, &p.child("effect"), &mut errs);
        }
    }
    errs
}

/// `Required` at `path.key` when the string there is empty or absent.
fn require_str(v: &Value, key: &str, path: &Path, errs: &mut Vec<FieldError>) {
    if str_at(v, key).unwrap_or_default().is_empty() {
        errs.push(FieldError::required(path.child(key), ""));
    }
}

/// `Required` at `path.key` when the list there is empty or absent.
fn require_non_empty_list(v: &Value, key: &str, path: &Path, errs: &mut Vec<FieldError>) {
    if arr_at(v, key).is_empty() {
        errs.push(FieldError::required(path.child(key), ""));
    }
}

fn validate_volume_source(v: &Value, kind: &str, p: &Path, errs: &mut Vec<FieldError>) {
    let Some(src) = v.get(kind) else { return };
    let mode_ok = |m: Option<i64>| m.is_none_or(|m| (0..=0o777).contains(&m));
    match kind {
        "hostPath" => {
            if str_at(src, "path").unwrap_or_default().is_empty() {
                errs.push(FieldError::required(p.child("path"), ""));
            }
            if let Some(t) = str_at(src, "type")
                && ![
                    "",
                    "DirectoryOrCreate",
                    "Directory",
                    "FileOrCreate",
                    "File",
                    "Socket",
                    "CharDevice",
                    "BlockDevice",
                ]
                .contains(&t)
            {
                errs.push(FieldError::not_supported(
                    p.child("type"),
                    &json!(t),
                    &[
                        "",
                        "BlockDevice",
                        "CharDevice",
                        "Directory",
                        "DirectoryOrCreate",
                        "File",
                        "FileOrCreate",
                        "Socket",
                    ],
                ));
            }
        }
        "secret" | "configMap" | "downwardAPI" | "projected" => {
            if kind == "secret" && str_at(src, "secretName").unwrap_or_default().is_empty() {
                errs.push(FieldError::required(p.child("secretName"), ""));
            }
            if kind == "configMap" && str_at(src, "name").unwrap_or_default().is_empty() {
                errs.push(FieldError::required(p.child("name"), ""));
            }
            if !mode_ok(i64_at(src, "defaultMode")) {
                errs.push(FieldError::invalid(
                    p.child("defaultMode"),
                    src.get("defaultMode").unwrap_or(&Value::Null),
                    FILE_MODE_ERROR,
                ));
            }
            for (i, item) in arr_at(src, "items").iter().enumerate() {
                let ip = p.child("items").index(i);
                if kind != "downwardAPI" && str_at(item, "key").unwrap_or_default().is_empty() {
                    errs.push(FieldError::required(ip.child("key"), ""));
                }
                let path = str_at(item, "path").unwrap_or_default();
                if path.is_empty() {
                    errs.push(FieldError::required(ip.child("path"), ""));
                } else if path.starts_with('/') {
                    errs.push(FieldError::invalid(
                        ip.child("path"),
                        &json!(path),
                        "must be a relative path",
                    ));
                } else if path.split('/').any(|seg| seg == "..") {
                    errs.push(FieldError::invalid(
                        ip.child("path"),
                        &json!(path),
                        "must not contain '..'",
                    ));
                }
                if !mode_ok(i64_at(item, "mode")) {
                    errs.push(FieldError::invalid(
                        ip.child("mode"),
                        item.get("mode").unwrap_or(&Value::Null),
                        FILE_MODE_ERROR,
                    ));
                }
            }
        }
        "persistentVolumeClaim" => require_str(src, "claimName", p, errs),
        "emptyDir" => {
            if let Some(m) = str_at(src, "medium")
                && !["", "Memory", "HugePages"].contains(&m)
                && !m.starts_with("HugePages-")
            {
                errs.push(FieldError::not_supported(
                    p.child("medium"),
                    &json!(m),
                    &["", "Memory", "HugePages"],
                ));
            }
            if let Some(q) = src.get("sizeLimit")
                && quantity::from_value(q).is_none_or(|q| q.nanos() < 0)
            {
                errs.push(FieldError::new(
                    ErrorKind::Invalid,
                    p.child("sizeLimit"),
                    Some(quantity::text(q)),
                    NONNEGATIVE,
                ));
            }
        }
        "nfs" => {
            if str_at(src, "server").unwrap_or_default().is_empty() {
                errs.push(FieldError::required(p.child("server"), ""));
            }
            let path = str_at(src, "path").unwrap_or_default();
            if path.is_empty() {
                errs.push(FieldError::required(p.child("path"), ""));
            } else if !path.starts_with('/') {
                errs.push(FieldError::invalid(
                    p.child("path"),
                    &json!(path),
                    "must be an absolute path",
                ));
            }
        }
        "csi" => require_str(src, "driver", p, errs),
        "image" => require_str(src, "reference", p, errs),
        _ => {}
    }
}

/// Upstream `ValidateVolumes`: unique DNS-label names, exactly one source per volume. Returns the
/// errors and the set of volume names (for volume mounts).
pub fn validate_volumes(volumes: &[Value], path: &Path) -> (Vec<FieldError>, HashSet<String>) {
    let mut errs = Vec::new();
    let mut seen = HashSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let p = path.index(i);
        let name = str_at(v, "name").unwrap_or_default();
        if name.is_empty() {
            errs.push(FieldError::required(p.child("name"), ""));
        } else {
            dns_label_field(name, &p.child("name"), &mut errs);
            if !seen.insert(name.to_string()) {
                errs.push(FieldError::duplicate(p.child("name"), &json!(name)));
            }
        }
        let sources: Vec<&str> = VOLUME_SOURCES
            .iter()
            .copied()
            .filter(|k| present(v, k))
            .collect();
        match sources.as_slice() {
            [] => errs.push(FieldError::required(&p, "must specify a volume type")),
            [one] => validate_volume_source(v, one, &p.child(one), &mut errs),
            [_, rest @ ..] => {
                for k in rest {
                    errs.push(FieldError::forbidden(
                        p.child(k),
                        "may not specify more than 1 volume type",
                    ));
                }
            }
        }
    }
    (errs, seen)
}

fn validate_handler(h: &Value, path: &Path, kinds: &[&str], errs: &mut Vec<FieldError>) {
    let mut n = 0;
    for kind in kinds {
        let Some(action) = h.get(*kind).filter(|v| !v.is_null()) else {
            continue;
        };
        if n > 0 {
            errs.push(FieldError::forbidden(
                path.child(kind),
                "may not specify more than 1 handler type",
            ));
            continue;
        }
        n += 1;
        let p = path.child(kind);
        match *kind {
            "exec" => require_non_empty_list(action, "command", &p, errs),
            "httpGet" => {
                if str_at(action, "path").unwrap_or_default().is_empty() {
                    errs.push(FieldError::required(p.child("path"), ""));
                }
                port_num_or_name(action.get("port"), &p.child("port"), errs);
                if let Some(s) = str_at(action, "scheme")
                    && s != "HTTP"
                    && s != "HTTPS"
                {
                    errs.push(FieldError::not_supported(
                        p.child("scheme"),
                        &json!(s),
                        &["HTTP", "HTTPS"],
                    ));
                }
                for (i, h) in arr_at(action, "httpHeaders").iter().enumerate() {
                    let name = str_at(h, "name").unwrap_or_default();
                    for msg in names::http_header_name(name) {
                        errs.push(FieldError::invalid(
                            p.child("httpHeaders").index(i).child("name"),
                            &json!(name),
                            msg,
                        ));
                    }
                }
            }
            "tcpSocket" => port_num_or_name(action.get("port"), &p.child("port"), errs),
            "grpc" => {
                let port = i64_at(action, "port").unwrap_or(0);
                for msg in names::port_num(port) {
                    errs.push(FieldError::invalid(p.child("port"), &json!(port), msg));
                }
            }
            "sleep" => {
                let s = i64_at(action, "seconds").unwrap_or(0);
                if s < 0 {
                    errs.push(FieldError::invalid(
                        p.child("seconds"),
                        &json!(s),
                        NONNEGATIVE,
                    ));
                }
            }
            _ => {}
        }
    }
    if n == 0 {
        errs.push(FieldError::required(path, "must specify a handler type"));
    }
}

/// Upstream `validateProbe`.
fn validate_probe(probe: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    validate_handler(probe, path, &["exec", "httpGet", "tcpSocket", "grpc"], errs);
    for key in [
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ] {
        nonnegative(probe, key, path, errs);
    }
    if let Some(g) = i64_at(probe, "terminationGracePeriodSeconds")
        && g <= 0
    {
        errs.push(FieldError::invalid(
            path.child("terminationGracePeriodSeconds"),
            &json!(g),
            "must be greater than 0",
        ));
    }
}

const ENV_FIELD_PATHS: &[&str] = &[
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

fn validate_env(env: &[Value], path: &Path, errs: &mut Vec<FieldError>) {
    for (i, e) in env.iter().enumerate() {
        let p = path.index(i);
        let name = str_at(e, "name").unwrap_or_default();
        if name.is_empty() {
            errs.push(FieldError::required(p.child("name"), ""));
        } else {
            for msg in names::env_var_name(name) {
                errs.push(FieldError::invalid(p.child("name"), &json!(name), msg));
            }
        }
        let Some(from) = e.get("valueFrom").filter(|v| v.is_object()) else {
            continue;
        };
        let vp = p.child("valueFrom");
        let sources: Vec<&str> = [
            "fieldRef",
            "resourceFieldRef",
            "configMapKeyRef",
            "secretKeyRef",
        ]
        .into_iter()
        .filter(|k| present(from, k))
        .collect();
        if !str_at(e, "value").unwrap_or_default().is_empty() && !sources.is_empty() {
            errs.push(FieldError::invalid(
                &vp,
                &json!(""),
                "may not be specified when `value` is not empty",
            ));
        }
        if sources.len() > 1 {
            errs.push(FieldError::invalid(
                &vp,
                &json!(""),
                "may not have more than one field specified at a time",
            ));
            continue;
        }
        let Some(kind) = sources.first() else {
            errs.push(FieldError::invalid(&vp, &json!(""), "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"));
            continue;
        };
        let src = &from[*kind];
        let sp = vp.child(kind);
        match *kind {
            "fieldRef" => {
                if str_at(src, "apiVersion").unwrap_or_default().is_empty() {
                    errs.push(FieldError::required(sp.child("apiVersion"), ""));
                }
                let fp = str_at(src, "fieldPath").unwrap_or_default();
                let base = fp.split_once('[').map(|(b, _)| b).unwrap_or(fp);
                let subscript_ok =
                    fp == base || matches!(base, "metadata.labels" | "metadata.annotations");
                if fp.is_empty() {
                    errs.push(FieldError::required(sp.child("fieldPath"), ""));
                } else if !ENV_FIELD_PATHS.contains(&base)
                    || !subscript_ok
                    || fp == "metadata.labels"
                    || fp == "metadata.annotations"
                {
                    errs.push(FieldError::not_supported(
                        sp.child("fieldPath"),
                        &json!(fp),
                        ENV_FIELD_PATHS,
                    ));
                }
            }
            "resourceFieldRef" => {
                let r = str_at(src, "resource").unwrap_or_default();
                let ok = [
                    "limits.cpu",
                    "limits.ephemeral-storage",
                    "limits.memory",
                    "requests.cpu",
                    "requests.ephemeral-storage",
                    "requests.memory",
                ];
                if r.is_empty() {
                    errs.push(FieldError::required(sp.child("resource"), ""));
                } else if !ok.contains(&r)
                    && !r.starts_with("limits.hugepages-")
                    && !r.starts_with("requests.hugepages-")
                {
                    errs.push(FieldError::not_supported(
                        sp.child("resource"),
                        &json!(r),
                        &ok,
                    ));
                }
            }
            _ => {
                let key = str_at(src, "key").unwrap_or_default();
                if key.is_empty() {
                    errs.push(FieldError::required(sp.child("key"), ""));
                } else {
                    for msg in names::config_map_key(key) {
                        errs.push(FieldError::invalid(sp.child("key"), &json!(key), msg));
                    }
                }
            }
        }
    }
}

fn validate_resources(res: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let limits = obj_at(res, "limits");
    let requests = obj_at(res, "requests");
    let standard = ["cpu", "memory", "ephemeral-storage"];
    let check_name = |name: &str, p: &Path, errs: &mut Vec<FieldError>| {
        for msg in names::qualified_name(name) {
            errs.push(FieldError::invalid(p, &json!(name), msg));
        }
        if !name.contains('/') && !standard.contains(&name) && !name.starts_with("hugepages-") {
            errs.push(FieldError::invalid(
                p,
                &json!(name),
                "must be a standard resource for containers",
            ));
        }
    };
    let mut parsed_limits = HashMap::new();
    for (name, q) in limits.into_iter().flatten() {
        let p = path.child("limits").key(name);
        check_name(name, &p, errs);
        match quantity::from_value(q) {
            None => errs.push(FieldError::new(
                ErrorKind::Invalid,
                &p,
                Some(quantity::text(q)),
                QUANTITY_FORMAT_ERROR,
            )),
            Some(v) if v.nanos() < 0 => errs.push(FieldError::new(
                ErrorKind::Invalid,
                &p,
                Some(quantity::text(q)),
                NONNEGATIVE,
            )),
            Some(v) => {
                parsed_limits.insert(name.as_str(), (v, quantity::text(q)));
            }
        }
    }
    let req_path = path.child("requests");
    for (name, q) in requests.into_iter().flatten() {
        let p = req_path.key(name);
        check_name(name, &p, errs);
        let Some(v) = quantity::from_value(q) else {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                &p,
                Some(quantity::text(q)),
                QUANTITY_FORMAT_ERROR,
            ));
            continue;
        };
        if v.nanos() < 0 {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                &p,
                Some(quantity::text(q)),
                NONNEGATIVE,
            ));
            continue;
        }
        let overcommit = standard.contains(&name.as_str());
        match parsed_limits.get(name.as_str()) {
            Some((lim, lim_text)) => {
                if !overcommit && v != *lim {
                    errs.push(FieldError::invalid(
                        &req_path,
                        &json!(quantity::text(q)),
                        format!("must be equal to {name} limit of {lim_text}"),
                    ));
                } else if v.cmp_value(*lim).is_gt() {
                    errs.push(FieldError::invalid(
                        &req_path,
                        &json!(quantity::text(q)),
                        format!("must be less than or equal to {name} limit of {lim_text}"),
                    ));
                }
            }
            None if !overcommit => {
                errs.push(FieldError::required(
                    path.child("limits"),
                    "Limit must be set for non overcommitable resources",
                ));
            }
            None => {}
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContainerKind {
    Init,
    Regular,
}

pub(crate) fn validate_container(
    c: &Value,
    p: &Path,
    kind: ContainerKind,
    volumes: &HashSet<String>,
    host_network: bool,
    errs: &mut Vec<FieldError>,
) {
    let name = str_at(c, "name").unwrap_or_default();
    if name.is_empty() {
        errs.push(FieldError::required(p.child("name"), ""));
    } else {
        dns_label_field(name, &p.child("name"), errs);
    }
    let image = str_at(c, "image").unwrap_or_default();
    if image.is_empty() {
        errs.push(FieldError::required(p.child("image"), ""));
    } else if image.trim() != image {
        errs.push(FieldError::invalid(
            p.child("image"),
            &json!(image),
            "must not have leading or trailing whitespace",
        ));
    }
    match str_at(c, "imagePullPolicy").unwrap_or_default() {
        "Always" | "IfNotPresent" | "Never" => {}
        "" => errs.push(FieldError::required(p.child("imagePullPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            p.child("imagePullPolicy"),
            &json!(other),
            &["Always", "IfNotPresent", "Never"],
        )),
    }
    match str_at(c, "terminationMessagePolicy").unwrap_or_default() {
        "File" | "FallbackToLogsOnError" => {}
        "" => errs.push(FieldError::required(
            p.child("terminationMessagePolicy"),
            "must be 'File' or 'FallbackToLogsOnError'",
        )),
        other => errs.push(FieldError::not_supported(
            p.child("terminationMessagePolicy"),
            &json!(other),
            &["File", "FallbackToLogsOnError"],
        )),
    }
    // Container restart policy (sidecars).
    let restart = str_at(c, "restartPolicy");
    let sidecar = kind == ContainerKind::Init && restart == Some("Always");
    match (kind, restart) {
        (_, None) => {}
        (ContainerKind::Regular, Some(_)) => {
            errs.push(FieldError::forbidden(
                p.child("restartPolicy"),
                "may not be set for non-init containers",
            ));
        }
        (ContainerKind::Init, Some("Always")) => {}
        (ContainerKind::Init, Some(other)) => {
            errs.push(FieldError::not_supported(
                p.child("restartPolicy"),
                &json!(other),
                &["Always"],
            ));
        }
    }
    // Ports.
    let mut port_names = HashSet::new();
    for (i, port) in arr_at(c, "ports").iter().enumerate() {
        let pp = p.child("ports").index(i);
        if let Some(n) = str_at(port, "name").filter(|n| !n.is_empty()) {
            for msg in names::port_name(n) {
                errs.push(FieldError::invalid(pp.child("name"), &json!(n), msg));
            }
            if !port_names.insert(n.to_string()) {
                errs.push(FieldError::duplicate(pp.child("name"), &json!(n)));
            }
        }
        match i64_at(port, "containerPort").unwrap_or(0) {
            0 => errs.push(FieldError::required(pp.child("containerPort"), "")),
            cp => {
                for msg in names::port_num(cp) {
                    errs.push(FieldError::invalid(
                        pp.child("containerPort"),
                        &json!(cp),
                        msg,
                    ));
                }
            }
        }
        let hp = i64_at(port, "hostPort").unwrap_or(0);
        if hp != 0 {
            for msg in names::port_num(hp) {
                errs.push(FieldError::invalid(pp.child("hostPort"), &json!(hp), msg));
            }
            if host_network && Some(hp) != i64_at(port, "containerPort") {
                errs.push(FieldError::invalid(
                    pp.child("hostPort"),
                    &json!(hp),
                    "must match `containerPort` when `hostNetwork` is true",
                ));
            }
        }
        match str_at(port, "protocol").unwrap_or_default() {
            "TCP" | "UDP" | "SCTP" => {}
            "" => errs.push(FieldError::required(pp.child("protocol"), "")),
            other => errs.push(FieldError::not_supported(
                pp.child("protocol"),
                &json!(other),
                &["SCTP", "TCP", "UDP"],
            )),
        }
    }
    validate_env(arr_at(c, "env"), &p.child("env"), errs);
    for (i, from) in arr_at(c, "envFrom").iter().enumerate() {
        let fp = p.child("envFrom").index(i);
        if let Some(prefix) = str_at(from, "prefix").filter(|s| !s.is_empty()) {
            for msg in names::env_var_name(prefix) {
                errs.push(FieldError::invalid(fp.child("prefix"), &json!(prefix), msg));
            }
        }
        let refs: Vec<&str> = ["configMapRef", "secretRef"]
            .into_iter()
            .filter(|k| present(from, k))
            .collect();
        match refs.as_slice() {
            [] => errs.push(FieldError::invalid(
                &fp,
                &json!(""),
                "must specify one of: `configMapRef` or `secretRef`",
            )),
            [one] => {
                let n = from
                    .get(*one)
                    .and_then(|r| str_at(r, "name"))
                    .unwrap_or_default();
                if n.is_empty() {
                    errs.push(FieldError::required(fp.child(one).child("name"), ""));
                } else {
                    dns_subdomain_field(n, &fp.child(one).child("name"), errs);
                }
            }
            _ => errs.push(FieldError::invalid(
                &fp,
                &json!(""),
                "may not have more than one field specified at a time",
            )),
        }
    }
    // Volume mounts.
    let mut mount_paths = HashSet::new();
    for (i, m) in arr_at(c, "volumeMounts").iter().enumerate() {
        let mp = p.child("volumeMounts").index(i);
        let vname = str_at(m, "name").unwrap_or_default();
        if vname.is_empty() {
            errs.push(FieldError::required(mp.child("name"), ""));
        } else if !volumes.contains(vname) {
            errs.push(FieldError::new(
                ErrorKind::NotFound,
                mp.child("name"),
                Some(format!("\"{vname}\"")),
                "",
            ));
        }
        let mount_path = str_at(m, "mountPath").unwrap_or_default();
        if mount_path.is_empty() {
            errs.push(FieldError::required(mp.child("mountPath"), ""));
        } else if !mount_paths.insert(mount_path.to_string()) {
            errs.push(FieldError::invalid(
                mp.child("mountPath"),
                &json!(mount_path),
                "must be unique",
            ));
        }
        if let Some(sub) = str_at(m, "subPath").filter(|s| !s.is_empty()) {
            if sub.starts_with('/') {
                errs.push(FieldError::invalid(
                    mp.child("subPath"),
                    &json!(sub),
                    "must be a relative path",
                ));
            } else if sub.split('/').any(|s| s == "..") {
                errs.push(FieldError::invalid(
                    mp.child("subPath"),
                    &json!(sub),
                    "must not contain '..'",
                ));
            }
        }
        if let Some(prop) = str_at(m, "mountPropagation")
            && !["None", "HostToContainer", "Bidirectional"].contains(&prop)
        {
            errs.push(FieldError::not_supported(
                mp.child("mountPropagation"),
                &json!(prop),
                &["Bidirectional", "HostToContainer", "None"],
            ));
        }
    }
    // Probes and lifecycle.
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(pr) = c.get(probe).filter(|v| v.is_object()) else {
            continue;
        };
        if kind == ContainerKind::Init && !sidecar {
            errs.push(FieldError::forbidden(
                p.child(probe),
                "may not be set for init containers without restartPolicy=Always",
            ));
            continue;
        }
        validate_probe(pr, &p.child(probe), errs);
        if probe != "readinessProbe" && i64_at(pr, "successThreshold").is_some_and(|s| s != 1) {
            let s = i64_at(pr, "successThreshold").unwrap_or_default();
            errs.push(FieldError::invalid(
                p.child(probe).child("successThreshold"),
                &json!(s),
                "must be 1",
            ));
        }
    }
    if let Some(lc) = c.get("lifecycle").filter(|v| v.is_object()) {
        if kind == ContainerKind::Init && !sidecar {
            errs.push(FieldError::forbidden(
                p.child("lifecycle"),
                "may not be set for init containers without restartPolicy=Always",
            ));
        } else {
            for hook in ["postStart", "preStop"] {
                if let Some(h) = lc.get(hook).filter(|v| v.is_object()) {
                    validate_handler(
                        h,
                        &p.child("lifecycle").child(hook),
                        &["exec", "httpGet", "tcpSocket", "sleep"],
                        errs,
                    );
                }
            }
        }
    }
    if let Some(res) = c.get("resources").filter(|v| v.is_object()) {
        validate_resources(res, &p.child("resources"), errs);
    }
}

/// Upstream `ValidatePodSpec` (without the Windows OS field rules, which live with the Windows
/// knowledge). `path` is where the spec sits: `spec` for a Pod, `spec.template.spec` for a
/// Deployment.
pub fn validate_pod_spec(spec: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !spec.is_object() {
        errs.push(FieldError::required(path.child("containers"), ""));
        return errs;
    }
    let (verrs, volumes) = validate_volumes(arr_at(spec, "volumes"), &path.child("volumes"));
    errs.extend(verrs);
    let host_network = bool_at(spec, "hostNetwork").unwrap_or(false);
    let containers = arr_at(spec, "containers");
    if containers.is_empty() {
        errs.push(FieldError::required(path.child("containers"), ""));
    }
    let mut all_names = HashSet::new();
    for (field, kind) in [
        ("initContainers", ContainerKind::Init),
        ("containers", ContainerKind::Regular),
    ] {
        for (i, c) in arr_at(spec, field).iter().enumerate() {
            let p = path.child(field).index(i);
            validate_container(c, &p, kind, &volumes, host_network, &mut errs);
            let name = str_at(c, "name").unwrap_or_default();
            if !name.is_empty() && !all_names.insert(name.to_string()) {
                errs.push(FieldError::duplicate(p.child("name"), &json!(name)));
            }
        }
    }
    for (i, c) in arr_at(spec, "ephemeralContainers").iter().enumerate() {
        let p = path.child("ephemeralContainers").index(i);
        let name = str_at(c, "name").unwrap_or_default();
        if name.is_empty() {
            errs.push(FieldError::required(p.child("name"), ""));
        } else if !all_names.insert(name.to_string()) {
            errs.push(FieldError::duplicate(p.child("name"), &json!(name)));
        }
    }
    match str_at(spec, "restartPolicy").unwrap_or_default() {
        "Always" | "OnFailure" | "Never" => {}
        "" => errs.push(FieldError::required(path.child("restartPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            path.child("restartPolicy"),
            &json!(other),
            &["Always", "OnFailure", "Never"],
        )),
    }
    let dns_policy = str_at(spec, "dnsPolicy").unwrap_or_default();
    match dns_policy {
        "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None" => {}
        "" => errs.push(FieldError::required(path.child("dnsPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            path.child("dnsPolicy"),
            &json!(other),
            &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        )),
    }
    if dns_policy == "None"
        && arr_at(spec.get("dnsConfig").unwrap_or(&Value::Null), "nameservers").is_empty()
    {
        if present(spec, "dnsConfig") {
            errs.push(FieldError::required(
                path.child("dnsConfig").child("nameservers"),
                "must provide at least one DNS nameserver when `dnsPolicy` is None",
            ));
        } else {
            errs.push(FieldError::required(
                path.child("dnsConfig"),
                "must provide `dnsConfig` when `dnsPolicy` is None",
            ));
        }
    }
    errs.extend(validate_labels(
        obj_at(spec, "nodeSelector"),
        &path.child("nodeSelector"),
    ));
    for key in [
        "serviceAccountName",
        "nodeName",
        "priorityClassName",
        "schedulerName",
        "runtimeClassName",
    ] {
        if let Some(v) = str_at(spec, key).filter(|v| !v.is_empty()) {
            dns_subdomain_field(v, &path.child(key), &mut errs);
        }
    }
    for key in ["hostname", "subdomain"] {
        if let Some(v) = str_at(spec, key).filter(|v| !v.is_empty()) {
            dns_label_field(v, &path.child(key), &mut errs);
        }
    }
    if let Some(ads) = i64_at(spec, "activeDeadlineSeconds")
        && !(1..=i64::from(u32::MAX)).contains(&ads)
    {
        errs.push(FieldError::invalid(
            path.child("activeDeadlineSeconds"),
            &json!(ads),
            names::inclusive_range_error(1, i64::from(u32::MAX)),
        ));
    }
    nonnegative(spec, "terminationGracePeriodSeconds", path, &mut errs);
    errs.extend(validate_tolerations(
        arr_at(spec, "tolerations"),
        &path.child("tolerations"),
    ));
    for (i, s) in arr_at(spec, "imagePullSecrets").iter().enumerate() {
        if str_at(s, "name").unwrap_or_default().is_empty() {
            errs.push(FieldError::required(
                path.child("imagePullSecrets").index(i).child("name"),
                "",
            ));
        }
    }
    for (i, g) in arr_at(spec, "schedulingGates").iter().enumerate() {
        let n = str_at(g, "name").unwrap_or_default();
        for msg in names::qualified_name(n) {
            errs.push(FieldError::invalid(
                path.child("schedulingGates").index(i).child("name"),
                &json!(n),
                msg,
            ));
        }
    }
    // spec.os is validated with the Windows rules in `admission::pod_os`, which reports an
    // unsupported name at `spec.os` as upstream does.
    if let Some(sc) = spec.get("securityContext").filter(|v| v.is_object()) {
        let sp = path.child("securityContext");
        for key in ["runAsUser", "runAsGroup", "fsGroup"] {
            if let Some(id) = i64_at(sc, key)
                && !(0..=i64::from(u32::MAX)).contains(&id)
            {
                errs.push(FieldError::invalid(
                    sp.child(key),
                    &json!(id),
                    names::inclusive_range_error(0, i64::from(u32::MAX)),
                ));
            }
        }
    }
    errs
}

/// Upstream `ValidatePodTemplateSpec`: template labels and annotations, then the spec, at
/// `path` (e.g. `spec.template`).
pub fn validate_pod_template(template: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let meta = template.get("metadata").unwrap_or(&Value::Null);
    errs.extend(validate_labels(
        obj_at(meta, "labels"),
        &path.child("metadata").child("labels"),
    ));
    errs.extend(validate_annotations(
        obj_at(meta, "annotations"),
        &path.child("metadata").child("annotations"),
    ));
    errs.extend(validate_pod_spec(
        template.get("spec").unwrap_or(&Value::Null),
        &path.child("spec"),
    ));
    errs
}

/// The fields upstream names in the pod-update `Forbidden` message (v1.32, in-place resize off).
pub const POD_UPDATABLE_FIELDS: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

fn tolerations_only_added(new: &[Value], old: &[Value], path: &Path) -> Vec<FieldError> {
    let strip = |t: &Value| {
        let mut t = t.clone();
        if let Some(m) = t.as_object_mut() {
            m.remove("tolerationSeconds");
        }
        t
    };
    for o in old {
        if !new.iter().any(|n| strip(n) == strip(o)) {
            return vec![FieldError::forbidden(
                path,
                "existing toleration can not be modified except its tolerationSeconds",
            )];
        }
    }
    validate_tolerations(new, path)
}

/// Upstream `ValidatePodUpdate` for the spec: only images, `activeDeadlineSeconds` (lowered),
/// tolerations (added), `terminationGracePeriodSeconds` (negative to 1) and scheduling gates
/// (removed) may change; anything else is `Forbidden` at `spec`.
pub fn validate_pod_spec_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let spec_path = Path::new("spec");
    let mut errs = Vec::new();
    let null = Value::Null;
    let ns = new.get("spec").unwrap_or(&null);
    let os = old.get("spec").unwrap_or(&null);
    for field in ["containers", "initContainers"] {
        let (n, o) = (arr_at(ns, field), arr_at(os, field));
        if n.len() != o.len() {
            errs.push(FieldError::forbidden(
                spec_path.child(field),
                "pod updates may not add or remove containers",
            ));
            return errs;
        }
        for (i, c) in n.iter().enumerate() {
            let image = str_at(c, "image").unwrap_or_default();
            if image.is_empty() {
                errs.push(FieldError::required(
                    spec_path.child(field).index(i).child("image"),
                    "",
                ));
            } else if image.trim() != image {
                errs.push(FieldError::invalid(
                    spec_path.child(field).index(i).child("image"),
                    &json!(image),
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    let ads_path = spec_path.child("activeDeadlineSeconds");
    match (
        i64_at(ns, "activeDeadlineSeconds"),
        i64_at(os, "activeDeadlineSeconds"),
    ) {
        (Some(n), _) if !(0..=i64::from(i32::MAX)).contains(&n) => {
            errs.push(FieldError::invalid(
                &ads_path,
                &json!(n),
                names::inclusive_range_error(0, i64::from(i32::MAX)),
            ));
            return errs;
        }
        (Some(n), Some(o)) if o < n => {
            errs.push(FieldError::invalid(
                &ads_path,
                &json!(n),
                "must be less than or equal to previous value",
            ));
            return errs;
        }
        (None, Some(_)) => {
            errs.push(FieldError::invalid(
                &ads_path,
                &Value::Null,
                "must not update from a positive integer to nil value",
            ));
        }
        _ => {}
    }
    errs.extend(tolerations_only_added(
        arr_at(ns, "tolerations"),
        arr_at(os, "tolerations"),
        &spec_path.child("tolerations"),
    ));
    if !errs.is_empty() {
        return errs;
    }
    // Munge the new spec with the old values of everything that may change, then compare.
    let mut munged = ns.clone();
    if let Some(m) = munged.as_object_mut() {
        for field in ["containers", "initContainers"] {
            if let Some(cs) = m.get_mut(field).and_then(Value::as_array_mut) {
                for (c, oc) in cs.iter_mut().zip(arr_at(os, field)) {
                    if let (Some(c), Some(img)) = (c.as_object_mut(), oc.get("image")) {
                        c.insert("image".into(), img.clone());
                    }
                }
            }
        }
        for key in ["activeDeadlineSeconds", "tolerations"] {
            match os.get(key) {
                Some(v) => m.insert(key.into(), v.clone()),
                None => m.remove(key),
            };
        }
        if i64_at(os, "terminationGracePeriodSeconds").is_some_and(|g| g < 0)
            && i64_at(ns, "terminationGracePeriodSeconds") == Some(1)
        {
            m.insert(
                "terminationGracePeriodSeconds".into(),
                os["terminationGracePeriodSeconds"].clone(),
            );
        }
        // Scheduling gates may only be removed; while gated, node selectors may be added.
        let old_gates = arr_at(os, "schedulingGates");
        if !old_gates.is_empty() {
            let new_gates = arr_at(ns, "schedulingGates");
            if new_gates.iter().all(|g| old_gates.contains(g)) {
                match os.get("schedulingGates") {
                    Some(v) => m.insert("schedulingGates".into(), v.clone()),
                    None => m.remove("schedulingGates"),
                };
            }
        }
    }
    if munged != *os {
        errs.push(FieldError::forbidden(
            &spec_path,
            format!(
                "pod updates may not change fields other than {POD_UPDATABLE_FIELDS}\n{}",
                spec_diff(os, &munged)
            ),
        ));
    }
    errs
}

/// A short description of which top-level spec fields differ (upstream prints a `cmp.Diff`).
fn spec_diff(old: &Value, new: &Value) -> String {
    let empty = Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = String::from("  core.PodSpec{\n");
    for k in keys {
        if o.get(k) != n.get(k) {
            let show =
                |v: Option<&Value>| v.map(Value::to_string).unwrap_or_else(|| "nil".to_string());
            out.push_str(&format!(
                "- \t{k}: {},\n+ \t{k}: {},\n",
                show(o.get(k)),
                show(n.get(k))
            ));
        }
    }
    out.push_str("  }\n");
    out
}
