//! OS placement and Windows build compatibility — tandem's rules beyond upstream (on by default;
//! `SchedulerOptions::upstream_os_placement` turns them off). A pod never lands on a node of
//! another OS, and a Windows pod whose image names a build lands only on hosts that run that build
//! with process isolation. The decisions come from [`crate::os`].

use std::sync::Arc;

use tandem_core::windows::{HostBuild, ImageBuild};

use crate::cycle_state::CycleState;
use crate::os::{self, Os, OsSource, WindowsBuild};
use crate::plugin::{Code, FilterPlugin, Plugin, PreFilterPlugin, Rejection, Status};
use crate::snapshot::{NodeInfo, Snapshot};

/// The OsPlacement plugin (pre-filter, filter, node-only): the OS check, then the build check.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsPlacement;

/// The pod's OS, where it comes from, and the images naming a Windows build.
#[derive(Debug)]
struct Wanted {
    os: Os,
    source: OsSource,
    image_builds: Vec<(String, WindowsBuild)>,
}

/// The refusal: `node(s) run linux, pod requires windows (spec.os.name)`.
fn explain_os(cs: &CycleState<'_>, node: &NodeInfo, _: usize) -> Vec<String> {
    let Some(wanted) = cs.read::<Wanted>() else {
        return Vec::new();
    };
    vec![format!(
        "node(s) run {}, pod requires {} ({})",
        node.os, wanted.os, wanted.source
    )]
}

/// The refusal: `node(s) run Windows build 10.0.20348, image … needs 10.0.17763 (process
/// isolation)`, for the image at position `image`.
fn explain_build(cs: &CycleState<'_>, node: &NodeInfo, image: usize) -> Vec<String> {
    let host = node
        .windows_build
        .map(|b| b.to_string())
        .unwrap_or_default();
    let reason = match cs.read::<Wanted>().and_then(|w| w.image_builds.get(image)) {
        Some((name, build)) => {
            format!(
                "node(s) run Windows build {host}, image {name} needs {build} (process isolation)"
            )
        }
        None => format!("node(s) run Windows build {host}, incompatible with the pod's images"),
    };
    vec![reason]
}

impl Plugin for OsPlacement {
    fn name(&self) -> &'static str {
        "OsPlacement"
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
}

impl PreFilterPlugin for OsPlacement {
    fn pre_filter(&self, cs: &mut CycleState<'_>, _: &Snapshot) -> Status {
        let (os, source) = os::pod_os(cs.pod);
        let image_builds = os::pod_image_builds(cs.pod);
        cs.write(Wanted {
            os,
            source,
            image_builds,
        });
        Status::Success
    }
}

impl FilterPlugin for OsPlacement {
    /// The node's OS must be the pod's; then every image that names a Windows build must run on
    /// the node's build (nodes without a `node.kubernetes.io/windows-build` label are not judged).
    fn filter(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
        let Some(wanted) = cs.read::<Wanted>() else {
            return Ok(());
        };
        if node.os != wanted.os {
            return Err(Rejection::deferred(
                Code::UnschedulableAndUnresolvable,
                explain_os,
                0,
            ));
        }
        let Some(host) = node.windows_build else {
            return Ok(());
        };
        match wanted
            .image_builds
            .iter()
            .position(|(_, b)| !HostBuild(host).runs(ImageBuild(*b)))
        {
            Some(i) => Err(Rejection::deferred(
                Code::UnschedulableAndUnresolvable,
                explain_build,
                i,
            )),
            None => Ok(()),
        }
    }

    fn node_only(&self) -> bool {
        true
    }

    fn sign(&self, cs: &CycleState<'_>, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        let Some(wanted) = cs.read::<Wanted>() else {
            return Ok(());
        };
        let builds: Vec<String> = wanted
            .image_builds
            .iter()
            .map(|(_, build)| build.to_string())
            .collect();
        serde_json::to_writer(out, &(wanted.os.as_str(), builds))
    }
}
