//! A container's environment, resolved the way the kubelet does before it creates a container
//! (`pkg/kubelet/kubelet_pods.go` `makeEnvironmentVariables`): `envFrom` ConfigMaps and Secrets,
//! then `env` in order with `$(VAR)` expansion, `valueFrom` references (ConfigMap and Secret keys,
//! the downward API's `fieldRef` and `resourceFieldRef`), then the service link variables.
//!
//! Failures carry the kubelet's messages verbatim: the pod worker shows them as the
//! `CreateContainerConfigError` message of the container, where users search for them. For that
//! reason an [`EnvError`]'s `Display` is the whole upstream text, causes included.
//!
//! The design is cache-free: every call GETs each referenced ConfigMap and Secret once (and
//! LISTs the Services of the namespace once for the service links), where the kubelet reads
//! watch-backed caches.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ObjectFieldSelector, Pod, ResourceFieldSelector, Secret, Service,
};
use kube::api::{Api, ListParams};
use tandem_core::field::go_quote;
use tandem_core::validation::names;
use tandem_core::validation::quantity::Quantity;

use crate::config::Resources;

/// The node- and sandbox-level facts a container's environment (and the pod's downward API
/// volumes) can refer to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvContext {
    /// `status.podIP`; superseded by the first of [`pod_ips`](Self::pod_ips) when that is set,
    /// as upstream does.
    pub pod_ip: Option<String>,
    /// `status.podIPs`, primary family first.
    pub pod_ips: Vec<String>,
    /// `status.hostIP`: the node's primary address.
    pub host_ip: Option<String>,
    /// `status.hostIPs`; when empty, [`host_ip`](Self::host_ip) alone.
    pub host_ips: Vec<String>,
    /// The node the pod runs on; `spec.nodeName` falls back to it when the pod has none.
    pub node_name: String,
    /// The node's allocatable resources: `limits.*` of a container without a limit resolve to
    /// these (upstream `defaultPodLimitsForDownwardAPI`).
    pub node_allocatable: Resources,
}

/// Why a container's environment could not be built. `Display` is the kubelet's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// A required ConfigMap does not exist (the kubelet's ConfigMap manager wording).
    #[error("configmap {} not found", go_quote(.name))]
    ConfigMapNotFound { name: String },
    /// A required Secret does not exist.
    #[error("secret {} not found", go_quote(.name))]
    SecretNotFound { name: String },
    /// A required `configMapKeyRef` names a key the ConfigMap lacks.
    #[error("couldn't find key {key} in ConfigMap {namespace}/{name}")]
    ConfigMapKeyNotFound {
        key: String,
        namespace: String,
        name: String,
    },
    /// A required `secretKeyRef` names a key the Secret lacks.
    #[error("couldn't find key {key} in Secret {namespace}/{name}")]
    SecretKeyNotFound {
        key: String,
        namespace: String,
        name: String,
    },
    /// The API server could not be asked for an object (not a NotFound).
    #[error("couldn't get {kind} {namespace}/{name}: {message}")]
    Api {
        kind: &'static str,
        namespace: String,
        name: String,
        message: String,
    },
    /// Listing Services for the service link variables failed.
    #[error("failed to list services when setting up env vars")]
    ListServices,
    /// A `fieldRef` with an `apiVersion` other than `v1`.
    #[error("unsupported pod version: {0}")]
    UnsupportedPodVersion(String),
    /// A `fieldRef` path the downward API does not know.
    #[error("field label not supported: {0}")]
    FieldLabelNotSupported(String),
    /// A subscript (`['k']`) on a path other than labels and annotations.
    #[error("field label does not support subscript: {0}")]
    FieldLabelSubscript(String),
    /// A path the downward API accepts but cannot resolve here (`spec.restartPolicy`,
    /// `status.phase`, … upstream's `ExtractFieldPathAsString`; or any non-metadata path in a
    /// downwardAPI volume).
    #[error("unsupported fieldPath: {0}")]
    UnsupportedFieldPath(String),
    /// `metadata.labels['…']` / `metadata.annotations['…']` with an invalid key.
    #[error("invalid key subscript in {path}: {reason}")]
    InvalidSubscript { path: String, reason: String },
    /// `status.hostIP(s)` asked for while the node has no known address.
    #[error("host IP unknown; known addresses: []")]
    HostIpUnknown,
    /// A `resourceFieldRef` resource the downward API does not expose.
    #[error("unsupported container resource : {0}")]
    UnsupportedResource(String),
    /// A `resourceFieldRef.containerName` naming no container of the pod.
    #[error("container {0} not found")]
    ContainerNotFound(String),
    /// A resource quantity or divisor that does not parse (API validation normally prevents it).
    #[error("invalid quantity {value:?} for {field}")]
    InvalidQuantity { field: String, value: String },
}

