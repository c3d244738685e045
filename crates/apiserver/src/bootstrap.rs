//! What exists from the first start: the namespaces `default`, `kube-system`, `kube-public` and
//! `kube-node-lease`, as upstream's `SystemNamespaces` controller ensures; the bootstrap RBAC
//! policy, as upstream's `rbac/bootstrap-roles` post-start hook reconciles it; the two system
//! PriorityClasses (`scheduling/bootstrap-system-priority-classes`); an `APIService` for every
//! group-version served (the aggregator's `apiservice-registration-controller`, which registers
//! the local ones); the `kubernetes` Service; and `kube-system/extension-apiserver-authentication`,
//! the ConfigMap aggregated API servers read to trust the front proxy.

use serde_json::json;
use tandem_core::registry::ResourceType;

use crate::error::ApiResult;
use crate::rest::Ctx;
use crate::state::State;

/// The namespaces every cluster has.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Creates any missing system namespace.
pub async fn ensure_namespaces(state: &State) -> ApiResult<()> {
    let rt = state.resource("", "v1", "namespaces")?;
    for ns in SYSTEM_NAMESPACES {
        if state.store.get(&rt.key(None, ns)).await?.is_some() {
            continue;
        }
        let mut ctx = Ctx::internal("system:apiserver");
        match state
            .create(
                &mut ctx,
                &rt,
                None,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Creates or updates `default/kubernetes`: the Service on the first address of the service
/// range (port 443, `https`) and its EndpointSlice and Endpoints naming `endpoint`, where pods
/// reach this API server — what upstream's `kubernetesservice` controller and endpoint
/// reconciler keep in place. Called again whenever the address pods should use changes.
pub async fn ensure_kubernetes_service(
    state: &State,
    endpoint: std::net::SocketAddr,
) -> ApiResult<()> {
    let ip = state.options.service_ranges.kubernetes_ip().to_string();
    let port = endpoint.port();
    let address = endpoint.ip().to_string();
    let address_type = if endpoint.is_ipv4() { "IPv4" } else { "IPv6" };
    upsert(
        state,
        ("", "v1", "services"),
        "kubernetes",
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
                     "sessionAffinity": "None",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]},
        }),
        &["spec"],
    )
    .await?;
    upsert(
        state,
        ("discovery.k8s.io", "v1", "endpointslices"),
        "kubernetes",
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": address_type,
            "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }),
        &["addressType", "endpoints", "ports"],
    )
    .await?;
    upsert(
        state,
        ("", "v1", "endpoints"),
        "kubernetes",
        json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": address}],
                         "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
        }),
        &["subsets"],
    )
    .await
}

/// Creates the bootstrap RBAC policy (`tandem_core::rbac::bootstrap`) and reconciles it as
/// upstream does on every start: objects annotated `rbac.authorization.kubernetes.io/autoupdate:
/// "false"` are left alone; otherwise a role gets the bootstrap rules back (an aggregated one
/// keeps the rules its controller gathered) and a binding gets any missing bootstrap subject.
pub async fn ensure_rbac(state: &State) -> ApiResult<()> {
    use tandem_core::rbac::bootstrap;
    let roles: Vec<serde_json::Value> = json_of(bootstrap::cluster_roles())
        .chain(json_of(bootstrap::roles()))
        .collect();
    let bindings: Vec<serde_json::Value> = json_of(bootstrap::cluster_role_bindings())
        .chain(json_of(bootstrap::role_bindings()))
        .collect();
    for desired in roles {
        let plural = if desired["kind"] == "Role" {
            "roles"
        } else {
            "clusterroles"
        };
        reconcile(state, plural, desired, |current, desired| {
            if current.get("aggregationRule").is_some_and(|a| !a.is_null()) {
                current["aggregationRule"] = desired["aggregationRule"].clone();
            } else {
                current["rules"] = desired["rules"].clone();
            }
        })
        .await?;
    }
    for desired in bindings {
        let plural = if desired["kind"] == "RoleBinding" {
            "rolebindings"
        } else {
            "clusterrolebindings"
        };
        reconcile(state, plural, desired, |current, desired| {
            let mut subjects = current
                .get("subjects")
                .and_then(serde_json::Value::as_array)
                .cloned()
                .unwrap_or_default();
            for s in desired
                .get("subjects")
                .and_then(serde_json::Value::as_array)
                .into_iter()
                .flatten()
            {
                if !subjects.contains(s) {
                    subjects.push(s.clone());
                }
            }
            if !subjects.is_empty() {
                current["subjects"] = json!(subjects);
            }
        })
        .await?;
    }
    Ok(())
}

