//! Stabilization and rate limits of the HorizontalPodAutoscaler, as upstream's
//! `pkg/controller/podautoscaler/horizontal.go` does them:
//!
//! - without `spec.behavior`: `stabilizeRecommendation` (the highest recommendation within the
//!   down-scale stabilization window) and `convertDesiredReplicasWithRules` (at most twice the
//!   current count, at least 4, within min/max);
//! - with it: `stabilizeRecommendationWithBehaviors` (the lowest recent recommendation within
//!   the scale-up window, the highest within the scale-down window) and
//!   `convertDesiredReplicasWithBehaviorRate` (each rule's policies over their periods, chosen by
//!   `selectPolicy`), fed by the scale events `storeScaleEvent` keeps.
//!
//! Pure: the history and the current time come in; nothing here reads a clock.

use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::{HPAScalingRules, HorizontalPodAutoscalerBehavior};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Upstream `scaleUpLimitFactor` and `scaleUpLimitMinimum` (no behavior).
const SCALE_UP_LIMIT_FACTOR: f64 = 2.0;
const SCALE_UP_LIMIT_MINIMUM: f64 = 4.0;

/// A recommendation made at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recommendation {
    pub replicas: i32,
    pub at: Timestamp,
}

/// A change of scale made at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScaleEvent {
    pub change: i32,
    pub at: Timestamp,
    pub outdated: bool,
}

/// What the controller remembers of one HPA between syncs.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub recommendations: Vec<Recommendation>,
    pub scale_up: Vec<ScaleEvent>,
    pub scale_down: Vec<ScaleEvent>,
}

/// A condition reason and message.
pub type Reason = (&'static str, &'static str);

const WITHIN_RANGE: Reason = (
    "DesiredWithinRange",
    "the desired count is within the acceptable range",
);
const SCALE_UP_LIMIT: Reason = (
    "ScaleUpLimit",
    "the desired replica count is increasing faster than the maximum scale rate",
);
const TOO_MANY: Reason = (
    "TooManyReplicas",
    "the desired replica count is more than the maximum replica count",
);
const TOO_FEW: Reason = (
    "TooFewReplicas",
    "the desired replica count is less than the minimum replica count",
);
const SCALE_DOWN_LIMIT: Reason = (
    "ScaleDownLimit",
    "the desired replica count is decreasing faster than the maximum scale rate",
);

fn ago(now: Timestamp, d: Duration) -> Timestamp {
    now.saturating_sub(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX))
        .unwrap_or(now)
}

fn seconds(s: i32) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

impl History {
    /// Upstream `recordInitialRecommendation`: the first sync remembers the current count.
    pub fn record_initial(&mut self, current: i32, now: Timestamp) {
        if self.recommendations.is_empty() {
            self.recommendations.push(Recommendation {
                replicas: current,
                at: now,
            });
        }
    }

    /// Records `desired`, replacing a sample older than every window (or appending).
    fn record(&mut self, desired: i32, old: Option<usize>, now: Timestamp) {
        let rec = Recommendation {
            replicas: desired,
            at: now,
        };
        match old.and_then(|i| self.recommendations.get_mut(i)) {
            Some(slot) => *slot = rec,
            None => self.recommendations.push(rec),
        }
    }

    /// Upstream `stabilizeRecommendation`: the highest recommendation of the down-scale window.
    pub fn stabilize(&mut self, desired: i32, window: Duration, now: Timestamp) -> i32 {
        let cutoff = ago(now, window);
        let mut max = desired;
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at < cutoff {
                old = Some(i);
            } else if r.replicas > max {
                max = r.replicas;
            }
        }
        self.record(desired, old, now);
        max
    }

    /// Upstream `stabilizeRecommendationWithBehaviors`: `current` bounded below by the lowest
    /// recommendation of the scale-up window and above by the highest of the scale-down window.
    pub fn stabilize_with_behavior(
        &mut self,
        current: i32,
        desired: i32,
        up_window: Duration,
        down_window: Duration,
        now: Timestamp,
    ) -> (i32, Reason) {
        let up_cutoff = ago(now, up_window);
        let down_cutoff = ago(now, down_window);
        let (mut up, mut down) = (desired, desired);
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at > up_cutoff {
                up = up.min(r.replicas);
            }
            if r.at > down_cutoff {
                down = down.max(r.replicas);
            }
            if r.at < up_cutoff && r.at < down_cutoff {
                old = Some(i);
            }
        }
        let recommendation = current.max(up).min(down);
        self.record(desired, old, now);
        let reason = if desired >= current {
            (
                "ScaleUpStabilized",
                "recent recommendations were lower than current one, applying the lowest recent recommendation",
            )
        } else {
            (
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
        };
        (recommendation, reason)
    }

    /// Upstream `storeScaleEvent`: remembers a change of scale for the rate policies (only
    /// with a behavior), reusing an entry older than the longest policy period.
    pub fn store_scale_event(
        &mut self,
        behavior: Option<&HorizontalPodAutoscalerBehavior>,
        previous: i32,
        new: i32,
        now: Timestamp,
    ) {
        let Some(behavior) = behavior else { return };
        let (events, rules, change) = if new > previous {
            (
                &mut self.scale_up,
                behavior.scale_up.as_ref(),
                new - previous,
            )
        } else {
            (
                &mut self.scale_down,
                behavior.scale_down.as_ref(),
                previous - new,
            )
        };
        let longest = rules
            .and_then(|r| r.policies.as_ref())
            .into_iter()
            .flatten()
            .map(|p| p.period_seconds)
            .max()
            .unwrap_or(0);
        let cutoff = ago(now, seconds(longest));
        for e in events.iter_mut() {
            if e.at < cutoff {
                e.outdated = true;
            }
        }
        let event = ScaleEvent {
            change,
            at: now,
            outdated: false,
        };
        match events.iter().rposition(|e| e.outdated) {
            Some(i) => events[i] = event,
            None => events.push(event),
        }
    }
}

