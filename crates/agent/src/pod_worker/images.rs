//! The image step of starting a container, as the kubelet's image manager
//! (`images.imageManager.EnsureImageExists`) takes it: the pull policy decides whether a
//! present image is used or pulled again; a missing image under `Never` waits with
//! `ErrImageNeverPull`; a pull uses the credentials of the pod's pull secrets that match the
//! image (each in turn, `kuberuntime_image.go` `PullImage`); a failed pull shows `ErrImagePull`,
//! then `ImagePullBackOff` until its back-off (10 s doubling to 5 min) ends, with the
//! `Pulling`, `Pulled`, `Failed`, `BackOff` and `FailedToRetrieveImagePullSecret` events the
//! kubelet records.

use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use tokio::time::Instant;

use super::container::{CState, track_spec};
use super::{BACKOFF_INITIAL, EventType, PodWorker, go_duration, next_backoff};
use crate::pull_secrets::pod_keyring;
use crate::runtime::cri::backend::normalize_image;
use crate::runtime::{PullOutcome, RuntimeError, repository};

/// How long `ErrImagePull` shows before the container turns to `ImagePullBackOff` (upstream
/// shows it until the pod's next sync).
const ERR_IMAGE_PULL_SHOWN: Duration = Duration::from_secs(1);

/// An image in back-off after a failed pull.
#[derive(Clone, Debug)]
pub(super) struct PullBackOff {
    /// No pull before this.
    pub(super) until: Instant,
    /// The back-off that `until` used, doubled at the next failure.
    pub(super) backoff: Duration,
    /// Why the last pull failed.
    pub(super) error: String,
}

/// The image pull policy, defaulted as the API does when absent (upstream
/// `SetDefaults_Container`: `Always` for `:latest` or no tag, else `IfNotPresent`).
pub(super) fn pull_policy(c: &Container) -> &str {
    if let Some(p) = c.image_pull_policy.as_deref() {
        return p;
    }
    let image = c.image.as_deref().unwrap_or_default();
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        "IfNotPresent"
    } else {
        match last.split_once(':') {
            Some((_, "latest")) | None => "Always",
            Some(_) => "IfNotPresent",
        }
    }
}

impl PodWorker {
    /// Makes sure container `i`'s image is on the node. Returns `false` when it is not (the
    /// container is then waiting with the reason and a retry time); `now` is when the start
    /// began, which back-off counts from.
    pub(super) async fn ensure_image(&mut self, i: usize, now: Instant) -> bool {
        let image = self.tracks[i].image();
        let t = &self.tracks[i];
        let policy = pull_policy(track_spec(&self.pod, t)).to_string();
        let present = self.ctx.runtime.image_status(&image);
        match (policy.as_str(), present) {
            ("Never", None) => {
                let msg =
                    format!("Container image \"{image}\" is not present with pull policy of Never");
                self.event(Some(i), EventType::Warning, "ErrImageNeverPull", &msg)
                    .await;
                self.tracks[i].state = CState::Waiting {
                    reason: "ErrImageNeverPull".into(),
                    message: Some(msg),
                    retry_at: Some(now + BACKOFF_INITIAL),
                };
                false
            }
            ("IfNotPresent" | "Never", Some(img)) => {
                self.tracks[i].image_id = img.id.clone();
                self.event(
                    Some(i),
                    EventType::Normal,
                    "Pulled",
                    &format!("Container image \"{image}\" already present on machine"),
                )
                .await;
                true
            }
            _ => {
                if let Some(b) = self.tracks[i].pull_backoff.as_deref().cloned()
                    && b.until > now
                {
                    self.event(
                        Some(i),
                        EventType::Normal,
                        "BackOff",
                        &format!("Back-off pulling image \"{image}\""),
                    )
                    .await;
                    self.event(
                        Some(i),
                        EventType::Warning,
                        "Failed",
                        "Error: ImagePullBackOff",
                    )
                    .await;
                    self.tracks[i].state = CState::Waiting {
                        reason: "ImagePullBackOff".into(),
                        message: Some(format!(
                            "Back-off pulling image \"{image}\": ErrImagePull: {}",
                            b.error
                        )),
                        retry_at: Some(b.until),
                    };
                    return false;
                }
                self.pull(i, &image, now).await
            }
        }
    }

    /// Pulls container `i`'s image with the pod's matching credentials; on failure the
    /// container shows `ErrImagePull` and the image enters back-off.
    async fn pull(&mut self, i: usize, image: &str, now: Instant) -> bool {
        self.event(
            Some(i),
            EventType::Normal,
            "Pulling",
            &format!("Pulling image \"{image}\""),
        )
        .await;
        let result = match pod_keyring(self.ctx.secrets.as_ref(), &self.pod).await {
            Err((name, e)) => Err(format!("pull secret {name:?}: {e}")),
            Ok(found) => {
                if !found.missing.is_empty() {
                    let msg = format!(
                        "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                        found.missing.join(", ")
                    );
                    self.event(
                        None,
                        EventType::Warning,
                        "FailedToRetrieveImagePullSecret",
                        &msg,
                    )
                    .await;
                }
                let repo = repository(&normalize_image(image)).to_string();
                let creds = found.keyring.lookup(&repo);
                self.pull_with(image, &creds).await
            }
        };
        match result {
            Ok(out) => {
                self.tracks[i].image_id = out.image.id.clone();
                self.tracks[i].pull_backoff = None;
                let emulated = if self.ctx.runtime.emulated() {
                    " (emulated pull)"
                } else {
                    ""
                };
                let msg = format!(
                    "Successfully pulled image \"{image}\" in {} ({} including waiting). Image size: {} bytes.{emulated}",
                    go_duration(out.took),
                    go_duration(out.took_including_waiting),
                    out.image.size_bytes
                );
                self.event(Some(i), EventType::Normal, "Pulled", &msg).await;
                true
            }
            Err(error) => {
                self.event(
                    Some(i),
                    EventType::Warning,
                    "Failed",
                    &format!("Failed to pull image \"{image}\": {error}"),
                )
                .await;
                self.event(Some(i), EventType::Warning, "Failed", "Error: ErrImagePull")
                    .await;
                let backoff = next_backoff(self.tracks[i].pull_backoff.as_ref().map(|b| b.backoff));
                self.tracks[i].pull_backoff = Some(Box::new(PullBackOff {
                    until: now + backoff,
                    backoff,
                    error: error.clone(),
                }));
                self.tracks[i].state = CState::Waiting {
                    reason: "ErrImagePull".into(),
                    message: Some(error),
                    retry_at: Some(now + ERR_IMAGE_PULL_SHOWN.min(backoff)),
                };
                false
            }
        }
    }

    /// One pull without credentials when none matches, else one per credential until one
    /// succeeds; the errors of every attempt otherwise (upstream aggregates them as
    /// `[e1, e2]`).
    async fn pull_with(
        &self,
        image: &str,
        creds: &[crate::runtime::Credential],
    ) -> Result<PullOutcome, String> {
        let message = |e: RuntimeError| match e {
            RuntimeError::Refused { message } => message,
            other => other.to_string(),
        };
        if creds.is_empty() {
            return self
                .ctx
                .runtime
                .pull_image(image, None)
                .await
                .map_err(message);
        }
        let mut errors = Vec::new();
        for cred in creds {
            match self.ctx.runtime.pull_image(image, Some(cred)).await {
                Ok(out) => return Ok(out),
                Err(e) => errors.push(message(e)),
            }
        }
        Err(match errors.len() {
            1 => errors.remove(0),
            _ => format!("[{}]", errors.join(", ")),
        })
    }
}
