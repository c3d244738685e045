//! What exists from the first start: the namespaces `default`, `kube-system`, `kube-public` and
//! `kube-node-lease`, as upstream's `SystemNamespaces` controller ensures; the bootstrap RBAC
//! policy, as upstream's `rbac/bootstrap-roles` post-start hook reconciles it; and the
//! `kubernetes` Service.

use serde_json::json;

use crate::error::ApiResult;
use crate::rest::{Ctx, State};

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
    let json_of = |v: Result<serde_json::Value, serde_json::Error>| v.unwrap_or_default();
    let roles: Vec<serde_json::Value> = bootstrap::cluster_roles()
        .into_iter()
        .map(|r| json_of(serde_json::to_value(r)))
        .chain(
            bootstrap::roles()
                .into_iter()
                .map(|r| json_of(serde_json::to_value(r))),
        )
        .collect();
    let bindings: Vec<serde_json::Value> = bootstrap::cluster_role_bindings()
        .into_iter()
        .map(|r| json_of(serde_json::to_value(r)))
        .chain(
            bootstrap::role_bindings()
                .into_iter()
                .map(|r| json_of(serde_json::to_value(r))),
        )
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
    let mut ctx = Ctx::internal("system:apiserver");
    for _attempt in 0..5 {
        let current = match state.get(&rt, ns.as_deref(), &name).await {
            Ok(v) => Some(v),
            Err(e) if e.code == 404 => None,
            Err(e) => return Err(e),
        };
        let result = match current {
            None => {
                state
                    .create(&mut ctx, &rt, ns.as_deref(), desired.clone())
                    .await
            }
            Some(current) => {
                let auto = current
                    .pointer("/metadata/annotations/rbac.authorization.kubernetes.io~1autoupdate")
                    .and_then(serde_json::Value::as_str);
                if auto == Some("false") {
                    return Ok(());
                }
                let mut next = current.clone();
                merge(&mut next, &desired);
                if next == current {
                    return Ok(());
                }
                state
                    .update(&mut ctx, &rt, ns.as_deref(), &name, next, None)
                    .await
            }
        };
        match result {
            Ok(_) => return Ok(()),
            Err(e) if e.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
    let mut ctx = Ctx::internal("system:apiserver");
    for _attempt in 0..5 {
        let current = match state.get(&rt, Some("default"), name).await {
            Ok(v) => Some(v),
            Err(e) if e.code == 404 => None,
            Err(e) => return Err(e),
        };
        let result = match current {
            None => {
                state
                    .create(&mut ctx, &rt, Some("default"), desired.clone())
                    .await
            }
            Some(current) => {
                let mut next = current.clone();
                for f in fields {
                    next[*f] = desired[*f].clone();
                }
                if next == current {
                    return Ok(());
                }
                state
                    .update(&mut ctx, &rt, Some("default"), name, next, None)
                    .await
            }
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
