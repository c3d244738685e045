//! Discovery documents: `/api`, `/apis`, per group and group-version resource lists, and the
//! aggregated discovery (`apidiscovery.k8s.io/v2`) that kubectl 1.32 asks for first, as upstream's
//! `k8s.io/apiserver/pkg/endpoints/discovery` serves them.

use serde_json::{Value, json};
use tandem_core::registry::{Registry, ResourceType};

/// The kind and verbs of a subresource, as upstream registers them.
fn subresource_info(rt: &ResourceType, sub: &str) -> (Value, &'static [&'static str]) {
    let own = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    match sub {
        "status" => (own, &["get", "patch", "update"]),
        "scale" => (
            json!({"group": "autoscaling", "version": "v1", "kind": "Scale"}),
            &["get", "patch", "update"],
        ),
        "binding" => (
            json!({"group": "", "version": "v1", "kind": "Binding"}),
            &["create"],
        ),
        "eviction" => (
            json!({"group": "policy", "version": "v1", "kind": "Eviction"}),
            &["create"],
        ),
        "log" => (own, &["get"]),
        "exec" => (
            json!({"group": "", "version": "v1", "kind": "PodExecOptions"}),
            &["create", "get"],
        ),
        "attach" => (
            json!({"group": "", "version": "v1", "kind": "PodAttachOptions"}),
            &["create", "get"],
        ),
        "portforward" => (
            json!({"group": "", "version": "v1", "kind": "PodPortForwardOptions"}),
            &["create", "get"],
        ),
        "ephemeralcontainers" | "approval" => (own, &["get", "patch", "update"]),
        "token" => (
            json!({"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"}),
            &["create"],
        ),
        "finalize" => (own, &["update"]),
        "proxy" => (
            json!({"group": "", "version": "v1", "kind": format!("{}ProxyOptions", rt.kind)}),
            &["create", "delete", "get", "patch", "update"],
        ),
        _ => (own, &["get"]),
    }
}

/// `/api`: the legacy group's versions.
pub fn api_versions(server_address: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
}

fn group_json(registry: &Registry, group: &str) -> Value {
    let versions: Vec<Value> = registry
        .group_versions()
        .into_iter()
        .filter(|(g, _)| g == group)
        .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or_else(|| json!({}));
    json!({"name": group, "versions": versions, "preferredVersion": preferred})
}

/// `/apis`: every named group.
pub fn api_group_list(registry: &Registry) -> Value {
    let mut groups: Vec<String> = Vec::new();
    for (g, _) in registry.group_versions() {
        if !g.is_empty() && !groups.contains(&g) {
            groups.push(g);
        }
    }
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups.iter().map(|g| group_json(registry, g)).collect::<Vec<_>>()})
}

/// `/apis/<group>`.
pub fn api_group(registry: &Registry, group: &str) -> Option<Value> {
    registry
        .group_versions()
        .iter()
        .any(|(g, _)| g == group)
        .then(|| {
            let mut v = group_json(registry, group);
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            v
        })
}

