//! Windows-aware admission: what upstream's admission chain and pod validation do for Windows
//! workloads, plus the warnings tandem adds, as pure functions over JSON objects.
//!
//! The API server calls [`admit`] after decoding, defaulting and the generic validation of
//! [`crate::validation`], and before storing: a refusal becomes a `Status` (see
//! [`AdmissionError`]), the returned strings become `Warning` response headers. The rules are
//! also usable one by one (the scheduler, agent and `tandem check` reuse them):
//!
//! | module | mirrors |
//! |---|---|
//! | [`pod_os`] | `validateOS`, `validateWindows`, `validateLinux` (`pkg/apis/core/validation`) |
//! | [`host_process`] | `validateWindowsHostProcessPod`, and `--allow-privileged=false` |
//! | [`windows_options`] | `validateWindowsSecurityContextOptions` |
//! | [`runtime_class`] | the `RuntimeClass` admission plugin (`setOverhead`, `setScheduling`, `validateOverhead`) |
//! | [`tolerations`] | `pkg/util/tolerations/merge.DoTolerationsMerge` |
//! | [`gmsa`] | the `kubernetes-sigs/windows-gmsa` admission webhook, built in |
//! | [`default_storage_class`] | the `DefaultStorageClass` admission plugin (run by the API server, which lists the StorageClasses) |
//! | [`default_ingress_class`] | the `DefaultIngressClass` admission plugin (run by the API server, which lists the IngressClasses) |
//! | [`default_tolerations`] | the `DefaultTolerationSeconds` admission plugin |
//! | [`priority`] | the `Priority` admission plugin (run by the API server, which looks up the PriorityClasses) |
//! | [`service_account`] | the `ServiceAccount` admission plugin's pod mutation (run by the API server, which looks up the account) |
//! | [`limit_ranger`] | the `LimitRanger` admission plugin (run by the API server, which looks up the LimitRanges) |
//! | [`matching`] | the webhook and policy rule, `matchPolicy` and selector predicates (`admission/plugin/webhook/predicates`) |
//! | [`policy`] | ValidatingAdmissionPolicy and CEL `matchConditions` (`admission/plugin/policy/validating`, `plugin/cel`) |
//! | [`review`] | the `admission.k8s.io/v1` AdmissionReview a webhook is sent and answers (`admission/plugin/webhook/request`) |
//! | [`warnings`] | beyond upstream: fields the API accepts but Windows nodes cannot honour |

pub mod default_ingress_class;
pub mod default_storage_class;
pub mod default_tolerations;
pub mod gmsa;
pub mod host_process;
pub mod limit_ranger;
pub mod matching;
pub mod pod_os;
pub mod pod_security;
pub mod policy;
pub mod priority;
pub mod review;
pub mod runtime_class;
pub mod service_account;
pub mod tolerations;
pub mod warnings;
pub mod windows_options;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::field::go_quote;
use crate::field::{FieldError, Path};
use crate::registry::ResourceType;

/// A refused admission: what the API server should answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// 422 `Invalid`: field errors, turned into a Status with `details.causes` by the API
    /// server exactly like generic validation failures.
    #[error("invalid: {}", join_errors(.0))]
    Invalid(Vec<FieldError>),
    /// 403 `Forbidden` from an admission plugin (upstream `admission.NewForbidden`). The message
    /// is the plugin's error (`pod rejected: RuntimeClass "x" not found`); upstream's Status
    /// message wraps it as `pods "web" is forbidden: <message>` (see
    /// [`AdmissionError::status_message`]).
    #[error("{0}")]
    Forbidden(String),
    /// A webhook-style denial carrying its own HTTP code and message (the gMSA webhook answers
    /// 403, 404, 417 or 422).
    #[error("{message}")]
    Denied { code: u16, message: String },
}

