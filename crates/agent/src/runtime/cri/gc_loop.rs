//! The image garbage collector's loop (the I/O side of [`super::image_gc`]): every `period`
//! (the kubelet's `ImageGCPeriod`, 5 minutes) it reads the image filesystem's capacity and free
//! space (`statvfs` of containerd's root), marks the images containers use, and removes what
//! [`super::image_gc::plan`] says. It ends when the runtime is dropped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Weak;
use std::time::Duration;

use tokio::time::Instant;

use super::CriRuntime;
use super::image_gc::{GcImage, GcPolicy, plan};

/// When each image ID was first seen and last used, across passes.
type Seen = HashMap<String, (std::time::Instant, std::time::Instant)>;

/// Runs passes every `period` while `runtime` lives. `root` is on the image filesystem;
/// `pinned` names images never removed (the sandbox image).
pub async fn run(
    runtime: Weak<CriRuntime>,
    policy: GcPolicy,
    period: Duration,
    root: PathBuf,
    pinned: Vec<String>,
) {
    let mut seen = Seen::new();
    let mut next = Instant::now() + period;
    loop {
        tokio::time::sleep_until(next).await;
        next = Instant::now() + period;
        let Some(rt) = runtime.upgrade() else {
            return;
        };
        let Ok(fs) = nix::sys::statvfs::statvfs(&root) else {
            tracing::debug!(root = %root.display(), "image gc: cannot read the image filesystem");
            continue;
        };
        let fragment = fs.fragment_size();
        let capacity = fs.blocks().saturating_mul(fragment);
        let available = fs.blocks_available().saturating_mul(fragment);
        pass(&rt, policy, capacity, available, &pinned, &mut seen).await;
    }
}

/// One pass: usage figures in, images removed.
async fn pass(
    rt: &CriRuntime,
    policy: GcPolicy,
    capacity: u64,
    available: u64,
    pinned: &[String],
    seen: &mut Seen,
) {
    rt.refresh_images().await;
    let now = std::time::Instant::now();
    let (images, used) = rt.image_use();
    let mut gc_images: HashMap<String, GcImage> = HashMap::new();
    for image in images {
        let in_use = used.iter().any(|u| image.is_named(u) || *u == image.id)
            || pinned.iter().any(|p| image.is_named(p));
        let (first_seen, last_used) = seen.entry(image.id.clone()).or_insert((now, now));
        if in_use {
            *last_used = now;
        }
        let entry = gc_images.entry(image.id.clone()).or_insert(GcImage {
            id: image.id.clone(),
            size_bytes: u64::try_from(image.size_bytes).unwrap_or(0),
            in_use: false,
            last_used: *last_used,
            first_seen: *first_seen,
        });
        entry.in_use |= in_use;
    }
    seen.retain(|id, _| gc_images.contains_key(id));
    let images: Vec<GcImage> = gc_images.into_values().collect();
    let decided = plan(policy, capacity, available, &images);
    for id in &decided.remove {
        match rt.remove_image(id).await {
            Ok(()) => tracing::info!(image = %id, "image gc: removed an unused image"),
            Err(e) => tracing::warn!(image = %id, "image gc: cannot remove: {e}"),
        }
    }
    if !decided.remove.is_empty() {
        rt.refresh_images().await;
    }
    if decided.short() {
        tracing::warn!(
            "Failed to garbage collect required amount of images. Attempted to free {} bytes, but only found {} bytes eligible to free.",
            decided.to_free,
            decided.freed
        );
    }
}
