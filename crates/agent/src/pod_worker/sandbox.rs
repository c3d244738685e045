//! The pod's first stage, [`Stage::Sandbox`]: mount the pod's volumes, then create its sandbox
//! (network namespace, pause container), as the kubelet's `SyncPod` does before any container
//! (upstream `kuberuntime` `createPodSandbox`). A failure is an event (`FailedMount`,
//! `FailedCreatePodSandBox`) and a retry after a doubling back-off; success moves the pod to its
//! first init container, or to its containers when it has none.

use std::time::Duration;

use tokio::time::Instant;

use super::{BACKOFF_MAX, EventType, PodWorker, Stage};
use crate::runtime::SandboxConfig;

impl PodWorker {
    /// One try at the sandbox stage, `retry_at` and `backoff` being the stage's. Returns
    /// whether the pod left the stage (so the step goes on to its containers).
    pub(super) async fn step_sandbox(
        &mut self,
        retry_at: Option<Instant>,
        backoff: Duration,
    ) -> bool {
        let now = Instant::now();
        if retry_at.is_some_and(|r| r > now) {
            return false;
        }
        if let Err(e) = self.ctx.runtime.prepare_volumes(&self.pod).await {
            self.event(None, EventType::Warning, "FailedMount", &e.to_string())
                .await;
            self.stage = Stage::Sandbox {
                retry_at: Some(now + backoff),
                backoff: (backoff * 2).min(Duration::from_secs(120)),
            };
            return false;
        }
        let cfg = SandboxConfig {
            pod_uid: self.pod.metadata.uid.clone().unwrap_or_default(),
            namespace: self
                .pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: self.pod.metadata.name.clone().unwrap_or_default(),
            pod: self.pod.clone(),
            ip: self.ip.clone(),
        };
        match self.ctx.runtime.run_sandbox(&cfg).await {
            Ok(sb) => {
                self.sandbox_id = Some(sb.id);
                // A runtime with its own IPAM (CNI) decides the address.
                if sb.ip.is_some() {
                    self.ip = sb.ip;
                }
                let has_init = self.tracks.iter().any(|t| t.is_init);
                self.stage = if has_init {
                    Stage::Init(0)
                } else {
                    Stage::Main
                };
            }
            Err(e) => {
                self.event(
                    None,
                    EventType::Warning,
                    "FailedCreatePodSandBox",
                    &format!("Failed to create pod sandbox: {e}"),
                )
                .await;
                self.stage = Stage::Sandbox {
                    retry_at: Some(now + backoff),
                    backoff: (backoff * 2).min(BACKOFF_MAX),
                };
                return false;
            }
        }
        true
    }
}
