//! RBAC's escalation prevention (upstream's `pkg/registry/rbac/{role,clusterrole,rolebinding,
//! clusterrolebinding}/policybased` and `pkg/registry/rbac/validation`): a user may write a Role
//! only with rules they already hold in its namespace unless they may `escalate` it, and may bind
//! a role only if they hold every rule it grants unless they may `bind` it. `system:masters` is
//! never checked.

use k8s_openapi::api::rbac::v1::{AggregationRule, PolicyRule};
use serde_json::Value;
use tandem_core::registry::ResourceType;

use super::UserInfo;
use super::authz::{self, Attributes};
use crate::error::ApiError;
use crate::state::State;

const GROUP: &str = "rbac.authorization.k8s.io";

/// Checks a create or update of an RBAC object by `user`. `old` is the stored object on update.
pub fn check(
    state: &State,
    user: &UserInfo,
    rt: &ResourceType,
    obj: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if rt.group != GROUP
        || user.in_group(super::MASTERS)
        || state.options.authorization == authz::AuthorizationMode::AlwaysAllow
    {
        return Ok(());
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match rt.plural.as_str() {
        "roles" | "clusterroles" => {
            let rules: Vec<PolicyRule> = obj
                .get("rules")
                .cloned()
                .and_then(|r| serde_json::from_value(r).ok())
                .unwrap_or_default();
            let may_escalate = authz::authorize(
                state,
                user,
                &Attributes::resource("escalate", GROUP, &rt.plural, ns, name),
            )
            .allowed();
            if may_escalate {
                return Ok(());
            }
            // Changing an aggregationRule can gather any rule: upstream asks for escalate.
            let aggregation = |v: Option<&Value>| -> Option<AggregationRule> {
                v.and_then(|v| v.get("aggregationRule"))
                    .cloned()
                    .and_then(|a| serde_json::from_value(a).ok())
            };
            let new_agg = aggregation(Some(obj));
            if new_agg.is_some() && new_agg != aggregation(old) {
                return Err(authz::forbidden_status(
                    GROUP,
                    &rt.plural,
                    name,
                    "must have cluster-admin privileges to use the aggregationRule",
                ));
            }
            // An aggregated ClusterRole's rules are the controller's to fill in.
            if new_agg.is_some() {
                return Ok(());
            }
            confirm_no_escalation(state, user, ns, &rules)
                .map_err(|msg| authz::forbidden_status(GROUP, &rt.plural, name, &msg))
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = obj.get("roleRef");
            if old.and_then(|o| o.get("roleRef")) == role_ref && old.is_some() {
                return Ok(());
            }
            let kind = role_ref
                .and_then(|r| r.get("kind"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let role = role_ref
                .and_then(|r| r.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let (plural, role_ns) = match kind {
                "Role" => ("roles", ns),
                _ => ("clusterroles", ""),
            };
            // `bind` on the referenced role is checked in the binding's namespace.
            let may_bind = authz::authorize(
                state,
                user,
                &Attributes::resource("bind", GROUP, plural, ns, role),
            )
            .allowed();
            if may_bind {
                return Ok(());
            }
            let rules = role_rules(state, plural, role_ns, role)?;
            confirm_no_escalation(state, user, ns, &rules)
                .map_err(|msg| authz::forbidden_status(GROUP, &rt.plural, name, &msg))
        }
        _ => Ok(()),
    }
}

/// The rules of the role a binding refers to, or upstream's NotFound.
fn role_rules(
    state: &State,
    plural: &str,
    ns: &str,
    name: &str,
) -> Result<Vec<PolicyRule>, ApiError> {
    let rt = state
        .registry
        .by_plural(GROUP, "v1", plural)
        .ok_or_else(ApiError::no_route)?;
    let scope = (!ns.is_empty()).then_some(ns);
    let obj = state
        .cache
        .get(&rt, &rt.key(scope, name))
        .and_then(|o| o.to_value())
        .ok_or_else(|| ApiError::not_found(&rt, name))?;
    Ok(obj
        .get("rules")
        .cloned()
        .and_then(|r| serde_json::from_value(r).ok())
        .unwrap_or_default())
}

/// Upstream's `ConfirmNoEscalation`: `user`'s rules in `namespace` must cover `rules`.
fn confirm_no_escalation(
    state: &State,
    user: &UserInfo,
    namespace: &str,
    rules: &[PolicyRule],
) -> Result<(), String> {
    let (_, index) = state.auth.rbac.index(state);
    let (owned, errors) = index.rules_for(user, namespace);
    let (covered, missing) = tandem_core::rbac::covers(&owned, rules);
    if covered {
        return Ok(());
    }
    let mut lines: Vec<String> = tandem_core::rbac::compact_rules(&missing)
        .iter()
        .map(tandem_core::rbac::compact_string)
        .collect();
    lines.sort();
    lines.dedup();
    let mut msg = format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        user.groups_display(),
        lines.join("\n")
    );
    if !errors.is_empty() {
        msg.push_str(&format!("; resolution errors: [{}]", errors.join(" ")));
    }
    Err(msg)
}
