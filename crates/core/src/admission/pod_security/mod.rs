//! Pod Security Admission, as upstream's built-in `PodSecurity` plugin
//! (`k8s.io/pod-security-admission`): a namespace's labels
//! `pod-security.kubernetes.io/{enforce,audit,warn}[-version]` choose a level (privileged,
//! baseline, restricted) and a version of the Pod Security Standards for each mode; pods that
//! violate the enforce level are refused, the warn level's violations come back as warnings
//! (for pods and for the templates of workload kinds), and raising a namespace's enforce level
//! reports the existing pods that would violate it.
//!
//! Windows as upstream treats it: from v1.25 the restricted controls that only mean something
//! on Linux (`allowPrivilegeEscalation`, seccomp, capabilities) pass pods with
//! `spec.os.name: windows`, while baseline still refuses HostProcess containers.
//!
//! Pure: the API server supplies the namespace labels, the configuration and the pods.

pub mod checks;

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use crate::field::{FieldError, Path};
use checks::{CheckFn, Violation};

/// The minor version `latest` means: the server's own.
pub const LATEST_MINOR: u32 = 33;

pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
pub const AUDIT_LABEL: &str = "pod-security.kubernetes.io/audit";
pub const AUDIT_VERSION_LABEL: &str = "pod-security.kubernetes.io/audit-version";
pub const WARN_LABEL: &str = "pod-security.kubernetes.io/warn";
pub const WARN_VERSION_LABEL: &str = "pod-security.kubernetes.io/warn-version";

/// Existing pods checked when a namespace's enforce level rises (upstream's
/// `namespaceMaxPodsToCheck`).
pub const NAMESPACE_MAX_PODS_TO_CHECK: usize = 3000;

/// A Pod Security Standards level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(s: &str) -> Result<Level, String> {
        match s {
            "privileged" => Ok(Level::Privileged),
            "baseline" => Ok(Level::Baseline),
            "restricted" => Ok(Level::Restricted),
            _ => Err("must be one of privileged, baseline, restricted".into()),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// `latest` or `v1.N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    Latest,
    Minor(u32),
}

impl Version {
    pub fn parse(s: &str) -> Result<Version, String> {
        if s == "latest" {
            return Ok(Version::Latest);
        }
        let err = || "must be \"latest\" or \"v1.x\"".to_string();
        let minor = s.strip_prefix("v1.").ok_or_else(err)?;
        if minor.is_empty()
            || !minor.bytes().all(|b| b.is_ascii_digit())
            || (minor.len() > 1 && minor.starts_with('0'))
        {
            return Err(err());
        }
        minor.parse().map(Version::Minor).map_err(|_| err())
    }

    /// The minor version the checks run at: `latest` and versions after the server's are the
    /// server's.
    pub fn effective_minor(self) -> u32 {
        match self {
            Version::Latest => LATEST_MINOR,
            Version::Minor(m) => m.min(LATEST_MINOR),
        }
    }

    /// Whether the checks of minor version `minor` apply.
    pub fn at_least(self, minor: u32) -> bool {
        self.effective_minor() >= minor
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Minor(m) => write!(f, "v1.{m}"),
        }
    }
}

/// A level at a version (`restricted:latest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

impl LevelVersion {
    pub const PRIVILEGED: LevelVersion = LevelVersion {
        level: Level::Privileged,
        version: Version::Latest,
    };
}

/// The three modes' levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            enforce: LevelVersion::PRIVILEGED,
            audit: LevelVersion::PRIVILEGED,
            warn: LevelVersion::PRIVILEGED,
        }
    }
}

impl Policy {
    pub fn fully_privileged(&self) -> bool {
        [self.enforce, self.audit, self.warn]
            .iter()
            .all(|lv| lv.level == Level::Privileged)
    }
}

fn labels_path(label: &str) -> Path {
    Path::new("metadata").child("labels").key(label)
}