/// Builds the environment of `container` in `pod`, in a stable order: `envFrom` variables
/// (sources in order, keys sorted), then each `env` entry in declaration order (a name defined
/// earlier keeps its position and takes the new value), then the service link variables not
/// already defined, sorted. (The kubelet builds a Go map, so its order is unspecified.)
///
/// Semantics follow upstream `makeEnvironmentVariables`:
/// - a missing ConfigMap/Secret is an error unless the reference is `optional`, in which case
///   the source (or variable) is skipped: an optional missing `valueFrom` leaves any value
///   `envFrom` gave the name in place;
/// - `envFrom` reads a ConfigMap's `data` only (not `binaryData`); Secret values are decoded
///   bytes, converted lossily where they are not UTF-8;
/// - `envFrom` keys that are not valid environment variable names are skipped with a warning.
///   Since v1.30 (`RelaxedEnvironmentVariableValidation`) every valid ConfigMap/Secret key is a
///   valid name, so this only catches objects that bypassed validation;
/// - `value` is expanded against the variables defined so far and the service variables;
///   `$(UNDEFINED)` stays verbatim and `$$` is an escaped `$` (see [`expand`]);
/// - `resourceFieldRef` `limits.*` that the container does not set resolve to the node's
///   allocatable ([`EnvContext::node_allocatable`]).
pub async fn container_env(
    client: &kube::Client,
    pod: &Pod,
    container: &Container,
    ctx: &EnvContext,
) -> Result<Vec<(String, String)>, EnvError> {
    let namespace = pod_namespace(pod);
    let mut objects = Objects::new(client, &namespace);
    let service_env = service_env(client, pod, &namespace).await?;
    let mut env = OrderedEnv::default();

    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.as_deref().unwrap_or("");
        if let Some(cm) = &source.config_map_ref {
            let Some(config_map) = objects.config_map(&cm.name, is_true(cm.optional)).await? else {
                continue;
            };
            let data = config_map
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k, v.clone()));
            add_env_from(&mut env, prefix, data, "configMap", &namespace, &cm.name);
        } else if let Some(s) = &source.secret_ref {
            let Some(secret) = objects.secret(&s.name, is_true(s.optional)).await? else {
                continue;
            };
            let data = secret
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()));
            add_env_from(&mut env, prefix, data, "secret", &namespace, &s.name);
        }
    }

    for var in container.env.iter().flatten() {
        let literal = var.value.as_deref().unwrap_or("");
        let value = if !literal.is_empty() {
            expand(literal, |name| {
                env.get(name)
                    .or_else(|| service_env.get(name).map(String::as_str))
                    .map_or_else(|| wrap_reference(name), str::to_owned)
            })
        } else if let Some(from) = &var.value_from {
            if let Some(field) = &from.field_ref {
                pod_field_value(field, pod, ctx)?
            } else if let Some(resource) = &from.resource_field_ref {
                resource_field_value(resource, pod, container, ctx)?
            } else if let Some(key_ref) = &from.config_map_key_ref {
                let optional = is_true(key_ref.optional);
                let Some(config_map) = objects.config_map(&key_ref.name, optional).await? else {
                    continue;
                };
                match config_map.data.as_ref().and_then(|d| d.get(&key_ref.key)) {
                    Some(v) => v.clone(),
                    None if optional => continue,
                    None => {
                        return Err(EnvError::ConfigMapKeyNotFound {
                            key: key_ref.key.clone(),
                            namespace: namespace.clone(),
                            name: key_ref.name.clone(),
                        });
                    }
                }
            } else if let Some(key_ref) = &from.secret_key_ref {
                let optional = is_true(key_ref.optional);
                let Some(secret) = objects.secret(&key_ref.name, optional).await? else {
                    continue;
                };
                match secret.data.as_ref().and_then(|d| d.get(&key_ref.key)) {
                    Some(v) => String::from_utf8_lossy(&v.0).into_owned(),
                    None if optional => continue,
                    None => {
                        return Err(EnvError::SecretKeyNotFound {
                            key: key_ref.key.clone(),
                            namespace: namespace.clone(),
                            name: key_ref.name.clone(),
                        });
                    }
                }
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        env.set(&var.name, value);
    }

    let mut result = env.into_vec();
    let defined: std::collections::HashSet<String> =
        result.iter().map(|(k, _)| k.clone()).collect();
    result.extend(
        service_env
            .into_iter()
            .filter(|(k, _)| !defined.contains(k)),
    );
    Ok(result)
}

/// Expands `$(VAR)` references in the container's `command` and `args` against its resolved
/// environment (upstream `ExpandContainerCommandAndArgs`); a later duplicate name wins, and an
/// undefined reference stays verbatim.
pub fn expand_command(
    container: &Container,
    env: &[(String, String)],
) -> (Vec<String>, Vec<String>) {
    let map: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let expand_all = |items: Option<&Vec<String>>| -> Vec<String> {
        items
            .into_iter()
            .flatten()
            .map(|item| {
                expand(item, |name| {
                    map.get(name)
                        .map_or_else(|| wrap_reference(name), |v| (*v).to_owned())
                })
            })
            .collect()
    };
    (
        expand_all(container.command.as_ref()),
        expand_all(container.args.as_ref()),
    )
}

/// Kubernetes' variable expansion (upstream `third_party/forked/golang/expansion.Expand`):
/// `$(NAME)` is replaced by `mapping(NAME)`, `$$` is an escaped `$`, and every other `$` is
/// kept as written — including an unterminated `$(`. References are not nested: `$(A$(B))`
/// asks `mapping` for `A$(B`. A mapping that does not know a name should return
/// [`wrap_reference`] of it so the reference stays verbatim.
pub fn expand(input: &str, mut mapping: impl FnMut(&str) -> String) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            // How many bytes after the `$` the construct consumed.
            let consumed = match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        out.push_str(&mapping(&rest[1..close]));
                        close + 1
                    }
                    None => {
                        out.push_str("$(");
                        1
                    }
                },
                _ => {
                    let c = rest.chars().next().unwrap_or('$');
                    out.push('$');
                    out.push(c);
                    c.len_utf8()
                }
            };
            cursor += consumed;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    out.push_str(&input[checkpoint.min(input.len())..]);
    out
}

