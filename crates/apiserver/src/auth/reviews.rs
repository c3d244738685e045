//! The review APIs, created and answered but never stored (upstream's `pkg/registry/
//! authorization/*` and `pkg/registry/authentication/*`): SubjectAccessReview,
//! LocalSubjectAccessReview, SelfSubjectAccessReview (`kubectl auth can-i`),
//! SelfSubjectRulesReview (`kubectl auth can-i --list`), TokenReview and SelfSubjectReview
//! (`kubectl auth whoami`).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tandem_core::field::FieldError;
use tandem_core::registry::ResourceType;

use super::UserInfo;
use super::authz::{self, Attributes};
use crate::error::{ApiError, ApiResult};
use crate::state::State;

/// Answers a create of a review kind; `ns` is the URL's namespace (LocalSubjectAccessReview).
pub fn create(
    state: &State,
    user: &UserInfo,
    rt: &ResourceType,
    ns: Option<&str>,
    body: Value,
) -> ApiResult<Value> {
    let mut out = body;
    if !out.is_object() {
        return Err(ApiError::bad_request("the request body must be an object"));
    }
    out["apiVersion"] = json!(rt.api_version());
    out["kind"] = json!(rt.kind);
    if out.get("metadata").is_none_or(Value::is_null) {
        out["metadata"] = json!({"creationTimestamp": null});
    }
    let spec = out.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = match rt.kind.as_str() {
        "SelfSubjectAccessReview" => access_review(state, rt, user, &spec, None)?,
        "SubjectAccessReview" => {
            let subject = subject_of(&spec);
            if subject.name.is_empty() && subject.groups.is_empty() {
                return Err(invalid(
                    rt,
                    FieldError::invalid(
                        "spec.user",
                        &json!(""),
                        "at least one of user or group must be specified",
                    ),
                ));
            }
            access_review(state, rt, &subject, &spec, None)?
        }
        "LocalSubjectAccessReview" => {
            let subject = subject_of(&spec);
            access_review(state, rt, &subject, &spec, ns)?
        }
        "SelfSubjectRulesReview" => rules_review(state, user, &spec),
        "SelfSubjectReview" => json!({ "userInfo": user_info_json(user) }),
        "TokenReview" => token_review(state, &spec),
        _ => return Err(ApiError::no_route()),
    };
    out["status"] = status;
    Ok(out)
}

fn invalid(rt: &ResourceType, e: FieldError) -> ApiError {
    ApiError::invalid(rt, "", &[e])
}

/// The user a SubjectAccessReview asks about.
fn subject_of(spec: &Value) -> UserInfo {
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let extra: BTreeMap<String, Vec<String>> = spec
        .get("extra")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), strings(Some(v))))
                .collect()
        })
        .unwrap_or_default();
    UserInfo {
        name: spec
            .get("user")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        uid: spec
            .get("uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        groups: strings(spec.get("groups")),
        extra,
    }
}

fn access_review(
    state: &State,
    rt: &ResourceType,
    user: &UserInfo,
    spec: &Value,
    local_ns: Option<&str>,
) -> ApiResult<Value> {
    let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    let attrs = match (resource, non_resource) {
        (Some(r), None) => {
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
            let mut namespace = s("namespace").to_string();
            if let Some(ns) = local_ns {
                if namespace.is_empty() {
                    namespace = ns.to_string();
                } else if namespace != ns {
                    return Err(invalid(
                        rt,
                        FieldError::invalid(
                            "spec.resourceAttributes.namespace",
                            &json!(namespace),
                            "must match metadata.namespace",
                        ),
                    ));
                }
            }
            Attributes {
                verb: s("verb").to_string(),
                resource_request: true,
                api_group: s("group").to_string(),
                api_version: s("version").to_string(),
                resource: s("resource").to_string(),
                subresource: s("subresource").to_string(),
                namespace,
                name: s("name").to_string(),
                path: String::new(),
            }
        }
        (None, Some(n)) => Attributes {
            verb: n
                .get("verb")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            path: n
                .get("path")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            ..Attributes::default()
        },
        (Some(r), Some(_)) => {
            return Err(invalid(
                rt,
                FieldError::invalid(
                    "spec.resourceAttributes",
                    r,
                    "cannot be specified in combination with nonResourceAttributes",
                ),
            ));
        }
        (None, None) => {
            return Err(invalid(
                rt,
                FieldError::invalid(
                    "spec.resourceAttributes",
                    &Value::Null,
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                ),
            ));
        }
    };
    let decision = authz::authorize(state, user, &attrs);
    let mut status = json!({ "allowed": decision.allowed() });
    if !decision.reason().is_empty() {
        status["reason"] = json!(decision.reason());
    }
    Ok(status)
}

/// SelfSubjectRulesReview: the rules the user holds in `spec.namespace`, as RBAC resolves them.
fn rules_review(state: &State, user: &UserInfo, spec: &Value) -> Value {
    let ns = spec
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (_, index) = state.auth.rbac.index(state);
    let (rules, errors) = index.rules_for(user, ns);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in rules {
        if let Some(urls) = r.non_resource_urls.as_ref().filter(|u| !u.is_empty()) {
            non_resource_rules.push(json!({"verbs": r.verbs, "nonResourceURLs": urls}));
        } else {
            let mut rule = json!({
                "verbs": r.verbs,
                "apiGroups": r.api_groups.unwrap_or_default(),
                "resources": r.resources.unwrap_or_default(),
            });
            if let Some(names) = r.resource_names.filter(|n| !n.is_empty()) {
                rule["resourceNames"] = json!(names);
            }
            resource_rules.push(rule);
        }
    }
    // The Node authorizer's graph and `system:masters` are not expressible as rules.
    let incomplete = user.node_name().is_some();
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": incomplete,
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(errors.join(", "));
    }
    status
}

fn user_info_json(user: &UserInfo) -> Value {
    serde_json::to_value(user).unwrap_or_else(|_| json!({}))
}

/// TokenReview: whether `spec.token` authenticates, and as whom.
fn token_review(state: &State, spec: &Value) -> Value {
    let token = spec
        .get("token")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let audiences = crate::webhook::string_list(spec, "audiences");
    let authn = &state.auth.authn;
    let result = if !audiences.is_empty() && token.matches('.').count() == 2 {
        authn
            .verify_jwt(token, &audiences)
            .and_then(|claims| super::authn::service_account_user(state, &claims))
    } else {
        authn.authenticate_token(state, token)
    };
    match result {
        Ok(user) => {
            let mut status = json!({"authenticated": true, "user": user_info_json(&user)});
            let aud = if audiences.is_empty() {
                vec![authn.issuer.issuer().to_string()]
            } else {
                audiences
            };
            status["audiences"] = json!(aud);
            status
        }
        Err(e) => json!({"user": {}, "error": e}),
    }
}