/// Upstream `calculateScaleUpLimit`.
fn scale_up_limit(current: i32) -> i32 {
    (SCALE_UP_LIMIT_FACTOR * f64::from(current)).max(SCALE_UP_LIMIT_MINIMUM) as i32
}

/// Upstream `convertDesiredReplicasWithRules` (no behavior).
pub fn convert_with_rules(current: i32, desired: i32, min: i32, max: i32) -> (i32, Reason) {
    let limit = scale_up_limit(current);
    let (maximum, limiting) = if max > limit {
        (limit, SCALE_UP_LIMIT)
    } else {
        (max, TOO_MANY)
    };
    if desired < min {
        (min, TOO_FEW)
    } else if desired > maximum {
        (maximum, limiting)
    } else {
        (desired, WITHIN_RANGE)
    }
}

/// Upstream `getReplicasChangePerPeriod`.
fn change_in_period(period_seconds: i32, events: &[ScaleEvent], now: Timestamp) -> i32 {
    let cutoff = ago(now, seconds(period_seconds));
    events
        .iter()
        .filter(|e| e.at > cutoff)
        .map(|e| e.change)
        .sum()
}

/// Upstream `calculateScaleUpLimitWithScalingRules` / `calculateScaleDownLimitWithBehaviors`.
fn limit_with_rules(
    current: i32,
    history: &History,
    rules: &HPAScalingRules,
    up: bool,
    now: Timestamp,
) -> i32 {
    let select = rules.select_policy.as_deref().unwrap_or("Max");
    if select == "Disabled" {
        return current;
    }
    // Scaling up, "Min" picks the smallest proposal; scaling down, the largest (the smallest
    // change either way).
    let pick_min = (select == "Min") == up;
    let mut result = if pick_min { i32::MAX } else { i32::MIN };
    for p in rules.policies.iter().flatten() {
        let added = change_in_period(p.period_seconds, &history.scale_up, now);
        let deleted = change_in_period(p.period_seconds, &history.scale_down, now);
        let start = current - added + deleted;
        let proposed = match (p.type_.as_str(), up) {
            ("Pods", true) => start + p.value,
            ("Pods", false) => start - p.value,
            ("Percent", true) => {
                (f64::from(start) * (1.0 + f64::from(p.value) / 100.0)).ceil() as i32
            }
            ("Percent", false) => (f64::from(start) * (1.0 - f64::from(p.value) / 100.0)) as i32,
            _ => continue,
        };
        result = if pick_min {
            result.min(proposed)
        } else {
            result.max(proposed)
        };
    }
    result
}

