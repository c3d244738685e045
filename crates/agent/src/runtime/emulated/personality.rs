//! The emulated node's OS personality as data, as kwok keeps node behaviour in stages: what a
//! real node of each OS refuses, with the message it gives, and how its containers die.
//!
//! [`WINDOWS`] refuses what a Windows node refuses: `hostNetwork` for pods that are not
//! HostProcess pods (the kubelet's `kuberuntime` sandbox checks on Windows), memory-backed
//! emptyDir (the emptyDir plugin's `SetUpAt` on Windows), privileged containers, and images (or
//! a pause image) built for a Windows build the host cannot run in process isolation (the Host
//! Compute Service's message); it never OOM-kills (Windows pages instead) and a container killed
//! at the end of its grace period exits 1. [`LINUX`] refuses Windows images (containerd's
//! platform matching on pull), OOM-kills, and reports SIGKILL as 137.
//!
//! Every check is a pure function of its input; the tests hold golden input/output pairs for
//! both personalities.

use k8s_openapi::api::core::v1::{Container, Pod};
use tandem_core::windows::ImageBuild;

use crate::config::NodeOs;
use crate::windows::{OS_MISMATCH_MESSAGE, WindowsVersion};

/// What an emulated node of one OS refuses and how its containers end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Personality {
    pub os: NodeOs,
    /// The sandbox's refusal of `hostNetwork` in a pod that is not a HostProcess pod.
    pub host_network_refusal: Option<&'static str>,
    /// Why a memory-backed emptyDir cannot be set up (after `MountVolume.SetUp failed for
    /// volume "<name>" : `).
    pub memory_empty_dir_refusal: Option<&'static str>,
    /// The refusal of a privileged container.
    pub privileged_refusal: Option<&'static str>,
    /// Containers run in process isolation: an image (or pause image) of a Windows build the
    /// host cannot run is refused with the Host Compute Service's message.
    pub process_isolation: bool,
    /// The refusal to pull a known Windows image (after `failed to pull and unpack image
    /// "<image>": `): no platform of its manifest matches the node's.
    pub windows_image_refusal: Option<&'static str>,
    /// Whether a container past its memory limit (`oom-after`) is OOM-killed.
    pub oom_kills: bool,
    /// The exit code of a container killed at the end of its stop grace period.
    pub killed_exit_code: i32,
}

/// A Linux node.
pub const LINUX: Personality = Personality {
    os: NodeOs::Linux,
    host_network_refusal: None,
    memory_empty_dir_refusal: None,
    privileged_refusal: None,
    process_isolation: false,
    windows_image_refusal: Some(
        "no match for platform in manifest: not found (a Windows image on a Linux node)",
    ),
    oom_kills: true,
    // SIGKILL.
    killed_exit_code: 137,
};

/// A Windows node.
pub const WINDOWS: Personality = Personality {
    os: NodeOs::Windows,
    host_network_refusal: Some(
        "failed to create pod sandbox: hostNetwork is not supported on Windows nodes for pods that are not HostProcess pods",
    ),
    memory_empty_dir_refusal: Some(
        "memory-backed emptyDir (medium: Memory) is not supported on Windows nodes",
    ),
    privileged_refusal: Some("privileged containers are not supported on Windows"),
    process_isolation: true,
    windows_image_refusal: None,
    // Windows pages instead.
    oom_kills: false,
    // Terminated after the CTRL_SHUTDOWN_EVENT grace period.
    killed_exit_code: 1,
};

