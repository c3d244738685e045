//! ImageLocality: prefer nodes that already hold the pod's images, weighted by image size and by
//! how widely the image is spread (so one node holding a popular image does not attract
//! everything). Mirrors upstream `pkg/scheduler/framework/plugins/imagelocality`.

use std::sync::Arc;

use crate::cycle_state::CycleState;
use crate::plugin::{Plugin, ScorePlugin, Status};
use crate::snapshot::{NodeInfo, Snapshot};

const MB: i64 = 1024 * 1024;
/// Upstream `minThreshold`: below this total, images give no advantage.
const MIN_THRESHOLD: i64 = 23 * MB;
/// Upstream `maxContainerThreshold`, per container.
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// Upstream `normalizedImageName`: an image without a tag or digest means `:latest`.
pub fn normalized_image_name(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') || last.contains('@') {
        name.to_string()
    } else {
        format!("{name}:latest")
    }
}

/// The ImageLocality plugin (score, 0–100).
#[derive(Debug, Clone, Copy, Default)]
pub struct ImageLocality;

/// The normalised image names of every container of the pod (the plugin's PreScore state).
#[derive(Debug)]
struct Images(Vec<String>);

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        "ImageLocality"
    }

    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

impl ScorePlugin for ImageLocality {
    fn pre_score(&self, cs: &mut CycleState<'_>) -> Status {
        let images = cs
            .pod
            .spec
            .as_ref()
            .map(|s| {
                s.init_containers
                    .iter()
                    .flatten()
                    .chain(&s.containers)
                    .filter_map(|c| c.image.as_deref().map(normalized_image_name))
                    .collect()
            })
            .unwrap_or_default();
        cs.write(Images(images));
        Status::Success
    }

    fn score(&self, cs: &CycleState<'_>, node: &NodeInfo, snapshot: &Snapshot) -> i64 {
        let Some(Images(images)) = cs.read() else {
            return 0;
        };
        if images.is_empty() || node.images.is_empty() {
            return 0;
        }
        let total = snapshot.nodes().len().max(1) as f64;
        let mut sum: i64 = 0;
        for image in images {
            if let Some(size) = node.images.get(image) {
                let spread = snapshot.image_node_count(image) as f64 / total;
                sum += (*size as f64 * spread) as i64;
            }
        }
        let max = MAX_CONTAINER_THRESHOLD * images.len() as i64;
        let sum = sum.clamp(MIN_THRESHOLD, max);
        100 * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD)
    }
}
