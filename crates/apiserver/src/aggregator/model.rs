//! The pure half of aggregation: what an `APIService` asks for ([`RemoteSpec`]), the
//! `Available` condition upstream's `AvailableConditionController` writes for each outcome of
//! its checks ([`Check`]), the identity headers a proxied request carries (upstream's
//! `transport.SetAuthProxyHeaders`), and the discovery documents of the served group-versions
//! merged with those of the aggregated servers.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Value, json};

/// An `APIService` served by another server (`spec.service` set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteSpec {
    /// `VERSION.GROUP`.
    pub name: String,
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub service: String,
    pub port: u16,
    /// PEM certificates the server's certificate must chain to (empty: the system's roots).
    pub ca_bundle: Vec<u8>,
    pub insecure_skip_tls_verify: bool,
    pub group_priority: i64,
    pub version_priority: i64,
}

impl RemoteSpec {
    /// The spec of an `APIService` object, `None` for a local one (no `spec.service`).
    pub fn of(api_service: &Value) -> Option<RemoteSpec> {
        let spec = api_service.get("spec")?;
        let service = spec.get("service").filter(|s| s.is_object())?;
        let text = |v: &Value, k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let ca_bundle = spec
            .get("caBundle")
            .and_then(Value::as_str)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .unwrap_or_default();
        Some(RemoteSpec {
            name: api_service
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            group: text(spec, "group"),
            version: text(spec, "version"),
            namespace: text(service, "namespace"),
            service: text(service, "name"),
            port: service
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(443),
            ca_bundle,
            insecure_skip_tls_verify: spec
                .get("insecureSkipTLSVerify")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            group_priority: spec
                .get("groupPriorityMinimum")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            version_priority: spec
                .get("versionPriority")
                .and_then(Value::as_i64)
                .unwrap_or(0),
        })
    }

    /// The discovery path every aggregated server must serve, which the availability check reads.
    pub fn discovery_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

/// Whether an `APIService` object's `Available` condition is `True`.
pub(crate) fn is_available(api_service: &Value) -> bool {
    api_service
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Available" && c["status"] == "True")
}

/// The outcome of one availability check of a remote `APIService`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Check {
    /// The discovery document answered 2xx or 3xx.
    Passed,
    ServiceNotFound,
    /// The Service has no port `spec.service.port`.
    ServicePortError,
    /// No ready endpoint has the Service port's name.
    MissingEndpoints {
        port_name: String,
    },
    /// The discovery request failed: upstream's message (`failing or missing response from
    /// URL: …`, or `bad status from URL: CODE`).
    DiscoveryFailed(String),
}

/// The `Available` condition of `spec` after `check`: status, reason and message as upstream's.
pub(crate) fn condition(spec: &RemoteSpec, check: &Check) -> (&'static str, &'static str, String) {
    let (svc, ns) = (&spec.service, &spec.namespace);
    match check {
        Check::Passed => ("True", "Passed", "all checks passed".to_string()),
        Check::ServiceNotFound => (
            "False",
            "ServiceNotFound",
            format!("service/{svc} in {ns:?} is not present"),
        ),
        Check::ServicePortError => (
            "False",
            "ServicePortError",
            format!(
                "service/{svc} in {ns:?} is not listening on port {}",
                spec.port
            ),
        ),
        Check::MissingEndpoints { port_name } => (
            "False",
            "MissingEndpoints",
            format!(
                "endpoints for service/{svc} in {ns:?} have no addresses with port name {port_name:?}"
            ),
        ),
        Check::DiscoveryFailed(message) => ("False", "FailedDiscoveryCheck", message.clone()),
    }
}

/// The status to write for `current` (an `APIService` object) once its `Available` condition is
/// `(status, reason, message)`, or `None` when that is what it already says. The transition time
/// moves only when the status does.
pub(crate) fn next_status(
    current: &Value,
    (status, reason, message): (&str, &str, &str),
    now: &str,
) -> Option<Value> {
    let mut conditions: Vec<Value> = current
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let existing = conditions.iter().position(|c| c["type"] == "Available");
    if let Some(i) = existing {
        let c = &conditions[i];
        if c["status"] == status && c["reason"] == reason && c["message"] == message {
            return None;
        }
    }
    let since = existing
        .map(|i| &conditions[i])
        .filter(|c| c["status"] == status)
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(now));
    let fresh = json!({
        "type": "Available", "status": status, "lastTransitionTime": since,
        "reason": reason, "message": message,
    });
    match existing {
        Some(i) => conditions[i] = fresh,
        None => conditions.push(fresh),
    }
    Some(json!({ "conditions": conditions }))
}

