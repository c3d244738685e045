//! Windows builds, the builds image tags name, and process-isolation compatibility.
//!
//! A Windows container shares the host's kernel when it runs with process isolation (the only
//! isolation Kubernetes supports), so its base image must suit the host's build. Microsoft's
//! published rules ("Windows container version compatibility"):
//!
//! - before Windows Server 2022, the image build must equal the host build (the revision may
//!   differ);
//! - from Windows Server 2022 (build 20348) on, a host runs images of its own build and of older
//!   builds down to 20348: a Windows Server 2025 host runs `ltsc2022` images;
//! - an image newer than its host never runs.
//!
//! The node label `node.kubernetes.io/windows-build` carries `major.minor.build` (`10.0.17763`).

use std::fmt;

/// A Windows build as `major.minor.build` (`10.0.17763`); the revision (UBR) is ignored because it
/// never affects compatibility on Windows Server 2019 and later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WindowsBuild {
    pub major: u32,
    pub minor: u32,
    pub build: u32,
}

impl WindowsBuild {
    /// Windows Server 2019 (LTSC), version 1809.
    pub const SERVER_2019: WindowsBuild = WindowsBuild::new(10, 0, 17763);
    /// Windows Server 2022 (LTSC).
    pub const SERVER_2022: WindowsBuild = WindowsBuild::new(10, 0, 20348);
    /// Windows Server 2025 (LTSC).
    pub const SERVER_2025: WindowsBuild = WindowsBuild::new(10, 0, 26100);

    pub const fn new(major: u32, minor: u32, build: u32) -> Self {
        WindowsBuild {
            major,
            minor,
            build,
        }
    }

    /// Parses `10.0.17763` or `10.0.17763.1234` (the revision is dropped). `None` for anything
    /// else, including a bare build number.
    pub fn parse(s: &str) -> Option<WindowsBuild> {
        let mut parts = s.trim().split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let build = parts.next()?.parse().ok()?;
        match parts.next() {
            None => {}
            Some(rev) if rev.parse::<u32>().is_ok() && parts.next().is_none() => {}
            Some(_) => return None,
        }
        Some(WindowsBuild {
            major,
            minor,
            build,
        })
    }

    /// The release this build belongs to, when it is one tandem knows.
    pub fn release(self) -> Option<&'static WindowsRelease> {
        RELEASES.iter().find(|r| r.build == self)
    }

    /// `Windows Server 2019` for known builds, else the dotted build.
    pub fn product_name(self) -> String {
        self.release()
            .map(|r| r.product.to_string())
            .unwrap_or_else(|| format!("Windows build {self}"))
    }
}

impl fmt::Display for WindowsBuild {
    /// `10.0.17763`: the value of the `node.kubernetes.io/windows-build` label.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.build)
    }
}

/// One Windows release and the image tag tokens that name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowsRelease {
    pub build: WindowsBuild,
    pub product: &'static str,
    /// Tag tokens naming this release (`ltsc2019`, `1809`), lower case.
    pub tags: &'static [&'static str],
    /// Long-term servicing channel release (the ones Kubernetes supports as nodes).
    pub ltsc: bool,
}

/// The Windows releases tandem knows, oldest first.
pub const RELEASES: &[WindowsRelease] = &[
    WindowsRelease {
        build: WindowsBuild::new(10, 0, 14393),
        product: "Windows Server 2016",
        tags: &["ltsc2016", "1607"],
        ltsc: true,
    },
    WindowsRelease {
        build: WindowsBuild::SERVER_2019,
        product: "Windows Server 2019",
        tags: &["ltsc2019", "1809"],
        ltsc: true,
    },
    WindowsRelease {
        build: WindowsBuild::new(10, 0, 18362),
        product: "Windows Server, version 1903",
        tags: &["1903"],
        ltsc: false,
    },
    WindowsRelease {
        build: WindowsBuild::new(10, 0, 18363),
        product: "Windows Server, version 1909",
        tags: &["1909"],
        ltsc: false,
    },
    WindowsRelease {
        build: WindowsBuild::new(10, 0, 19041),
        product: "Windows Server, version 2004",
        tags: &["2004"],
        ltsc: false,
    },
    WindowsRelease {
        build: WindowsBuild::new(10, 0, 19042),
        product: "Windows Server, version 20H2",
        tags: &["20h2"],
        ltsc: false,
    },
    WindowsRelease {
        build: WindowsBuild::SERVER_2022,
        product: "Windows Server 2022",
        tags: &["ltsc2022"],
        ltsc: true,
    },
    WindowsRelease {
        build: WindowsBuild::SERVER_2025,
        product: "Windows Server 2025",
        tags: &["ltsc2025"],
        ltsc: true,
    },
];