/// `$(name)`: what a mapping returns for a name it does not know, so the text stays verbatim.
pub fn wrap_reference(name: &str) -> String {
    format!("$({name})")
}

/// The value of a `fieldRef` for the environment (upstream `podFieldSelectorRuntimeValue`).
pub fn pod_field_value(
    selector: &ObjectFieldSelector,
    pod: &Pod,
    ctx: &EnvContext,
) -> Result<String, EnvError> {
    let path = convert_field_label(selector.api_version.as_deref(), &selector.field_path)?;
    let spec = pod.spec.as_ref();
    match path.as_str() {
        "spec.nodeName" => Ok(spec
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| ctx.node_name.clone())),
        "spec.serviceAccountName" => Ok(spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default()),
        "status.hostIP" => host_ips(ctx)?
            .first()
            .cloned()
            .ok_or(EnvError::HostIpUnknown),
        "status.hostIPs" => Ok(host_ips(ctx)?.join(",")),
        "status.podIP" => Ok(ctx
            .pod_ips
            .first()
            .cloned()
            .or_else(|| ctx.pod_ip.clone())
            .unwrap_or_default()),
        "status.podIPs" => Ok(ctx.pod_ips.join(",")),
        _ => metadata_field_value(pod, &path),
    }
}

fn host_ips(ctx: &EnvContext) -> Result<Vec<String>, EnvError> {
    if !ctx.host_ips.is_empty() {
        return Ok(ctx.host_ips.clone());
    }
    ctx.host_ip
        .clone()
        .filter(|ip| !ip.is_empty())
        .map(|ip| vec![ip])
        .ok_or(EnvError::HostIpUnknown)
}

/// Upstream `ConvertDownwardAPIFieldLabel` for pods: the paths the downward API accepts, with
/// the legacy `spec.host` renamed.
fn convert_field_label(api_version: Option<&str>, label: &str) -> Result<String, EnvError> {
    let version = api_version.filter(|v| !v.is_empty()).unwrap_or("v1");
    if version != "v1" {
        return Err(EnvError::UnsupportedPodVersion(version.to_owned()));
    }
    if let Some((path, _)) = split_subscript(label) {
        return match path {
            "metadata.annotations" | "metadata.labels" => Ok(label.to_owned()),
            _ => Err(EnvError::FieldLabelSubscript(label.to_owned())),
        };
    }
    match label {
        "metadata.annotations"
        | "metadata.labels"
        | "metadata.name"
        | "metadata.namespace"
        | "metadata.uid"
        | "spec.nodeName"
        | "spec.restartPolicy"
        | "spec.serviceAccountName"
        | "spec.schedulerName"
        | "status.phase"
        | "status.hostIP"
        | "status.hostIPs"
        | "status.podIP"
        | "status.podIPs" => Ok(label.to_owned()),
        "spec.host" => Ok("spec.nodeName".to_owned()),
        _ => Err(EnvError::FieldLabelNotSupported(label.to_owned())),
    }
}

/// Upstream `fieldpath.SplitMaybeSubscriptedPath`: `metadata.labels['k']` → (`metadata.labels`,
/// `k`).
fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let inner = path.strip_suffix("']")?;
    let (head, key) = inner.split_once("['")?;
    (!head.is_empty()).then_some((head, key))
}

