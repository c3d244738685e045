//! Beyond upstream: `Warning` headers for fields the API accepts but Windows nodes cannot honour,
//! and for Windows pods whose OS or build is left to chance.
//!
//! Field warnings apply to a pod or template that targets Windows by `spec.os.name`, by its node
//! selector or required node affinity on `kubernetes.io/os`, or by its RuntimeClass. Each warning
//! is one line, `<field path>: <why Windows cannot honour it>`, the way `kubectl` prints
//! `Warning: …`. The facts come from the reference documents (Windows containers in Kubernetes:
//! field compatibility, storage limitations, resource management).

use serde_json::Value;

use super::host_process::is_host_process_pod;
use crate::field::Path;
use crate::validation::quantity;
use crate::windows::pod_os::containers;
use crate::windows::{
    HostBuild, ImageBuild, LABEL_OS, LABEL_WINDOWS_BUILD, OsSource, PodOs, image_build_tag,
    pod_os_at, process_isolation_compatible, windows_build_pin,
};

/// The default `terminationMessagePath`, which works on Windows because it does not exist there.
const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// The OS the pod's node selection (selector, affinity, RuntimeClass) chooses, ignoring
/// `spec.os.name` and images.
fn selected_os(
    spec: &Value,
    runtime_class: Option<&Value>,
    path: &Path,
) -> Option<(PodOs, OsSource)> {
    let mut without_os = spec.clone();
    if let Some(m) = without_os.as_object_mut() {
        m.remove("os");
    }
    let d = pod_os_at(&without_os, runtime_class, path);
    d.source.is_node_selection().then_some((d.os, d.source))
}

fn is_linux_path(p: &str) -> bool {
    p.starts_with('/') && !p.starts_with("//")
}

/// The warnings for the pod spec at `path` (`spec`, `spec.template.spec`, …). `runtime_class` is
/// the RuntimeClass named by `spec.runtimeClassName`, when it exists.
pub fn windows_warnings(spec: &Value, runtime_class: Option<&Value>, path: &Path) -> Vec<String> {
    windows_findings(spec, runtime_class, path)
        .into_iter()
        .map(|w| w.text)
        .collect()
}

/// The pitfalls behind the warnings: why a Windows node cannot honour what the pod asks, or why
/// its OS or build is left to chance. Each has a stable rule (`tandem check` reports its ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    OsNotSet,
    OsConflict,
    WindowsImageNotSelected,
    TolerationWithoutSelector,
    DnsHostNet,
    HostNetwork,
    MemoryEmptyDir,
    LinuxHostPath,
    Nfs,
    SubPath,
    MountPropagation,
    BlockDevice,
    TerminationMessagePath,
    ReadOnlyRootFilesystem,
    HugePages,
    MemoryOvercommit,
    BuildNotPinned,
    BuildMismatch,
}

impl Rule {
    /// Every rule, in ID order.
    pub const ALL: [Rule; 18] = [
        Rule::OsNotSet,
        Rule::OsConflict,
        Rule::WindowsImageNotSelected,
        Rule::TolerationWithoutSelector,
        Rule::DnsHostNet,
        Rule::HostNetwork,
        Rule::MemoryEmptyDir,
        Rule::LinuxHostPath,
        Rule::Nfs,
        Rule::SubPath,
        Rule::MountPropagation,
        Rule::BlockDevice,
        Rule::TerminationMessagePath,
        Rule::ReadOnlyRootFilesystem,
        Rule::HugePages,
        Rule::MemoryOvercommit,
        Rule::BuildNotPinned,
        Rule::BuildMismatch,
    ];

