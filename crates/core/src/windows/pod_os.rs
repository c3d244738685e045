//! Which operating system a pod (or pod template) targets, and why.
//!
//! Upstream decides nothing here: `spec.os.name` only drives validation, and placement is left to
//! node selectors and taints. tandem's scheduler, agent, warnings and `tandem check` need one
//! answer, taken in this order (the first that speaks wins):
//!
//! 1. `spec.os.name` (`linux` or `windows`);
//! 2. `spec.nodeSelector[kubernetes.io/os]` (or the deprecated `beta.kubernetes.io/os`);
//! 3. the required node affinity, when every `nodeSelectorTerms` entry confines
//!    `kubernetes.io/os` to the same single OS;
//! 4. the RuntimeClass's `scheduling.nodeSelector[kubernetes.io/os]`, when the caller has it;
//! 5. a recognisably Windows container image ([`super::is_known_windows_image`]);
//! 6. otherwise Linux: pods that say nothing are Linux pods.

use std::fmt;

use serde_json::Value;

use super::{LABEL_OS, LABEL_OS_BETA, LABEL_WINDOWS_BUILD, WindowsBuild, is_known_windows_image};
use crate::field::Path;

/// A pod's operating system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodOs {
    Linux,
    Windows,
}

impl PodOs {
    /// `linux` / `windows`: the `spec.os.name` and `kubernetes.io/os` value.
    pub fn as_str(self) -> &'static str {
        match self {
            PodOs::Linux => "linux",
            PodOs::Windows => "windows",
        }
    }

    /// Parses an OS name as Kubernetes spells it (`linux`, `windows`; exact match).
    pub fn from_name(name: &str) -> Option<PodOs> {
        match name {
            "linux" => Some(PodOs::Linux),
            "windows" => Some(PodOs::Windows),
            _ => None,
        }
    }
}

impl fmt::Display for PodOs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What decided a pod's OS. Each variant carries the field path (or object) it came from, so
/// messages can name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OsSource {
    /// `spec.os.name`.
    OsField(String),
    /// `spec.nodeSelector[kubernetes.io/os]`.
    NodeSelector(String),
    /// The required node affinity at this path.
    NodeAffinity(String),
    /// The RuntimeClass of this name (its `scheduling.nodeSelector`).
    RuntimeClass(String),
    /// The container image at this path (`spec.containers[0].image`) and its value.
    Image { path: String, image: String },
    /// Nothing said: Linux.
    Default,
}

impl OsSource {
    /// Whether the pod *selects* nodes of this OS (node selector, affinity or RuntimeClass),
    /// as opposed to declaring it (`spec.os.name`) or it being guessed (image, default).
    pub fn is_node_selection(&self) -> bool {
        matches!(
            self,
            OsSource::NodeSelector(_) | OsSource::NodeAffinity(_) | OsSource::RuntimeClass(_)
        )
    }
}

impl fmt::Display for OsSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OsSource::OsField(p) | OsSource::NodeSelector(p) | OsSource::NodeAffinity(p) => {
                f.write_str(p)
            }
            OsSource::RuntimeClass(name) => write!(
                f,
                "RuntimeClass {name:?} scheduling.nodeSelector[{LABEL_OS}]"
            ),
            OsSource::Image { path, image } => write!(f, "{path} {image:?} is a Windows image"),
            OsSource::Default => f.write_str("nothing selects an OS; pods default to linux"),
        }
    }
}

/// The OS a pod targets and what decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodOsDecision {
    pub os: PodOs,
    pub source: OsSource,
}

impl fmt::Display for PodOsDecision {
    /// `pod requires windows (spec.os.name)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pod requires {} ({})", self.os, self.source)
    }
}

/// The OS of a pod spec at `spec` (see the module documentation for the order).
///
/// `runtime_class` is the RuntimeClass object named by `spec.runtimeClassName`, when the caller
/// looked it up.
pub fn pod_os(spec: &Value, runtime_class: Option<&Value>) -> PodOsDecision {
    pod_os_at(spec, runtime_class, &Path::new("spec"))
}

