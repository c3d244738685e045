//! Image garbage collection by disk usage, as the kubelet's image GC manager
//! (`pkg/kubelet/images/image_gc_manager.go`) decides it. Pure: the loop in `backend.rs` feeds
//! it the image filesystem's figures and the images with their use.
//!
//! - Nothing happens while the filesystem's usage is below `--image-gc-high-threshold`
//!   percent (default 85).
//! - At or above it, enough is freed to bring usage down to `--image-gc-low-threshold`
//!   (default 80): `capacity × (100 − low) / 100 − available` bytes.
//! - Only images no container uses (running or exited, of any pod) and that are not pinned
//!   (the sandbox image) are removed, least recently used first (then the first seen first);
//!   an image is "used" at the last scan a container used it.
//! - When the eligible images cannot free enough, all of them go and the shortfall is
//!   reported (upstream's `FreeDiskSpaceFailed` event).

use std::time::Instant;

/// The thresholds, checked as the kubelet's configuration validation checks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcPolicy {
    pub high_percent: u8,
    pub low_percent: u8,
}

impl Default for GcPolicy {
    /// The kubelet's defaults: 85 and 80.
    fn default() -> GcPolicy {
        GcPolicy {
            high_percent: 85,
            low_percent: 80,
        }
    }
}

impl GcPolicy {
    /// Both in 0–100 and low below high (upstream `ValidateKubeletConfiguration`).
    pub fn new(high_percent: u8, low_percent: u8) -> Result<GcPolicy, String> {
        if high_percent > 100 {
            return Err(format!(
                "--image-gc-high-threshold ({high_percent}) must be between 0 and 100"
            ));
        }
        if low_percent > 100 {
            return Err(format!(
                "--image-gc-low-threshold ({low_percent}) must be between 0 and 100"
            ));
        }
        if low_percent >= high_percent {
            return Err(format!(
                "--image-gc-low-threshold ({low_percent}) must be less than --image-gc-high-threshold ({high_percent})"
            ));
        }
        Ok(GcPolicy {
            high_percent,
            low_percent,
        })
    }
}

/// One image as the collector sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcImage {
    /// The image ID (`sha256:…`), what is removed.
    pub id: String,
    pub size_bytes: u64,
    /// Used by a container or pinned: never removed.
    pub in_use: bool,
    /// When a container last used it (or when it was first seen, for images never used).
    pub last_used: Instant,
    pub first_seen: Instant,
}

/// What one pass decides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcPlan {
    /// Image IDs to remove, in order.
    pub remove: Vec<String>,
    /// Bytes the pass must free (0 when usage is below the high threshold).
    pub to_free: u64,
    /// Bytes the removals free.
    pub freed: u64,
}

impl GcPlan {
    /// Whether the eligible images could not free what was needed.
    pub fn short(&self) -> bool {
        self.freed < self.to_free
    }
}

/// Decides one pass over an image filesystem of `capacity` bytes with `available` free.
pub fn plan(policy: GcPolicy, capacity: u64, available: u64, images: &[GcImage]) -> GcPlan {
    if capacity == 0 {
        return GcPlan::default();
    }
    let available = available.min(capacity);
    let usage_percent = 100 - available.saturating_mul(100) / capacity;
    if usage_percent < u64::from(policy.high_percent) {
        return GcPlan::default();
    }
    let target_free = capacity / 100 * u64::from(100 - policy.low_percent)
        + capacity % 100 * u64::from(100 - policy.low_percent) / 100;
    let to_free = target_free.saturating_sub(available);
    let mut eligible: Vec<&GcImage> = images.iter().filter(|i| !i.in_use).collect();
    eligible.sort_by(|a, b| {
        a.last_used
            .cmp(&b.last_used)
            .then(a.first_seen.cmp(&b.first_seen))
            .then(a.id.cmp(&b.id))
    });
    let mut out = GcPlan {
        to_free,
        ..GcPlan::default()
    };
    for image in eligible {
        if out.freed >= to_free {
            break;
        }
        out.freed = out.freed.saturating_add(image.size_bytes);
        out.remove.push(image.id.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn image(id: &str, size: u64, in_use: bool, used_secs: u64, base: Instant) -> GcImage {
        GcImage {
            id: id.into(),
            size_bytes: size,
            in_use,
            last_used: base + Duration::from_secs(used_secs),
            first_seen: base,
        }
    }

    #[test]
    fn thresholds_are_validated_like_the_kubelet() {
        assert!(GcPolicy::new(85, 80).is_ok());
        assert!(GcPolicy::new(1, 0).is_ok());
        assert!(GcPolicy::new(101, 80).is_err());
        assert!(GcPolicy::new(80, 80).is_err());
        assert!(GcPolicy::new(50, 60).is_err());
    }

    #[test]
    fn below_the_high_threshold_nothing_is_removed() {
        let now = Instant::now();
        let images = [image("a", 10, false, 0, now)];
        assert_eq!(
            plan(GcPolicy::default(), 1000, 160, &images),
            GcPlan::default()
        );
        assert_eq!(plan(GcPolicy::default(), 0, 0, &images), GcPlan::default());
    }

    #[test]
    fn least_recently_used_unused_images_go_until_the_low_threshold() {
        let now = Instant::now();
        let images = [
            image("used", 500, true, 0, now),
            image("recent", 100, false, 30, now),
            image("old", 60, false, 10, now),
            image("older", 60, false, 5, now),
        ];
        // 90 % used; down to 80 % means 100 bytes to free: `older`, then `old`.
        let p = plan(GcPolicy::default(), 1000, 100, &images);
        assert_eq!(p.remove, ["older", "old"]);
        assert_eq!((p.to_free, p.freed, p.short()), (100, 120, false));
    }

    #[test]
    fn when_not_enough_is_eligible_everything_unused_goes_and_the_shortfall_shows() {
        let now = Instant::now();
        let images = [
            image("used", 900, true, 0, now),
            image("x", 10, false, 0, now),
        ];
        let p = plan(GcPolicy::new(1, 0).expect("policy"), 1000, 100, &images);
        assert_eq!(p.remove, ["x"]);
        assert_eq!((p.to_free, p.freed, p.short()), (900, 10, true));
    }
}