/// The metadata paths of the downward API (upstream `fieldpath.ExtractFieldPathAsString`):
/// `metadata.name`, `.namespace`, `.uid`, `.labels`, `.annotations` (whole maps in
/// [`format_map`] form, or one key by subscript). Anything else is
/// [`EnvError::UnsupportedFieldPath`]; downwardAPI volumes use only this.
pub fn metadata_field_value(pod: &Pod, path: &str) -> Result<String, EnvError> {
    let meta = &pod.metadata;
    if let Some((head, key)) = split_subscript(path) {
        let (map, key_to_check) = match head {
            "metadata.annotations" => (meta.annotations.as_ref(), key.to_lowercase()),
            "metadata.labels" => (meta.labels.as_ref(), key.to_owned()),
            _ => {
                return Err(EnvError::UnsupportedFieldPath(path.to_owned()));
            }
        };
        let errs = names::qualified_name(&key_to_check);
        if !errs.is_empty() {
            return Err(EnvError::InvalidSubscript {
                path: path.to_owned(),
                reason: errs.join(";"),
            });
        }
        return Ok(map.and_then(|m| m.get(key)).cloned().unwrap_or_default());
    }
    match path {
        "metadata.annotations" => Ok(format_map(meta.annotations.as_ref())),
        "metadata.labels" => Ok(format_map(meta.labels.as_ref())),
        "metadata.name" => Ok(meta.name.clone().unwrap_or_default()),
        "metadata.namespace" => Ok(meta.namespace.clone().unwrap_or_default()),
        "metadata.uid" => Ok(meta.uid.clone().unwrap_or_default()),
        _ => Err(EnvError::UnsupportedFieldPath(path.to_owned())),
    }
}

/// Upstream `fieldpath.FormatMap`: `key="value"` lines sorted by key, values quoted like Go's
/// `strconv.Quote`, no trailing newline.
pub fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The value of a `resourceFieldRef` (upstream `containerResourceRuntimeValue` over
/// `defaultPodLimitsForDownwardAPI`): `container` itself when the selector names no container,
/// else the named container of the pod (init containers included). Limits the container does
/// not set (or sets to zero) for cpu, memory and ephemeral-storage are the node's allocatable.
pub fn resource_field_value(
    selector: &ResourceFieldSelector,
    pod: &Pod,
    container: &Container,
    ctx: &EnvContext,
) -> Result<String, EnvError> {
    let target = match selector.container_name.as_deref().filter(|n| !n.is_empty()) {
        None => container,
        Some(name) => find_container(pod, name)?,
    };
    container_resource_value(selector, target, &ctx.node_allocatable)
}

/// Upstream `findContainerInPod`.
pub(crate) fn find_container<'a>(pod: &'a Pod, name: &str) -> Result<&'a Container, EnvError> {
    let spec = pod.spec.as_ref();
    spec.into_iter()
        .flat_map(|s| s.containers.iter())
        .chain(
            spec.into_iter()
                .flat_map(|s| s.init_containers.iter().flatten()),
        )
        .find(|c| c.name == name)
        .ok_or_else(|| EnvError::ContainerNotFound(name.to_owned()))
}

/// Upstream `ExtractContainerResourceValue` after `MergeContainerResourceLimits`: cpu in
/// `ceil(milli / divisor-milli)`, the byte resources (memory, ephemeral-storage, hugepages-*) in
/// `ceil(value / divisor)`, where an unset or zero divisor is 1.
pub(crate) fn container_resource_value(
    selector: &ResourceFieldSelector,
    container: &Container,
    allocatable: &Resources,
) -> Result<String, EnvError> {
    let (kind, resource) = selector
        .resource
        .split_once('.')
        .filter(|(kind, _)| matches!(*kind, "limits" | "requests"))
        .ok_or_else(|| EnvError::UnsupportedResource(selector.resource.clone()))?;
    let is_cpu = resource == "cpu";
    let bytes_like =
        matches!(resource, "memory" | "ephemeral-storage") || resource.starts_with("hugepages-");
    if !is_cpu && !bytes_like {
        return Err(EnvError::UnsupportedResource(selector.resource.clone()));
    }
    let resources = container.resources.as_ref();
    let list = if kind == "limits" {
        resources.and_then(|r| r.limits.as_ref())
    } else {
        resources.and_then(|r| r.requests.as_ref())
    };
    let mut nanos = match list.and_then(|l| l.get(resource)) {
        Some(q) => parse_quantity(&selector.resource, &q.0)?.nanos(),
        None => 0,
    };
    if kind == "limits" && nanos == 0 {
        // Hugepages are never overcommitted, so upstream does not default them.
        nanos = match resource {
            "cpu" => i128::from(allocatable.cpu_millis) * 1_000_000,
            "memory" => i128::from(allocatable.memory) * 1_000_000_000,
            "ephemeral-storage" => i128::from(allocatable.ephemeral_storage) * 1_000_000_000,
            _ => nanos,
        };
    }
    let divisor = match selector.divisor.as_ref() {
        Some(d) => parse_quantity("divisor", &d.0)?.nanos(),
        None => 0,
    };
    // An unset or zero divisor is "1".
    let divisor = if divisor == 0 { 1_000_000_000 } else { divisor };
    if divisor < 0 {
        return Err(EnvError::InvalidQuantity {
            field: "divisor".to_owned(),
            value: selector
                .divisor
                .as_ref()
                .map(|d| d.0.clone())
                .unwrap_or_default(),
        });
    }
    // Both sides are first rounded up to whole units (milli-units for cpu), as Quantity's
    // MilliValue()/Value() do, then divided rounding up.
    let unit: i128 = if is_cpu { 1_000_000 } else { 1_000_000_000 };
    let value = ceil_div(nanos, unit);
    let divisor_units = ceil_div(divisor, unit).max(1);
    Ok(ceil_div(value, divisor_units).to_string())
}

