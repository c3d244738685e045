//! Starting a container once its image is present: create, start, the `Created` and `Started`
//! events, its probes set up, and the postStart hook (upstream `kuberuntime`
//! `startContainer`; a failed postStart hook kills the container, which its restart policy then
//! restarts). Create failures wait with `CreateContainerConfigError` (configuration the agent
//! could not resolve) or `CreateContainerError`, start failures with `RunContainerError`.

use std::time::Duration;

use tokio::time::Instant;

use super::container::{CState, track_spec};
use super::probes::ProbeTrack;
use super::{BACKOFF_INITIAL, EventType, PodWorker, next_backoff};
use crate::runtime::{HookKind, ProbeKind, RuntimeError};

impl PodWorker {
    /// Image → create → start → postStart, with the kubelet's events and waiting reasons.
    pub(super) async fn start_container(&mut self, i: usize) {
        let now = Instant::now();
        if !self.ensure_image(i, now).await {
            return;
        }
        let retry = |b: Option<Duration>| now + b.unwrap_or(BACKOFF_INITIAL);
        let Some(sandbox) = self.sandbox_id.clone() else {
            return;
        };
        let attempt = u32::try_from(self.tracks[i].restart_count).unwrap_or(0);
        let t = &self.tracks[i];
        let container = track_spec(&self.pod, t).clone();
        let info = match self
            .ctx
            .runtime
            .create_container(&sandbox, &self.pod, &container, attempt)
            .await
        {
            Ok(info) => info,
            Err(e) => {
                let msg = e.to_string();
                let reason = match e {
                    RuntimeError::Config(_) => "CreateContainerConfigError",
                    _ => "CreateContainerError",
                };
                self.event(
                    Some(i),
                    EventType::Warning,
                    "Failed",
                    &format!("Error: {msg}"),
                )
                .await;
                let b = self.tracks[i].backoff;
                self.tracks[i].backoff = Some(next_backoff(b));
                self.tracks[i].state = CState::Waiting {
                    reason: reason.into(),
                    message: Some(msg),
                    retry_at: Some(retry(b)),
                };
                return;
            }
        };
        self.tracks[i].container_id = Some(info.id.clone());
        self.tracks[i].image_id = info.image_id.clone();
        let name = container.name.clone();
        self.event(
            Some(i),
            EventType::Normal,
            "Created",
            &format!("Created container: {name}"),
        )
        .await;
        if let Err(e) = self.ctx.runtime.start_container(&info.id).await {
            self.event(
                Some(i),
                EventType::Warning,
                "Failed",
                &format!("Error: {e}"),
            )
            .await;
            self.tracks[i].state = CState::Waiting {
                reason: "RunContainerError".into(),
                message: Some(e.to_string()),
                retry_at: Some(retry(self.tracks[i].backoff)),
            };
            return;
        }
        let started_at = self
            .ctx
            .runtime
            .container_status(&info.id)
            .ok()
            .and_then(|c| c.started_at)
            .unwrap_or_else(|| self.ctx.clock.now());
        // The kubelet's message; an emulated runtime adds that nothing runs.
        let message = if self.ctx.runtime.emulated() {
            format!("Started container {name} (emulated: no process runs)")
        } else {
            format!("Started container {name}")
        };
        self.event(Some(i), EventType::Normal, "Started", &message)
            .await;
        let t = &mut self.tracks[i];
        let c = &container;
        t.ever_ran = true;
        t.state = CState::Running {
            id: info.id.clone(),
            started_at,
        };
        let started = Instant::now();
        t.probes.clear();
        let implicit = self.ctx.runtime.implicit_probes(&info.id);
        for (kind, spec) in [
            (ProbeKind::Startup, c.startup_probe.as_ref()),
            (ProbeKind::Liveness, c.liveness_probe.as_ref()),
            (ProbeKind::Readiness, c.readiness_probe.as_ref()),
        ] {
            match spec {
                Some(p) => t.probes.push(ProbeTrack::from_spec(kind, p, started)),
                None if implicit.contains(&kind) => {
                    t.probes.push(ProbeTrack::implicit(kind, started))
                }
                None => {}
            }
        }
        t.started = !t.probes.iter().any(|p| p.kind == ProbeKind::Startup);
        t.ready = t.started && !t.probes.iter().any(|p| p.kind == ProbeKind::Readiness);
        if c.lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
            .is_some()
            && let Err(e) = self
                .ctx
                .runtime
                .run_hook(&info.id, HookKind::PostStart)
                .await
        {
            {
                let msg = format!("PostStartHook failed: {e}");
                self.event(Some(i), EventType::Warning, "FailedPostStartHook", &msg)
                    .await;
                self.event(
                    Some(i),
                    EventType::Normal,
                    "Killing",
                    &format!("FailedPostStartHook: stopping container {name}"),
                )
                .await;
                let _ = self
                    .ctx
                    .runtime
                    .stop_container(&info.id, self.grace())
                    .await;
                if let Ok(info) = self.ctx.runtime.container_status(&info.id) {
                    self.exited(i, &info).await;
                }
                return;
            }
        }
        self.run_probes(i, &info.id).await;
    }
}