/// Upstream `convertDesiredReplicasWithBehaviorRate`.
pub fn convert_with_behavior_rate(
    history: &History,
    current: i32,
    desired: i32,
    min: i32,
    max: i32,
    behavior: &HorizontalPodAutoscalerBehavior,
    now: Timestamp,
) -> (i32, Reason) {
    if desired > current {
        let Some(rules) = behavior.scale_up.as_ref() else {
            return (desired.min(max), WITHIN_RANGE);
        };
        let limit = limit_with_rules(current, history, rules, true, now).max(current);
        let (maximum, limiting) = if max > limit {
            (limit, SCALE_UP_LIMIT)
        } else {
            (max, TOO_MANY)
        };
        if desired > maximum {
            return (maximum, limiting);
        }
    } else if desired < current {
        let Some(rules) = behavior.scale_down.as_ref() else {
            return (desired.max(min), WITHIN_RANGE);
        };
        let limit = limit_with_rules(current, history, rules, false, now).min(current);
        let (minimum, limiting) = if min < limit {
            (limit, SCALE_DOWN_LIMIT)
        } else {
            (min, TOO_FEW)
        };
        if desired < minimum {
            return (minimum, limiting);
        }
    }
    (desired, WITHIN_RANGE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn behavior(v: serde_json::Value) -> HorizontalPodAutoscalerBehavior {
        serde_json::from_value(v).unwrap_or_default()
    }

    /// horizontal_test.go `TestNormalizeDesiredReplicas`-style: without a behavior, at most
    /// twice the current count (at least 4), within min and max.
    #[test]
    fn without_behavior_scale_up_is_limited_to_double_or_four() {
        assert_eq!(convert_with_rules(1, 10, 1, 10), (4, SCALE_UP_LIMIT));
        assert_eq!(convert_with_rules(5, 20, 1, 8), (8, TOO_MANY));
        assert_eq!(convert_with_rules(3, 0, 2, 10), (2, TOO_FEW));
        assert_eq!(convert_with_rules(3, 5, 1, 10), (5, WITHIN_RANGE));
    }

    #[test]
    fn down_scale_window_keeps_the_highest_recent_recommendation() {
        let mut h = History::default();
        h.record_initial(5, t(0));
        let window = Duration::from_secs(300);
        assert_eq!(h.stabilize(2, window, t(15)), 5);
        assert_eq!(h.stabilize(2, window, t(200)), 5);
        // The initial 5 left the window: the highest recent one is 2.
        assert_eq!(h.stabilize(2, window, t(301)), 2);
        // The sample older than the window was replaced, not appended.
        assert_eq!(h.recommendations.len(), 3);
        assert!(h.recommendations.iter().all(|r| r.replicas == 2));
    }

    /// `TestScaleUpOneMetricInvalid`-style behaviors: `Pods: 4 / 15 s` and `Percent: 100 / 15 s`
    /// with `Max` allow max(1+4, 2) = 5 from 1.
    #[test]
    fn behavior_policies_pick_the_largest_change_with_max() {
        let b = behavior(json!({
            "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15}]},
            "scaleDown": {"stabilizationWindowSeconds": 300, "selectPolicy": "Max", "policies": [
                {"type": "Percent", "value": 100, "periodSeconds": 15}]}}));
        let h = History::default();
        assert_eq!(
            convert_with_behavior_rate(&h, 1, 10, 1, 10, &b, t(0)),
            (5, SCALE_UP_LIMIT)
        );
        assert_eq!(
            convert_with_behavior_rate(&h, 8, 10, 1, 10, &b, t(0)),
            (10, WITHIN_RANGE)
        );
        assert_eq!(
            convert_with_behavior_rate(&h, 5, 1, 2, 10, &b, t(0)),
            (2, TOO_FEW)
        );
    }

    #[test]
    fn behavior_min_policy_and_period_events_limit_the_rate() {
        let b = behavior(json!({
            "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Min", "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 60},
                {"type": "Percent", "value": 100, "periodSeconds": 60}]},
            "scaleDown": {"selectPolicy": "Max", "stabilizationWindowSeconds": 0, "policies": [
                {"type": "Pods", "value": 1, "periodSeconds": 60}]}}));
        let mut h = History::default();
        // Min of (2+4, 2*2) = 4.
        assert_eq!(
            convert_with_behavior_rate(&h, 2, 10, 1, 10, &b, t(0)),
            (4, SCALE_UP_LIMIT)
        );
        h.store_scale_event(Some(&b), 2, 4, t(0));
        // Within the same minute, the period started at 2: still at most 4.
        assert_eq!(
            convert_with_behavior_rate(&h, 4, 10, 1, 10, &b, t(30)),
            (4, SCALE_UP_LIMIT)
        );
        // A minute later the period starts at 4: min(8, 8).
        assert_eq!(
            convert_with_behavior_rate(&h, 4, 10, 1, 10, &b, t(61)),
            (8, SCALE_UP_LIMIT)
        );
        // Scaling down one pod a minute.
        assert_eq!(
            convert_with_behavior_rate(&h, 8, 1, 1, 10, &b, t(61)),
            (7, SCALE_DOWN_LIMIT)
        );
        let disabled = behavior(
            json!({"scaleDown": {"selectPolicy": "Disabled", "policies": [
            {"type": "Pods", "value": 1, "periodSeconds": 60}]}}),
        );
        assert_eq!(
            convert_with_behavior_rate(&h, 8, 1, 1, 10, &disabled, t(61)),
            (8, SCALE_DOWN_LIMIT)
        );
    }

    #[test]
    fn behavior_windows_bound_the_recommendation_both_ways() {
        let mut h = History::default();
        h.record_initial(3, t(0));
        let (up, down) = (Duration::from_secs(60), Duration::from_secs(300));
        // A drop to 1 is held at 3 by the down window.
        let (r, reason) = h.stabilize_with_behavior(3, 1, up, down, t(10));
        assert_eq!((r, reason.0), (3, "ScaleDownStabilized"));
        // A rise to 6 is held at the lowest recommendation of the last minute (1, so current 3).
        let (r, reason) = h.stabilize_with_behavior(3, 6, up, down, t(20));
        assert_eq!((r, reason.0), (3, "ScaleUpStabilized"));
        // After both windows only the recent recommendation counts.
        let (r, _) = h.stabilize_with_behavior(3, 1, up, down, t(400));
        assert_eq!(r, 1);
    }
}