/// [`pod_os`] for a spec found at `path` (`spec.template.spec` in a Deployment), so the reason
/// names the real field.
pub fn pod_os_at(spec: &Value, runtime_class: Option<&Value>, path: &Path) -> PodOsDecision {
    if let Some(os) = spec
        .get("os")
        .and_then(|o| o.get("name"))
        .and_then(Value::as_str)
        .and_then(PodOs::from_name)
    {
        return PodOsDecision {
            os,
            source: OsSource::OsField(path.child("os").child("name").to_string()),
        };
    }
    let selector = spec.get("nodeSelector");
    for label in [LABEL_OS, LABEL_OS_BETA] {
        if let Some(os) = selector
            .and_then(|s| s.get(label))
            .and_then(Value::as_str)
            .and_then(PodOs::from_name)
        {
            return PodOsDecision {
                os,
                source: OsSource::NodeSelector(path.child("nodeSelector").key(label).to_string()),
            };
        }
    }
    if let Some(os) = affinity_os(spec) {
        let p = path
            .child("affinity")
            .child("nodeAffinity")
            .child("requiredDuringSchedulingIgnoredDuringExecution");
        return PodOsDecision {
            os,
            source: OsSource::NodeAffinity(p.to_string()),
        };
    }
    if let Some(rc) = runtime_class
        && let Some(os) = rc
            .get("scheduling")
            .and_then(|s| s.get("nodeSelector"))
            .and_then(|s| s.get(LABEL_OS).or_else(|| s.get(LABEL_OS_BETA)))
            .and_then(Value::as_str)
            .and_then(PodOs::from_name)
    {
        let name = rc
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .or_else(|| spec.get("runtimeClassName").and_then(Value::as_str))
            .unwrap_or_default()
            .to_string();
        return PodOsDecision {
            os,
            source: OsSource::RuntimeClass(name),
        };
    }
    for (cpath, c) in containers(spec, path) {
        if let Some(image) = c.get("image").and_then(Value::as_str)
            && is_known_windows_image(image)
        {
            return PodOsDecision {
                os: PodOs::Windows,
                source: OsSource::Image {
                    path: cpath.child("image").to_string(),
                    image: image.to_string(),
                },
            };
        }
    }
    PodOsDecision {
        os: PodOs::Linux,
        source: OsSource::Default,
    }
}

/// The init, regular and ephemeral containers of a spec with their paths, in upstream's
/// `VisitContainersWithPath` order.
pub(crate) fn containers<'a>(spec: &'a Value, path: &Path) -> Vec<(Path, &'a Value)> {
    let mut out = Vec::new();
    for key in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(list) = spec.get(key).and_then(Value::as_array) {
            for (i, c) in list.iter().enumerate() {
                if c.is_object() {
                    out.push((path.child(key).index(i), c));
                }
            }
        }
    }
    out
}

