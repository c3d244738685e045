//! Windows knowledge shared by admission, the scheduler, the node agent and `tandem check`.
//!
//! - [`build`]: Windows Server builds (`10.0.17763` = 2019, `10.0.20348` = 2022, `10.0.26100` =
//!   2025), the build an image tag names (`servercore:ltsc2019`, `nanoserver:1809`), whether an
//!   image is a Windows image, a node's full version with its revision, and Microsoft's
//!   process-isolation compatibility rules (`HostBuild::runs(ImageBuild)`).
//! - [`pod_os`]: which operating system a pod or pod template targets, and why.
//!
//! Everything here is a pure function of its inputs.

pub mod build;
pub mod pod_os;

pub use build::{
    HostBuild, ImageBuild, RELEASES, WindowsBuild, WindowsRelease, WindowsVersion, image_build_tag,
    image_windows_build, is_known_windows_image, process_isolation_compatible,
};
pub use pod_os::{OsSource, PodOs, PodOsDecision, pod_os, pod_os_at, windows_build_pin};

/// The well-known node label naming the node's operating system (`linux`, `windows`).
pub const LABEL_OS: &str = "kubernetes.io/os";
/// The deprecated beta OS label, still honoured in selectors.
pub const LABEL_OS_BETA: &str = "beta.kubernetes.io/os";
/// The well-known node label naming a Windows node's `major.minor.build`.
pub const LABEL_WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
