//! ConfigMap and Secret validation.
//!
//! Mirrors upstream `pkg/apis/core/validation/validation.go`: `ValidateConfigMap`,
//! `ValidateConfigMapUpdate`, `ValidateSecret` and `ValidateSecretUpdate`.

use serde_json::{Map, Value, json};

use super::json::{obj_at, path as jpath, str_at};
use super::meta::{immutable, too_long};
use super::names;
use crate::field::{FieldError, Path};

/// Upstream `core.MaxSecretSize`: 1 MiB for the data of one ConfigMap or Secret.
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;

/// Decoded size of a base64 value as stored in `data`/`binaryData`.
fn base64_len(v: &Value) -> usize {
    let s = v.as_str().unwrap_or_default();
    let pad = s.bytes().rev().take_while(|c| *c == b'=').count();
    (s.len() / 4) * 3 - pad.min((s.len() / 4) * 3)
}

fn keys(map: Option<&Map<String, Value>>, path: &Path, errs: &mut Vec<FieldError>) {
    for k in map.into_iter().flat_map(|m| m.keys()) {
        for msg in names::config_map_key(k) {
            errs.push(FieldError::invalid(path.key(k), &json!(k), msg));
        }
    }
}

/// Upstream `ValidateConfigMap` (after metadata).
pub fn validate_config_map(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let data = obj_at(obj, "data");
    let binary = obj_at(obj, "binaryData");
    keys(data, &Path::new("data"), &mut errs);
    let mut total = 0;
    for (k, v) in data.into_iter().flatten() {
        if binary.is_some_and(|b| b.contains_key(k)) {
            errs.push(FieldError::invalid(
                Path::new("data").key(k),
                &json!(k),
                "duplicate of key present in binaryData",
            ));
        }
        total += v.as_str().map(str::len).unwrap_or(0);
    }
    keys(binary, &Path::new("binaryData"), &mut errs);
    total += binary
        .into_iter()
        .flatten()
        .map(|(_, v)| base64_len(v))
        .sum::<usize>();
    if total > MAX_SECRET_SIZE {
        errs.push(too_long(&Path::default(), MAX_SECRET_SIZE));
    }
    errs
}

/// Upstream immutability rule shared by ConfigMap and Secret updates.
fn immutable_data(new: &Value, old: &Value, fields: &[&str], errs: &mut Vec<FieldError>) {
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return;
    }
    if new.get("immutable").and_then(Value::as_bool) != Some(true) {
        errs.push(FieldError::forbidden(
            "immutable",
            "field is immutable when `immutable` is set",
        ));
    }
    for f in fields {
        if new.get(*f).filter(|v| !v.is_null()) != old.get(*f).filter(|v| !v.is_null()) {
            errs.push(FieldError::forbidden(
                *f,
                "field is immutable when `immutable` is set",
            ));
        }
    }
}

/// Upstream `ValidateConfigMapUpdate` (after metadata).
pub fn validate_config_map_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    immutable_data(new, old, &["data", "binaryData"], &mut errs);
    errs.extend(validate_config_map(new));
    errs
}

/// Upstream `ValidateSecret` (after metadata).
pub fn validate_secret(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let data_path = Path::new("data");
    let data = obj_at(obj, "data");
    keys(data, &data_path, &mut errs);
    let total: usize = data.into_iter().flatten().map(|(_, v)| base64_len(v)).sum();
    if total > MAX_SECRET_SIZE {
        errs.push(too_long(&data_path, MAX_SECRET_SIZE));
    }
    let has = |k: &str| data.is_some_and(|d| d.contains_key(k));
    match str_at(obj, "type").unwrap_or_default() {
        "kubernetes.io/service-account-token" => {
            let sa = jpath(
                obj,
                &[
                    "metadata",
                    "annotations",
                    "kubernetes.io/service-account.name",
                ],
            )
            .and_then(Value::as_str);
            if sa.unwrap_or_default().is_empty() {
                errs.push(FieldError::required(
                    Path::new("metadata")
                        .child("annotations")
                        .key("kubernetes.io/service-account.name"),
                    "",
                ));
            }
        }
        "kubernetes.io/dockercfg" if !has(".dockercfg") => {
            errs.push(FieldError::required(data_path.key(".dockercfg"), ""))
        }
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            errs.push(FieldError::required(data_path.key(".dockerconfigjson"), ""));
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            errs.push(FieldError::required(data_path.key("username"), ""));
            errs.push(FieldError::required(data_path.key("password"), ""));
        }
        "kubernetes.io/ssh-auth"
            if data
                .and_then(|d| d.get("ssh-privatekey"))
                .is_none_or(|v| base64_len(v) == 0) =>
        {
            errs.push(FieldError::required(data_path.key("ssh-privatekey"), ""));
        }
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    errs.push(FieldError::required(data_path.key(k), ""));
                }
            }
        }
        _ => {}
    }
    errs
}

/// Upstream `ValidateSecretUpdate` (after metadata): `type` is immutable, and so is the data
/// once `immutable` is set.
pub fn validate_secret_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    errs.extend(immutable(
        new.get("type"),
        old.get("type"),
        &Path::new("type"),
    ));
    immutable_data(new, old, &["data"], &mut errs);
    errs.extend(validate_secret(new));
    errs
}