/// The values a set of node selector terms allows for `label`, when every term constrains it
/// with `In` (single-valued after intersection); `None` when any term leaves it open.
fn required_terms_single_value(spec: &Value, labels: &[&str]) -> Option<String> {
    let terms = spec
        .get("affinity")?
        .get("nodeAffinity")?
        .get("requiredDuringSchedulingIgnoredDuringExecution")?
        .get("nodeSelectorTerms")?
        .as_array()?;
    let mut found: Option<String> = None;
    if terms.is_empty() {
        return None;
    }
    for term in terms {
        let mut allowed: Option<Vec<String>> = None;
        for expr in term
            .get("matchExpressions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            let key = expr.get("key").and_then(Value::as_str).unwrap_or_default();
            if !labels.contains(&key) {
                continue;
            }
            let values: Vec<String> = expr
                .get("values")
                .and_then(Value::as_array)
                .map(|vs| {
                    vs.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            if expr.get("operator").and_then(Value::as_str) == Some("In") {
                allowed = Some(match allowed {
                    None => values,
                    Some(prev) => prev.into_iter().filter(|v| values.contains(v)).collect(),
                });
            }
        }
        let mut allowed = allowed?;
        allowed.sort();
        allowed.dedup();
        if allowed.len() != 1 {
            return None;
        }
        let v = allowed.pop()?;
        match &found {
            Some(f) if *f != v => return None,
            _ => found = Some(v),
        }
    }
    found
}

/// The OS the required node affinity confines the pod to, if it confines it to exactly one.
/// `In` narrows a term to its values, `NotIn [linux]` to windows and vice versa.
fn affinity_os(spec: &Value) -> Option<PodOs> {
    if let Some(v) = required_terms_single_value(spec, &[LABEL_OS, LABEL_OS_BETA]) {
        return PodOs::from_name(&v);
    }
    // `NotIn` form: every term excludes the other OS.
    let terms = spec
        .get("affinity")?
        .get("nodeAffinity")?
        .get("requiredDuringSchedulingIgnoredDuringExecution")?
        .get("nodeSelectorTerms")?
        .as_array()?;
    let mut found: Option<PodOs> = None;
    if terms.is_empty() {
        return None;
    }
    for term in terms {
        let mut this: Option<PodOs> = None;
        for expr in term
            .get("matchExpressions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            let key = expr.get("key").and_then(Value::as_str).unwrap_or_default();
            if key != LABEL_OS && key != LABEL_OS_BETA {
                continue;
            }
            if expr.get("operator").and_then(Value::as_str) != Some("NotIn") {
                continue;
            }
            let values: Vec<&str> = expr
                .get("values")
                .and_then(Value::as_array)
                .map(|vs| vs.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if values.contains(&"linux") && !values.contains(&"windows") {
                this = Some(PodOs::Windows);
            } else if values.contains(&"windows") && !values.contains(&"linux") {
                this = Some(PodOs::Linux);
            }
        }
        let this = this?;
        match found {
            Some(f) if f != this => return None,
            _ => found = Some(this),
        }
    }
    found
}

/// The Windows build a pod is pinned to through `node.kubernetes.io/windows-build` (its node
/// selector, its required node affinity, or its RuntimeClass's `scheduling.nodeSelector`), with
/// the raw label value and where it came from. The value is `None` when the label value does
/// not parse as a build.
pub fn windows_build_pin(
    spec: &Value,
    runtime_class: Option<&Value>,
    path: &Path,
) -> Option<(Option<WindowsBuild>, String, String)> {
    if let Some(v) = spec
        .get("nodeSelector")
        .and_then(|s| s.get(LABEL_WINDOWS_BUILD))
        .and_then(Value::as_str)
    {
        return Some((
            WindowsBuild::parse(v),
            v.to_string(),
            path.child("nodeSelector")
                .key(LABEL_WINDOWS_BUILD)
                .to_string(),
        ));
    }
    if let Some(v) = required_terms_single_value(spec, &[LABEL_WINDOWS_BUILD]) {
        let p = path
            .child("affinity")
            .child("nodeAffinity")
            .child("requiredDuringSchedulingIgnoredDuringExecution");
        return Some((WindowsBuild::parse(&v), v, p.to_string()));
    }
    if let Some(rc) = runtime_class
        && let Some(v) = rc
            .get("scheduling")
            .and_then(|s| s.get("nodeSelector"))
            .and_then(|s| s.get(LABEL_WINDOWS_BUILD))
            .and_then(Value::as_str)
    {
        let name = rc
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Some((
            WindowsBuild::parse(v),
            v.to_string(),
            format!("RuntimeClass {name:?}"),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn windows_pod_os_is_decided_in_documented_order() {
        let rc = json!({"metadata": {"name": "windows-2019"}, "scheduling": {"nodeSelector": {"kubernetes.io/os": "windows"}}});
        let affinity = |op: &str, values: Value| {
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": op, "values": values}]}
            ]}}})
        };
        let win_image =
            json!([{"name": "c", "image": "mcr.microsoft.com/windows/servercore:ltsc2019"}]);
        let cases: Vec<(Value, Option<&Value>, PodOs, &str)> = vec![
            (
                json!({"os": {"name": "windows"}}),
                None,
                PodOs::Windows,
                "pod requires windows (spec.os.name)",
            ),
            (
                json!({"os": {"name": "linux"}, "nodeSelector": {"kubernetes.io/os": "windows"}}),
                None,
                PodOs::Linux,
                "pod requires linux (spec.os.name)",
            ),
            (
                json!({"nodeSelector": {"kubernetes.io/os": "windows"}}),
                None,
                PodOs::Windows,
                "pod requires windows (spec.nodeSelector[kubernetes.io/os])",
            ),
            (
                json!({"nodeSelector": {"beta.kubernetes.io/os": "linux"}, "containers": win_image.clone()}),
                None,
                PodOs::Linux,
                "pod requires linux (spec.nodeSelector[beta.kubernetes.io/os])",
            ),
            (
                json!({"affinity": affinity("In", json!(["windows"]))}),
                None,
                PodOs::Windows,
                "pod requires windows (spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution)",
            ),
            (
                json!({"affinity": affinity("NotIn", json!(["linux"]))}),
                None,
                PodOs::Windows,
                "",
            ),
            (
                json!({"affinity": affinity("In", json!(["windows", "linux"]))}),
                None,
                PodOs::Linux,
                "",
            ),
            (
                json!({"runtimeClassName": "windows-2019"}),
                Some(&rc),
                PodOs::Windows,
                "pod requires windows (RuntimeClass \"windows-2019\" scheduling.nodeSelector[kubernetes.io/os])",
            ),
            (
                json!({"containers": win_image.clone()}),
                None,
                PodOs::Windows,
                "pod requires windows (spec.containers[0].image \"mcr.microsoft.com/windows/servercore:ltsc2019\" is a Windows image)",
            ),
            (
                json!({"containers": [{"image": "nginx"}]}),
                None,
                PodOs::Linux,
                "",
            ),
            (json!({"os": {"name": "macos"}}), None, PodOs::Linux, ""),
        ];
        for (spec, rc, os, message) in cases {
            let d = pod_os(&spec, rc);
            assert_eq!(d.os, os, "{spec}");
            if !message.is_empty() {
                assert_eq!(d.to_string(), message, "{spec}");
            }
        }
    }

    #[test]
    fn windows_pod_os_never_panics_on_odd_shapes() {
        for spec in [
            json!(null),
            json!(1),
            json!("x"),
            json!([]),
            json!({"os": 3, "nodeSelector": [], "affinity": "x", "containers": {"a": 1}}),
            json!({"os": {"name": null}, "nodeSelector": {"kubernetes.io/os": 1}}),
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [1, {"matchExpressions": [null, {"key": 1}]}]}}}}),
            json!({"containers": [null, 1, {"image": 3}]}),
        ] {
            let d = pod_os(&spec, Some(&json!({"scheduling": 7})));
            assert_eq!(d.os, PodOs::Linux);
            let _ = windows_build_pin(&spec, Some(&json!([])), &Path::new("spec"));
        }
    }

    #[test]
    fn windows_build_pin_reads_selector_affinity_and_runtime_class() {
        let p = Path::new("spec");
        let spec = json!({"nodeSelector": {"node.kubernetes.io/windows-build": "10.0.20348"}});
        assert_eq!(
            windows_build_pin(&spec, None, &p).map(|x| x.0),
            Some(Some(WindowsBuild::SERVER_2022))
        );
        let spec = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "node.kubernetes.io/windows-build", "operator": "In", "values": ["10.0.17763"]}]}
        ]}}}});
        assert_eq!(
            windows_build_pin(&spec, None, &p).map(|x| x.0),
            Some(Some(WindowsBuild::SERVER_2019))
        );
        let rc = json!({"metadata": {"name": "w"}, "scheduling": {"nodeSelector": {"node.kubernetes.io/windows-build": "10.0.17763"}}});
        assert_eq!(
            windows_build_pin(&json!({}), Some(&rc), &p).map(|x| x.2),
            Some("RuntimeClass \"w\"".to_string())
        );
        assert_eq!(windows_build_pin(&json!({}), None, &p), None);
    }
}
