//! The image step of starting a container, as the kubelet's image manager
//! (`images.imageManager.EnsureImageExists`) takes it: the pull policy decides whether a
//! present image is used or pulled again; a missing image under `Never` waits with
//! `ErrImageNeverPull`, a failed pull with `ImagePullBackOff` (and the `Pulling`, `Pulled`,
//! `Failed`, `BackOff` events the kubelet records).

use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use tokio::time::Instant;

use super::container::{CState, track_spec};
use super::{BACKOFF_INITIAL, EventType, PodWorker, go_duration, next_backoff};

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
        let retry = |b: Option<Duration>| now + b.unwrap_or(BACKOFF_INITIAL);
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
                return false;
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
            }
            _ => {
                self.event(
                    Some(i),
                    EventType::Normal,
                    "Pulling",
                    &format!("Pulling image \"{image}\""),
                )
                .await;
                match self.ctx.runtime.pull_image(&image).await {
                    Ok(out) => {
                        self.tracks[i].image_id = out.image.id.clone();
                        let msg = format!(
                            "Successfully pulled image \"{image}\" in {} ({} including waiting). Image size: {} bytes. (emulated pull)",
                            go_duration(out.took),
                            go_duration(out.took_including_waiting),
                            out.image.size_bytes
                        );
                        self.event(Some(i), EventType::Normal, "Pulled", &msg).await;
                    }
                    Err(e) => {
                        self.event(
                            Some(i),
                            EventType::Warning,
                            "Failed",
                            &format!("Failed to pull image \"{image}\": {e}"),
                        )
                        .await;
                        self.event(Some(i), EventType::Warning, "Failed", "Error: ErrImagePull")
                            .await;
                        let b = self.tracks[i].backoff;
                        self.tracks[i].backoff = Some(next_backoff(b));
                        self.event(
                            Some(i),
                            EventType::Normal,
                            "BackOff",
                            &format!("Back-off pulling image \"{image}\""),
                        )
                        .await;
                        self.tracks[i].state = CState::Waiting {
                            reason: "ImagePullBackOff".into(),
                            message: Some(format!(
                                "Back-off pulling image \"{image}\": ErrImagePull: {e}"
                            )),
                            retry_at: Some(retry(b)),
                        };
                        return false;
                    }
                }
            }
        }
        true
    }
}