impl Personality {
    /// The personality of a node of `os`.
    pub fn of(os: NodeOs) -> &'static Personality {
        match os {
            NodeOs::Linux => &LINUX,
            NodeOs::Windows => &WINDOWS,
        }
    }

    /// Why the node refuses the pod's sandbox, apart from its pause image.
    pub fn sandbox_refusal(&self, pod: &Pod) -> Option<String> {
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        match self.host_network_refusal {
            Some(message) if host_network && !is_host_process(pod) => Some(message.to_string()),
            _ => None,
        }
    }

    /// Why the node cannot set up the pod's volumes: the first volume it refuses.
    pub fn volume_refusal(&self, pod: &Pod) -> Option<String> {
        let why = self.memory_empty_dir_refusal?;
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
        volumes
            .into_iter()
            .flatten()
            .find(|v| v.empty_dir.as_ref().and_then(|e| e.medium.as_deref()) == Some("Memory"))
            .map(|v| format!("MountVolume.SetUp failed for volume \"{}\" : {why}", v.name))
    }

    /// Why the node refuses the container, apart from its image.
    pub fn container_refusal(&self, container: &Container) -> Option<String> {
        let privileged = container
            .security_context
            .as_ref()
            .and_then(|s| s.privileged)
            == Some(true);
        self.privileged_refusal
            .filter(|_| privileged)
            .map(str::to_string)
    }

    /// Why a host of build `host` cannot run `image`: the Host Compute Service's message when
    /// it runs in process isolation and the image's Windows build is one the host does not run.
    /// Images without a known build are let through.
    pub fn image_refusal(&self, host: Option<WindowsVersion>, image: &str) -> Option<String> {
        let (Some(host), Some(build)) = (host, tandem_core::windows::image_windows_build(image))
        else {
            return None;
        };
        (self.process_isolation && !host.host().runs(ImageBuild(build)))
            .then(|| OS_MISMATCH_MESSAGE.to_string())
    }

    /// Why the node refuses the sandbox of a host of build `host` for its pause image.
    pub fn pause_image_refusal(&self, host: Option<WindowsVersion>, pause: &str) -> Option<String> {
        self.image_refusal(host, pause)
            .map(|e| format!("failed to create pod sandbox with pause image {pause}: {e}"))
    }

    /// Why the node refuses to pull `image`.
    pub fn pull_refusal(&self, image: &str) -> Option<String> {
        let why = self.windows_image_refusal?;
        tandem_core::windows::is_known_windows_image(image)
            .then(|| format!("failed to pull and unpack image \"{image}\": {why}"))
    }
}