/// `/api/v1` or `/apis/<group>/<version>`: the APIResourceList.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types: Vec<_> = registry.in_group_version(group, version).collect();
    if types.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for t in types {
        let mut r = json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": t.verbs(),
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            r["categories"] = json!(t.categories);
        }
        resources.push(r);
        for sub in &t.subresources {
            let (kind, verbs) = subresource_info(t, sub);
            let mut r = json!({"name": format!("{}/{sub}", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": kind["kind"], "verbs": verbs});
            if kind["group"] != json!(t.group) || kind["version"] != json!(t.version) {
                r["group"] = kind["group"].clone();
                r["version"] = kind["version"].clone();
            }
            resources.push(r);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// The aggregated discovery document for the legacy group (`legacy = true`, served at `/api`) or
/// for all named groups (served at `/apis`).
pub fn aggregated(registry: &Registry, legacy: bool, beta: bool) -> Value {
    let mut groups: Vec<String> = Vec::new();
    for (g, _) in registry.group_versions() {
        if g.is_empty() == legacy && !groups.contains(&g) {
            groups.push(g);
        }
    }
    let items: Vec<Value> = groups
        .iter()
        .map(|g| {
            let versions: Vec<Value> = registry
                .group_versions()
                .into_iter()
                .filter(|(gg, _)| gg == g)
                .map(|(_, v)| {
                    let resources: Vec<Value> = registry
                        .in_group_version(g, &v)
                        .map(|t| {
                            let subs: Vec<Value> = t
                                .subresources
                                .iter()
                                .map(|s| {
                                    let (kind, verbs) = subresource_info(t, s);
                                    json!({"subresource": s, "responseKind": kind, "verbs": verbs})
                                })
                                .collect();
                            let mut r = json!({
                                "resource": t.plural,
                                "responseKind": {"group": t.group, "version": t.version, "kind": t.kind},
                                "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": t.singular,
                                "verbs": t.verbs(),
                            });
                            if !t.short_names.is_empty() {
                                r["shortNames"] = json!(t.short_names);
                            }
                            if !t.categories.is_empty() {
                                r["categories"] = json!(t.categories);
                            }
                            if !subs.is_empty() {
                                r["subresources"] = json!(subs);
                            }
                            r
                        })
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": g}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": if beta { "apidiscovery.k8s.io/v2beta1" } else { "apidiscovery.k8s.io/v2" }, "metadata": {}, "items": items})
}

/// Whether `Accept` asks for aggregated discovery (upstream's `WrapAggregatedDiscoveryToHandler`);
/// `Some(beta)` picks the version. Ranges are read in order of preference
/// (`tandem_core::accept::preferred`): the first `as=APIGroupDiscoveryList;g=apidiscovery.k8s.io`
/// with `v=v2` or `v=v2beta1` asks for it, unless a plain `application/json` or `*/*` (no
/// parameters) comes first, which asks for the unaggregated lists.
pub fn wants_aggregated(accept: Option<&str>) -> Option<bool> {
    for range in tandem_core::accept::preferred(accept?) {
        if range.param("g") == "apidiscovery.k8s.io" && range.param("as") == "APIGroupDiscoveryList"
        {
            match range.param("v") {
                "v2" => return Some(false),
                "v2beta1" => return Some(true),
                _ => {}
            }
        }
        if range.params.is_empty() && (range.is("application", "json") || range.is("*", "*")) {
            return None;
        }
    }
    None
}

/// `/version`, as upstream's `version.Info`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "gitVersion": concat!("v1.33.0+tandem-", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resource_list_has_pods_with_short_name_and_subresources() {
        let r = Registry::builtin();
        let list = resource_list(&r, "", "v1").expect("v1");
        let res = list["resources"].as_array().expect("array");
        let pods = res.iter().find(|x| x["name"] == "pods").expect("pods");
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert!(res.iter().any(|x| x["name"] == "pods/status"));
        let scale = res
            .iter()
            .find(|x| x["name"] == "replicationcontrollers/scale")
            .expect("rc scale");
        assert_eq!(scale["group"], json!("autoscaling"));
    }

    #[test]
    fn kubectl_accept_header_selects_aggregated_v2() {
        let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(wants_aggregated(Some(accept)), Some(false));
        assert_eq!(wants_aggregated(Some("application/json")), None);
    }

    #[test]
    fn aggregated_discovery_is_the_first_acceptable_range_by_weight_then_order() {
        let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        let v2beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
        let cases: &[(Option<&str>, Option<bool>)] = &[
            (None, None),
            (Some(""), None),
            (Some(v2), Some(false)),
            (Some(v2beta1), Some(true)),
            (
                Some(&format!("{v2beta1},{v2},application/json")),
                Some(true),
            ),
            (Some(&format!("application/json,{v2}")), None),
            // At equal weight the more specific range comes first.
            (Some(&format!("*/*,{v2}")), Some(false)),
            (Some(&format!("*/*;q=1,{v2};q=0.9")), None),
            (Some(&format!("application/json;q=0.5,{v2}")), Some(false)),
            (Some(&format!("{v2};q=0.5,{v2beta1}")), Some(true)),
            (Some(&format!("{v2};q=0,application/json")), None),
            // An unknown version, or a range that is not JSON, is passed over.
            (
                Some(&format!(
                    "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList,{v2beta1}"
                )),
                Some(true),
            ),
            (Some(&format!("text/html,{v2}")), Some(false)),
            (
                Some("application/json;g=example.com;v=v2;as=APIGroupDiscoveryList"),
                None,
            ),
        ];
        for (accept, expected) in cases {
            assert_eq!(wants_aggregated(*accept), *expected, "Accept: {accept:?}");
        }
    }
}
