//! The pod status the worker publishes, built from its state as the kubelet's status manager
//! builds it: the phase (upstream `getPhase`), the conditions `PodReadyToStartContainers`,
//! `Initialized`, `ContainersReady`, `Ready` and `PodScheduled` with their transition times,
//! container statuses (init, regular, ephemeral), addresses, start time and QoS class. A status
//! is written only when it changed.

use k8s_openapi::api::core::v1::{
    Container, ContainerState as KState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};

use super::container::{CState, Term, Track};
use super::{PodWorker, ReportError, Stage};
use crate::clock;

impl PodWorker {
    /// The pod phase, as upstream `getPhase` computes it.
    pub fn phase(&self) -> String {
        if let Some(p) = &self.phase_override {
            return p.clone();
        }
        if matches!(self.stage, Stage::Sandbox { .. } | Stage::Init(_)) {
            return "Pending".into();
        }
        let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
        for t in self.tracks.iter().filter(|t| t.is_regular()) {
            match &t.state {
                CState::Running { .. } => running += 1,
                CState::Terminated(term) => {
                    stopped += 1;
                    if term.exit_code == 0 {
                        succeeded += 1;
                    }
                }
                CState::Waiting { .. } if t.last.is_some() => stopped += 1,
                CState::Waiting { .. } => waiting += 1,
            }
        }
        if waiting > 0 {
            return "Pending".into();
        }
        if running > 0 {
            return "Running".into();
        }
        if stopped == 0 {
            return "Pending".into();
        }
        match self.restart_policy() {
            "Never" => if succeeded == stopped {
                "Succeeded"
            } else {
                "Failed"
            }
            .into(),
            "OnFailure" => if succeeded == stopped {
                "Succeeded"
            } else {
                "Running"
            }
            .into(),
            _ => "Running".into(),
        }
    }

    fn condition(
        &mut self,
        type_: &str,
        status: bool,
        reason: Option<&str>,
        message: Option<String>,
    ) -> PodCondition {
        let s = if status { "True" } else { "False" }.to_string();
        let now = self.ctx.clock.now();
        let entry = self
            .conditions
            .entry(type_.to_string())
            .or_insert_with(|| (s.clone(), now));
        if entry.0 != s {
            *entry = (s.clone(), now);
        }
        PodCondition {
            type_: type_.to_string(),
            status: s,
            reason: reason.map(str::to_string),
            message,
            last_transition_time: Some(clock::time(entry.1)),
            last_probe_time: None,
            observed_generation: None,
        }
    }