/// Upstream `PolicyToEvaluate`: the namespace's labels over the cluster defaults, with the
/// label errors (`metadata.labels[…]`). A bad warn or audit level fails open (privileged); warn
/// follows enforce when only enforce is set and is stricter.
pub fn policy_from_labels(
    labels: &BTreeMap<String, String>,
    defaults: Policy,
) -> (Policy, Vec<FieldError>) {
    let mut p = defaults;
    let mut errors = Vec::new();
    let mut err = |label: &str, value: &str, e: String| {
        errors.push(FieldError::invalid(
            labels_path(label).to_string(),
            &Value::String(value.to_string()),
            e,
        ));
    };
    let mut has_enforce_level = false;
    if let Some(v) = labels.get(ENFORCE_LABEL) {
        match Level::parse(v) {
            Ok(l) => {
                p.enforce.level = l;
                has_enforce_level = true;
            }
            Err(e) => {
                // Upstream's ParseLevel answers restricted with its error: fail closed.
                p.enforce.level = Level::Restricted;
                err(ENFORCE_LABEL, v, e);
            }
        }
    }
    if let Some(v) = labels.get(ENFORCE_VERSION_LABEL) {
        match Version::parse(v) {
            Ok(ver) => p.enforce.version = ver,
            Err(e) => {
                p.enforce.version = Version::Latest;
                err(ENFORCE_VERSION_LABEL, v, e);
            }
        }
    }
    if let Some(v) = labels.get(AUDIT_LABEL) {
        match Level::parse(v) {
            Ok(l) => p.audit.level = l,
            Err(e) => {
                p.audit.level = Level::Privileged;
                err(AUDIT_LABEL, v, e);
            }
        }
    }
    if let Some(v) = labels.get(AUDIT_VERSION_LABEL) {
        match Version::parse(v) {
            Ok(ver) => p.audit.version = ver,
            Err(e) => {
                p.audit.version = Version::Latest;
                err(AUDIT_VERSION_LABEL, v, e);
            }
        }
    }
    let has_warn_level = labels.contains_key(WARN_LABEL);
    if let Some(v) = labels.get(WARN_LABEL) {
        match Level::parse(v) {
            Ok(l) => p.warn.level = l,
            Err(e) => {
                p.warn.level = Level::Privileged;
                err(WARN_LABEL, v, e);
            }
        }
    }
    let has_warn_version = labels.contains_key(WARN_VERSION_LABEL);
    if let Some(v) = labels.get(WARN_VERSION_LABEL) {
        match Version::parse(v) {
            Ok(ver) => p.warn.version = ver,
            Err(e) => {
                p.warn.version = Version::Latest;
                err(WARN_VERSION_LABEL, v, e);
            }
        }
    }
    if !has_warn_level && has_enforce_level && p.enforce.level > p.warn.level {
        p.warn.level = p.enforce.level;
        if !has_warn_version {
            p.warn.version = p.enforce.version;
        }
    }
    (p, errors)
}

/// The controls of each level, in upstream's order (baseline IDs sorted, then restricted IDs
/// sorted; a restricted control replaces the baseline one it tightens).
fn checks_for(lv: LevelVersion) -> Vec<CheckFn> {
    use checks::*;
    let restricted = lv.level == Level::Restricted;
    let v = lv.version;
    let mut out: Vec<CheckFn> = vec![app_armor];
    // capabilities_baseline, unless restricted's own applies (1.22+).
    if !(restricted && v.at_least(22)) {
        out.push(capabilities_baseline);
    }
    out.push(host_namespaces);
    if !restricted {
        out.push(host_path_volumes);
    }
    out.extend([
        host_ports as CheckFn,
        privileged,
        proc_mount,
        se_linux_options,
    ]);
    // seccompProfile_baseline, unless restricted's own applies (1.19+).
    if !(restricted && v.at_least(19)) {
        out.push(seccomp_baseline);
    }
    out.extend([sysctls as CheckFn, windows_host_process]);
    if restricted {
        out.push(allow_privilege_escalation);
        if v.at_least(22) {
            out.push(capabilities_restricted);
        }
        out.extend([restricted_volumes as CheckFn, run_as_non_root, run_as_user]);
        if v.at_least(19) {
            out.push(seccomp_restricted);
        }
    }
    out
}

/// The violations of a pod (its metadata and spec) against `lv`; none for privileged.
pub fn evaluate(lv: LevelVersion, meta: &Value, spec: &Value) -> Vec<Violation> {
    if lv.level == Level::Privileged {
        return Vec::new();
    }
    checks_for(lv)
        .into_iter()
        .filter_map(|check| check(meta, spec, lv.version))
        .collect()
}

/// Upstream `AggregateCheckResult.ForbiddenDetail`: `reason (detail), reason (detail)`.
pub fn forbidden_detail(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            if v.detail.is_empty() {
                v.reason.clone()
            } else {
                format!("{} ({})", v.reason, v.detail)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `violates PodSecurity "restricted:latest": …` (the enforce refusal's reason).
pub fn enforce_message(lv: LevelVersion, violations: &[Violation]) -> String {
    format!(
        "violates PodSecurity \"{lv}\": {}",
        forbidden_detail(violations)
    )
}

/// `would violate PodSecurity "restricted:latest": …` (warnings and audit annotations).
pub fn warn_message(lv: LevelVersion, violations: &[Violation]) -> String {
    format!(
        "would violate PodSecurity \"{lv}\": {}",
        forbidden_detail(violations)
    )
}

/// `PodSecurityConfiguration` (`pod-security.admission.config.k8s.io/v1`), the plugin's entry
/// of `--admission-control-config-file`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Configuration {
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(default)]
    pub exemptions: Exemptions,
}

/// The cluster-wide levels for namespaces without labels.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Defaults {
    #[serde(default = "privileged")]
    pub enforce: String,
    #[serde(default = "latest", rename = "enforce-version")]
    pub enforce_version: String,
    #[serde(default = "privileged")]
    pub audit: String,
    #[serde(default = "latest", rename = "audit-version")]
    pub audit_version: String,
    #[serde(default = "privileged")]
    pub warn: String,
    #[serde(default = "latest", rename = "warn-version")]
    pub warn_version: String,
}