fn parse_quantity(field: &str, text: &str) -> Result<Quantity, EnvError> {
    Quantity::parse(text).ok_or_else(|| EnvError::InvalidQuantity {
        field: field.to_owned(),
        value: text.to_owned(),
    })
}

/// `ceil(a / b)` for `b > 0`.
fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 { q } else { q + 1 }
}

fn is_true(flag: Option<bool>) -> bool {
    flag.unwrap_or(false)
}

/// The pod's namespace, `default` when the object carries none.
pub(crate) fn pod_namespace(pod: &Pod) -> String {
    pod.metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

/// The text of a kube-rs error as the API server phrased it (`configmaps "x" is forbidden…`).
pub(crate) fn api_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}

/// Adds the keys of one `envFrom` source, skipping names that cannot be environment variables.
fn add_env_from(
    env: &mut OrderedEnv,
    prefix: &str,
    data: impl Iterator<Item = (impl AsRef<str>, String)>,
    kind: &str,
    namespace: &str,
    name: &str,
) {
    let mut invalid = Vec::new();
    for (key, value) in data {
        let var = format!("{prefix}{}", key.as_ref());
        if names::env_var_name(&var).is_empty() {
            env.set(&var, value);
        } else {
            invalid.push(var);
        }
    }
    if !invalid.is_empty() {
        invalid.sort();
        tracing::warn!(
            "Keys [{}] from the EnvFrom {kind} {namespace}/{name} were skipped since they are considered invalid environment variable names.",
            invalid.join(", ")
        );
    }
}

/// Environment variables in first-definition order; redefining a name replaces its value.
#[derive(Default)]
struct OrderedEnv {
    vars: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl OrderedEnv {
    fn get(&self, name: &str) -> Option<&str> {
        self.index.get(name).map(|&i| self.vars[i].1.as_str())
    }

    fn set(&mut self, name: &str, value: String) {
        match self.index.get(name) {
            Some(&i) => self.vars[i].1 = value,
            None => {
                self.index.insert(name.to_owned(), self.vars.len());
                self.vars.push((name.to_owned(), value));
            }
        }
    }

    fn into_vec(self) -> Vec<(String, String)> {
        self.vars
    }
}

/// The ConfigMaps and Secrets one call has read, so each is fetched once.
pub(crate) struct Objects<'a> {
    client: &'a kube::Client,
    namespace: &'a str,
    config_maps: HashMap<String, Option<ConfigMap>>,
    secrets: HashMap<String, Option<Secret>>,
}

impl<'a> Objects<'a> {
    pub(crate) fn new(client: &'a kube::Client, namespace: &'a str) -> Self {
        Objects {
            client,
            namespace,
            config_maps: HashMap::new(),
            secrets: HashMap::new(),
        }
    }

    pub(crate) fn client(&self) -> &'a kube::Client {
        self.client
    }

    /// The ConfigMap, `None` when it is missing and `optional`.
    pub(crate) async fn config_map(
        &mut self,
        name: &str,
        optional: bool,
    ) -> Result<Option<ConfigMap>, EnvError> {
        if !self.config_maps.contains_key(name) {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), self.namespace);
            let found = api.get_opt(name).await.map_err(|e| EnvError::Api {
                kind: "configmap",
                namespace: self.namespace.to_owned(),
                name: name.to_owned(),
                message: api_message(&e),
            })?;
            self.config_maps.insert(name.to_owned(), found);
        }
        match self.config_maps.get(name).cloned().flatten() {
            Some(cm) => Ok(Some(cm)),
            None if optional => Ok(None),
            None => Err(EnvError::ConfigMapNotFound {
                name: name.to_owned(),
            }),
        }
    }

    /// The Secret, `None` when it is missing and `optional`.
    pub(crate) async fn secret(
        &mut self,
        name: &str,
        optional: bool,
    ) -> Result<Option<Secret>, EnvError> {
        if !self.secrets.contains_key(name) {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), self.namespace);
            let found = api.get_opt(name).await.map_err(|e| EnvError::Api {
                kind: "secret",
                namespace: self.namespace.to_owned(),
                name: name.to_owned(),
                message: api_message(&e),
            })?;
            self.secrets.insert(name.to_owned(), found);
        }
        match self.secrets.get(name).cloned().flatten() {
            Some(s) => Ok(Some(s)),
            None if optional => Ok(None),
            None => Err(EnvError::SecretNotFound {
                name: name.to_owned(),
            }),
        }
    }
}

