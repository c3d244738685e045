//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as upstream's protobuf
//! serializer reads them: the 4-byte magic `k8s\0`, then a `runtime.Unknown` whose `typeMeta`
//! names the kind and whose `raw` holds the object's message (the `k8s-pb` bindings).
//!
//! kubectl's typed commands send their bodies this way: `kubectl auth can-i` and `whoami` (the
//! review kinds), `kubectl create token` (TokenRequest), `kubectl certificate approve|deny`
//! (CertificateSigningRequest) and `kubectl create role`, `clusterrole`, `rolebinding`,
//! `clusterrolebinding`. Those kinds are decoded here into the same
//! JSON the rest of the pipeline reads; other kinds still get 415 (see the known gaps in
//! `docs/architecture.md`). Responses are JSON, which every client accepts alongside protobuf.

use k8s_pb::api::authentication::v1 as authn;
use k8s_pb::api::authorization::v1 as authz;
use k8s_pb::api::certificates::v1 as certs;
use k8s_pb::api::rbac::v1 as rbac;
use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prost::Message;
use serde_json::{Map, Value, json};

use crate::error::ApiError;

/// The media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\0";

/// Decodes a protobuf body into the object's JSON form.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let bad =
        |what: &str| ApiError::bad_request(format!("cannot decode the protobuf body: {what}"));
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("it does not start with the k8s protobuf magic number"))?;
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(rest)
        .map_err(|e| bad(&e.to_string()))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let raw = raw.as_slice();
    let err = |e: prost::DecodeError| bad(&format!("{kind}: {e}"));
    let mut v = match (api_version.as_str(), kind.as_str()) {
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            let r = authz::SelfSubjectAccessReview::decode(raw).map_err(err)?;
            let spec = r.spec.unwrap_or_default();
            json!({"metadata": meta(r.metadata), "spec": access_spec(
                spec.resource_attributes, spec.non_resource_attributes)})
        }
        ("authorization.k8s.io/v1", "SubjectAccessReview" | "LocalSubjectAccessReview") => {
            let r = authz::SubjectAccessReview::decode(raw).map_err(err)?;
            let spec = r.spec.unwrap_or_default();
            let mut s = access_spec(spec.resource_attributes, spec.non_resource_attributes);
            s["user"] = json!(spec.user.unwrap_or_default());
            s["groups"] = json!(spec.groups);
            s["uid"] = json!(spec.uid.unwrap_or_default());
            let extra: Map<String, Value> = spec
                .extra
                .into_iter()
                .map(|(k, v)| (k, json!(v.items)))
                .collect();
            s["extra"] = Value::Object(extra);
            json!({"metadata": meta(r.metadata), "spec": s})
        }
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => {
            let r = authz::SelfSubjectRulesReview::decode(raw).map_err(err)?;
            let ns = r.spec.and_then(|s| s.namespace).unwrap_or_default();
            json!({"metadata": meta(r.metadata), "spec": {"namespace": ns}})
        }
        ("authentication.k8s.io/v1", "SelfSubjectReview") => {
            let r = authn::SelfSubjectReview::decode(raw).map_err(err)?;
            json!({"metadata": meta(r.metadata)})
        }
        ("authentication.k8s.io/v1", "TokenReview") => {
            let r = authn::TokenReview::decode(raw).map_err(err)?;
            let spec = r.spec.unwrap_or_default();
            json!({"metadata": meta(r.metadata), "spec": {
                "token": spec.token.unwrap_or_default(), "audiences": spec.audiences}})
        }
        ("authentication.k8s.io/v1", "TokenRequest") => {
            let r = authn::TokenRequest::decode(raw).map_err(err)?;
            let spec = r.spec.unwrap_or_default();
            let mut s = json!({"audiences": spec.audiences});
            if let Some(e) = spec.expiration_seconds {
                s["expirationSeconds"] = json!(e);
            }
            if let Some(b) = spec.bound_object_ref {
                s["boundObjectRef"] = json!({
                    "kind": b.kind.unwrap_or_default(),
                    "apiVersion": b.api_version.unwrap_or_default(),
                    "name": b.name.unwrap_or_default(),
                    "uid": b.u_id.unwrap_or_default(),
                });
            }
            json!({"metadata": meta(r.metadata), "spec": s})
        }
        ("rbac.authorization.k8s.io/v1", "Role") => {
            let r = rbac::Role::decode(raw).map_err(err)?;
            json!({"metadata": meta(r.metadata), "rules": rules(r.rules)})
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            let r = rbac::ClusterRole::decode(raw).map_err(err)?;
            let mut v = json!({"metadata": meta(r.metadata), "rules": rules(r.rules)});
            if let Some(a) = r.aggregation_rule {
                let selectors: Vec<Value> =
                    a.cluster_role_selectors.into_iter().map(selector).collect();
                v["aggregationRule"] = json!({"clusterRoleSelectors": selectors});
            }
            v
        }
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            let r = rbac::RoleBinding::decode(raw).map_err(err)?;
            binding(r.metadata, r.subjects, r.role_ref)
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            let r = rbac::ClusterRoleBinding::decode(raw).map_err(err)?;
            binding(r.metadata, r.subjects, r.role_ref)
        }
        ("certificates.k8s.io/v1", "CertificateSigningRequest") => {
            let r = certs::CertificateSigningRequest::decode(raw).map_err(err)?;
            csr(r)
        }
        _ => return Err(ApiError::unsupported_media_type(MEDIA_TYPE)),
    };
    v["apiVersion"] = json!(api_version);
    v["kind"] = json!(kind);
    Ok(v)
}