/// First build of the "newer hosts run older images" era (Windows Server 2022).
const FORWARD_COMPATIBLE_FROM: u32 = 20348;

/// The Windows build a container image was made for (from its tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImageBuild(pub WindowsBuild);

/// The Windows build of a host (a node's `node.kubernetes.io/windows-build`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostBuild(pub WindowsBuild);

impl HostBuild {
    /// Whether this host runs a container image made for `image` with process isolation: the
    /// one check the scheduler, admission and the node agent all use. See
    /// [`process_isolation_compatible`].
    pub fn runs(self, image: ImageBuild) -> bool {
        process_isolation_compatible(image, self)
    }
}

/// A full Windows version, `major.minor.build.revision` (`10.0.17763.5820`): the build that
/// decides compatibility and the update revision (UBR) a node reports in its `kernelVersion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowsVersion {
    pub build: WindowsBuild,
    /// The update build revision; never affects compatibility.
    pub revision: u32,
}

impl WindowsVersion {
    pub const fn new(build: WindowsBuild, revision: u32) -> Self {
        WindowsVersion { build, revision }
    }

    /// Parses `10.0.17763.5820`, or `10.0.17763` with revision 0. `None` for anything else.
    pub fn parse(s: &str) -> Option<WindowsVersion> {
        let build = WindowsBuild::parse(s)?;
        let revision = match s.trim().splitn(4, '.').nth(3) {
            Some(rev) => rev.parse().ok()?,
            None => 0,
        };
        Some(WindowsVersion { build, revision })
    }

    /// This version as a host that runs images.
    pub fn host(self) -> HostBuild {
        HostBuild(self.build)
    }
}

impl fmt::Display for WindowsVersion {
    /// `10.0.17763.5820`: a Windows node's `kernelVersion`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.build, self.revision)
    }
}

/// Whether a container image built on `image` can run with process isolation on a host of build
/// `host`, following Microsoft's published compatibility rules (see the module documentation).
/// The two builds have types of their own so that a caller cannot swap them; `host.runs(image)`
/// ([`HostBuild::runs`]) reads the same. Hyper-V isolation, which would run older images on newer
/// hosts, is not supported by Kubernetes on Windows and is not modelled.
pub fn process_isolation_compatible(image: ImageBuild, host: HostBuild) -> bool {
    let (ImageBuild(image), HostBuild(host)) = (image, host);
    if image == host {
        return true;
    }
    if image > host {
        return false;
    }
    // An older image: only images from Windows Server 2022 on run on newer hosts.
    image.major == host.major && image.minor == host.minor && image.build >= FORWARD_COMPATIBLE_FROM
}

/// Splits an image reference into (repository with registry, tag); the digest is dropped.
fn split_image(image: &str) -> (String, Option<String>) {
    let no_digest = image.split('@').next().unwrap_or_default().trim();
    let last_slash = no_digest.rfind('/').map_or(0, |i| i + 1);
    match no_digest[last_slash..].rfind(':') {
        Some(i) => {
            let at = last_slash + i;
            (
                no_digest[..at].to_ascii_lowercase(),
                Some(no_digest[at + 1..].to_ascii_lowercase()),
            )
        }
        None => (no_digest.to_ascii_lowercase(), None),
    }
}

/// Repository prefixes whose images are Windows images whatever their tag.
const WINDOWS_REPOSITORIES: &[&str] = &[
    "mcr.microsoft.com/windows/",
    "mcr.microsoft.com/dotnet/framework/",
    "mcr.microsoft.com/powershell/windows",
    "microsoft/windowsservercore",
    "microsoft/nanoserver",
    "microsoft/iis",
    "microsoft/aspnet",
    "microsoft/dotnet-framework",
    "docker.io/microsoft/windowsservercore",
    "docker.io/microsoft/nanoserver",
    "docker.io/microsoft/iis",
];

/// Exact repositories that are Windows images.
const WINDOWS_REPOSITORY_NAMES: &[&str] = &["mcr.microsoft.com/windows"];

/// Tag tokens that say "this image is built on a Windows base".
const WINDOWS_TAG_TOKENS: &[&str] = &["nanoserver", "windowsservercore", "servercore", "windows"];

