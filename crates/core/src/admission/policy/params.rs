//! A binding's params (upstream `generic.CollectParams`): the object `paramRef.name` names, or
//! those `paramRef.selector` selects, among the objects of the policy's `paramKind`.

use serde_json::Value;

use super::compile::CompiledPolicy;
use crate::selector::LabelSelector;

/// Whether the policy's `paramKind` is namespaced (the API server knows from its registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamScope {
    Cluster,
    Namespaced,
}

/// Why a binding's params cannot be collected: a configuration error, reported as
/// `failed to configure binding: <this>` under `failurePolicy: Fail`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    #[error(
        "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
    )]
    NamespacedParamsForClusterScopedRequest,
    #[error("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")]
    NamespaceForClusterScopedParams,
    #[error("paramRef.name and paramRef.selector are mutually exclusive")]
    NameAndSelector,
    /// The selector does not parse (`metav1.LabelSelectorAsSelector`).
    #[error("{0}")]
    InvalidSelector(String),
    #[error("one of name or selector must be provided")]
    NoNameOrSelector,
    /// Nothing found and `parameterNotFoundAction: Deny`.
    #[error("no params found for policy binding with `Deny` parameterNotFoundAction")]
    NotFound,
}

/// The params to evaluate `policy` with for `binding` (upstream `CollectParams`): once per
/// returned entry, `None` standing for `params: null`.
///
/// - A policy without `paramKind`, or a binding without `paramRef`, evaluates once with `null`.
/// - `paramRef.name` picks that object; `paramRef.selector` every object it selects (`{}`: all).
///   For a namespaced paramKind, only objects in `paramRef.namespace` (default: the request's
///   namespace, which must then be set) count.
/// - Nothing found: [`ParamsError::NotFound`] under `parameterNotFoundAction: Deny`, otherwise
///   an empty list (the binding is skipped).
///
/// `candidates` are all objects of the paramKind (the API server lists them from its cache);
/// `request_namespace` is the request's namespace (`None` or empty for cluster-scoped ones).
pub fn resolve_params<'a>(
    binding: &Value,
    policy: &CompiledPolicy,
    candidates: &'a [Value],
    scope: ParamScope,
    request_namespace: Option<&str>,
) -> Result<Vec<Option<&'a Value>>, ParamsError> {
    let param_ref = binding
        .get("spec")
        .and_then(|s| s.get("paramRef"))
        .filter(|r| r.is_object());
    let (Some(_), Some(param_ref)) = (policy.param_kind(), param_ref) else {
        return Ok(vec![None]);
    };
    let text = |key: &str| param_ref.get(key).and_then(Value::as_str).unwrap_or("");
    let ref_namespace = text("namespace");
    let name = text("name");
    let selector = param_ref.get("selector").filter(|s| !s.is_null());

    let namespace = match scope {
        ParamScope::Namespaced if !ref_namespace.is_empty() => Some(ref_namespace),
        ParamScope::Namespaced => match request_namespace.filter(|ns| !ns.is_empty()) {
            Some(ns) => Some(ns),
            None => return Err(ParamsError::NamespacedParamsForClusterScopedRequest),
        },
        ParamScope::Cluster if !ref_namespace.is_empty() => {
            return Err(ParamsError::NamespaceForClusterScopedParams);
        }
        ParamScope::Cluster => None,
    };
    let in_scope = |obj: &&Value| match namespace {
        Some(ns) => object_namespace(obj) == ns,
        None => true,
    };

    let params: Vec<Option<&Value>> = if !name.is_empty() {
        if selector.is_some() {
            return Err(ParamsError::NameAndSelector);
        }
        candidates
            .iter()
            .filter(in_scope)
            .find(|obj| object_name(obj) == name)
            .map(Some)
            .into_iter()
            .collect()
    } else if let Some(selector) = selector {
        let selector = LabelSelector::from_json(selector)
            .map_err(|e| ParamsError::InvalidSelector(e.to_string()))?;
        candidates
            .iter()
            .filter(in_scope)
            .filter(|obj| selector.matches_object(obj))
            .map(Some)
            .collect()
    } else {
        return Err(ParamsError::NoNameOrSelector);
    };

    if params.is_empty() && text("parameterNotFoundAction") == "Deny" {
        return Err(ParamsError::NotFound);
    }
    Ok(params)
}

fn object_name(obj: &Value) -> &str {
    obj.get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn object_namespace(obj: &Value) -> &str {
    obj.get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or("")
}