/// The headers naming the requesting user to an aggregated server (upstream's front-proxy
/// `X-Remote-User`, one `X-Remote-Group` per group, `X-Remote-Extra-KEY` per extra value with
/// the key escaped as a URL path segment, lower-case).
pub(crate) fn identity_headers(
    name: &str,
    groups: &[String],
    extra: &BTreeMap<String, Vec<String>>,
) -> Vec<(String, String)> {
    let mut out = vec![("X-Remote-User".to_string(), name.to_string())];
    out.extend(
        groups
            .iter()
            .map(|g| ("X-Remote-Group".to_string(), g.clone())),
    );
    for (key, values) in extra {
        let header = format!("X-Remote-Extra-{}", escape_header_key(key));
        out.extend(values.iter().map(|v| (header.clone(), v.clone())));
    }
    out
}

/// Percent-escapes what may not appear in a header name (upstream escapes extra keys with
/// `url.PathEscape`, so `example.com/scopes` travels as `example.com%2fscopes`).
fn escape_header_key(key: &str) -> String {
    let mut out = String::new();
    for b in key.to_lowercase().bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    out
}

/// Whether a request header is one a client may not pass to an aggregated server: its
/// credentials and any identity headers of its own (the aggregated server trusts those only
/// from the front proxy, but a client's copies must not ride along with the real ones).
pub(crate) fn is_stripped_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower == "authorization"
        || lower.starts_with("impersonate-")
        || lower == "x-remote-user"
        || lower == "x-remote-group"
        || lower.starts_with("x-remote-extra-")
}

/// A group-version served by an aggregated server, with what its discovery said (`None`
/// before its first successful read).
#[derive(Debug, Clone)]
pub(crate) struct RemoteDiscovery {
    pub group: String,
    pub version: String,
    pub group_priority: i64,
    pub version_priority: i64,
    /// The server's `APIResourceList`.
    pub resources: Option<Value>,
    /// The last read failed: aggregated discovery marks the version `Stale`.
    pub stale: bool,
}

/// Upstream's version ordering for discovery (`version.CompareKubeAwareVersionStrings`): GA
/// before beta before alpha before anything else, higher numbers first.
fn version_rank(v: &str) -> (u8, i64, u8, i64, String) {
    let parse = |s: &str| -> Option<(i64, u8, i64)> {
        let rest = s.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: i64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((major, 0, 0));
        }
        for (label, rank) in [("beta", 1u8), ("alpha", 2u8)] {
            if let Some(n) = tail.strip_prefix(label) {
                return Some((major, rank, n.parse().ok()?));
            }
        }
        None
    };
    match parse(v) {
        Some((major, stage, minor)) => (0, -major, stage, -minor, String::new()),
        None => (1, 0, 0, 0, v.to_string()),
    }
}

/// The versions of `group` among `remotes`, in discovery order (version priority, then
/// upstream's version ordering).
fn remote_versions<'a>(remotes: &'a [RemoteDiscovery], group: &str) -> Vec<&'a RemoteDiscovery> {
    let mut versions: Vec<&RemoteDiscovery> = remotes.iter().filter(|r| r.group == group).collect();
    versions.sort_by(|a, b| {
        b.version_priority
            .cmp(&a.version_priority)
            .then_with(|| version_rank(&a.version).cmp(&version_rank(&b.version)))
    });
    versions
}

/// The groups of `remotes` not already in `local_groups`, by group priority (highest first)
/// then name.
fn new_groups(remotes: &[RemoteDiscovery], local_groups: &[String]) -> Vec<String> {
    let mut groups: Vec<(i64, String)> = Vec::new();
    for r in remotes {
        if r.group.is_empty() || local_groups.contains(&r.group) {
            continue;
        }
        match groups.iter_mut().find(|(_, g)| *g == r.group) {
            Some(entry) => entry.0 = entry.0.max(r.group_priority),
            None => groups.push((r.group_priority, r.group.clone())),
        }
    }
    groups.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    groups.into_iter().map(|(_, g)| g).collect()
}