fn is_windows_repository(repo: &str) -> bool {
    WINDOWS_REPOSITORY_NAMES.contains(&repo)
        || WINDOWS_REPOSITORIES
            .iter()
            .any(|p| repo.starts_with(p) || format!("{repo}/").starts_with(p))
}

fn tag_tokens(tag: &str) -> impl Iterator<Item = &str> {
    tag.split(['-', '_']).filter(|t| !t.is_empty())
}

/// The tag token naming a Windows build in `image`, with that build: `Some(("ltsc2019",
/// 10.0.17763))` for `mcr.microsoft.com/windows/servercore:ltsc2019`.
///
/// `ltscNNNN` tokens and full builds (`10.0.17763.5696`) count on any image; the bare version
/// numbers of semi-annual releases (`1809`, `2004`, `20H2`) count only on known Windows
/// repositories or next to `nanoserver`/`windowsservercore` in the tag, so `myapp:1809` is not
/// mistaken for a Windows image.
pub fn image_build_tag(image: &str) -> Option<(String, WindowsBuild)> {
    let (repo, tag) = split_image(image);
    let tag = tag?;
    let windows_context =
        is_windows_repository(&repo) || tag_tokens(&tag).any(|t| WINDOWS_TAG_TOKENS.contains(&t));
    for token in tag_tokens(&tag) {
        if token.starts_with("10.")
            && let Some(build) = WindowsBuild::parse(token)
        {
            return Some((token.to_string(), build));
        }
        for release in RELEASES {
            for &name in release.tags {
                let bare_version = !name.starts_with("ltsc");
                if token == name && (!bare_version || windows_context) {
                    return Some((token.to_string(), release.build));
                }
            }
        }
    }
    None
}

/// The Windows build an image's tag names (`servercore:ltsc2019`, `iis:windowsservercore-ltsc2022`,
/// `nanoserver:1809`, `app:v2-ltsc2025`), if any. See [`image_build_tag`].
pub fn image_windows_build(image: &str) -> Option<WindowsBuild> {
    image_build_tag(image).map(|(_, b)| b)
}

