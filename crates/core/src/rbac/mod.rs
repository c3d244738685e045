//! Role-based access control as upstream's RBAC authorizer and RBAC registry evaluate it, over
//! the `k8s-openapi` `rbac.authorization.k8s.io/v1` types. Pure: which roles and bindings
//! apply to a user is the API server's business; this module answers questions about rules.
//!
//! - [`rule_allows`] / [`rules_allow`]: whether a rule allows a request (upstream `RuleAllows`,
//!   plugin/pkg/auth/authorizer/rbac/rbac.go); [`subject_applies`]: whether a binding names a
//!   user (`appliesToUser`).
//! - [`covers`]: the escalation check run when a Role or ClusterRole is written (upstream
//!   `Covers`, pkg/registry/rbac/validation/policy_comparator.go), with [`compact_rules`] and
//!   [`compact_string`] to word the refusal as upstream's `ConfirmNoEscalation` does.
//! - [`aggregate_rules`]: the rules of an aggregated ClusterRole (upstream's
//!   clusterrole-aggregation controller).
//! - [`bootstrap`]: the default roles and bindings the API server creates at start.
//!
//! # The controller manager's permissions
//!
//! Upstream's kube-controller-manager runs each controller with its own service account
//! (`kube-system/<controller>`, bound to `system:controller:<controller>`), and its own user
//! `system:kube-controller-manager` holds only the `system:kube-controller-manager` role
//! (informers, leader election, token secrets). tandem runs every controller in one process as
//! that one user, so the user must hold the union of that role and the controller roles of the
//! controllers tandem runs — no more.
//!
//! tandem grants it by binding, not by aggregation: each `system:controller:<controller>`
//! ClusterRoleBinding names upstream's service account *and* the user
//! `system:kube-controller-manager`, and so do the RoleBindings of the namespaced controller
//! Roles (`system:controller:token-cleaner` in `kube-system`, `system:controller:bootstrap-signer`
//! in `kube-system` and `kube-public`). An aggregated ClusterRole was rejected because it is
//! empty until the clusterrole-aggregation controller fills it, and that controller runs as the
//! same user: the user's rights would depend on a controller that needs those rights to run.
//! Bindings take effect the moment they are stored, keep every role byte-for-byte upstream's,
//! and `kubectl get clusterrolebinding -o wide` shows who holds what.

mod aggregation;
pub mod bootstrap;
mod covers;
mod rules;

pub use aggregation::aggregate_rules;
pub use covers::{breakdown_rule, compact_rules, compact_string, covers};
pub use rules::{RequestAttributes, rule_allows, rules_allow, subject_applies};

/// `rbac.authorization.k8s.io`: the API group of roles and bindings, and the `apiGroup` of
/// `roleRef`s and of `User`/`Group` subjects.
pub const GROUP_NAME: &str = "rbac.authorization.k8s.io";
/// Upstream `rbacv1.VerbAll`.
pub const VERB_ALL: &str = "*";
/// Upstream `rbacv1.APIGroupAll`.
pub const API_GROUP_ALL: &str = "*";
/// Upstream `rbacv1.ResourceAll`.
pub const RESOURCE_ALL: &str = "*";
/// Upstream `rbacv1.NonResourceAll`.
pub const NON_RESOURCE_ALL: &str = "*";
/// The label upstream puts on every bootstrap object (`bootstrappolicy.Label`).
pub const BOOTSTRAPPING_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");
/// Upstream `rbacv1.AutoUpdateAnnotationKey`: `"true"` lets the API server reconcile the object
/// back to the bootstrap policy at start; `"false"` leaves a customised default alone.
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";

#[cfg(test)]
mod tests;
