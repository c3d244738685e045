//! Columns and cells of networking.k8s.io objects: upstream's `ingressColumnDefinitions`,
//! `ingressClassColumnDefinitions` and `networkPolicyColumnDefinitioins` with `printIngress`
//! (`formatHosts`, `formatPorts`, `ingressLoadBalancerStatusStringer` unclipped, as the server
//! prints wide), `printIngressClass` and `printNetworkPolicy`
//! (pkg/printers/internalversion/printers.go).

use serde_json::Value;

use super::age::created;
use super::json::{arr_at, format_label_selector, get, load_balancer_ingress, name, s, str_at};
use super::{AGE, ColumnDefinition, NAME, col};

/// NAME, CLASS, HOSTS, ADDRESS, PORTS, AGE.
pub fn ingress_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col(
            "Class",
            "string",
            "The name of the IngressClass resource that should be used for additional configuration",
        ),
        col(
            "Hosts",
            "string",
            "Hosts that incoming requests are matched against before the ingress rule",
        ),
        col(
            "Address",
            "string",
            "Address is a list containing ingress points for the load-balancer",
        ),
        col("Ports", "string", "Ports of TLS configurations that open"),
        AGE,
    ]
}

/// NAME, CONTROLLER, PARAMETERS, AGE.
pub fn ingress_class_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col(
            "Controller",
            "string",
            "Controller that is responsible for handling this class",
        ),
        col(
            "Parameters",
            "string",
            "A reference to a resource with additional parameters",
        ),
        AGE,
    ]
}

/// `extensionsv1beta1.NetworkPolicySpec{}.SwaggerDoc()["podSelector"]`.
const POD_SELECTOR_DESC: &str = "Selects the pods to which this NetworkPolicy object applies. The array of ingress rules is applied to any pods selected by this field. Multiple network policies can select the same set of pods. In this case, the ingress rules for each are combined additively. This field is NOT optional and follows standard label selector semantics. An empty podSelector matches all pods in this namespace.";

/// NAME, POD-SELECTOR, AGE.
pub fn network_policy_columns() -> Vec<ColumnDefinition> {
    vec![NAME, col("Pod-Selector", "string", POD_SELECTOR_DESC), AGE]
}

/// `formatHosts`: up to three rule hosts, `*` when none is set.
fn format_hosts(rules: &[Value]) -> String {
    const MAX: usize = 3;
    let mut list: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if list.len() == MAX {
            more = true;
        }
        let host = str_at(rule, &["host"]);
        if !more && !host.is_empty() {
            list.push(host);
        }
    }
    if list.is_empty() {
        return "*".to_string();
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", rules.len().saturating_sub(MAX))
    } else {
        joined
    }
}

/// `printIngress`.
pub fn ingress(obj: &Value, now: i64) -> Vec<Value> {
    let class = get(obj, &["spec", "ingressClassName"])
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    let ports = if arr_at(obj, &["spec", "tls"]).is_empty() {
        "80"
    } else {
        "80, 443"
    };
    vec![
        s(name(obj)),
        s(class),
        s(format_hosts(arr_at(obj, &["spec", "rules"]))),
        s(load_balancer_ingress(obj).join(",")),
        s(ports),
        created(obj, now),
    ]
}

/// `printIngressClass`: parameters as `Kind[.apiGroup]/name`, `<none>` when unset.
pub fn ingress_class(obj: &Value, now: i64) -> Vec<Value> {
    let parameters = match get(obj, &["spec", "parameters"]).filter(|p| p.is_object()) {
        None => "<none>".to_string(),
        Some(p) => {
            let mut out = str_at(p, &["kind"]).to_string();
            if let Some(group) = get(p, &["apiGroup"]).and_then(Value::as_str) {
                out.push('.');
                out.push_str(group);
            }
            format!("{out}/{}", str_at(p, &["name"]))
        }
    };
    vec![
        s(name(obj)),
        s(str_at(obj, &["spec", "controller"])),
        s(parameters),
        created(obj, now),
    ]
}

/// `printNetworkPolicy`: the pod selector as `metav1.FormatLabelSelector` prints it.
pub fn network_policy(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        s(name(obj)),
        s(format_label_selector(get(obj, &["spec", "podSelector"]))),
        created(obj, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::tests::NOW;

    fn row(plural: &str, obj: &Value) -> Vec<String> {
        crate::table::tests::row("networking.k8s.io", plural, obj)
    }

    fn meta() -> Value {
        json!({"name": "web", "namespace": "default", "creationTimestamp": crate::time::format_rfc3339(NOW - 120)})
    }

    #[test]
    fn ingress_row_shows_class_hosts_address_and_tls_ports() {
        let obj = json!({
            "metadata": meta(),
            "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["a.example.com"]}],
                "rules": [{"host": "a.example.com"}, {"host": "b.example.com"}, {}, {"host": "c.example.com"}, {"host": "d.example.com"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.2"}, {"hostname": "lb.example.com"}, {"ip": "10.0.0.2"}]}},
        });
        assert_eq!(
            row("ingresses", &obj),
            [
                "web",
                "nginx",
                "a.example.com,b.example.com,c.example.com + 2 more...",
                "10.0.0.2,lb.example.com",
                "80, 443",
                "2m"
            ]
        );
        let bare = json!({"metadata": meta(), "spec": {"defaultBackend": {}}});
        assert_eq!(
            row("ingresses", &bare),
            ["web", "<none>", "*", "", "80", "2m"]
        );
        let cols: Vec<&str> = ingress_columns().iter().map(|c| c.name).collect();
        assert_eq!(cols, ["Name", "Class", "Hosts", "Address", "Ports", "Age"]);
    }

    #[test]
    fn ingress_class_row_formats_parameters_reference() {
        let obj = json!({"metadata": meta(), "spec": {"controller": "k8s.io/ingress-nginx",
            "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "external-lb"}}});
        assert_eq!(
            row("ingressclasses", &obj),
            [
                "web",
                "k8s.io/ingress-nginx",
                "IngressParameters.k8s.example.com/external-lb",
                "2m"
            ]
        );
        let plain = json!({"metadata": meta(), "spec": {"controller": "k8s.io/x"}});
        assert_eq!(row("ingressclasses", &plain)[2], "<none>");
    }

    #[test]
    fn network_policy_row_formats_pod_selector() {
        let obj =
            json!({"metadata": meta(), "spec": {"podSelector": {"matchLabels": {"app": "db"}}}});
        assert_eq!(row("networkpolicies", &obj), ["web", "app=db", "2m"]);
        let all = json!({"metadata": meta(), "spec": {"podSelector": {}}});
        assert_eq!(row("networkpolicies", &all), ["web", "<none>", "2m"]);
        assert_eq!(network_policy_columns()[1].name, "Pod-Selector");
    }
}