/// Whether the pod, or one of its containers, is a HostProcess pod.
fn is_host_process(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let pod_level = spec
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.windows_options.as_ref())
        .and_then(|w| w.host_process)
        .unwrap_or(false);
    pod_level
        || spec.is_some_and(|s| {
            s.containers.iter().any(|c| {
                c.security_context
                    .as_ref()
                    .and_then(|s| s.windows_options.as_ref())
                    .and_then(|w| w.host_process)
                    == Some(true)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windows::{SERVER_2019, SERVER_2022, SERVER_2025};

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
            .expect("pod fixture")
    }

    fn container(spec: serde_json::Value) -> Container {
        serde_json::from_value(spec).expect("container fixture")
    }

    /// What a personality is asked about.
    enum Input<'a> {
        Sandbox(&'a Pod),
        Volumes(&'a Pod),
        ContainerSpec(&'a Container),
        Image(Option<WindowsVersion>, &'a str),
        PauseImage(Option<WindowsVersion>, &'a str),
        Pull(&'a str),
    }

    impl Input<'_> {
        fn refusal(&self, p: &Personality) -> Option<String> {
            match *self {
                Input::Sandbox(pod) => p.sandbox_refusal(pod),
                Input::Volumes(pod) => p.volume_refusal(pod),
                Input::ContainerSpec(c) => p.container_refusal(c),
                Input::Image(host, image) => p.image_refusal(host, image),
                Input::PauseImage(host, image) => p.pause_image_refusal(host, image),
                Input::Pull(image) => p.pull_refusal(image),
            }
        }
    }

    /// The golden pairs: a personality, one input to one of its checks, and the refusal the
    /// node gives (`None`: accepted).
    #[test]
    fn personalities_refuse_what_their_os_refuses_with_its_messages() {
        use Input::*;

        let plain = pod(serde_json::json!({"containers": [{"name": "app"}]}));
        let host_network =
            pod(serde_json::json!({"hostNetwork": true, "containers": [{"name": "app"}]}));
        let host_process = pod(serde_json::json!({"hostNetwork": true,
            "securityContext": {"windowsOptions": {"hostProcess": true}},
            "containers": [{"name": "app"}]}));
        let host_process_container = pod(serde_json::json!({"hostNetwork": true,
            "containers": [{"name": "app",
                "securityContext": {"windowsOptions": {"hostProcess": true}}}]}));
        let memory = pod(
            serde_json::json!({"containers": [{"name": "app"}], "volumes": [
            {"name": "disk", "emptyDir": {}},
            {"name": "cache", "emptyDir": {"medium": "Memory"}}]}),
        );
        let privileged = container(serde_json::json!({"name": "app",
            "securityContext": {"privileged": true}}));
        let unprivileged = container(serde_json::json!({"name": "app",
            "securityContext": {"privileged": false}}));
        let host_network_message = "failed to create pod sandbox: hostNetwork is not supported on Windows nodes for pods that are not HostProcess pods";
        let memory_message = "MountVolume.SetUp failed for volume \"cache\" : memory-backed emptyDir (medium: Memory) is not supported on Windows nodes";
        let nanoserver = "mcr.microsoft.com/windows/nanoserver:ltsc2022";
        let pull_message = "failed to pull and unpack image \"mcr.microsoft.com/windows/nanoserver:ltsc2022\": no match for platform in manifest: not found (a Windows image on a Linux node)";
        let pause_2019 = "mcr.microsoft.com/oss/kubernetes/pause:3.9-windows-ltsc2019";

        let cases: Vec<(&str, &Personality, Input, Option<&str>)> = vec![
            ("plain sandbox", &WINDOWS, Sandbox(&plain), None),
            (
                "hostNetwork",
                &WINDOWS,
                Sandbox(&host_network),
                Some(host_network_message),
            ),
            ("hostNetwork", &LINUX, Sandbox(&host_network), None),
            (
                "hostNetwork of a HostProcess pod",
                &WINDOWS,
                Sandbox(&host_process),
                None,
            ),
            (
                "hostNetwork of a HostProcess container",
                &WINDOWS,
                Sandbox(&host_process_container),
                None,
            ),
            (
                "memory emptyDir",
                &WINDOWS,
                Volumes(&memory),
                Some(memory_message),
            ),
            ("memory emptyDir", &LINUX, Volumes(&memory), None),
            ("no volumes", &WINDOWS, Volumes(&plain), None),
            (
                "privileged",
                &WINDOWS,
                ContainerSpec(&privileged),
                Some("privileged containers are not supported on Windows"),
            ),
            ("privileged", &LINUX, ContainerSpec(&privileged), None),
            ("unprivileged", &WINDOWS, ContainerSpec(&unprivileged), None),
            (
                "ltsc2019 image on 2022",
                &WINDOWS,
                Image(Some(SERVER_2022), "x/app:ltsc2019"),
                Some(OS_MISMATCH_MESSAGE),
            ),
            (
                "ltsc2022 image on 2025",
                &WINDOWS,
                Image(Some(SERVER_2025), "x/app:ltsc2022"),
                None,
            ),
            (
                "ltsc2022 image on 2019",
                &WINDOWS,
                Image(Some(SERVER_2019), "x/app:ltsc2022"),
                Some(OS_MISMATCH_MESSAGE),
            ),
            (
                "image without a build",
                &WINDOWS,
                Image(Some(SERVER_2019), "busybox:1.36"),
                None,
            ),
            (
                "no host build",
                &WINDOWS,
                Image(None, "x/app:ltsc2019"),
                None,
            ),
            (
                "ltsc2019 image, no process isolation",
                &LINUX,
                Image(Some(SERVER_2022), "x/app:ltsc2019"),
                None,
            ),
            (
                "pause image of another build",
                &WINDOWS,
                PauseImage(Some(SERVER_2022), pause_2019),
                Some(
                    "failed to create pod sandbox with pause image mcr.microsoft.com/oss/kubernetes/pause:3.9-windows-ltsc2019: The operating system of the container does not match the operating system of the host.",
                ),
            ),
            (
                "Windows image",
                &LINUX,
                Pull(nanoserver),
                Some(pull_message),
            ),
            ("Windows image", &WINDOWS, Pull(nanoserver), None),
            ("Linux image", &LINUX, Pull("busybox:1.36"), None),
        ];
        for (name, personality, input, want) in cases {
            assert_eq!(
                input.refusal(personality).as_deref(),
                want,
                "{name} on {:?}",
                personality.os
            );
        }
    }

    #[test]
    fn each_os_has_its_personality_and_its_way_of_ending_containers() {
        for (os, oom_kills, killed_exit_code) in
            [(NodeOs::Linux, true, 137), (NodeOs::Windows, false, 1)]
        {
            let p = Personality::of(os);
            assert_eq!(
                (p.os, p.oom_kills, p.killed_exit_code),
                (os, oom_kills, killed_exit_code)
            );
        }
    }
}