/// The ObjectMeta fields a client sets on create.
fn meta(m: Option<ObjectMeta>) -> Value {
    let m = m.unwrap_or_default();
    let mut out = Map::new();
    for (key, value) in [
        ("name", m.name),
        ("generateName", m.generate_name),
        ("namespace", m.namespace),
        ("resourceVersion", m.resource_version),
        ("uid", m.uid),
    ] {
        if let Some(v) = value.filter(|s| !s.is_empty()) {
            out.insert(key.into(), json!(v));
        }
    }
    if !m.labels.is_empty() {
        out.insert("labels".into(), json!(m.labels));
    }
    if !m.annotations.is_empty() {
        out.insert("annotations".into(), json!(m.annotations));
    }
    if !m.finalizers.is_empty() {
        out.insert("finalizers".into(), json!(m.finalizers));
    }
    Value::Object(out)
}

/// A CSR as `kubectl certificate approve|deny` sends it back: the whole object, with the new
/// condition in its status.
fn csr(r: certs::CertificateSigningRequest) -> Value {
    let b64 = |bytes: Vec<u8>| {
        serde_json::to_value(k8s_openapi::ByteString(bytes)).unwrap_or(Value::Null)
    };
    let time = |t: Option<k8s_pb::apimachinery::pkg::apis::meta::v1::Time>| -> Value {
        match t.and_then(|t| t.seconds) {
            Some(secs) => json!(tandem_core::time::format_rfc3339(secs)),
            None => Value::Null,
        }
    };
    let spec = r.spec.unwrap_or_default();
    let mut s = json!({
        "request": b64(spec.request.unwrap_or_default()),
        "signerName": spec.signer_name.unwrap_or_default(),
        "usages": spec.usages,
        "groups": spec.groups,
    });
    if let Some(e) = spec.expiration_seconds {
        s["expirationSeconds"] = json!(e);
    }
    for (key, value) in [("username", spec.username), ("uid", spec.uid)] {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            s[key] = json!(v);
        }
    }
    if !spec.extra.is_empty() {
        let extra: Map<String, Value> = spec
            .extra
            .into_iter()
            .map(|(k, v)| (k, json!(v.items)))
            .collect();
        s["extra"] = Value::Object(extra);
    }
    let status = r.status.unwrap_or_default();
    let conditions: Vec<Value> = status
        .conditions
        .into_iter()
        .map(|c| {
            json!({
                "type": c.r#type.unwrap_or_default(),
                "status": c.status.unwrap_or_default(),
                "reason": c.reason.unwrap_or_default(),
                "message": c.message.unwrap_or_default(),
                "lastUpdateTime": time(c.last_update_time),
                "lastTransitionTime": time(c.last_transition_time),
            })
        })
        .collect();
    let mut st = json!({"conditions": conditions});
    if let Some(cert) = status.certificate.filter(|c| !c.is_empty()) {
        st["certificate"] = b64(cert);
    }
    json!({"metadata": meta(r.metadata), "spec": s, "status": st})
}

fn access_spec(
    resource: Option<authz::ResourceAttributes>,
    non_resource: Option<authz::NonResourceAttributes>,
) -> Value {
    let mut spec = json!({});
    if let Some(r) = resource {
        spec["resourceAttributes"] = json!({
            "namespace": r.namespace.unwrap_or_default(),
            "verb": r.verb.unwrap_or_default(),
            "group": r.group.unwrap_or_default(),
            "version": r.version.unwrap_or_default(),
            "resource": r.resource.unwrap_or_default(),
            "subresource": r.subresource.unwrap_or_default(),
            "name": r.name.unwrap_or_default(),
        });
    }
    if let Some(n) = non_resource {
        spec["nonResourceAttributes"] = json!({
            "path": n.path.unwrap_or_default(),
            "verb": n.verb.unwrap_or_default(),
        });
    }
    spec
}

fn rules(rules: Vec<rbac::PolicyRule>) -> Value {
    let out: Vec<Value> = rules
        .into_iter()
        .map(|r| {
            let mut v = json!({"verbs": r.verbs});
            for (key, list) in [
                ("apiGroups", r.api_groups),
                ("resources", r.resources),
                ("resourceNames", r.resource_names),
                ("nonResourceURLs", r.non_resource_ur_ls),
            ] {
                if !list.is_empty() {
                    v[key] = json!(list);
                }
            }
            v
        })
        .collect();
    json!(out)
}