fn join_errors(errs: &[FieldError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl AdmissionError {
    /// The HTTP status code of the refusal.
    pub fn code(&self) -> u16 {
        match self {
            AdmissionError::Invalid(_) => 422,
            AdmissionError::Forbidden(_) => 403,
            AdmissionError::Denied { code, .. } => *code,
        }
    }

    /// The Status `reason` upstream sends with this code (`Invalid`, `Forbidden`, `NotFound`);
    /// empty when upstream sends none (webhook denials with other codes).
    pub fn reason(&self) -> &'static str {
        match self.code() {
            400 => "BadRequest",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            422 => "Invalid",
            500 => "InternalError",
            _ => "",
        }
    }

    /// The Status message for an object of `group_resource` (`pods`) named `name` (empty when
    /// the name is not known yet), as upstream words it:
    /// - `Forbidden`: `pods "web" is forbidden: pod rejected: …` (`apierrors.NewForbidden`);
    /// - `Denied`: `admission webhook "<gmsa webhook>" denied the request: …` (`ToStatusErr`);
    /// - `Invalid`: `Pod "web" is invalid: spec.os.name: …` is built by the API server from the
    ///   field errors (it knows the kind); this returns the joined causes.
    pub fn status_message(&self, group_resource: &str, name: &str) -> String {
        match self {
            AdmissionError::Forbidden(msg) if name.is_empty() => {
                format!("{group_resource} is forbidden: {msg}")
            }
            AdmissionError::Forbidden(msg) => {
                format!("{group_resource} {} is forbidden: {msg}", go_quote(name))
            }
            AdmissionError::Denied { message, .. } => {
                format!(
                    "admission webhook {} denied the request: {message}",
                    go_quote(gmsa::WEBHOOK_NAME)
                )
            }
            AdmissionError::Invalid(errs) => join_errors(errs),
        }
    }
}

/// The operation being admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}

/// The objects admission needs to read: cluster-scoped RuntimeClasses
/// (`node.k8s.io/v1`) and GMSACredentialSpecs (`windows.k8s.io/v1`), by name. The API server
/// answers from its watch cache; `tandem check` from the manifests it was given.
pub trait Lookups {
    fn runtime_class(&self, name: &str) -> Option<Value>;
    fn gmsa_credential_spec(&self, name: &str) -> Option<Value>;
}

/// [`Lookups`] over in-memory maps (tests, `tandem check`).
#[derive(Debug, Clone, Default)]
pub struct MapLookups {
    pub runtime_classes: BTreeMap<String, Value>,
    pub gmsa_credential_specs: BTreeMap<String, Value>,
}

impl MapLookups {
    /// Files `obj` under its `metadata.name` when it is a RuntimeClass or GMSACredentialSpec;
    /// other kinds are ignored. Returns whether it was kept.
    pub fn insert(&mut self, obj: Value) -> bool {
        let Some(name) = obj
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return false;
        };
        match obj.get("kind").and_then(Value::as_str) {
            Some("RuntimeClass") => {
                self.runtime_classes.insert(name, obj);
                true
            }
            Some("GMSACredentialSpec") => {
                self.gmsa_credential_specs.insert(name, obj);
                true
            }
            _ => false,
        }
    }
}

impl Lookups for MapLookups {
    fn runtime_class(&self, name: &str) -> Option<Value> {
        self.runtime_classes.get(name).cloned()
    }
    fn gmsa_credential_spec(&self, name: &str) -> Option<Value> {
        self.gmsa_credential_specs.get(name).cloned()
    }
}

/// Server options that change admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionOptions {
    /// Upstream `--allow-privileged` (default true). When false, `privileged: true` containers
    /// and HostProcess pods are Forbidden "by cluster policy".
    pub privileged_allowed: bool,
    /// Whether to compute the beyond-upstream Windows warnings.
    pub warnings: bool,
    /// The DefaultTolerationSeconds plugin's `tolerationSeconds`.
    pub default_tolerations: default_tolerations::DefaultTolerations,
}

impl Default for AdmissionOptions {
    fn default() -> Self {
        AdmissionOptions {
            privileged_allowed: true,
            warnings: true,
            default_tolerations: Default::default(),
        }
    }
}