/// The service link variables the container sees (upstream `getServiceEnvVarMap`): those of
/// the `kubernetes` Service in `default` always, and of every Service of the pod's namespace
/// when `enableServiceLinks` is true (the default). A namespace's own Service shadows the
/// master Service of the same name.
async fn service_env(
    client: &kube::Client,
    pod: &Pod,
    namespace: &str,
) -> Result<BTreeMap<String, String>, EnvError> {
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let mut services: BTreeMap<String, Service> = BTreeMap::new();
    if links {
        let api: Api<Service> = Api::namespaced(client.clone(), namespace);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|_| EnvError::ListServices)?;
        for svc in list.items {
            services.insert(svc.metadata.name.clone().unwrap_or_default(), svc);
        }
    }
    if namespace != "default" || !links {
        let api: Api<Service> = Api::namespaced(client.clone(), "default");
        if let Some(master) = api
            .get_opt("kubernetes")
            .await
            .map_err(|_| EnvError::ListServices)?
        {
            services.entry("kubernetes".to_owned()).or_insert(master);
        }
    }
    Ok(services.values().flat_map(service_vars).collect())
}

/// Upstream `envvars.FromServices` for one Service: `<NAME>_SERVICE_HOST`/`_PORT`, a variable
/// per named port, and the Docker link variables. Services without a cluster IP (headless or
/// ExternalName) or without ports contribute nothing.
pub(crate) fn service_vars(svc: &Service) -> Vec<(String, String)> {
    let Some(spec) = svc.spec.as_ref() else {
        return Vec::new();
    };
    let ip = spec.cluster_ip.as_deref().unwrap_or("");
    let ports = spec.ports.as_deref().unwrap_or(&[]);
    if ip.is_empty() || ip == "None" || ports.is_empty() {
        return Vec::new();
    }
    let prefix = env_var_name_for(svc.metadata.name.as_deref().unwrap_or(""));
    let mut vars = vec![
        (format!("{prefix}_SERVICE_HOST"), ip.to_owned()),
        (format!("{prefix}_SERVICE_PORT"), ports[0].port.to_string()),
    ];
    for p in ports {
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            vars.push((
                format!("{prefix}_SERVICE_PORT_{}", env_var_name_for(name)),
                p.port.to_string(),
            ));
        }
    }
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_owned()
    };
    for (i, p) in ports.iter().enumerate() {
        let protocol = p
            .protocol
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or("TCP");
        let lower = protocol.to_lowercase();
        let url = format!("{lower}://{host}:{}", p.port);
        if i == 0 {
            vars.push((format!("{prefix}_PORT"), url.clone()));
        }
        let port_prefix = format!("{prefix}_PORT_{}_{}", p.port, protocol.to_uppercase());
        vars.push((format!("{port_prefix}_PROTO"), lower));
        vars.push((format!("{port_prefix}_PORT"), p.port.to_string()));
        vars.push((format!("{port_prefix}_ADDR"), ip.to_owned()));
        vars.push((port_prefix, url));
    }
    vars
}