    fn container_status(&self, t: &Track) -> ContainerStatus {
        let term_state = |x: &Term| ContainerStateTerminated {
            container_id: x.container_id.clone(),
            exit_code: x.exit_code,
            finished_at: Some(clock::time(x.finished_at)),
            message: x.message.clone(),
            reason: Some(x.reason.clone()),
            signal: None,
            started_at: x.started_at.map(clock::time),
        };
        let state = match &t.state {
            CState::Waiting {
                reason, message, ..
            } => KState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: message.clone(),
                }),
                ..KState::default()
            },
            CState::Running { started_at, .. } => KState {
                running: Some(ContainerStateRunning {
                    started_at: Some(clock::time(*started_at)),
                }),
                ..KState::default()
            },
            CState::Terminated(x) => KState {
                terminated: Some(term_state(x)),
                ..KState::default()
            },
        };
        ContainerStatus {
            name: t.name.clone(),
            image: t.image(),
            image_id: t.image_id.clone(),
            container_id: match &t.state {
                CState::Running { id, .. } => Some(id.clone()),
                CState::Terminated(x) => x.container_id.clone(),
                CState::Waiting { .. } => t.last.as_ref().and_then(|l| l.container_id.clone()),
            },
            ready: t.ready,
            restart_count: t.restart_count,
            started: Some(t.started && matches!(t.state, CState::Running { .. })),
            state: Some(state),
            last_state: Some(
                t.last
                    .as_ref()
                    .map(|x| KState {
                        terminated: Some(term_state(x)),
                        ..KState::default()
                    })
                    .unwrap_or_default(),
            ),
            ..ContainerStatus::default()
        }
    }

    /// The pod status as it stands.
    pub fn status(&mut self) -> PodStatus {
        let phase = self.phase();
        let terminal = phase == "Succeeded" || phase == "Failed";
        let sandbox_ready = self.sandbox_id.is_some() && !terminal;
        let init_incomplete: Vec<String> = match self.stage {
            Stage::Sandbox { .. } | Stage::Init(_) => self
                .tracks
                .iter()
                .filter(|t| {
                    t.is_init
                        && !matches!(&t.state, CState::Terminated(x) if x.exit_code == 0)
                        && !(t.sidecar && t.started)
                })
                .map(|t| t.name().to_string())
                .collect(),
            _ => Vec::new(),
        };
        let unready: Vec<String> = self
            .tracks
            .iter()
            .filter(|t| (t.is_regular() || t.sidecar) && !t.ready)
            .map(|t| t.name().to_string())
            .collect();
        let mut conditions =
            vec![self.condition("PodReadyToStartContainers", sandbox_ready, None, None)];
        conditions.push(if init_incomplete.is_empty() {
            self.condition("Initialized", true, None, None)
        } else {
            let m = format!(
                "containers with incomplete status: [{}]",
                init_incomplete.join(" ")
            );
            self.condition(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(m),
            )
        });
        let (ready, reason, message) = if phase == "Succeeded" {
            (false, Some("PodCompleted"), None)
        } else if unready.is_empty() {
            (true, None, None)
        } else {
            (
                false,
                Some("ContainersNotReady"),
                Some(format!(
                    "containers with unready status: [{}]",
                    unready.join(" ")
                )),
            )
        };
        conditions.push(self.condition("ContainersReady", ready, reason, message.clone()));
        conditions.push(self.condition("Ready", ready, reason, message));
        conditions.push(self.condition("PodScheduled", true, None, None));
        let (reason, message) = (None, None);
        let host_network = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let pod_ip = if host_network {
            Some(self.ctx.host_ip.clone())
        } else {
            self.ip.clone()
        };
        let init: Vec<ContainerStatus> = self
            .tracks
            .iter()
            .filter(|t| t.is_init)
            .map(|t| self.container_status(t))
            .collect();
        // Upstream reports ephemeral containers never ready.
        let ephemeral: Vec<ContainerStatus> = self
            .tracks
            .iter()
            .filter(|t| t.is_ephemeral())
            .map(|t| ContainerStatus {
                ready: false,
                ..self.container_status(t)
            })
            .collect();
        PodStatus {
            phase: Some(phase),
            conditions: Some(conditions),
            container_statuses: Some(
                self.tracks
                    .iter()
                    .filter(|t| t.is_regular())
                    .map(|t| self.container_status(t))
                    .collect(),
            ),
            ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
            init_container_statuses: (!init.is_empty()).then_some(init),
            host_ip: Some(self.ctx.host_ip.clone()),
            host_ips: Some(vec![HostIP {
                ip: self.ctx.host_ip.clone(),
            }]),
            pod_ip: pod_ip.clone(),
            pod_ips: pod_ip.map(|ip| vec![PodIP { ip }]),
            start_time: Some(clock::time(self.start_time)),
            qos_class: Some(
                self.pod
                    .status
                    .as_ref()
                    .and_then(|s| s.qos_class.clone())
                    .unwrap_or_else(|| qos_class(&self.pod)),
            ),
            reason,
            message,
            ..PodStatus::default()
        }
    }

    /// Writes the status when it differs from the last one written.
    pub(super) async fn publish(&mut self) -> Result<(), ReportError> {
        let status = self.status();
        let fingerprint = status_fingerprint(&status);
        if fingerprint.is_some() && self.last_published == fingerprint {
            return Ok(());
        }
        self.ctx.reporter.status(&self.pod, &status).await?;
        self.last_published = fingerprint;
        Ok(())
    }

    /// Whether the pod has reached a terminal phase.
    pub fn finished(&self) -> bool {
        self.stage == Stage::Finished
    }
}

/// The pod's QoS class, as upstream `qos.GetPodQOS` computes it from requests and limits.
fn qos_class(pod: &Pod) -> String {
    let Some(spec) = pod.spec.as_ref() else {
        return "BestEffort".into();
    };
    let all: Vec<&Container> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &all {
        let res = c.resources.as_ref();
        let req = res.and_then(|r| r.requests.clone()).unwrap_or_default();
        let lim = res.and_then(|r| r.limits.clone()).unwrap_or_default();
        if !req.is_empty() || !lim.is_empty() {
            any = true;
        }
        for name in ["cpu", "memory"] {
            match (req.get(name).or(lim.get(name)), lim.get(name)) {
                (Some(r), Some(l)) if r == l => {}
                _ => guaranteed = false,
            }
        }
    }
    if !any {
        "BestEffort".into()
    } else if guaranteed {
        "Guaranteed".into()
    } else {
        "Burstable".into()
    }
}

/// A 64-bit hash of the status's JSON form; `None` if it does not serialise (never expected),
/// which makes the next publish write rather than skip.
fn status_fingerprint(status: &PodStatus) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let bytes = serde_json::to_vec(status).ok()?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    Some(hasher.finish())
}
