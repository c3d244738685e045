//! Windows build knowledge the agent needs: the node's build, its labels and `nodeInfo` strings,
//! which build an image was made for, and whether process isolation can run it.
//!
//! Image ↔ host compatibility delegates to the shared knowledge in `tandem_core::windows`, so the
//! scheduler, admission and the agent cannot disagree; this module adds what only a node needs
//! (its revision, `osImage` and `kernelVersion` strings, the HCS mismatch message).

use std::fmt;

/// A Windows version `major.minor.build.revision` (`10.0.17763.5820`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WindowsBuild {
    pub major: u32,
    pub minor: u32,
    pub build: u32,
    /// The update revision (UBR); only shown in `kernelVersion`.
    pub revision: u32,
}

impl WindowsBuild {
    /// Windows Server 2019 (LTSC 2019, 1809).
    pub const SERVER_2019: WindowsBuild = WindowsBuild {
        major: 10,
        minor: 0,
        build: 17763,
        revision: 5820,
    };
    /// Windows Server 2022 (LTSC 2022).
    pub const SERVER_2022: WindowsBuild = WindowsBuild {
        major: 10,
        minor: 0,
        build: 20348,
        revision: 2461,
    };
    /// Windows Server 2025 (LTSC 2025).
    pub const SERVER_2025: WindowsBuild = WindowsBuild {
        major: 10,
        minor: 0,
        build: 26100,
        revision: 2033,
    };

    /// Parses `10.0.17763` or `10.0.17763.5820`; a missing revision is 0.
    pub fn parse(s: &str) -> Option<WindowsBuild> {
        let parts: Vec<&str> = s.trim().split('.').collect();
        if !(3..=4).contains(&parts.len()) {
            return None;
        }
        let n = |i: usize| parts.get(i).map_or(Some(0), |p| p.parse::<u32>().ok());
        Some(WindowsBuild {
            major: n(0)?,
            minor: n(1)?,
            build: n(2)?,
            revision: n(3)?,
        })
    }

    /// `major.minor.build`: the value of `node.kubernetes.io/windows-build`.
    pub fn label(&self) -> String {
        format!("{}.{}.{}", self.major, self.minor, self.build)
    }

    /// `major.minor.build.revision`: the node's `kernelVersion`.
    pub fn kernel_version(&self) -> String {
        format!(
            "{}.{}.{}.{}",
            self.major, self.minor, self.build, self.revision
        )
    }

    /// The marketing name a Windows node reports as `osImage`.
    pub fn os_image(&self) -> String {
        match self.build {
            17763 => "Windows Server 2019 Datacenter".into(),
            20348 => "Windows Server 2022 Datacenter".into(),
            26100 => "Windows Server 2025 Datacenter".into(),
            b => format!("Windows Server Datacenter (build {b})"),
        }
    }
}

impl fmt::Display for WindowsBuild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// The Windows build number an image reference was built for, read from its tag (`ltsc2019`,
/// `1809`, `windowsservercore-ltsc2022`, …); `None` when the tag names no Windows release (a
/// multi-platform manifest, or a Linux image). Delegates to `tandem_core::windows`.
pub fn image_windows_build(image: &str) -> Option<u32> {
    tandem_core::windows::image_windows_build(image).map(|b| b.build)
}

/// Whether an image reference is recognisably a Windows image. Delegates to
/// `tandem_core::windows::is_known_windows_image`.
pub fn is_windows_image(image: &str) -> bool {
    tandem_core::windows::is_known_windows_image(image)
}

/// Whether this host runs an image of `image_build` with process isolation: the shared check of
/// `tandem_core::windows`, which the scheduler and admission use too.
pub fn runs_image_build(host: &WindowsBuild, image_build: u32) -> bool {
    use tandem_core::windows::{HostBuild, ImageBuild, WindowsBuild as CoreBuild};
    tandem_core::windows::process_isolation_compatible(
        ImageBuild(CoreBuild::new(10, 0, image_build)),
        HostBuild(CoreBuild::new(host.major, host.minor, host.build)),
    )
}

/// The message Windows (HCS) gives when a container's OS build cannot run on the host.
pub const OS_MISMATCH_MESSAGE: &str =
    "The operating system of the container does not match the operating system of the host.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_builds_come_from_tags() {
        assert_eq!(
            image_windows_build("mcr.microsoft.com/windows/servercore:ltsc2019"),
            Some(17763)
        );
        assert_eq!(
            image_windows_build("mcr.microsoft.com/windows/nanoserver:1809"),
            Some(17763)
        );
        assert_eq!(
            image_windows_build(
                "mcr.microsoft.com/dotnet/framework/aspnet:4.8-windowsservercore-ltsc2022"
            ),
            Some(20348)
        );
        assert_eq!(
            image_windows_build("mcr.microsoft.com/windows/servercore:10.0.17763.5820"),
            Some(17763)
        );
        assert_eq!(
            image_windows_build("localhost:5000/app:ltsc2025"),
            Some(26100)
        );
        assert_eq!(image_windows_build("nginx"), None);
        assert_eq!(image_windows_build("localhost:5000/nginx"), None);
        assert!(is_windows_image("mcr.microsoft.com/windows/servercore"));
        assert!(!is_windows_image("busybox:1.36"));
    }

    #[test]
    fn a_host_runs_the_image_builds_of_the_shared_rules() {
        let host = |build| WindowsBuild {
            build,
            ..WindowsBuild::SERVER_2019
        };
        assert!(runs_image_build(&host(17763), 17763));
        assert!(
            !runs_image_build(&host(20348), 17763),
            "2019 images need a 2019 host"
        );
        assert!(
            !runs_image_build(&host(17763), 20348),
            "never newer than the host"
        );
        assert!(
            runs_image_build(&host(26100), 20348),
            "2025 hosts run 2022 images"
        );
        assert!(!runs_image_build(&host(26100), 17763));
        assert!(!runs_image_build(&host(14393), 17763));
    }

    #[test]
    fn build_strings() {
        let b = WindowsBuild::SERVER_2019;
        assert_eq!(b.label(), "10.0.17763");
        assert_eq!(b.kernel_version(), "10.0.17763.5820");
        assert_eq!(b.os_image(), "Windows Server 2019 Datacenter");
        assert_eq!(
            WindowsBuild::parse("10.0.20348").map(|b| b.build),
            Some(20348)
        );
        assert_eq!(WindowsBuild::parse("10.0"), None);
        assert_eq!(WindowsBuild::parse("10.x.1"), None);
    }
}