/// Appends to `versions` the entries of `local`'s `versions` that no remote version replaces.
fn append_unreplaced(versions: &mut Vec<Value>, local: &Value, remote: &[&RemoteDiscovery]) {
    for v in local
        .get("versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if !remote.iter().any(|r| v["version"] == r.version.as_str()) {
            versions.push(v.clone());
        }
    }
}

fn group_version_entry(group: &str, version: &str) -> Value {
    json!({"groupVersion": format!("{group}/{version}"), "version": version})
}

/// `/apis/GROUP` of a group: the local document with the remote versions merged in (remote
/// versions replace local ones of the same name), or the remote group alone.
pub(crate) fn merge_group(
    local: Option<Value>,
    group: &str,
    remotes: &[RemoteDiscovery],
) -> Option<Value> {
    let remote = remote_versions(remotes, group);
    if remote.is_empty() {
        return local;
    }
    let mut versions: Vec<Value> = remote
        .iter()
        .map(|r| group_version_entry(group, &r.version))
        .collect();
    let preferred = match &local {
        // A local group keeps its preferred version unless a remote one replaced it.
        Some(l) => {
            append_unreplaced(&mut versions, l, &remote);
            l.get("preferredVersion")
                .filter(|p| !remote.iter().any(|r| p["version"] == r.version.as_str()))
                .cloned()
                .unwrap_or_else(|| versions[0].clone())
        }
        None => versions[0].clone(),
    };
    Some(json!({
        "kind": "APIGroup", "apiVersion": "v1", "name": group,
        "versions": versions, "preferredVersion": preferred,
    }))
}

/// `/apis`: the local APIGroupList with the aggregated groups merged in.
pub(crate) fn merge_group_list(mut local: Value, remotes: &[RemoteDiscovery]) -> Value {
    let Some(groups) = local.get_mut("groups").and_then(Value::as_array_mut) else {
        return local;
    };
    let names: Vec<String> = groups
        .iter()
        .filter_map(|g| g["name"].as_str().map(str::to_string))
        .collect();
    // A group of the list has no `kind` or `apiVersion` of its own.
    let entry = |local: Option<Value>, name: &str| {
        let mut merged = merge_group(local, name, remotes)?;
        if let Some(m) = merged.as_object_mut() {
            m.remove("kind");
            m.remove("apiVersion");
        }
        Some(merged)
    };
    for g in groups.iter_mut() {
        let name = g["name"].as_str().unwrap_or_default().to_string();
        if !remotes.iter().any(|r| r.group == name) {
            continue;
        }
        if let Some(merged) = entry(Some(g.clone()), &name) {
            *g = merged;
        }
    }
    for name in new_groups(remotes, &names) {
        groups.extend(entry(None, &name));
    }
    local
}

