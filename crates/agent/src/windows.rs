//! Windows knowledge only a node needs: the full versions (with update revision) tandem's
//! emulated Windows nodes report, the `osImage` string, and the message Windows' Host Compute
//! Service gives for an image its host cannot run.
//!
//! Builds, image tags and image ↔ host compatibility are the shared knowledge of
//! `tandem_core::windows` ([`WindowsVersion`], `HostBuild::runs`), so the scheduler, admission
//! and the agent cannot disagree.

pub use tandem_core::windows::{WindowsBuild, WindowsVersion};

/// Windows Server 2019 (LTSC 2019, 1809) as emulated nodes report it.
pub const SERVER_2019: WindowsVersion = WindowsVersion::new(WindowsBuild::SERVER_2019, 5820);
/// Windows Server 2022 (LTSC 2022) as emulated nodes report it.
pub const SERVER_2022: WindowsVersion = WindowsVersion::new(WindowsBuild::SERVER_2022, 2461);
/// Windows Server 2025 (LTSC 2025) as emulated nodes report it.
pub const SERVER_2025: WindowsVersion = WindowsVersion::new(WindowsBuild::SERVER_2025, 2033);

/// The marketing name a Windows node reports as `osImage`.
pub fn os_image(build: WindowsBuild) -> String {
    match build {
        WindowsBuild::SERVER_2019 => "Windows Server 2019 Datacenter".into(),
        WindowsBuild::SERVER_2022 => "Windows Server 2022 Datacenter".into(),
        WindowsBuild::SERVER_2025 => "Windows Server 2025 Datacenter".into(),
        b => format!("Windows Server Datacenter (build {})", b.build),
    }
}

/// The message Windows (HCS) gives when a container's OS build cannot run on the host.
pub const OS_MISMATCH_MESSAGE: &str =
    "The operating system of the container does not match the operating system of the host.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_nodes_report_their_versions_like_windows_does() {
        // (version, kernelVersion, node.kubernetes.io/windows-build, osImage)
        let cases = [
            (
                SERVER_2019,
                "10.0.17763.5820",
                "10.0.17763",
                "Windows Server 2019 Datacenter",
            ),
            (
                SERVER_2022,
                "10.0.20348.2461",
                "10.0.20348",
                "Windows Server 2022 Datacenter",
            ),
            (
                SERVER_2025,
                "10.0.26100.2033",
                "10.0.26100",
                "Windows Server 2025 Datacenter",
            ),
            (
                WindowsVersion::new(WindowsBuild::new(10, 0, 19041), 1),
                "10.0.19041.1",
                "10.0.19041",
                "Windows Server Datacenter (build 19041)",
            ),
        ];
        for (v, kernel, label, image) in cases {
            assert_eq!(v.to_string(), kernel);
            assert_eq!(v.build.to_string(), label);
            assert_eq!(os_image(v.build), image);
        }
    }
}