/// Upstream `makeEnvVariableName`: upper case, `.` and `-` to `_`, a leading digit prefixed
/// with `_`.
fn env_var_name_for(name: &str) -> String {
    let upper = name.replace(['.', '-'], "_").to_uppercase();
    if upper.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{upper}")
    } else {
        upper
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> String {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            map.get(name)
                .cloned()
                .unwrap_or_else(|| wrap_reference(name))
        }
    }

    #[test]
    fn expansion_follows_the_kubernetes_expansion_spec() {
        let m = lookup(&[("A", "a"), ("B", "b"), ("EMPTY", ""), ("REF", "$(A)")]);
        let cases = [
            ("$(A)", "a"),
            ("x$(A)y$(B)z", "xaybz"),
            ("$(A)$(A)", "aa"),
            ("$$(A)", "$(A)"),
            ("$$(A)-$(B)", "$(A)-b"),
            ("cost: $$5", "cost: $5"),
            ("$(MISSING)", "$(MISSING)"),
            ("a$(EMPTY)b", "ab"),
            ("$(REF)", "$(A)"),
            ("$(A", "$(A"),
            ("end$", "end$"),
            ("$(A)$(", "a$("),
            ("$A", "$A"),
            ("${A}", "${A}"),
            ("$?x$!", "$?x$!"),
            ("$(A$(B))", "$(A$(B))"),
            ("$$$$(A)", "$$(A)"),
            ("$$$(A)", "$a"),
            ("--$($($(--", "--$($($(--"),
            ("$é$(A)", "$éa"),
            ("\\$(A)", "\\a"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, &m), want, "input {input:?}");
        }
    }

    #[test]
    fn command_and_args_expand_against_the_last_definition() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "command": ["/bin/$(SHELL)", "-c"], "args": ["echo $(MSG) $$(MSG) $(NOPE)"]
        }))
        .expect("container");
        let env = vec![
            ("SHELL".to_string(), "sh".to_string()),
            ("MSG".to_string(), "old".to_string()),
            ("MSG".to_string(), "hi".to_string()),
        ];
        let (cmd, args) = expand_command(&c, &env);
        assert_eq!(cmd, ["/bin/sh", "-c"]);
        assert_eq!(args, ["echo hi $(MSG) $(NOPE)"]);
    }

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1",
                         "labels": {"b": "2", "a": "x\"y"},
                         "annotations": {"Note.Example.com/k": "v"}},
            "spec": {"nodeName": "n1", "serviceAccountName": "sa",
                     "containers": [{"name": "app",
                        "resources": {"limits": {"memory": "128Mi"},
                                      "requests": {"cpu": "250m", "memory": "64Mi"}}}],
                     "initContainers": [{"name": "init",
                        "resources": {"limits": {"cpu": "2"}}}]}
        }))
        .expect("pod")
    }

    fn field(path: &str) -> ObjectFieldSelector {
        ObjectFieldSelector {
            api_version: Some("v1".into()),
            field_path: path.into(),
        }
    }

    #[test]
    fn field_refs_resolve_like_the_kubelet() {
        let p = pod();
        let ctx = EnvContext {
            pod_ip: Some("10.0.0.9".into()),
            pod_ips: vec!["10.0.0.5".into(), "fd00::5".into()],
            host_ip: Some("192.168.1.2".into()),
            node_name: "fallback".into(),
            ..EnvContext::default()
        };
        let v = |path: &str| pod_field_value(&field(path), &p, &ctx);
        assert_eq!(v("metadata.name").as_deref(), Ok("web"));
        assert_eq!(v("metadata.namespace").as_deref(), Ok("shop"));
        assert_eq!(v("metadata.uid").as_deref(), Ok("u-1"));
        assert_eq!(v("metadata.labels['a']").as_deref(), Ok("x\"y"));
        assert_eq!(v("metadata.labels['zz']").as_deref(), Ok(""));
        assert_eq!(v("metadata.labels").as_deref(), Ok("a=\"x\\\"y\"\nb=\"2\""));
        assert_eq!(
            v("metadata.annotations['Note.Example.com/k']").as_deref(),
            Ok("v")
        );
        assert_eq!(v("spec.nodeName").as_deref(), Ok("n1"));
        assert_eq!(v("spec.host").as_deref(), Ok("n1"));
        assert_eq!(v("spec.serviceAccountName").as_deref(), Ok("sa"));
        assert_eq!(v("status.podIP").as_deref(), Ok("10.0.0.5"));
        assert_eq!(v("status.podIPs").as_deref(), Ok("10.0.0.5,fd00::5"));
        assert_eq!(v("status.hostIP").as_deref(), Ok("192.168.1.2"));
        assert_eq!(v("status.hostIPs").as_deref(), Ok("192.168.1.2"));
        assert_eq!(
            v("status.phase").map_err(|e| e.to_string()),
            Err("unsupported fieldPath: status.phase".into())
        );
        assert_eq!(
            v("spec.containers").map_err(|e| e.to_string()),
            Err("field label not supported: spec.containers".into())
        );
        assert_eq!(
            v("spec.nodeName['x']").map_err(|e| e.to_string()),
            Err("field label does not support subscript: spec.nodeName['x']".into())
        );
        assert!(
            v("metadata.labels['bad key']")
                .map_err(|e| e.to_string())
                .expect_err("invalid key")
                .starts_with("invalid key subscript in metadata.labels['bad key']: ")
        );
        let mut v2 = field("metadata.name");
        v2.api_version = Some("v2".into());
        assert_eq!(
            pod_field_value(&v2, &p, &ctx).map_err(|e| e.to_string()),
            Err("unsupported pod version: v2".into())
        );
        let no_host = EnvContext::default();
        assert_eq!(
            pod_field_value(&field("status.hostIP"), &p, &no_host).map_err(|e| e.to_string()),
            Err("host IP unknown; known addresses: []".into())
        );
        // Without pod_ips, status.podIP is the single pod_ip.
        let single = EnvContext {
            pod_ip: Some("10.0.0.9".into()),
            ..EnvContext::default()
        };
        assert_eq!(
            pod_field_value(&field("status.podIP"), &p, &single).as_deref(),
            Ok("10.0.0.9")
        );
    }

    fn resource(
        res: &str,
        divisor: Option<&str>,
        container: Option<&str>,
    ) -> ResourceFieldSelector {
        ResourceFieldSelector {
            container_name: container.map(str::to_owned),
            divisor: divisor.map(|d| Q(d.to_owned())),
            resource: res.to_owned(),
        }
    }

    #[test]
    fn resource_refs_round_up_and_default_limits_to_allocatable() {
        let p = pod();
        let app = &p.spec.as_ref().expect("spec").containers[0];
        let ctx = EnvContext {
            node_allocatable: Resources {
                cpu_millis: 3500,
                memory: 8 * 1024 * 1024 * 1024,
                ephemeral_storage: 10_000_000_000,
                pods: 110,
            },
            ..EnvContext::default()
        };
        let v = |r: &str, d: Option<&str>, c: Option<&str>| {
            resource_field_value(&resource(r, d, c), &p, app, &ctx).map_err(|e| e.to_string())
        };
        assert_eq!(v("requests.cpu", None, None), Ok("1".into()));
        assert_eq!(v("requests.cpu", Some("1m"), None), Ok("250".into()));
        assert_eq!(v("limits.cpu", None, None), Ok("4".into()));
        assert_eq!(v("limits.cpu", Some("1m"), None), Ok("3500".into()));
        assert_eq!(v("limits.memory", None, None), Ok("134217728".into()));
        assert_eq!(v("limits.memory", Some("1Mi"), None), Ok("128".into()));
        assert_eq!(v("requests.memory", Some("1M"), None), Ok("68".into()));
        assert_eq!(
            v("limits.ephemeral-storage", Some("1G"), None),
            Ok("10".into())
        );
        assert_eq!(v("requests.ephemeral-storage", None, None), Ok("0".into()));
        assert_eq!(v("limits.hugepages-2Mi", None, None), Ok("0".into()));
        assert_eq!(v("limits.cpu", Some("0"), Some("init")), Ok("2".into()));
        assert_eq!(
            v("limits.cpu", None, Some("nope")),
            Err("container nope not found".into())
        );
        assert_eq!(
            v("limits.nvidia.com/gpu", None, None),
            Err("unsupported container resource : limits.nvidia.com/gpu".into())
        );
        assert_eq!(
            v("cpu", None, None),
            Err("unsupported container resource : cpu".into())
        );
    }

    #[test]
    fn service_links_name_every_port_like_docker_links() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "my-db.v2"},
            "spec": {"clusterIP": "10.96.0.12", "ports": [
                {"port": 5432},
                {"name": "metrics", "port": 9187, "protocol": "UDP"}]}
        }))
        .expect("service");
        let vars: BTreeMap<String, String> = service_vars(&svc).into_iter().collect();
        let get = |k: &str| vars.get(k).map(String::as_str);
        assert_eq!(get("MY_DB_V2_SERVICE_HOST"), Some("10.96.0.12"));
        assert_eq!(get("MY_DB_V2_SERVICE_PORT"), Some("5432"));
        assert_eq!(get("MY_DB_V2_SERVICE_PORT_METRICS"), Some("9187"));
        assert_eq!(get("MY_DB_V2_PORT"), Some("tcp://10.96.0.12:5432"));
        assert_eq!(get("MY_DB_V2_PORT_5432_TCP"), Some("tcp://10.96.0.12:5432"));
        assert_eq!(get("MY_DB_V2_PORT_5432_TCP_PROTO"), Some("tcp"));
        assert_eq!(get("MY_DB_V2_PORT_5432_TCP_PORT"), Some("5432"));
        assert_eq!(get("MY_DB_V2_PORT_5432_TCP_ADDR"), Some("10.96.0.12"));
        assert_eq!(get("MY_DB_V2_PORT_9187_UDP"), Some("udp://10.96.0.12:9187"));
        assert_eq!(vars.len(), 12);

        let headless: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "h"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}
        }))
        .expect("service");
        assert!(service_vars(&headless).is_empty());
        assert_eq!(env_var_name_for("3d-svc"), "_3D_SVC");
        let v6: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "v6"}, "spec": {"clusterIP": "fd00::1", "ports": [{"port": 80}]}
        }))
        .expect("service");
        let vars: BTreeMap<String, String> = service_vars(&v6).into_iter().collect();
        assert_eq!(
            vars.get("V6_PORT").map(String::as_str),
            Some("tcp://[fd00::1]:80")
        );
    }

    #[test]
    fn env_from_keys_that_are_not_env_names_are_skipped() {
        let mut env = OrderedEnv::default();
        let data = vec![
            ("GOOD", "1".to_string()),
            ("has=equals", "2".to_string()),
            ("1.dotted-ok", "3".to_string()),
        ];
        add_env_from(&mut env, "P_", data.into_iter(), "configMap", "ns", "cm");
        assert_eq!(
            env.into_vec(),
            vec![
                ("P_GOOD".to_string(), "1".to_string()),
                ("P_1.dotted-ok".to_string(), "3".to_string())
            ]
        );
    }

    #[test]
    fn error_messages_are_the_kubelets() {
        let e = EnvError::ConfigMapNotFound { name: "x".into() };
        assert_eq!(e.to_string(), "configmap \"x\" not found");
        let e = EnvError::SecretKeyNotFound {
            key: "k".into(),
            namespace: "ns".into(),
            name: "s".into(),
        };
        assert_eq!(e.to_string(), "couldn't find key k in Secret ns/s");
    }
}