/// One version of an aggregated discovery document (`apidiscovery.k8s.io/v2`) built from an
/// aggregated server's `APIResourceList`: subresources (`pods/log`) folded under their
/// resource, the scope from `namespaced`.
fn aggregated_version(r: &RemoteDiscovery) -> Value {
    let listed: Vec<Value> = r
        .resources
        .as_ref()
        .and_then(|l| l.get("resources"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut resources: Vec<Value> = Vec::new();
    for res in listed.iter().filter(|x| {
        !x.get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .contains('/')
    }) {
        let name = res["name"].as_str().unwrap_or_default();
        let kind = |x: &Value| {
            json!({
                "group": x.get("group").and_then(Value::as_str).unwrap_or(r.group.as_str()),
                "version": x.get("version").and_then(Value::as_str).unwrap_or(r.version.as_str()),
                "kind": x.get("kind").cloned().unwrap_or(json!("")),
            })
        };
        let mut entry = json!({
            "resource": name,
            "responseKind": kind(res),
            "scope": if res["namespaced"].as_bool().unwrap_or(false) { "Namespaced" } else { "Cluster" },
            "singularResource": res.get("singularName").cloned().unwrap_or(json!("")),
            "verbs": res.get("verbs").cloned().unwrap_or(json!([])),
        });
        for key in ["shortNames", "categories"] {
            if let Some(v) = res
                .get(key)
                .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
            {
                entry[key] = v.clone();
            }
        }
        let subs: Vec<Value> = listed
            .iter()
            .filter_map(|x| {
                let (parent, sub) = x.get("name")?.as_str()?.split_once('/')?;
                (parent == name).then(|| {
                    json!({"subresource": sub, "responseKind": kind(x),
                           "verbs": x.get("verbs").cloned().unwrap_or(json!([]))})
                })
            })
            .collect();
        if !subs.is_empty() {
            entry["subresources"] = json!(subs);
        }
        resources.push(entry);
    }
    json!({
        "version": r.version, "resources": resources,
        "freshness": if r.stale { "Stale" } else { "Current" },
    })
}

/// `/apis` as aggregated discovery: the local document with the aggregated group-versions
/// merged in (a remote version replaces a local one of the same name). Versions whose
/// discovery was never read are left out.
pub(crate) fn merge_aggregated(mut local: Value, remotes: &[RemoteDiscovery]) -> Value {
    let read: Vec<RemoteDiscovery> = remotes
        .iter()
        .filter(|r| r.resources.is_some() && !r.group.is_empty())
        .cloned()
        .collect();
    let Some(items) = local.get_mut("items").and_then(Value::as_array_mut) else {
        return local;
    };
    let names: Vec<String> = items
        .iter()
        .filter_map(|i| i.pointer("/metadata/name")?.as_str().map(str::to_string))
        .collect();
    for item in items.iter_mut() {
        let group = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let remote = remote_versions(&read, &group);
        if remote.is_empty() {
            continue;
        }
        let mut versions: Vec<Value> = remote.iter().map(|r| aggregated_version(r)).collect();
        append_unreplaced(&mut versions, item, &remote);
        item["versions"] = json!(versions);
    }
    for group in new_groups(&read, &names) {
        let versions: Vec<Value> = remote_versions(&read, &group)
            .into_iter()
            .map(aggregated_version)
            .collect();
        items.push(json!({"metadata": {"name": group}, "versions": versions}));
    }
    local
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(group: &str, version: &str, resources: Option<Value>) -> RemoteDiscovery {
        RemoteDiscovery {
            group: group.into(),
            version: version.into(),
            group_priority: 100,
            version_priority: 100,
            resources,
            stale: false,
        }
    }

    #[test]
    fn a_remote_api_service_reads_its_service_and_tls_settings() {
        let svc = json!({
            "metadata": {"name": "v1alpha1.wardle.example.com"},
            "spec": {"group": "wardle.example.com", "version": "v1alpha1",
                     "service": {"namespace": "wardle", "name": "api"},
                     "caBundle": base64::engine::general_purpose::STANDARD.encode("PEM"),
                     "groupPriorityMinimum": 1000, "versionPriority": 15},
        });
        let spec = RemoteSpec::of(&svc).expect("remote");
        assert_eq!(
            (
                spec.port,
                spec.ca_bundle.as_slice(),
                spec.insecure_skip_tls_verify
            ),
            (443, b"PEM".as_slice(), false)
        );
        assert_eq!(spec.discovery_path(), "/apis/wardle.example.com/v1alpha1");
        let local =
            json!({"metadata": {"name": "v1.apps"}, "spec": {"group": "apps", "version": "v1"}});
        assert!(RemoteSpec::of(&local).is_none());
    }

    #[test]
    fn conditions_carry_upstreams_reasons_and_keep_their_transition_time() {
        let spec = RemoteSpec::of(&json!({"metadata": {"name": "v1.x.io"}, "spec": {
            "group": "x.io", "version": "v1", "service": {"namespace": "ns", "name": "api", "port": 8443}}}))
        .expect("remote");
        assert_eq!(
            condition(&spec, &Check::ServiceNotFound).2,
            "service/api in \"ns\" is not present"
        );
        assert_eq!(
            condition(&spec, &Check::ServicePortError).2,
            "service/api in \"ns\" is not listening on port 8443"
        );
        assert_eq!(
            condition(
                &spec,
                &Check::MissingEndpoints {
                    port_name: "https".into()
                }
            )
            .2,
            "endpoints for service/api in \"ns\" have no addresses with port name \"https\""
        );
        let (s, r, m) = condition(&spec, &Check::Passed);
        let obj = json!({"status": {"conditions": [{"type": "Available", "status": "False",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "ServiceNotFound", "message": "x"}]}});
        let next = next_status(&obj, (s, r, &m), "2026-02-02T00:00:00Z").expect("changed");
        assert_eq!(
            next["conditions"][0]["lastTransitionTime"],
            "2026-02-02T00:00:00Z"
        );
        let same = json!({"status": next.clone()});
        assert!(next_status(&same, (s, r, &m), "2026-03-03T00:00:00Z").is_none());
        // Another reason with the same status keeps the time.
        let failed = ("False", "MissingEndpoints", "y");
        let after = next_status(&obj, failed, "2026-04-04T00:00:00Z").expect("changed");
        assert_eq!(
            after["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
    }

    #[test]
    fn identity_headers_name_the_user_groups_and_escaped_extras() {
        let extra = BTreeMap::from([(
            "example.com/Scopes".to_string(),
            vec!["a".to_string(), "b".to_string()],
        )]);
        let h = identity_headers(
            "jane",
            &["dev".into(), "system:authenticated".into()],
            &extra,
        );
        assert_eq!(
            h,
            vec![
                ("X-Remote-User".into(), "jane".into()),
                ("X-Remote-Group".into(), "dev".into()),
                ("X-Remote-Group".into(), "system:authenticated".into()),
                ("X-Remote-Extra-example.com%2fscopes".into(), "a".into()),
                ("X-Remote-Extra-example.com%2fscopes".into(), "b".into()),
            ]
        );
        assert!(is_stripped_header("Authorization") && is_stripped_header("X-Remote-Extra-foo"));
        assert!(is_stripped_header("Impersonate-User") && !is_stripped_header("Accept"));
    }

    #[test]
    fn remote_groups_join_the_group_list_and_replace_local_versions() {
        let local = json!({"kind": "APIGroupList", "groups": [
            {"name": "metrics.k8s.io", "versions": [{"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}],
             "preferredVersion": {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}}]});
        let remotes = vec![
            remote("wardle.example.com", "v1alpha1", None),
            remote("wardle.example.com", "v1beta1", None),
            remote("metrics.k8s.io", "v1beta1", None),
        ];
        let merged = merge_group_list(local, &remotes);
        let groups = merged["groups"].as_array().expect("groups");
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0]["versions"].as_array().map(Vec::len), Some(1));
        assert_eq!(groups[1]["name"], "wardle.example.com");
        assert_eq!(groups[1]["preferredVersion"]["version"], "v1beta1");
        assert_eq!(groups[1]["versions"][1]["version"], "v1alpha1");
        assert!(merge_group(None, "other.io", &remotes).is_none());
    }

    #[test]
    fn aggregated_discovery_folds_subresources_and_skips_unread_versions() {
        let list = json!({"kind": "APIResourceList", "groupVersion": "wardle.example.com/v1alpha1", "resources": [
            {"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder",
             "verbs": ["get", "list"], "shortNames": ["fl"]},
            {"name": "flunders/status", "singularName": "", "namespaced": true, "kind": "Flunder", "verbs": ["get"]},
        ]});
        let remotes = vec![
            remote("wardle.example.com", "v1alpha1", Some(list)),
            remote("unread.example.com", "v1", None),
        ];
        let merged = merge_aggregated(
            json!({"kind": "APIGroupDiscoveryList", "items": []}),
            &remotes,
        );
        let items = merged["items"].as_array().expect("items");
        assert_eq!(items.len(), 1);
        let res = &items[0]["versions"][0]["resources"][0];
        assert_eq!(res["scope"], "Namespaced");
        assert_eq!(res["shortNames"], json!(["fl"]));
        assert_eq!(res["responseKind"]["group"], "wardle.example.com");
        assert_eq!(res["subresources"][0]["subresource"], "status");
        assert_eq!(items[0]["versions"][0]["freshness"], "Current");
    }

    #[test]
    fn versions_order_as_upstreams_kube_aware_comparison() {
        let mut vs = vec!["v1alpha1", "v2", "v1", "v1beta2", "v1beta1", "foo"];
        vs.sort_by_key(|v| version_rank(v));
        assert_eq!(
            vs,
            vec!["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }
}