    /// The stable ID.
    pub fn id(self) -> &'static str {
        match self {
            Rule::OsNotSet => "TDM101",
            Rule::OsConflict => "TDM102",
            Rule::WindowsImageNotSelected => "TDM103",
            Rule::TolerationWithoutSelector => "TDM104",
            Rule::DnsHostNet => "TDM110",
            Rule::HostNetwork => "TDM111",
            Rule::MemoryEmptyDir => "TDM120",
            Rule::LinuxHostPath => "TDM121",
            Rule::Nfs => "TDM122",
            Rule::SubPath => "TDM123",
            Rule::MountPropagation => "TDM124",
            Rule::BlockDevice => "TDM125",
            Rule::TerminationMessagePath => "TDM126",
            Rule::ReadOnlyRootFilesystem => "TDM127",
            Rule::HugePages => "TDM130",
            Rule::MemoryOvercommit => "TDM131",
            Rule::BuildNotPinned => "TDM140",
            Rule::BuildMismatch => "TDM141",
        }
    }

    /// Where the rule comes from: the reference document's rule it enforces.
    pub fn source(self) -> &'static str {
        match self {
            Rule::OsNotSet | Rule::OsConflict => {
                "Windows containers in Kubernetes: set .spec.os.name for Windows pods so the API server enforces what Windows supports"
            }
            Rule::WindowsImageNotSelected => {
                "Common pitfalls: forgetting the nodeSelector sends Windows pods to Linux nodes"
            }
            Rule::TolerationWithoutSelector => {
                "Taints and tolerations: a pod needs both the nodeSelector and the matching toleration to choose Windows"
            }
            Rule::ReadOnlyRootFilesystem => {
                "Security context on Windows: readOnlyRootFilesystem is not possible; write access is required for registry and system processes"
            }
            Rule::DnsHostNet | Rule::HostNetwork => {
                "Networking limitations: host networking is not available to Windows pods (HostProcess only)"
            }
            Rule::MemoryEmptyDir
            | Rule::LinuxHostPath
            | Rule::Nfs
            | Rule::SubPath
            | Rule::MountPropagation
            | Rule::BlockDevice
            | Rule::TerminationMessagePath => {
                "Storage on Windows nodes: emptyDir on disk, Windows host paths, no subPath, mount propagation or block devices"
            }
            Rule::HugePages | Rule::MemoryOvercommit => {
                "Resource management on Windows: no huge pages; no OOM killer, memory overcommit pages to disk"
            }
            Rule::BuildNotPinned | Rule::BuildMismatch => {
                "Windows version compatibility: a process-isolated container needs the host's Windows build"
            }
        }
    }
}

/// One warning: the rule it breaks and the text `kubectl` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub rule: Rule,
    pub text: String,
}

impl Warning {
    fn new(rule: Rule, text: String) -> Warning {
        Warning { rule, text }
    }
}

/// [`windows_warnings`] with the rule of each.
pub fn windows_findings(spec: &Value, runtime_class: Option<&Value>, path: &Path) -> Vec<Warning> {
    let mut out = Vec::new();
    if !spec.is_object() {
        return out;
    }
    let os_path = path.child("os").child("name");
    let os_name = spec
        .get("os")
        .and_then(|o| o.get("name"))
        .and_then(Value::as_str)
        .and_then(PodOs::from_name);
    let selected = selected_os(spec, runtime_class, path);
    match (os_name, &selected) {
        (None, Some((PodOs::Windows, source))) => out.push(Warning::new(Rule::OsNotSet, format!(
            "{os_path}: the pod selects Windows nodes ({source}) but does not set {os_path}: windows, so fields Windows cannot honour are not rejected; set it to windows"
        ))),
        (Some(PodOs::Linux), Some((PodOs::Windows, source))) => out.push(Warning::new(Rule::OsConflict, format!(
            "{os_path}: linux conflicts with {source}, which selects Windows nodes; a Linux pod cannot run there"
        ))),
        (Some(PodOs::Windows), Some((PodOs::Linux, source))) => out.push(Warning::new(Rule::OsConflict, format!(
            "{source}: selects Linux nodes but {os_path} is windows; a Windows pod cannot run there"
        ))),
        _ => {}
    }
    let targets_windows =
        os_name == Some(PodOs::Windows) || matches!(selected, Some((PodOs::Windows, _)));
    if !targets_windows {
        if let Some(i) = windows_toleration(spec) {
            out.push(Warning::new(Rule::TolerationWithoutSelector, format!(
                "{}: tolerating the Windows nodes' taint lets the pod run there but does not send it there; add a {LABEL_OS}: windows node selector (or a Windows RuntimeClass) so it cannot land on a Linux node",
                path.child("tolerations").index(i)
            )));
        }
        if os_name.is_none()
            && selected.is_none()
            && let OsSource::Image {
                path: image_path,
                image,
            } = pod_os_at(spec, runtime_class, path).source
        {
            out.push(Warning::new(Rule::WindowsImageNotSelected, format!(
                "{image_path}: {image:?} is a Windows image but the pod does not select Windows nodes; set {os_path}: windows and a {LABEL_OS}: windows node selector (or a Windows RuntimeClass)"
            )));
        }
        return out;
    }
    pod_warnings(spec, path, &mut out);
    for (cpath, c) in containers(spec, path) {
        container_warnings(c, &cpath, &mut out);
    }
    build_warnings(spec, runtime_class, path, &mut out);
    out
}

