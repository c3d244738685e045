//! The operating-system knowledge the scheduler decides with: which OS a pod needs (and why),
//! which Windows build an image was made for, and which host builds run it with process isolation.
//!
//! These are tandem's rules beyond upstream kube-scheduler (which only honours what a pod
//! selects). The knowledge itself (builds, image tags, `HostBuild::runs`) is shared with
//! admission, the agent and `tandem check` in [`tandem_core::windows`], and tested there; this
//! module only reads a pod and a node's labels into it.

use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use tandem_core::windows::{self as core_windows, PodOs};

pub use tandem_core::windows::{
    LABEL_OS, LABEL_OS_BETA, LABEL_WINDOWS_BUILD, OsSource, WindowsBuild,
};

/// A node or pod operating system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Os {
    Linux,
    Windows,
    /// Anything else a label may say (`freebsd`…), compared by name.
    Other(String),
}

impl Os {
    /// Parses a `kubernetes.io/os` value or `spec.os.name`.
    pub fn parse(s: &str) -> Os {
        match s {
            "linux" => Os::Linux,
            "windows" => Os::Windows,
            other => Os::Other(other.to_string()),
        }
    }

    /// The label value.
    pub fn as_str(&self) -> &str {
        match self {
            Os::Linux => "linux",
            Os::Windows => "windows",
            Os::Other(s) => s,
        }
    }
}

impl fmt::Display for Os {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The OS a node runs, from its `kubernetes.io/os` label (or the deprecated beta label); a node
/// without either is a Linux node (the kubelet always sets the label).
pub fn node_os(labels: &std::collections::BTreeMap<String, String>) -> Os {
    labels
        .get(LABEL_OS)
        .or_else(|| labels.get(LABEL_OS_BETA))
        .map_or(Os::Linux, |v| Os::parse(v))
}

/// The OS a pod needs and what decided it: `spec.os.name`, else the `kubernetes.io/os` its
/// nodeSelector (with RuntimeClass scheduling merged in by admission) or required node affinity
/// selects, else what its images reveal, else Linux ([`tandem_core::windows::pod_os`]).
pub fn pod_os(pod: &Pod) -> (Os, OsSource) {
    let spec = pod.spec.as_ref().map(os_relevant_spec).unwrap_or_default();
    let decision = core_windows::pod_os(&spec, None);
    let os = match decision.os {
        PodOs::Linux => Os::Linux,
        PodOs::Windows => Os::Windows,
    };
    (os, decision.source)
}

/// The part of a pod spec the OS decision reads (OS field, node selector, node affinity, container
/// images, in their original positions so messages name the right field), without serialising the
/// whole spec for every pod.
fn os_relevant_spec(spec: &k8s_openapi::api::core::v1::PodSpec) -> serde_json::Value {
    let images = |list: Vec<Option<&String>>| -> serde_json::Value {
        list.into_iter()
            .map(|i| serde_json::json!({"image": i}))
            .collect()
    };
    let mut v = serde_json::json!({
        "containers": images(spec.containers.iter().map(|c| c.image.as_ref()).collect()),
    });
    if let Some(init) = &spec.init_containers {
        v["initContainers"] = images(init.iter().map(|c| c.image.as_ref()).collect());
    }
    if let Some(eph) = &spec.ephemeral_containers {
        v["ephemeralContainers"] = images(eph.iter().map(|c| c.image.as_ref()).collect());
    }
    if let Some(os) = &spec.os {
        v["os"] = serde_json::json!({"name": os.name});
    }
    if let Some(sel) = &spec.node_selector {
        v["nodeSelector"] = serde_json::json!(sel);
    }
    if let Some(na) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
    {
        v["affinity"] = serde_json::json!({"nodeAffinity": na});
    }
    if let Some(rc) = &spec.runtime_class_name {
        v["runtimeClassName"] = serde_json::json!(rc);
    }
    v
}

/// The images of a pod that name a Windows build, with that build.
pub fn pod_image_builds(pod: &Pod) -> Vec<(String, WindowsBuild)> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter_map(|c| {
            let image = c.image.as_deref()?;
            Some((image.to_string(), core_windows::image_windows_build(image)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("fixture pod")
    }

    #[test]
    fn pod_os_comes_from_the_first_thing_that_says() {
        let cases = [
            (
                serde_json::json!({"os": {"name": "windows"}, "containers": [{"name": "a", "image": "nginx"}]}),
                Os::Windows,
                "spec.os.name",
            ),
            (
                serde_json::json!({"nodeSelector": {"kubernetes.io/os": "windows"}, "containers": [{"name": "a", "image": "nginx"}]}),
                Os::Windows,
                "nodeSelector",
            ),
            (
                serde_json::json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]}]}]}}},
                "containers": [{"name": "a", "image": "nginx"}]}),
                Os::Windows,
                "nodeAffinity",
            ),
            (
                serde_json::json!({"containers": [{"name": "a", "image": "mcr.microsoft.com/windows/servercore:ltsc2019"}]}),
                Os::Windows,
                "image",
            ),
            (
                serde_json::json!({"containers": [{"name": "a", "image": "nginx"}]}),
                Os::Linux,
                "default",
            ),
            (
                serde_json::json!({"os": {"name": "linux"}, "containers": [{"name": "a", "image": "mcr.microsoft.com/windows/nanoserver:1809"}]}),
                Os::Linux,
                "spec.os.name",
            ),
        ];
        for (spec, os, source) in cases {
            let (got, why) = pod_os(&pod(serde_json::json!({"spec": spec})));
            assert_eq!(got, os, "{source}");
            let why = why.to_string();
            match source {
                "default" => assert!(why.contains("default"), "{why}"),
                s => assert!(why.contains(s), "{why} should mention {s}"),
            }
        }
    }
}