/// Where the pod template spec of a workload kind lives, or `None` for kinds without one.
/// `Some(&[])` is a Pod (the object's own `spec`).
pub fn pod_spec_location(rt: &ResourceType) -> Option<&'static [&'static str]> {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => Some(&["spec"]),
        ("", "PodTemplate") => Some(&["template", "spec"]),
        ("", "ReplicationController")
        | ("apps", "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet")
        | ("extensions", "Deployment" | "ReplicaSet" | "DaemonSet")
        | ("batch", "Job") => Some(&["spec", "template", "spec"]),
        ("batch", "CronJob") => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
        _ => None,
    }
}

/// The value at `keys` under `v` (object fields only).
pub fn at<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |cur, k| cur.get(*k))
}

fn path_of(keys: &[&str]) -> Path {
    keys.iter().fold(Path::default(), |p, k| p.child(k))
}

fn is_pod(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.kind == "Pod"
}

/// Runs the Windows admission rules for one write and returns the warnings to send.
///
/// Pods: on create the RuntimeClass plugin, the gMSA webhook (mutate, then validate) and
/// DefaultTolerationSeconds mutate `obj`; on update the gMSA settings must not change. Then, on
/// both, the pod OS rules ([`pod_os::validate_all`]: `spec.os`, Linux-only fields, HostProcess,
/// `windowsOptions` content) and the warnings. Workloads (Deployment, ReplicaSet, DaemonSet,
/// StatefulSet, Job, CronJob, ReplicationController, PodTemplate): the pod OS rules and warnings
/// on their template; RuntimeClass and gMSA admission apply to pods only, as upstream. Other
/// kinds pass untouched. On update, warnings are returned only when the pod spec changed.
pub fn admit(
    op: Operation,
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
    lookups: &dyn Lookups,
    options: &AdmissionOptions,
) -> Result<Vec<String>, AdmissionError> {
    let Some(location) = pod_spec_location(rt) else {
        return Ok(Vec::new());
    };
    if is_pod(rt) {
        match op {
            Operation::Create => {
                let rc_name = obj
                    .get("spec")
                    .and_then(|s| s.get("runtimeClassName"))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string);
                let rc = rc_name.as_deref().and_then(|n| lookups.runtime_class(n));
                runtime_class::admit(obj, rc.as_ref(), rc_name.as_deref())?;
                gmsa::admit_create(obj, |n| lookups.gmsa_credential_spec(n))?;
                default_tolerations::admit_with(obj, options.default_tolerations);
            }
            Operation::Update => {
                if let Some(old) = old {
                    gmsa::validate_update(obj, old)?;
                }
            }
        }
    }
    let null = Value::Null;
    let spec = at(obj, location).unwrap_or(&null);
    let path = path_of(location);
    let errs = pod_os::validate_all(spec, &path, options);
    if !errs.is_empty() {
        return Err(AdmissionError::Invalid(errs));
    }
    if !options.warnings {
        return Ok(Vec::new());
    }
    if op == Operation::Update
        && let Some(old_spec) = old.and_then(|o| at(o, location))
        && old_spec == spec
    {
        return Ok(Vec::new());
    }
    let rc = spec
        .get("runtimeClassName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .and_then(|n| lookups.runtime_class(n));
    Ok(warnings::windows_warnings(spec, rc.as_ref(), &path))
}

/// The Windows pitfalls of a pod or workload template (the warnings of [`admit`], with the rule
/// each breaks), for `tandem check`. Other kinds have none.
pub fn findings(rt: &ResourceType, obj: &Value, lookups: &dyn Lookups) -> Vec<warnings::Warning> {
    let Some(location) = pod_spec_location(rt) else {
        return Vec::new();
    };
    let Some(spec) = at(obj, location) else {
        return Vec::new();
    };
    let rc = spec
        .get("runtimeClassName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .and_then(|n| lookups.runtime_class(n));
    warnings::windows_findings(spec, rc.as_ref(), &path_of(location))
}

#[cfg(test)]
mod tests;