/// The index of a toleration of the Windows nodes' taint (`os=windows`, as the reference
/// documents taint them), when the pod has one.
fn windows_toleration(spec: &Value) -> Option<usize> {
    spec.get("tolerations")?.as_array()?.iter().position(|t| {
        let key = t.get("key").and_then(Value::as_str);
        let value = t.get("value").and_then(Value::as_str);
        matches!(key, Some("os" | LABEL_OS)) && value == Some("windows")
    })
}

fn pod_warnings(spec: &Value, path: &Path, out: &mut Vec<Warning>) {
    if spec.get("dnsPolicy").and_then(Value::as_str) == Some("ClusterFirstWithHostNet") {
        out.push(Warning::new(Rule::DnsHostNet, format!(
            "{}: ClusterFirstWithHostNet is not supported on Windows nodes, which give pods no host networking; Windows pods always run with a container network",
            path.child("dnsPolicy")
        )));
    }
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) && !is_host_process_pod(spec)
    {
        out.push(Warning::new(Rule::HostNetwork, format!(
            "{}: Windows nodes give host networking only to HostProcess pods (securityContext.windowsOptions.hostProcess: true); other Windows pods run with a container network",
            path.child("hostNetwork")
        )));
    }
    for (i, vol) in spec
        .get("volumes")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .enumerate()
    {
        let vp = path.child("volumes").index(i);
        if vol
            .get("emptyDir")
            .and_then(|e| e.get("medium"))
            .and_then(Value::as_str)
            == Some("Memory")
        {
            out.push(Warning::new(Rule::MemoryEmptyDir, format!(
                "{}: memory-backed emptyDir volumes are not supported on Windows nodes; the volume uses the node's disk",
                vp.child("emptyDir").child("medium")
            )));
        }
        if let Some(p) = vol
            .get("hostPath")
            .and_then(|h| h.get("path"))
            .and_then(Value::as_str)
            && is_linux_path(p)
        {
            out.push(Warning::new(Rule::LinuxHostPath, format!(
                "{}: {p:?} is a Linux path; Windows hosts use paths like C:\\data or named pipes like \\\\.\\pipe\\docker_engine",
                vp.child("hostPath").child("path")
            )));
        }
        if vol.get("nfs").is_some_and(|v| !v.is_null()) {
            out.push(Warning::new(Rule::Nfs, format!(
                "{}: NFS volumes are not supported on Windows nodes; use SMB or a CSI driver that supports Windows",
                vp.child("nfs")
            )));
        }
    }
}

