//! OS placement and Windows build compatibility — tandem's rules beyond upstream (on by default;
//! `SchedulerOptions::upstream_os_placement` turns them off). A pod never lands on a node of
//! another OS, and a Windows pod whose image names a build lands only on hosts that run that build
//! with process isolation. The decisions come from [`crate::os`].

use crate::framework::{CycleState, Rejection};
use crate::snapshot::NodeInfo;
use tandem_core::windows::{HostBuild, ImageBuild};

/// Filter: the node's OS must be the pod's.
pub fn filter_os(cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
    if node.os == cs.os {
        Ok(())
    } else {
        Err(Rejection::WrongOs)
    }
}

/// The refusal: `node(s) run linux, pod requires windows (spec.os.name)`.
pub fn os_reason(cs: &CycleState<'_>, node: &NodeInfo) -> String {
    format!(
        "node(s) run {}, pod requires {} ({})",
        node.os, cs.os, cs.os_source
    )
}

/// Filter: every image that names a Windows build must run on the node's build. Nodes without
/// a `node.kubernetes.io/windows-build` label are not judged.
pub fn filter_build(cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
    let Some(host) = node.windows_build else {
        return Ok(());
    };
    match cs
        .image_builds
        .iter()
        .position(|(_, b)| !HostBuild(host).runs(ImageBuild(*b)))
    {
        Some(i) => Err(Rejection::WrongBuild(i)),
        None => Ok(()),
    }
}

/// The refusal: `node(s) run Windows build 10.0.20348, image … needs 10.0.17763 (process isolation)`.
pub fn build_reason(cs: &CycleState<'_>, node: &NodeInfo, image: usize) -> String {
    let host = node
        .windows_build
        .map(|b| b.to_string())
        .unwrap_or_default();
    match cs.image_builds.get(image) {
        Some((name, build)) => {
            format!(
                "node(s) run Windows build {host}, image {name} needs {build} (process isolation)"
            )
        }
        None => format!("node(s) run Windows build {host}, incompatible with the pod's images"),
    }
}