/// The JSON of bootstrap objects (plain data, which always serializes; `null` if one did not).
fn json_of<T: serde::Serialize>(objects: Vec<T>) -> impl Iterator<Item = serde_json::Value> {
    objects
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap_or_default())
}

/// Creates one bootstrap RBAC object or brings the stored one back with `merge`.
async fn reconcile(
    state: &State,
    plural: &str,
    desired: serde_json::Value,
    merge: impl Fn(&mut serde_json::Value, &serde_json::Value),
) -> ApiResult<()> {
    let rt = state.resource("rbac.authorization.k8s.io", "v1", plural)?;
    let name = desired
        .pointer("/metadata/name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_string();
    let ns = desired
        .pointer("/metadata/namespace")
        .and_then(serde_json::Value::as_str)
        .map(str::to_string);
    create_or_update(state, &rt, ns.as_deref(), &name, &desired, |current| {
        let auto = current
            .pointer("/metadata/annotations/rbac.authorization.kubernetes.io~1autoupdate")
            .and_then(serde_json::Value::as_str);
        if auto == Some("false") {
            return None;
        }
        let mut next = current.clone();
        merge(&mut next, &desired);
        Some(next)
    })
    .await
}

/// Creates `desired` in `default`, or, when it exists, writes its `fields` over the stored
/// object if they differ (the rest of the stored object, e.g. an allocated clusterIP, is kept).
async fn upsert(
    state: &State,
    (group, version, plural): (&str, &str, &str),
    name: &str,
    desired: serde_json::Value,
    fields: &[&str],
) -> ApiResult<()> {
    let rt = state.resource(group, version, plural)?;
    create_or_update(state, &rt, Some("default"), name, &desired, |current| {
        let mut next = current.clone();
        for f in fields {
            next[*f] = desired[*f].clone();
        }
        Some(next)
    })
    .await
}

/// Creates or updates `kube-system/extension-apiserver-authentication` as upstream's
/// `ClientCARegistrationHook` writes it: the CA of client certificates (`client-ca-file`) and
/// the request-header settings an aggregated server needs to trust the identity headers of the
/// front proxy (`requestheader-*`: its CA, the one allowed client name and the header names).
pub async fn ensure_authentication_config_map(
    state: &State,
    client_ca_pem: &str,
    requestheader_ca_pem: &str,
) -> ApiResult<()> {
    let rt = state.resource("", "v1", "configmaps")?;
    let list = |items: &[&str]| serde_json::to_string(items).unwrap_or_default();
    let data = json!({
        "client-ca-file": client_ca_pem,
        "requestheader-client-ca-file": requestheader_ca_pem,
        "requestheader-allowed-names": list(&[crate::pki::FRONT_PROXY_CLIENT_CN]),
        "requestheader-extra-headers-prefix": list(&["X-Remote-Extra-"]),
        "requestheader-group-headers": list(&["X-Remote-Group"]),
        "requestheader-username-headers": list(&["X-Remote-User"]),
    });
    let desired = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
        "data": data,
    });
    create_or_update(
        state,
        &rt,
        Some("kube-system"),
        "extension-apiserver-authentication",
        &desired,
        |current| {
            let mut next = current.clone();
            next["data"] = desired["data"].clone();
            Some(next)
        },
    )
    .await
}