fn privileged() -> String {
    "privileged".into()
}

fn latest() -> String {
    "latest".into()
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            enforce: privileged(),
            enforce_version: latest(),
            audit: privileged(),
            audit_version: latest(),
            warn: privileged(),
            warn_version: latest(),
        }
    }
}

/// Who and what the plugin leaves alone.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Exemptions {
    #[serde(default)]
    pub usernames: Vec<String>,
    #[serde(default)]
    pub runtime_classes: Vec<String>,
    #[serde(default)]
    pub namespaces: Vec<String>,
}

impl Configuration {
    /// The defaults as a policy (upstream `ToPolicy`), or every bad field.
    pub fn policy(&self) -> Result<Policy, String> {
        let d = &self.defaults;
        let mut errs = Vec::new();
        let mut level = |name: &str, v: &str| {
            Level::parse(v).unwrap_or_else(|e| {
                errs.push(format!("{name}: {e}"));
                Level::Privileged
            })
        };
        let (enforce, audit, warn) = (
            level("enforce", &d.enforce),
            level("audit", &d.audit),
            level("warn", &d.warn),
        );
        let mut version = |name: &str, v: &str| {
            Version::parse(v).unwrap_or_else(|e| {
                errs.push(format!("{name}: {e}"));
                Version::Latest
            })
        };
        let policy = Policy {
            enforce: LevelVersion {
                level: enforce,
                version: version("enforce-version", &d.enforce_version),
            },
            audit: LevelVersion {
                level: audit,
                version: version("audit-version", &d.audit_version),
            },
            warn: LevelVersion {
                level: warn,
                version: version("warn-version", &d.warn_version),
            },
        };
        if errs.is_empty() {
            Ok(policy)
        } else {
            Err(errs.join(", "))
        }
    }
}

/// Upstream `isSignificantPodUpdate`: only a change of images or of the number of containers
/// (or a new or changed ephemeral container) is evaluated again.
pub fn is_significant_update(new_spec: &Value, old_spec: &Value) -> bool {
    let list = |s: &Value, k: &str| -> Vec<Value> {
        s.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let image = |c: &Value| c.get("image").cloned().unwrap_or(Value::Null);
    for k in ["containers", "initContainers"] {
        let (n, o) = (list(new_spec, k), list(old_spec, k));
        if n.len() != o.len() || n.iter().zip(&o).any(|(a, b)| image(a) != image(b)) {
            return true;
        }
    }
    let old_ephemeral = list(old_spec, "ephemeralContainers");
    list(new_spec, "ephemeralContainers").iter().any(|c| {
        match old_ephemeral
            .iter()
            .find(|o| o.get("name") == c.get("name"))
        {
            None => true,
            Some(o) => image(o) != image(c),
        }
    })
}

/// Upstream `EvaluatePodsInNamespace`: the warnings for raising a namespace's enforce level to
/// `enforce`, given its pods as (name, metadata, spec). Pods with identical violations are
/// reported once (`web-1 (and 2 other pods): …`); at most [`NAMESPACE_MAX_PODS_TO_CHECK`] are
/// checked.
pub fn evaluate_existing_pods(
    namespace: &str,
    enforce: LevelVersion,
    pods: &[(String, Value, Value)],
) -> Vec<String> {
    let mut warnings = Vec::new();
    let total = pods.len();
    let checked = total.min(NAMESPACE_MAX_PODS_TO_CHECK);
    // Warning text → (first pod name, count), in first-seen order.
    let mut seen: Vec<(String, String, usize)> = Vec::new();
    let mut sorted: Vec<&(String, Value, Value)> = pods.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, meta, spec) in sorted.into_iter().take(checked) {
        let violations = evaluate(enforce, meta, spec);
        if violations.is_empty() {
            continue;
        }
        let text = forbidden_detail(&violations);
        match seen.iter_mut().find(|(t, _, _)| *t == text) {
            Some(entry) => entry.2 += 1,
            None => seen.push((text, name.clone(), 1)),
        }
    }
    if checked < total {
        warnings.push(format!(
            "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
        ));
    }
    if !seen.is_empty() {
        warnings.push(format!(
            "existing pods in namespace \"{namespace}\" violate the new PodSecurity enforce level \"{enforce}\""
        ));
    }
    let mut pod_warnings: Vec<String> = seen
        .into_iter()
        .map(|(text, first, count)| match count {
            1 => format!("{first}: {text}"),
            2 => format!("{first} (and 1 other pod): {text}"),
            n => format!("{first} (and {} other pods): {text}", n - 1),
        })
        .collect();
    pod_warnings.sort();
    warnings.extend(pod_warnings);
    warnings
}

#[cfg(test)]
mod tests;