fn container_warnings(c: &Value, cpath: &Path, out: &mut Vec<Warning>) {
    for (j, m) in c
        .get("volumeMounts")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .enumerate()
    {
        let mp = cpath.child("volumeMounts").index(j);
        for key in ["subPath", "subPathExpr"] {
            if m.get(key)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                out.push(Warning::new(Rule::SubPath, format!(
                    "{}: Windows containers can mount only whole volumes; subpath mounts are not supported on Windows nodes",
                    mp.child(key)
                )));
            }
        }
        if let Some(mode) = m.get("mountPropagation").and_then(Value::as_str)
            && mode != "None"
        {
            out.push(Warning::new(
                Rule::MountPropagation,
                format!(
                    "{}: mount propagation is not supported on Windows nodes",
                    mp.child("mountPropagation")
                ),
            ));
        }
    }
    if c.pointer("/securityContext/readOnlyRootFilesystem")
        .and_then(Value::as_bool)
        == Some(true)
    {
        out.push(Warning::new(Rule::ReadOnlyRootFilesystem, format!(
            "{}: a read-only root filesystem is not possible on Windows; write access is required for the registry and system processes inside the container",
            cpath.child("securityContext").child("readOnlyRootFilesystem")
        )));
    }
    if c.get("volumeDevices")
        .and_then(Value::as_array)
        .is_some_and(|v| !v.is_empty())
    {
        out.push(Warning::new(
            Rule::BlockDevice,
            format!(
                "{}: Windows nodes cannot attach raw block devices to pods",
                cpath.child("volumeDevices")
            ),
        ));
    }
    if let Some(p) = c.get("terminationMessagePath").and_then(Value::as_str)
        && !p.is_empty()
        && p != DEFAULT_TERMINATION_MESSAGE_PATH
    {
        out.push(Warning::new(Rule::TerminationMessagePath, format!(
            "{}: Windows cannot map a single file into a container, so the termination message may not be read from {p:?}",
            cpath.child("terminationMessagePath")
        )));
    }
    let resources = c.get("resources");
    for kind in ["limits", "requests"] {
        if let Some(list) = resources
            .and_then(|r| r.get(kind))
            .and_then(Value::as_object)
        {
            for name in list.keys().filter(|k| k.starts_with("hugepages-")) {
                out.push(Warning::new(
                    Rule::HugePages,
                    format!(
                        "{}: huge pages are not available to Windows containers",
                        cpath.child("resources").child(kind).key(name)
                    ),
                ));
            }
        }
    }
    let memory = |kind: &str| {
        resources
            .and_then(|r| r.get(kind))
            .and_then(|l| l.get("memory"))
    };
    if let (Some(req), Some(lim)) = (memory("requests"), memory("limits"))
        && let (Some(rq), Some(lq)) = (quantity::from_value(req), quantity::from_value(lim))
        && !rq.cmp_value(lq).is_eq()
    {
        out.push(Warning::new(Rule::MemoryOvercommit, format!(
            "{}: {} differs from the memory limit {}; Windows has no OOM killer and pages to disk when memory is overcommitted, so set the request equal to the limit (or leave it unset)",
            cpath.child("resources").child("requests").key("memory"),
            quantity::text(req),
            quantity::text(lim)
        )));
    }
}

