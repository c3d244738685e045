//! Columns and cells of RoleBindings and ClusterRoleBindings: upstream's
//! `roleBindingsColumnDefinitions` / `clusterRoleBindingsColumnDefinitions` with
//! `printRoleBinding` / `printClusterRoleBinding` (pkg/printers/internalversion/printers.go).
//! Roles and ClusterRoles have no printer upstream and use `rest.defaultTableConvertor`
//! (NAME, CREATED AT).

use serde_json::Value;

use super::age::created;
use super::json::{arr_at, name, s, str_at};
use super::{AGE, ColumnDefinition, NAME, col, wide};

/// `rbacv1beta1.RoleBinding{}.SwaggerDoc()["roleRef"]`.
const ROLE_BINDING_ROLE_DESC: &str = "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.";
/// `rbacv1beta1.ClusterRoleBinding{}.SwaggerDoc()["roleRef"]`.
const CLUSTER_ROLE_BINDING_ROLE_DESC: &str = "RoleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.";

/// NAME, ROLE, AGE and, with `-o wide`, USERS, GROUPS, SERVICEACCOUNTS. `cluster` picks the
/// ClusterRoleBinding wording of the descriptions.
pub fn binding_columns(cluster: bool) -> Vec<ColumnDefinition> {
    let (role, users, groups, service_accounts) = if cluster {
        (
            CLUSTER_ROLE_BINDING_ROLE_DESC,
            "Users in the clusterRoleBinding",
            "Groups in the clusterRoleBinding",
            "ServiceAccounts in the clusterRoleBinding",
        )
    } else {
        (
            ROLE_BINDING_ROLE_DESC,
            "Users in the roleBinding",
            "Groups in the roleBinding",
            "ServiceAccounts in the roleBinding",
        )
    };
    vec![
        NAME,
        col("Role", "string", role),
        AGE,
        wide("Users", "string", users),
        wide("Groups", "string", groups),
        wide("ServiceAccounts", "string", service_accounts),
    ]
}

/// `printRoleBinding` / `printClusterRoleBinding`: ROLE is `<kind>/<name>` of the roleRef; the
/// wide cells are the subjects split as `rbac.SubjectsStrings` does (users and groups by name,
/// service accounts as `<namespace>/<name>`), each joined with `, `.
pub fn binding(obj: &Value, now: i64) -> Vec<Value> {
    let role = format!(
        "{}/{}",
        str_at(obj, &["roleRef", "kind"]),
        str_at(obj, &["roleRef", "name"])
    );
    let mut users = Vec::new();
    let mut groups = Vec::new();
    let mut service_accounts = Vec::new();
    for subject in arr_at(obj, &["subjects"]) {
        let subject_name = str_at(subject, &["name"]);
        match str_at(subject, &["kind"]) {
            "User" => users.push(subject_name.to_string()),
            "Group" => groups.push(subject_name.to_string()),
            "ServiceAccount" => service_accounts.push(format!(
                "{}/{subject_name}",
                str_at(subject, &["namespace"])
            )),
            _ => {}
        }
    }
    vec![
        s(name(obj)),
        s(role),
        created(obj, now),
        s(users.join(", ")),
        s(groups.join(", ")),
        s(service_accounts.join(", ")),
    ]
}