fn selector(s: k8s_pb::apimachinery::pkg::apis::meta::v1::LabelSelector) -> Value {
    let mut v = json!({});
    if !s.match_labels.is_empty() {
        v["matchLabels"] = json!(s.match_labels);
    }
    if !s.match_expressions.is_empty() {
        let exprs: Vec<Value> = s
            .match_expressions
            .into_iter()
            .map(|e| {
                json!({"key": e.key.unwrap_or_default(), "operator": e.operator.unwrap_or_default(),
                       "values": e.values})
            })
            .collect();
        v["matchExpressions"] = json!(exprs);
    }
    v
}

fn binding(
    metadata: Option<ObjectMeta>,
    subjects: Vec<rbac::Subject>,
    role_ref: Option<rbac::RoleRef>,
) -> Value {
    let subjects: Vec<Value> = subjects
        .into_iter()
        .map(|s| {
            let mut v =
                json!({"kind": s.kind.unwrap_or_default(), "name": s.name.unwrap_or_default()});
            if let Some(g) = s.api_group.filter(|g| !g.is_empty()) {
                v["apiGroup"] = json!(g);
            }
            if let Some(ns) = s.namespace.filter(|n| !n.is_empty()) {
                v["namespace"] = json!(ns);
            }
            v
        })
        .collect();
    let r = role_ref.unwrap_or_default();
    json!({
        "metadata": meta(metadata),
        "subjects": subjects,
        "roleRef": {"apiGroup": r.api_group.unwrap_or_default(), "kind": r.kind.unwrap_or_default(),
                    "name": r.name.unwrap_or_default()},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut out = MAGIC.to_vec();
        out.extend(unknown.encode_to_vec());
        out
    }

    #[test]
    fn a_self_subject_access_review_decodes_as_kubectl_sends_it() {
        let review = authz::SelfSubjectAccessReview {
            spec: Some(authz::SelfSubjectAccessReviewSpec {
                resource_attributes: Some(authz::ResourceAttributes {
                    namespace: Some("default".into()),
                    verb: Some("list".into()),
                    resource: Some("pods".into()),
                    ..Default::default()
                }),
                non_resource_attributes: None,
            }),
            ..Default::default()
        };
        let body = envelope(
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            review.encode_to_vec(),
        );
        let v = decode(&body).expect("decodes");
        assert_eq!(v["kind"], "SelfSubjectAccessReview");
        assert_eq!(v["spec"]["resourceAttributes"]["verb"], "list");
        assert_eq!(v["spec"]["resourceAttributes"]["namespace"], "default");
    }

    #[test]
    fn bindings_keep_their_subjects_and_role() {
        let b = rbac::ClusterRoleBinding {
            metadata: Some(ObjectMeta {
                name: Some("x".into()),
                ..Default::default()
            }),
            subjects: vec![rbac::Subject {
                kind: Some("Group".into()),
                name: Some("auditors".into()),
                api_group: Some("rbac.authorization.k8s.io".into()),
                namespace: None,
            }],
            role_ref: Some(rbac::RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: Some("ClusterRole".into()),
                name: Some("view".into()),
            }),
        };
        let body = envelope(
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            b.encode_to_vec(),
        );
        let v = decode(&body).expect("decodes");
        assert_eq!(v["metadata"]["name"], "x");
        assert_eq!(v["subjects"][0]["name"], "auditors");
        assert_eq!(v["roleRef"]["name"], "view");
    }

    #[test]
    fn an_approved_csr_keeps_its_request_and_condition() {
        let r = certs::CertificateSigningRequest {
            metadata: Some(ObjectMeta {
                name: Some("node-csr-1".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            }),
            spec: Some(certs::CertificateSigningRequestSpec {
                request: Some(b"PEM".to_vec()),
                signer_name: Some("kubernetes.io/kube-apiserver-client".into()),
                usages: vec!["client auth".into()],
                ..Default::default()
            }),
            status: Some(certs::CertificateSigningRequestStatus {
                conditions: vec![certs::CertificateSigningRequestCondition {
                    r#type: Some("Approved".into()),
                    status: Some("True".into()),
                    reason: Some("KubectlApprove".into()),
                    ..Default::default()
                }],
                certificate: None,
            }),
        };
        let body = envelope(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            r.encode_to_vec(),
        );
        let v = decode(&body).expect("decodes");
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        assert_eq!(v["spec"]["request"], "UEVN");
        assert_eq!(v["status"]["conditions"][0]["reason"], "KubectlApprove");
    }

    #[test]
    fn garbage_and_other_kinds_are_refused_cleanly() {
        assert_eq!(decode(b"nope").map_err(|e| e.code), Err(400));
        assert_eq!(decode(b"k8s\0\xff\xff").map_err(|e| e.code), Err(400));
        let other = envelope("v1", "Namespace", Vec::new());
        assert_eq!(decode(&other).map_err(|e| e.code), Err(415));
    }
}
