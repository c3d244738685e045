//! A container as the pod worker tracks it: its state ([`CState`], what `containerStatuses`
//! shows), restart count, last termination, back-off and probes ([`Track`]), and where its spec
//! is read from (the pod's `initContainers`/`containers`, or an ephemeral container added by
//! `kubectl debug`).
//!
//! The states and waiting reasons are the kubelet's (upstream `kuberuntime`
//! `convertToAPIContainerStatuses`); [`Term::not_located`] is upstream's
//! `ContainerStatusUnknown` for a container the runtime no longer knows.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};
use tokio::time::Instant;

use super::probes::ProbeTrack;

/// How a container ended (`state.terminated` / `lastState.terminated`).
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    pub exit_code: i32,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<SystemTime>,
    pub finished_at: SystemTime,
    pub container_id: Option<String>,
}

impl Term {
    /// Upstream's `ContainerStatusUnknown` (exit code 137): the runtime has no record of a
    /// container the worker last saw running, or was still waiting to start when the pod ended.
    pub(super) fn not_located(finished_at: SystemTime, container_id: Option<String>) -> Term {
        Term {
            exit_code: 137,
            reason: "ContainerStatusUnknown".into(),
            message: Some("The container could not be located when the pod was terminated".into()),
            started_at: None,
            finished_at,
            container_id,
        }
    }
}

/// A container's state in the worker.
#[derive(Clone, Debug, PartialEq)]
pub enum CState {
    Waiting {
        reason: String,
        message: Option<String>,
        retry_at: Option<Instant>,
    },
    Running {
        id: String,
        started_at: SystemTime,
    },
    Terminated(Term),
}

#[derive(Clone, Debug)]
pub(super) struct Track {
    /// The container's name; its spec is read from the worker's pod when needed
    /// ([`spec_container`]) rather than copied here: a parsed `Container` is over 2 KB, and a
    /// node bench keeps tens of thousands of workers.
    pub(super) name: String,
    /// The image the container runs, as the spec named it when the worker started.
    pub(super) image: String,
    pub(super) is_init: bool,
    /// An ephemeral container's spec (as a `Container`; `kubectl debug` adds them to a running
    /// pod). Kept here because an ephemeral container is not in the pod's `containers`; it is
    /// started once in the pod's sandbox and never restarted.
    pub(super) ephemeral: Option<Box<Container>>,
    /// A restartable init container (`restartPolicy: Always`): a sidecar.
    pub(super) sidecar: bool,
    pub(super) state: CState,
    pub(super) restart_count: i32,
    pub(super) last: Option<Term>,
    pub(super) backoff: Option<Duration>,
    pub(super) image_id: String,
    /// After a failed pull: until when the image is in back-off, and why the pull failed
    /// (the kubelet's image back-off, keyed by pod and image).
    pub(super) pull_backoff: Option<Box<super::images::PullBackOff>>,
    pub(super) container_id: Option<String>,
    pub(super) ready: bool,
    pub(super) started: bool,
    pub(super) probes: Vec<ProbeTrack>,
    pub(super) ever_ran: bool,
}

impl Track {
    pub(super) fn new(container: &Container, is_init: bool, waiting_reason: &str) -> Track {
        let sidecar = is_init && container.restart_policy.as_deref() == Some("Always");
        Track {
            name: container.name.clone(),
            image: container.image.clone().unwrap_or_default(),
            is_init,
            ephemeral: None,
            sidecar,
            state: CState::Waiting {
                reason: waiting_reason.to_string(),
                message: None,
                retry_at: None,
            },
            restart_count: 0,
            last: None,
            backoff: None,
            image_id: String::new(),
            pull_backoff: None,
            container_id: None,
            ready: false,
            started: false,
            probes: Vec::new(),
            ever_ran: false,
        }
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn is_ephemeral(&self) -> bool {
        self.ephemeral.is_some()
    }

    /// A regular container (neither init nor ephemeral): what the pod phase and readiness count.
    pub(super) fn is_regular(&self) -> bool {
        !self.is_init && !self.is_ephemeral()
    }

    pub(super) fn field_path(&self) -> String {
        if self.is_ephemeral() {
            format!("spec.ephemeralContainers{{{}}}", self.name)
        } else if self.is_init {
            format!("spec.initContainers{{{}}}", self.name)
        } else {
            format!("spec.containers{{{}}}", self.name)
        }
    }

    pub(super) fn image(&self) -> String {
        self.image.clone()
    }
}

/// The spec of a worker's container: the init container or container named `name` in `pod`,
/// or an empty spec if the pod no longer has it (a pod's containers cannot change, so only a
/// malformed update gets there).
pub(super) fn spec_container<'a>(pod: &'a Pod, is_init: bool, name: &str) -> &'a Container {
    static NONE: std::sync::LazyLock<Container> = std::sync::LazyLock::new(Container::default);
    let spec = pod.spec.as_ref();
    let list = if is_init {
        spec.and_then(|s| s.init_containers.as_deref())
    } else {
        spec.map(|s| s.containers.as_slice())
    };
    list.into_iter()
        .flatten()
        .find(|c| c.name == name)
        .unwrap_or(&NONE)
}

/// A track's container spec: its ephemeral container's, or the pod's container of that name.
pub(super) fn track_spec<'a>(pod: &'a Pod, t: &'a Track) -> &'a Container {
    match &t.ephemeral {
        Some(c) => c,
        None => spec_container(pod, t.is_init, &t.name),
    }
}

/// An `EphemeralContainer` as the `Container` the runtime creates (the same fields, less
/// `targetContainerName`, which the runtime reads from the pod).
fn ephemeral_as_container(ec: &EphemeralContainer) -> Container {
    let mut v = serde_json::to_value(ec).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.remove("targetContainerName");
    }
    serde_json::from_value(v).unwrap_or_else(|_| Container {
        name: ec.name.clone(),
        image: ec.image.clone(),
        ..Container::default()
    })
}

/// Tracks for the pod's ephemeral containers that `tracks` does not have yet, in spec order.
pub(super) fn new_ephemeral_tracks(pod: &Pod, tracks: &[Track]) -> Vec<Track> {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|ec| !tracks.iter().any(|t| t.name == ec.name))
        .map(|ec| {
            let c = ephemeral_as_container(ec);
            let mut t = Track::new(&c, false, "ContainerCreating");
            t.ephemeral = Some(Box::new(c));
            t
        })
        .collect()
}