/// Whether `image` is recognisably a Windows image: a Microsoft Windows repository
/// (`mcr.microsoft.com/windows/*`, `mcr.microsoft.com/dotnet/framework/*`, the old
/// `microsoft/windowsservercore`, …), a tag built on a Windows base (`…-nanoserver-…`,
/// `…windowsservercore…`), or a tag naming a Windows build (`…-ltsc2022`).
pub fn is_known_windows_image(image: &str) -> bool {
    let (repo, tag) = split_image(image);
    if repo.is_empty() {
        return false;
    }
    if is_windows_repository(&repo) {
        return true;
    }
    let Some(tag) = tag else {
        return false;
    };
    tag_tokens(&tag).any(|t| WINDOWS_TAG_TOKENS.contains(&t)) || image_build_tag(image).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_build_parses_label_values_and_revisions() {
        assert_eq!(
            WindowsBuild::parse("10.0.17763"),
            Some(WindowsBuild::SERVER_2019)
        );
        assert_eq!(
            WindowsBuild::parse("10.0.20348.2340"),
            Some(WindowsBuild::SERVER_2022)
        );
        for bad in [
            "",
            "10",
            "10.0",
            "10.0.x",
            "ltsc2019",
            "10.0.1.2.3",
            "10.0.17763.x",
        ] {
            assert_eq!(WindowsBuild::parse(bad), None, "{bad}");
        }
        assert_eq!(WindowsBuild::SERVER_2025.to_string(), "10.0.26100");
        assert_eq!(
            WindowsBuild::SERVER_2022.product_name(),
            "Windows Server 2022"
        );
    }

    #[test]
    fn windows_image_build_is_detected_from_tags() {
        let cases: &[(&str, Option<WindowsBuild>)] = &[
            (
                "mcr.microsoft.com/windows/servercore:ltsc2019",
                Some(WindowsBuild::SERVER_2019),
            ),
            (
                "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022",
                Some(WindowsBuild::SERVER_2022),
            ),
            (
                "mcr.microsoft.com/windows/nanoserver:1809",
                Some(WindowsBuild::SERVER_2019),
            ),
            (
                "myregistry.io/billing-app:v4.8-ltsc2022",
                Some(WindowsBuild::SERVER_2022),
            ),
            (
                "myregistry.io/app:1.0-LTSC2025",
                Some(WindowsBuild::SERVER_2025),
            ),
            (
                "mcr.microsoft.com/dotnet/framework/aspnet:4.8-windowsservercore-ltsc2019",
                Some(WindowsBuild::SERVER_2019),
            ),
            (
                "mcr.microsoft.com/windows/servercore:10.0.20348.2340",
                Some(WindowsBuild::SERVER_2022),
            ),
            (
                "mcr.microsoft.com/dotnet/aspnet:8.0-nanoserver-1809",
                Some(WindowsBuild::SERVER_2019),
            ),
            (
                "registry:5000/windows/servercore:ltsc2019@sha256:abcd",
                Some(WindowsBuild::SERVER_2019),
            ),
            ("myapp:1809", None),
            ("nginx:1.25", None),
            ("nginx", None),
            ("localhost:5000/nginx", None),
            ("mcr.microsoft.com/windows/servercore", None),
            ("", None),
            (":::", None),
        ];
        for (image, want) in cases {
            assert_eq!(image_windows_build(image), *want, "{image}");
        }
        assert_eq!(
            image_build_tag("mcr.microsoft.com/windows/servercore:ltsc2019").map(|(t, _)| t),
            Some("ltsc2019".to_string())
        );
    }

    #[test]
    fn windows_images_are_recognised() {
        for image in [
            "mcr.microsoft.com/windows/servercore:ltsc2019",
            "mcr.microsoft.com/windows/nanoserver:1809",
            "mcr.microsoft.com/windows:1809",
            "mcr.microsoft.com/windows/servercore/iis",
            "mcr.microsoft.com/dotnet/framework/runtime:4.8",
            "mcr.microsoft.com/dotnet/aspnet:8.0-nanoserver-ltsc2022",
            "microsoft/windowsservercore",
            "myregistry.io/billing-worker:v2.1-ltsc2022",
        ] {
            assert!(is_known_windows_image(image), "{image}");
        }
        for image in [
            "nginx",
            "busybox:1.36",
            "mcr.microsoft.com/dotnet/aspnet:8.0",
            "mcr.microsoft.com/oss/kubernetes/pause:3.6",
            "myapp:1809",
            "windows-exporter:latest",
            "",
        ] {
            assert!(!is_known_windows_image(image), "{image}");
        }
    }

    #[test]
    fn windows_versions_parse_with_or_without_a_revision() {
        let cases = [
            ("10.0.17763.5820", Some((WindowsBuild::SERVER_2019, 5820))),
            ("10.0.20348", Some((WindowsBuild::SERVER_2022, 0))),
            (" 10.0.26100.2033 ", Some((WindowsBuild::SERVER_2025, 2033))),
            ("10.0", None),
            ("10.x.1", None),
            ("10.0.17763.", None),
            ("10.0.17763.x", None),
            ("10.0.17763.1.2", None),
        ];
        for (s, want) in cases {
            let got = WindowsVersion::parse(s).map(|v| (v.build, v.revision));
            assert_eq!(got, want, "{s:?}");
        }
        let v = WindowsVersion::new(WindowsBuild::SERVER_2019, 5820);
        assert_eq!(v.to_string(), "10.0.17763.5820");
        assert!(v.host().runs(ImageBuild(WindowsBuild::SERVER_2019)));
    }

    #[test]
    fn process_isolation_compatibility_matrix_follows_microsoft_rules() {
        let (s2016, s2019, s2022, s2025) = (
            WindowsBuild::new(10, 0, 14393),
            WindowsBuild::SERVER_2019,
            WindowsBuild::SERVER_2022,
            WindowsBuild::SERVER_2025,
        );
        // (image, host, compatible)
        let matrix = [
            (s2016, s2016, true),
            (s2016, s2019, false),
            (s2019, s2019, true),
            (s2019, s2022, false),
            (s2019, s2025, false),
            (s2019, s2016, false),
            (s2022, s2019, false),
            (s2022, s2022, true),
            (s2022, s2025, true),
            (s2025, s2022, false),
            (s2025, s2025, true),
            (
                WindowsBuild::new(10, 0, 19041),
                WindowsBuild::new(10, 0, 19042),
                false,
            ),
        ];
        for (image, host, want) in matrix {
            assert_eq!(
                process_isolation_compatible(ImageBuild(image), HostBuild(host)),
                want,
                "image {image} on host {host}"
            );
            assert_eq!(HostBuild(host).runs(ImageBuild(image)), want);
        }
    }
}
