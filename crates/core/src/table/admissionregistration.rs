//! Columns and cells of the admissionregistration.k8s.io kinds: upstream's
//! `mutatingWebhookColumnDefinitions` / `printMutatingWebhook`,
//! `validatingWebhookColumnDefinitions` / `printValidatingWebhook`, `validatingAdmissionPolicy`
//! / `printValidatingAdmissionPolicy` and `validatingAdmissionPolicyBinding` /
//! `printValidatingAdmissionPolicyBinding` (pkg/printers/internalversion/printers.go).

use serde_json::{Map, Value};

use super::age::created;
use super::json::{arr_len, get, n, name, s, str_at};
use super::{AGE, ColumnDefinition, NAME, col};

/// NAME, WEBHOOKS, AGE (both webhook configurations).
pub fn webhook_configuration_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col(
            "Webhooks",
            "integer",
            "Webhooks indicates the number of webhooks registered in this configuration",
        ),
        AGE,
    ]
}

/// `printValidatingWebhook` / `printMutatingWebhook`: the number of webhooks.
pub fn webhook_configuration(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        s(name(obj)),
        n(arr_len(obj, &["webhooks"])),
        created(obj, now),
    ]
}

/// NAME, VALIDATIONS, PARAMKIND, AGE.
pub fn policy_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col(
            "Validations",
            "integer",
            "Validations indicates the number of validation rules defined in this configuration",
        ),
        col(
            "ParamKind",
            "string",
            "ParamKind specifies the kind of resources used to parameterize this policy",
        ),
        AGE,
    ]
}

/// `printValidatingAdmissionPolicy`: the number of validations and `apiVersion/kind` of the
/// parameters, `<unset>` without them.
pub fn policy(obj: &Value, now: i64) -> Vec<Value> {
    let param_kind = match get(obj, &["spec", "paramKind"]).filter(|k| !k.is_null()) {
        Some(k) => format!("{}/{}", str_at(k, &["apiVersion"]), str_at(k, &["kind"])),
        None => "<unset>".to_string(),
    };
    vec![
        s(name(obj)),
        n(arr_len(obj, &["spec", "validations"])),
        s(param_kind),
        created(obj, now),
    ]
}

/// NAME, POLICYNAME, PARAMREF, AGE.
pub fn binding_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col(
            "PolicyName",
            "string",
            "PolicyName indicates the policy definition which the policy binding binded to",
        ),
        col(
            "ParamRef",
            "string",
            "ParamRef indicates the param resource which sets the configration param",
        ),
        AGE,
    ]
}

/// `printValidatingAdmissionPolicyBinding`: the parameter as `namespace/name` (`*/name` when
/// no namespace is given: the printer cannot tell whether the kind is cluster-scoped), else
/// the selector as Go prints a `LabelSelector`, else `<unset>`.
pub fn binding(obj: &Value, now: i64) -> Vec<Value> {
    let param = match get(obj, &["spec", "paramRef"]).filter(|p| p.is_object()) {
        None => "<unset>".to_string(),
        Some(pr) => {
            let name = str_at(pr, &["name"]);
            let namespace = str_at(pr, &["namespace"]);
            match pr.get("selector").filter(|s| !s.is_null()) {
                _ if !name.is_empty() && !namespace.is_empty() => format!("{namespace}/{name}"),
                _ if !name.is_empty() => format!("*/{name}"),
                Some(sel) => go_label_selector(sel),
                None => "<unset>".to_string(),
            }
        }
    };
    vec![
        s(name(obj)),
        s(str_at(obj, &["spec", "policyName"])),
        s(param),
        created(obj, now),
    ]
}

/// The generated `(*LabelSelector).String()` of upstream's protobuf types:
/// `&LabelSelector{MatchLabels:map[string]string{env: prod,},MatchExpressions:[]LabelSelectorRequirement{},}`.
fn go_label_selector(sel: &Value) -> String {
    let empty = Map::new();
    let labels = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut keys: Vec<&String> = labels.keys().collect();
    keys.sort();
    let labels: String = keys
        .iter()
        .map(|k| format!("{k}: {},", labels[*k].as_str().unwrap_or_default()))
        .collect();
    let expressions: String = sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|v| v.as_str().unwrap_or_default())
                .collect();
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                str_at(e, &["key"]),
                str_at(e, &["operator"]),
                values.join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::row;

    const GROUP: &str = "admissionregistration.k8s.io";

    #[test]
    fn webhook_configurations_count_their_webhooks() {
        let obj = json!({"metadata": {"name": "hooks"},
                         "webhooks": [{"name": "a.example.com"}, {"name": "b.example.com"}]});
        for plural in [
            "validatingwebhookconfigurations",
            "mutatingwebhookconfigurations",
        ] {
            assert_eq!(row(GROUP, plural, &obj)[..2], ["hooks", "2"]);
        }
    }

    #[test]
    fn policies_show_validations_and_param_kind() {
        let with = json!({"metadata": {"name": "p"}, "spec": {
            "paramKind": {"apiVersion": "example.com/v1", "kind": "Limits"},
            "validations": [{"expression": "true"}, {"expression": "false"}]}});
        assert_eq!(
            row(GROUP, "validatingadmissionpolicies", &with)[..3],
            ["p", "2", "example.com/v1/Limits"]
        );
        let without = json!({"metadata": {"name": "p"}, "spec": {}});
        assert_eq!(
            row(GROUP, "validatingadmissionpolicies", &without)[..3],
            ["p", "0", "<unset>"]
        );
    }

    #[test]
    fn bindings_show_the_policy_and_the_parameter_reference() {
        let binding = |param_ref: serde_json::Value| json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "paramRef": param_ref}});
        let cell = |param_ref| {
            row(
                GROUP,
                "validatingadmissionpolicybindings",
                &binding(param_ref),
            )
        };
        assert_eq!(
            cell(json!({"name": "limits", "namespace": "ops"}))[..3],
            ["b", "p", "ops/limits"]
        );
        assert_eq!(cell(json!({"name": "limits"}))[2], "*/limits");
        assert_eq!(
            cell(
                json!({"selector": {"matchLabels": {"env": "prod", "app": "web"},
                                     "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}})
            )[2],
            "&LabelSelector{MatchLabels:map[string]string{app: web,env: prod,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:tier,Operator:In,Values:[a b],},},}"
        );
        assert_eq!(cell(json!(null))[2], "<unset>");
    }
}