fn build_warnings(
    spec: &Value,
    runtime_class: Option<&Value>,
    path: &Path,
    out: &mut Vec<Warning>,
) {
    let pin = windows_build_pin(spec, runtime_class, path);
    let host_process = is_host_process_pod(spec);
    for (cpath, c) in containers(spec, path) {
        let Some(image) = c.get("image").and_then(Value::as_str) else {
            continue;
        };
        let Some((tag, build)) = image_build_tag(image) else {
            continue;
        };
        match &pin {
            None if !host_process => out.push(Warning::new(Rule::BuildNotPinned, format!(
                "{}: tag {tag} names {} ({build}) but no node selector or RuntimeClass pins {LABEL_WINDOWS_BUILD}; on a Windows node of another build the container cannot start",
                cpath.child("image"),
                build.product_name()
            ))),
            Some((Some(host), raw, source)) if !host_process && !process_isolation_compatible(ImageBuild(build), HostBuild(*host)) => {
                out.push(Warning::new(Rule::BuildMismatch, format!(
                    "{}: tag {tag} names {} ({build}), which cannot run with process isolation on the {LABEL_WINDOWS_BUILD} {raw} that {source} selects",
                    cpath.child("image"),
                    build.product_name()
                )))
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn win(extra: Value) -> Value {
        let mut s = json!({
            "os": {"name": "windows"},
            "nodeSelector": {"kubernetes.io/os": "windows", "node.kubernetes.io/windows-build": "10.0.17763"},
            "containers": [{"name": "c", "image": "mcr.microsoft.com/windows/servercore:ltsc2019",
                            "terminationMessagePath": "/dev/termination-log"}],
        });
        if let (Some(m), Some(e)) = (s.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                m.insert(k.clone(), v.clone());
            }
        }
        s
    }

    fn warn(spec: &Value) -> Vec<String> {
        windows_warnings(spec, None, &Path::new("spec"))
    }

    fn one(spec: &Value, prefix: &str) {
        let w = warn(spec);
        assert_eq!(w.len(), 1, "{w:#?}");
        assert!(
            w[0].starts_with(prefix),
            "{:?} should start with {prefix:?}",
            w[0]
        );
        assert!(!w[0].contains('\n'));
    }

    #[test]
    fn windows_pod_without_problem_fields_gets_no_warning() {
        assert_eq!(warn(&win(json!({}))), Vec::<String>::new());
    }

    #[test]
    fn windows_warning_for_each_field_windows_cannot_honour() {
        let c = |extra: Value| {
            let mut c =
                json!({"name": "c", "image": "mcr.microsoft.com/windows/servercore:ltsc2019"});
            if let (Some(m), Some(e)) = (c.as_object_mut(), extra.as_object()) {
                for (k, v) in e {
                    m.insert(k.clone(), v.clone());
                }
            }
            json!({"containers": [c]})
        };
        let cases: Vec<(Value, &str)> = vec![
            (
                c(json!({"volumeMounts": [{"name": "v", "mountPath": "C:\\v", "subPath": "x"}]})),
                "spec.containers[0].volumeMounts[0].subPath: ",
            ),
            (
                c(
                    json!({"volumeMounts": [{"name": "v", "mountPath": "C:\\v", "subPathExpr": "$(POD)"}]}),
                ),
                "spec.containers[0].volumeMounts[0].subPathExpr: ",
            ),
            (
                c(
                    json!({"volumeMounts": [{"name": "v", "mountPath": "C:\\v", "mountPropagation": "HostToContainer"}]}),
                ),
                "spec.containers[0].volumeMounts[0].mountPropagation: ",
            ),
            (
                json!({"volumes": [{"name": "v", "emptyDir": {"medium": "Memory"}}]}),
                "spec.volumes[0].emptyDir.medium: ",
            ),
            (
                json!({"volumes": [{"name": "v", "hostPath": {"path": "/var/log"}}]}),
                "spec.volumes[0].hostPath.path: \"/var/log\" is a Linux path",
            ),
            (
                json!({"volumes": [{"name": "v", "nfs": {"server": "s", "path": "/x"}}]}),
                "spec.volumes[0].nfs: NFS volumes",
            ),
            (
                c(json!({"volumeDevices": [{"name": "d", "devicePath": "/dev/xvda"}]})),
                "spec.containers[0].volumeDevices: ",
            ),
            (
                json!({"dnsPolicy": "ClusterFirstWithHostNet"}),
                "spec.dnsPolicy: ClusterFirstWithHostNet",
            ),
            (json!({"hostNetwork": true}), "spec.hostNetwork: "),
            (
                c(json!({"resources": {"limits": {"hugepages-2Mi": "10Mi", "memory": "1Gi"}}})),
                "spec.containers[0].resources.limits[hugepages-2Mi]: huge pages",
            ),
            (
                c(json!({"terminationMessagePath": "/tmp/msg"})),
                "spec.containers[0].terminationMessagePath: ",
            ),
            (
                c(
                    json!({"resources": {"requests": {"memory": "300Mi"}, "limits": {"memory": "800Mi"}}}),
                ),
                "spec.containers[0].resources.requests[memory]: 300Mi differs from the memory limit 800Mi",
            ),
        ];
        for (extra, prefix) in cases {
            one(&win(extra), prefix);
        }
    }

    #[test]
    fn windows_fields_that_windows_honours_get_no_warning() {
        let spec = win(json!({
            "volumes": [{"name": "a", "hostPath": {"path": "C:\\data"}}, {"name": "p", "hostPath": {"path": "\\\\.\\pipe\\docker_engine"}}, {"name": "e", "emptyDir": {}}],
            "containers": [{"name": "c", "image": "mcr.microsoft.com/windows/servercore:ltsc2019",
                "volumeMounts": [{"name": "a", "mountPath": "C:\\a", "subPath": "", "mountPropagation": "None"}],
                "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1024Mi"}}}],
        }));
        assert_eq!(warn(&spec), Vec::<String>::new());
    }

    #[test]
    fn windows_host_process_pod_with_host_network_gets_no_host_network_warning() {
        let spec = win(
            json!({"hostNetwork": true, "securityContext": {"windowsOptions": {"hostProcess": true}}}),
        );
        assert_eq!(warn(&spec), Vec::<String>::new());
    }

    #[test]
    fn linux_pods_get_no_windows_field_warnings() {
        let spec = json!({"os": {"name": "linux"}, "hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet",
            "volumes": [{"name": "v", "emptyDir": {"medium": "Memory"}}],
            "containers": [{"name": "c", "image": "nginx", "volumeMounts": [{"name": "v", "mountPath": "/v", "subPath": "x"}]}]});
        assert_eq!(warn(&spec), Vec::<String>::new());
        assert_eq!(
            warn(&json!({"containers": [{"name": "c", "image": "nginx"}]})),
            Vec::<String>::new()
        );
    }

    #[test]
    fn windows_selection_without_os_name_is_warned() {
        let spec = json!({"nodeSelector": {"kubernetes.io/os": "windows", "node.kubernetes.io/windows-build": "10.0.17763"},
            "containers": [{"name": "c", "image": "mcr.microsoft.com/windows/servercore:ltsc2019"}]});
        assert_eq!(
            warn(&spec),
            vec![
                "spec.os.name: the pod selects Windows nodes (spec.nodeSelector[kubernetes.io/os]) but does not set spec.os.name: windows, so fields Windows cannot honour are not rejected; set it to windows"
            ]
        );
        let rc = json!({"metadata": {"name": "windows-2019"}, "scheduling": {"nodeSelector": {"kubernetes.io/os": "windows"}}});
        let w = windows_warnings(
            &json!({"runtimeClassName": "windows-2019", "containers": []}),
            Some(&rc),
            &Path::new("spec"),
        );
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("RuntimeClass \"windows-2019\""), "{}", w[0]);
    }

    #[test]
    fn windows_os_and_selection_conflicts_are_warned() {
        let w = warn(
            &json!({"os": {"name": "linux"}, "nodeSelector": {"kubernetes.io/os": "windows"}}),
        );
        assert_eq!(
            w,
            vec![
                "spec.os.name: linux conflicts with spec.nodeSelector[kubernetes.io/os], which selects Windows nodes; a Linux pod cannot run there"
            ]
        );
        let w = warn(
            &json!({"os": {"name": "windows"}, "nodeSelector": {"kubernetes.io/os": "linux"}}),
        );
        assert_eq!(
            w,
            vec![
                "spec.nodeSelector[kubernetes.io/os]: selects Linux nodes but spec.os.name is windows; a Windows pod cannot run there"
            ]
        );
    }

    #[test]
    fn windows_image_without_windows_selection_is_warned() {
        let w = warn(
            &json!({"containers": [{"name": "c", "image": "mcr.microsoft.com/windows/nanoserver:1809"}]}),
        );
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("spec.containers[0].image: \"mcr.microsoft.com/windows/nanoserver:1809\" is a Windows image"), "{}", w[0]);
    }

    #[test]
    fn windows_image_build_tag_without_pin_is_warned_and_incompatible_pin_too() {
        let unpinned = json!({"os": {"name": "windows"}, "nodeSelector": {"kubernetes.io/os": "windows"},
            "containers": [{"name": "c", "image": "myregistry.io/billing-app:v4.8-ltsc2022"}]});
        assert_eq!(
            warn(&unpinned),
            vec![
                "spec.containers[0].image: tag ltsc2022 names Windows Server 2022 (10.0.20348) but no node selector or RuntimeClass pins node.kubernetes.io/windows-build; on a Windows node of another build the container cannot start"
            ]
        );
        let mismatched = json!({"os": {"name": "windows"}, "nodeSelector": {"node.kubernetes.io/windows-build": "10.0.17763"},
            "containers": [{"name": "c", "image": "myregistry.io/billing-app:v4.8-ltsc2022"}]});
        assert_eq!(
            warn(&mismatched),
            vec![
                "spec.containers[0].image: tag ltsc2022 names Windows Server 2022 (10.0.20348), which cannot run with process isolation on the node.kubernetes.io/windows-build 10.0.17763 that spec.nodeSelector[node.kubernetes.io/windows-build] selects"
            ]
        );
        // A 2025 host runs 2022 images.
        let forward = json!({"os": {"name": "windows"}, "nodeSelector": {"node.kubernetes.io/windows-build": "10.0.26100"},
            "containers": [{"name": "c", "image": "myregistry.io/billing-app:v4.8-ltsc2022"}]});
        assert_eq!(warn(&forward), Vec::<String>::new());
    }

    #[test]
    fn toleration_of_the_windows_taint_without_a_selector_is_warned() {
        let spec = json!({
            "tolerations": [{"key": "dedicated", "operator": "Exists"}, {"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "example.com/app:1"}],
        });
        let findings = windows_findings(&spec, None, &Path::new("spec"));
        assert_eq!(findings.len(), 1, "{findings:#?}");
        assert_eq!(findings[0].rule, Rule::TolerationWithoutSelector);
        assert!(
            findings[0]
                .text
                .starts_with("spec.tolerations[1]: tolerating the Windows nodes' taint")
        );
        // With the selector as well, nothing to say.
        let mut selected = spec.clone();
        selected["nodeSelector"] = json!({"kubernetes.io/os": "windows"});
        selected["os"] = json!({"name": "windows"});
        assert!(
            windows_findings(&selected, None, &Path::new("spec"))
                .iter()
                .all(|f| f.rule != Rule::TolerationWithoutSelector)
        );
    }

    #[test]
    fn read_only_root_filesystem_of_a_windows_container_is_warned() {
        let mut spec = win(json!({}));
        spec["containers"][0]["securityContext"] = json!({"readOnlyRootFilesystem": true});
        one(
            &spec,
            "spec.containers[0].securityContext.readOnlyRootFilesystem: a read-only root filesystem is not possible on Windows",
        );
        let ids: std::collections::BTreeSet<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
        assert_eq!(ids.len(), Rule::ALL.len(), "rule IDs are unique");
    }

    #[test]
    fn windows_warnings_never_panic_on_odd_shapes() {
        for spec in [
            json!(null),
            json!({"os": {"name": "windows"}, "volumes": 1, "containers": [1, {"volumeMounts": [1, {"subPath": 3}], "resources": {"limits": 1}}]}),
            json!({"os": {"name": "windows"}, "volumes": [null, {"hostPath": 1, "emptyDir": {"medium": 2}}], "containers": {"x": 1}}),
            json!({"os": {"name": "windows"}, "containers": [{"image": 5, "resources": {"requests": {"memory": "x"}, "limits": {"memory": []}}}]}),
        ] {
            let _ = windows_warnings(&spec, Some(&json!({"scheduling": []})), &Path::new("spec"));
        }
    }
}
