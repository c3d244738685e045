//! The TokenRequest API: `POST …/serviceaccounts/NAME/token` issues a token for the account,
//! optionally bound to a Pod, Secret or Node (upstream's `pkg/registry/core/serviceaccount/
//! storage/token.go`), with upstream's defaults (one hour, the issuer as audience) and limits
//! (at least ten minutes, at most 2^32 seconds).

use serde_json::{Value, json};

use super::UserInfo;
use super::sa_token::{BoundRef, Claims, KubernetesClaim, service_account_user};
use crate::error::{ApiError, ApiResult};
use crate::state::State;
use tandem_core::field::FieldError;

const DEFAULT_EXPIRATION: i64 = 3600;
const MIN_EXPIRATION: i64 = 600;
const MAX_EXPIRATION: i64 = 1 << 32;

/// Issues a token for `namespace/name` as `body` (a TokenRequest) asks; returns the TokenRequest
/// with its status, for a 201.
pub async fn create(
    state: &State,
    user: &UserInfo,
    namespace: &str,
    name: &str,
    body: Value,
) -> ApiResult<Value> {
    let sa_rt = state.resource("", "v1", "serviceaccounts")?;
    let invalid = |errors: Vec<FieldError>| {
        let mut e = ApiError::invalid(&sa_rt, name, &errors);
        // Upstream reports these against the TokenRequest kind.
        e.message = e
            .message
            .replacen("ServiceAccount", "TokenRequest.authentication.k8s.io", 1);
        e
    };
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let expiration = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION,
        Some(v) => match v.as_i64() {
            Some(n) => n,
            None => {
                return Err(invalid(vec![FieldError::invalid(
                    "spec.expirationSeconds",
                    v,
                    "must be an integer",
                )]));
            }
        },
    };
    if expiration < MIN_EXPIRATION {
        return Err(invalid(vec![FieldError::invalid(
            "spec.expirationSeconds",
            &json!(expiration),
            "may not specify a duration less than 10 minutes",
        )]));
    }
    if expiration > MAX_EXPIRATION {
        return Err(invalid(vec![FieldError::invalid(
            "spec.expirationSeconds",
            &json!(expiration),
            "may not specify a duration larger than 2^32 seconds",
        )]));
    }
    let issuer = state.auth.authn.issuer.clone();
    let audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| vec![issuer.issuer().to_string()]);

    let sa = state.get(&sa_rt, Some(namespace), name).await?;
    let sa_uid = sa
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if sa.pointer("/metadata/deletionTimestamp").is_some() {
        return Err(ApiError::not_found(&sa_rt, name));
    }
    super::node::admit(
        state,
        user,
        "create",
        &sa_rt,
        Some("token"),
        Some(&body),
        Some(&sa),
    )?;

    let mut claim = KubernetesClaim {
        namespace: namespace.to_string(),
        serviceaccount: BoundRef {
            name: name.to_string(),
            uid: sa_uid,
        },
        pod: None,
        secret: None,
        node: None,
        warnafter: None,
    };
    if let Some(bound) = spec.get("boundObjectRef").filter(|b| !b.is_null()) {
        bind(state, namespace, name, bound, &mut claim).await?;
    }
    let now = super::authn::now_unix();
    let claims = Claims {
        iss: String::new(),
        sub: service_account_user(namespace, name),
        aud: audiences.clone(),
        exp: now + expiration,
        iat: now,
        nbf: now,
        jti: crate::meta::new_uid(),
        kubernetes: claim,
    };
    let token = issuer
        .sign(claims)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut spec_out = spec.clone();
    spec_out["audiences"] = json!(audiences);
    spec_out["expirationSeconds"] = json!(expiration);
    if spec_out.get("boundObjectRef").is_none() {
        spec_out["boundObjectRef"] = Value::Null;
    }
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": tandem_core::time::format_rfc3339(now),
        },
        "spec": spec_out,
        "status": {
            "token": token,
            "expirationTimestamp": tandem_core::time::format_rfc3339(now + expiration),
        },
    }))
}

/// Checks the bound object and records it (and, for a pod, its node) in the claims.
async fn bind(
    state: &State,
    namespace: &str,
    account: &str,
    bound: &Value,
    claim: &mut KubernetesClaim,
) -> ApiResult<()> {
    let kind = bound
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let api_version = bound
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("v1");
    let name = bound
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let want_uid = bound.get("uid").and_then(Value::as_str).unwrap_or_default();
    let (plural, scope) = match (api_version, kind) {
        ("v1", "Pod") => ("pods", Some(namespace)),
        ("v1", "Secret") => ("secrets", Some(namespace)),
        ("v1", "Node") => ("nodes", None),
        _ => {
            return Err(ApiError::bad_request(format!(
                "cannot bind token for object of type {api_version}, Kind={kind}"
            )));
        }
    };
    let rt = state.resource("", "v1", plural)?;
    let obj = state.get(&rt, scope, name).await?;
    let uid = obj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if !want_uid.is_empty() && want_uid != uid {
        return Err(ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {plural} {name:?}: the UID in the bound object reference ({want_uid}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        ));
    }
    let r = BoundRef {
        name: name.to_string(),
        uid,
    };
    match kind {
        "Pod" => {
            let pod_sa = obj
                .pointer("/spec/serviceAccountName")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or("default");
            if pod_sa != account {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount {account:?} to pod running with different serviceaccount name."
                )));
            }
            if let Some(node) = obj
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                && let Some((node_uid, _)) = super::authn::cached_meta(state, "nodes", None, node)
            {
                claim.node = Some(BoundRef {
                    name: node.to_string(),
                    uid: node_uid,
                });
            }
            claim.pod = Some(r);
        }
        "Secret" => claim.secret = Some(r),
        _ => claim.node = Some(r),
    }
    Ok(())
}