/// Creates `desired` as `name` (in `ns`), or, when it exists, updates it to what `next` makes
/// of the stored object; `None`, or the object unchanged, leaves it as it is. A conflict with
/// another writer reads the object again, up to five attempts.
async fn create_or_update(
    state: &State,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    desired: &serde_json::Value,
    next: impl Fn(&serde_json::Value) -> Option<serde_json::Value>,
) -> ApiResult<()> {
    let mut ctx = Ctx::internal("system:apiserver");
    for _attempt in 0..5 {
        let current = match state.get(rt, ns, name).await {
            Ok(v) => Some(v),
            Err(e) if e.code == 404 => None,
            Err(e) => return Err(e),
        };
        let result = match current {
            None => state.create(&mut ctx, rt, ns, desired.clone()).await,
            Some(current) => match next(&current) {
                Some(next) if next != current => {
                    state.update(&mut ctx, rt, ns, name, next, None).await
                }
                _ => return Ok(()),
            },
        };
        match result {
            Ok(_) => return Ok(()),
            // Raced with another writer: look again.
            Err(e) if e.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The PriorityClasses every cluster has (upstream `scheduling.SystemPriorityClasses`).
const SYSTEM_PRIORITY_CLASSES: &[(&str, i64, &str)] = &[
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

/// Creates any missing system PriorityClass. An existing one is left as it is, as upstream's
/// post-start hook leaves it.
pub async fn ensure_priority_classes(state: &State) -> ApiResult<()> {
    let rt = state.resource("scheduling.k8s.io", "v1", "priorityclasses")?;
    for (name, value, description) in SYSTEM_PRIORITY_CLASSES {
        if state.store.get(&rt.key(None, name)).await?.is_some() {
            continue;
        }
        let mut ctx = Ctx::internal("system:apiserver");
        let class = json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "description": description,
        });
        match state.create(&mut ctx, &rt, None, class).await {
            Ok(_) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The aggregator's ordering of a local group-version: `(groupPriorityMinimum,
/// versionPriority)`, as upstream's `apiVersionPriorities` table gives them. Groups upstream
/// serves as custom resources (`windows.k8s.io`) get the CRD registration controller's values.
fn api_service_priority(group: &str) -> (i64, i64) {
    match group {
        "" => (18000, 1),
        "apiregistration.k8s.io" => (18000, 15),
        "apps" => (17800, 15),
        "events.k8s.io" => (17750, 15),
        "authentication.k8s.io" => (17700, 15),
        "authorization.k8s.io" => (17600, 15),
        "autoscaling" => (17500, 15),
        "batch" => (17400, 15),
        "certificates.k8s.io" => (17300, 15),
        "networking.k8s.io" => (17200, 15),
        "policy" => (17100, 15),
        "rbac.authorization.k8s.io" => (17000, 15),
        "storage.k8s.io" => (16800, 15),
        "apiextensions.k8s.io" | "admissionregistration.k8s.io" => (16700, 15),
        "scheduling.k8s.io" => (16600, 15),
        "coordination.k8s.io" => (16500, 15),
        "node.k8s.io" => (16300, 15),
        "discovery.k8s.io" => (16200, 15),
        _ => (1000, 100),
    }
}

/// The `APIService` of a group-version served by this server (`spec.service` unset: handled
/// locally), with the `Available` condition upstream's availability controller gives local
/// services.
pub fn local_api_service(group: &str, version: &str) -> (serde_json::Value, serde_json::Value) {
    let (group_priority, version_priority) = api_service_priority(group);
    let mut spec = json!({
        "version": version,
        "groupPriorityMinimum": group_priority,
        "versionPriority": version_priority,
    });
    if !group.is_empty() {
        spec["group"] = json!(group);
    }
    let automanaged = if api_service_priority(group) == (1000, 100) {
        "true"
    } else {
        "onstart"
    };
    let object = json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": format!("{version}.{group}"),
                     "labels": {"kube-aggregator.kubernetes.io/automanaged": automanaged}},
        "spec": spec,
    });
    let status = json!({"conditions": [{
        "type": "Available", "status": "True",
        "lastTransitionTime": tandem_core::time::now_rfc3339(),
        "reason": "Local", "message": "Local APIServices are always available",
    }]});
    (object, status)
}

/// Creates the `APIService` of every group-version served by built-in types, and gives each
/// the `Available` status of a local service. Existing ones keep their spec.
pub async fn ensure_api_services(state: &State) -> ApiResult<()> {
    let served = state.registry.load().group_versions();
    for (group, version) in served {
        ensure_api_service(state, &group, &version).await?;
    }
    Ok(())
}

/// Creates the local `APIService` of `version.group` unless it exists, and marks it
/// `Available` unless it is.
pub async fn ensure_api_service(state: &State, group: &str, version: &str) -> ApiResult<()> {
    let rt = state.resource("apiregistration.k8s.io", "v1", "apiservices")?;
    let (object, status) = local_api_service(group, version);
    let name = format!("{version}.{group}");
    let mut ctx = Ctx::internal("system:apiserver");
    let current = match state.get(&rt, None, &name).await {
        Ok(v) => v,
        Err(e) if e.code == 404 => match state.create(&mut ctx, &rt, None, object).await {
            Ok(_) => state.get(&rt, None, &name).await?,
            Err(e) if e.code == 409 => return Ok(()),
            Err(e) => return Err(e),
        },
        Err(e) => return Err(e),
    };
    // Handed to another server (a user's metrics-server, say): its availability is the
    // aggregator's to judge.
    if current
        .pointer("/spec/service")
        .is_some_and(|s| s.is_object())
    {
        return Ok(());
    }
    let available = current
        .pointer("/status/conditions")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Available" && c["status"] == "True")
        });
    if available {
        return Ok(());
    }
    let mut next = current;
    next["status"] = status;
    match state
        .update(&mut ctx, &rt, None, &name, next, Some("status"))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}
