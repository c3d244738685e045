//! The replica calculation of the HorizontalPodAutoscaler, as upstream's
//! `pkg/controller/podautoscaler/replica_calculator.go` (`GetResourceReplicas`,
//! `GetRawResourceReplicas`, `groupPods`, `calculatePodRequests`) and
//! `metrics/utilization.go` (`GetResourceUtilizationRatio`, `GetMetricUsageRatio`) do it.
//!
//! Pure: pods, per-pod samples and the current time go in, a proposal comes out.
//! - Deleted and failed pods are dropped; pending pods count as unready; pods without a sample
//!   are missing. For CPU, a pod is also unready while it is within the CPU initialization
//!   period and unready or not yet sampled since it became ready, or when it has never been
//!   ready since its start.
//! - Within the tolerance (0.1 by default) nothing changes.
//! - Missing pods are assumed to use 100 % of their request (or the target, when higher) on a
//!   scale-down and 0 % on a scale-up; unready pods 0 % on a scale-up. If that assumption turns
//!   the direction round, or brings the ratio within tolerance, nothing changes.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use tandem_core::validation::quantity::Quantity;

/// One pod's usage of a resource in milli-units, with when and over what window it was
/// measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub value: i64,
    pub timestamp: Timestamp,
    pub window: Duration,
}

/// Samples by pod name.
pub type PodSamples = HashMap<String, Sample>;

/// The tunables of the calculation, upstream's controller-manager flags.
#[derive(Debug, Clone, Copy)]
pub struct Calculator {
    /// `--horizontal-pod-autoscaler-tolerance`.
    pub tolerance: f64,
    /// `--horizontal-pod-autoscaler-cpu-initialization-period`.
    pub cpu_initialization_period: Duration,
    /// `--horizontal-pod-autoscaler-initial-readiness-delay`.
    pub initial_readiness_delay: Duration,
}

impl Default for Calculator {
    fn default() -> Self {
        Calculator {
            tolerance: 0.1,
            cpu_initialization_period: Duration::from_secs(300),
            initial_readiness_delay: Duration::from_secs(30),
        }
    }
}

/// A utilization proposal: the replicas, the utilization in percent of the requests and the
/// raw average usage (milli-units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtilizationProposal {
    pub replicas: i32,
    pub utilization: i32,
    pub raw_average: i64,
}

struct Groups {
    ready: usize,
    unready: Vec<String>,
    missing: Vec<String>,
    ignored: Vec<String>,
}

fn plus(t: Timestamp, d: Duration) -> Timestamp {
    t.saturating_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX))
        .unwrap_or(t)
}

fn ready_condition(pod: &Pod) -> Option<(bool, Option<Timestamp>)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| {
            (
                c.status == "True",
                c.last_transition_time.as_ref().map(|t| t.0),
            )
        })
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn pod_name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// Upstream `groupPods`.
fn group_pods(
    calc: &Calculator,
    pods: &[&Pod],
    samples: &PodSamples,
    resource: &str,
    now: Timestamp,
) -> Groups {
    let mut g = Groups {
        ready: 0,
        unready: Vec::new(),
        missing: Vec::new(),
        ignored: Vec::new(),
    };
    for pod in pods {
        let name = pod_name(pod);
        if pod.metadata.deletion_timestamp.is_some() || phase(pod) == "Failed" {
            g.ignored.push(name);
            continue;
        }
        if phase(pod) == "Pending" {
            g.unready.push(name);
            continue;
        }
        let Some(sample) = samples.get(&name) else {
            g.missing.push(name);
            continue;
        };
        if resource == "cpu" {
            let start = pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0);
            let unready = match (ready_condition(pod), start) {
                (Some((ready, transition)), Some(start)) => {
                    let transition = transition.unwrap_or(start);
                    if plus(start, calc.cpu_initialization_period) > now {
                        // Within the initialization period: unready, or not sampled for a full
                        // window since it became ready.
                        !ready || sample.timestamp < plus(transition, sample.window)
                    } else {
                        // Unready and never ready since its start.
                        !ready && plus(start, calc.initial_readiness_delay) > transition
                    }
                }
                _ => true,
            };
            if unready {
                g.unready.push(name);
                continue;
            }
        }
        g.ready += 1;
    }
    g
}

/// Upstream `calculatePodRequests`: each pod's request of `resource` (milli-units), summed over
/// its containers (and restartable init containers), or one container's.
fn pod_requests(
    pods: &[&Pod],
    container: Option<&str>,
    resource: &str,
) -> Result<HashMap<String, i64>, String> {
    let mut out = HashMap::new();
    for pod in pods {
        let Some(spec) = &pod.spec else {
            out.insert(pod_name(pod), 0);
            continue;
        };
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let mut sum: i64 = 0;
        for c in spec.containers.iter().chain(sidecars) {
            if container.is_some_and(|want| want != c.name) {
                continue;
            }
            let request = c
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get(resource));
            match request.and_then(|q| Quantity::parse(&q.0)) {
                Some(q) => sum = sum.saturating_add(milli(q)),
                None => {
                    return Err(format!(
                        "missing request for {resource} in container {} of Pod {}",
                        c.name,
                        pod_name(pod)
                    ));
                }
            }
        }
        out.insert(pod_name(pod), sum);
    }
    Ok(out)
}

/// A quantity in milli-units, rounded up as upstream's `MilliValue`.
pub fn milli(q: Quantity) -> i64 {
    let nanos = q.nanos();
    let m = nanos.div_euclid(1_000_000) + i128::from(nanos.rem_euclid(1_000_000) != 0);
    i64::try_from(m).unwrap_or(if m < 0 { i64::MIN } else { i64::MAX })
}

/// Upstream `GetResourceUtilizationRatio`.
fn utilization_ratio(
    samples: &PodSamples,
    requests: &HashMap<String, i64>,
    target: i32,
) -> Result<(f64, i32, i64), String> {
    let (mut used, mut requested, mut entries) = (0i64, 0i64, 0i64);
    for (pod, s) in samples {
        // A sample of a pod the calculation does not know is extraneous.
        let Some(r) = requests.get(pod) else { continue };
        used = used.saturating_add(s.value);
        requested = requested.saturating_add(*r);
        entries += 1;
    }
    if requested == 0 {
        return Err("no metrics returned matched known pods".to_string());
    }
    let utilization = i32::try_from(used.saturating_mul(100) / requested).unwrap_or(i32::MAX);
    Ok((
        f64::from(utilization) / f64::from(target.max(1)),
        utilization,
        used / entries.max(1),
    ))
}

/// Upstream `GetMetricUsageRatio`.
fn usage_ratio(samples: &PodSamples, target: i64) -> (f64, i64) {
    let total: i64 = samples.values().map(|s| s.value).sum();
    let usage = total / i64::try_from(samples.len().max(1)).unwrap_or(1);
    (usage as f64 / target.max(1) as f64, usage)
}

fn ceil(x: f64) -> i32 {
    let c = x.ceil();
    if c >= f64::from(i32::MAX) {
        i32::MAX
    } else {
        c as i32
    }
}

impl Calculator {
    /// Upstream `GetResourceReplicas`: replicas for a target utilization (percent of request).
    #[allow(clippy::too_many_arguments)]
    pub fn resource_replicas(
        &self,
        current: i32,
        target_utilization: i32,
        resource: &str,
        container: Option<&str>,
        pods: &[&Pod],
        mut samples: PodSamples,
        now: Timestamp,
    ) -> Result<UtilizationProposal, String> {
        if pods.is_empty() {
            return Err("no pods returned by selector while calculating replica count".into());
        }
        let g = group_pods(self, pods, &samples, resource, now);
        for name in g.ignored.iter().chain(&g.unready) {
            samples.remove(name);
        }
        let requests = pod_requests(pods, container, resource)?;
        if samples.is_empty() {
            return Err("did not receive metrics for targeted pods (pods might be unready)".into());
        }
        let (ratio, utilization, raw_average) =
            utilization_ratio(&samples, &requests, target_utilization)?;
        let proposal = |replicas| UtilizationProposal {
            replicas,
            utilization,
            raw_average,
        };
        let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if (1.0 - ratio).abs() <= self.tolerance {
                return Ok(proposal(current));
            }
            return Ok(proposal(ceil(ratio * g.ready as f64)));
        }
        let fill = |samples: &mut PodSamples, names: &[String], value: &dyn Fn(&str) -> i64| {
            for name in names {
                samples.insert(
                    name.clone(),
                    Sample {
                        value: value(name),
                        timestamp: now,
                        window: Duration::ZERO,
                    },
                );
            }
        };
        if !g.missing.is_empty() {
            if ratio < 1.0 {
                // A scale-down treats missing pods as using their whole request (or the
                // target, when it is above 100 %).
                let fallback = i64::from(target_utilization.max(100));
                fill(&mut samples, &g.missing, &|n| {
                    requests.get(n).copied().unwrap_or(0) * fallback / 100
                });
            } else if ratio > 1.0 {
                fill(&mut samples, &g.missing, &|_| 0);
            }
        }
        if scale_up_with_unready {
            fill(&mut samples, &g.unready, &|_| 0);
        }
        let (new_ratio, _, _) = utilization_ratio(&samples, &requests, target_utilization)?;
        if (1.0 - new_ratio).abs() <= self.tolerance
            || (ratio < 1.0 && new_ratio > 1.0)
            || (ratio > 1.0 && new_ratio < 1.0)
        {
            return Ok(proposal(current));
        }
        let replicas = ceil(new_ratio * samples.len() as f64);
        if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
            return Ok(proposal(current));
        }
        Ok(proposal(replicas))
    }

    /// Upstream `getUsageRatioReplicaCount` (Object and External metrics with a `Value`
    /// target): within tolerance the current count stays, else the ready pods scale by the
    /// ratio; from zero replicas the ratio alone decides.
    pub fn usage_ratio_replicas(&self, current: i32, ratio: f64, ready_pods: usize) -> i32 {
        if current == 0 {
            return ceil(ratio);
        }
        if (1.0 - ratio).abs() <= self.tolerance {
            return current;
        }
        ceil(ratio * ready_pods as f64)
    }

    /// Upstream `GetObjectPerPodMetricReplicas` / `GetExternalPerPodMetricReplicas` (an
    /// `AverageValue` target): `usage` (milli-units, the whole object's or the sum of every
    /// series) spread over the scale's `status_replicas`. Returns the replicas and the usage per
    /// pod.
    pub fn per_pod_replicas(&self, status_replicas: i32, usage: i64, target: i64) -> (i32, i64) {
        let pods = f64::from(status_replicas.max(1));
        let target = target.max(1) as f64;
        let ratio = usage as f64 / (target * pods);
        let replicas = if (1.0 - ratio).abs() > self.tolerance {
            ceil(usage as f64 / target)
        } else {
            status_replicas
        };
        let per_pod = (usage as f64 / pods).ceil();
        (replicas, per_pod as i64)
    }

    /// Upstream `GetRawResourceReplicas` / `calcPlainMetricReplicas`: replicas for a target
    /// average usage (milli-units). Returns the replicas and the average usage.
    pub fn raw_resource_replicas(
        &self,
        current: i32,
        target: i64,
        resource: &str,
        pods: &[&Pod],
        mut samples: PodSamples,
        now: Timestamp,
    ) -> Result<(i32, i64), String> {
        if pods.is_empty() {
            return Err("no pods returned by selector while calculating replica count".into());
        }
        let g = group_pods(self, pods, &samples, resource, now);
        for name in g.ignored.iter().chain(&g.unready) {
            samples.remove(name);
        }
        if samples.is_empty() {
            return Err("did not receive metrics for targeted pods (pods might be unready)".into());
        }
        let (ratio, usage) = usage_ratio(&samples, target);
        let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if (1.0 - ratio).abs() <= self.tolerance {
                return Ok((current, usage));
            }
            return Ok((ceil(ratio * g.ready as f64), usage));
        }
        let mut fill = |names: &[String], value: i64| {
            for name in names {
                samples.insert(
                    name.clone(),
                    Sample {
                        value,
                        timestamp: now,
                        window: Duration::ZERO,
                    },
                );
            }
        };
        if !g.missing.is_empty() {
            fill(&g.missing, if ratio < 1.0 { target } else { 0 });
        }
        if scale_up_with_unready {
            fill(&g.unready, 0);
        }
        let (new_ratio, _) = usage_ratio(&samples, target);
        if (1.0 - new_ratio).abs() <= self.tolerance
            || (ratio < 1.0 && new_ratio > 1.0)
            || (ratio > 1.0 && new_ratio < 1.0)
        {
            return Ok((current, usage));
        }
        let replicas = ceil(new_ratio * samples.len() as f64);
        if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
            return Ok((current, usage));
        }
        Ok((replicas, usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_ratio_and_per_pod_replicas_follow_upstream() {
        let calc = Calculator::default();
        // Upstream's TestReplicaCalcScaleUpCMObject: 3 ready pods, 30 % over target → 4.
        assert_eq!(calc.usage_ratio_replicas(3, 1.3, 3), 4);
        // Within the tolerance nothing moves.
        assert_eq!(calc.usage_ratio_replicas(3, 1.05, 3), 3);
        // From zero replicas the ratio alone decides.
        assert_eq!(calc.usage_ratio_replicas(0, 2.5, 0), 3);
        // Per pod: 8.6 over a target of 2 per pod with 3 replicas → 5, 2.867 each.
        assert_eq!(calc.per_pod_replicas(3, 8600, 2000), (5, 2867));
        assert_eq!(calc.per_pod_replicas(3, 6100, 2000), (3, 2034));
        // No replicas in the status yet: the usage is not divided by zero.
        assert_eq!(calc.per_pod_replicas(0, 5000, 2000), (3, 5000));
    }

    /// A running pod started long ago, ready since its start, requesting `cpu` (milli-cores).
    fn pod(name: &str, cpu_request: i64, phase: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": format!("{cpu_request}m"), "memory": "64Mi"}}}]},
            "status": {"phase": phase, "startTime": "2020-01-01T00:00:00Z",
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                    "lastTransitionTime": "2020-01-01T00:00:10Z"}]}
        }))
        .unwrap_or_default()
    }

    /// Running pods as (name, cpu request in milli-cores, ready), as upstream's test cases list
    /// them.
    fn running(pods: &[(&str, i64, bool)]) -> Vec<Pod> {
        pods.iter()
            .map(|(name, cpu, ready)| pod(name, *cpu, "Running", *ready))
            .collect()
    }

    /// Pods `a` to `e`, Running and ready, each requesting one core (upstream's five-pod cases).
    fn five_ready_pods() -> Vec<Pod> {
        let names = ["a", "b", "c", "d", "e"];
        names
            .iter()
            .map(|n| pod(n, 1000, "Running", true))
            .collect()
    }

    fn now() -> Timestamp {
        "2024-01-01T00:00:00Z"
            .parse()
            .unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn samples(values: &[(&str, i64)]) -> PodSamples {
        values
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    Sample {
                        value: *v,
                        timestamp: now(),
                        window: Duration::from_secs(30),
                    },
                )
            })
            .collect()
    }

    fn calc() -> Calculator {
        Calculator::default()
    }

    /// Upstream's `replicaCalcTestCase.runTest` for a CPU utilization target: the proposal for
    /// `pods` using `usage` (milli-cores by pod name).
    fn cpu_proposal(
        current: i32,
        target: i32,
        pods: &[Pod],
        usage: &[(&str, i64)],
    ) -> UtilizationProposal {
        let refs: Vec<&Pod> = pods.iter().collect();
        calc()
            .resource_replicas(current, target, "cpu", None, &refs, samples(usage), now())
            .expect("proposal")
    }

    /// replica_calculator_test.go `TestReplicaCalcScaleUp`: 3 pods at 300/500/700m of 1 core,
    /// target 30 % → 5 replicas, utilization 50 %.
    #[test]
    fn scale_up_follows_the_usage_ratio() {
        let pods = running(&[("a", 1000, true), ("b", 1000, true), ("c", 1000, true)]);
        let p = cpu_proposal(3, 30, &pods, &[("a", 300), ("b", 500), ("c", 700)]);
        assert_eq!(
            p,
            UtilizationProposal {
                replicas: 5,
                utilization: 50,
                raw_average: 500
            }
        );
    }

    /// `TestReplicaCalcScaleDown`: 5 pods at 100/300/500/250/250m of 1 core, target 50 % → 3.
    #[test]
    fn scale_down_follows_the_usage_ratio() {
        let pods = five_ready_pods();
        let p = cpu_proposal(
            5,
            50,
            &pods,
            &[("a", 100), ("b", 300), ("c", 500), ("d", 250), ("e", 250)],
        );
        assert_eq!((p.replicas, p.utilization), (3, 28));
    }

    /// `TestReplicaCalcTolerance`: 1.08 of the target is within the 0.1 tolerance.
    #[test]
    fn a_change_within_tolerance_keeps_the_current_count() {
        let pods = running(&[("a", 900, true), ("b", 1000, true), ("c", 1100, true)]);
        let p = cpu_proposal(3, 100, &pods, &[("a", 1010), ("b", 1070), ("c", 1170)]);
        assert_eq!((p.replicas, p.utilization), (3, 108));
    }

    /// `TestReplicaCalcScaleUpUnreadyLessScale`: an unready pod counts as 0 % on a scale-up.
    #[test]
    fn unready_pods_damp_a_scale_up() {
        let pods = running(&[("a", 1000, false), ("b", 1000, true), ("c", 1000, true)]);
        let p = cpu_proposal(3, 30, &pods, &[("a", 300), ("b", 500), ("c", 700)]);
        assert_eq!((p.replicas, p.utilization, p.raw_average), (4, 60, 600));
    }

    /// `TestReplicaCalcScaleDownIncludeUnreadyPods`-style: missing pods count as their whole
    /// request on a scale-down.
    #[test]
    fn missing_pods_damp_a_scale_down() {
        let pods = five_ready_pods();
        // `e` has no sample.
        let p = cpu_proposal(
            5,
            50,
            &pods,
            &[("a", 100), ("b", 300), ("c", 500), ("d", 250)],
        );
        // Without e: 1150/4000 = 28 %, a scale-down to 3. With e at its whole request:
        // 2150/5000 = 43 %, ceil(0.86 * 5) = 5, so the count stays.
        assert_eq!(p.replicas, 5);
        assert_eq!(p.utilization, 28);
    }

    #[test]
    fn pending_pods_and_missing_requests_are_handled_as_upstream() {
        let pods = [
            pod("a", 1000, "Pending", false),
            pod("b", 1000, "Running", true),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = calc()
            .resource_replicas(2, 50, "cpu", None, &refs, samples(&[("b", 1000)]), now())
            .expect("proposal");
        // b alone is at 200 % of a 50 % target; counting the pending a as 0 % brings the ratio
        // to 1.0, within tolerance, so the count stays.
        assert_eq!((p.replicas, p.utilization), (2, 100));
        let mut no_request = pod("c", 1000, "Running", true);
        if let Some(spec) = no_request.spec.as_mut() {
            spec.containers[0].resources = None;
        }
        let refs = [&no_request];
        assert_eq!(
            calc().resource_replicas(1, 50, "cpu", None, &refs, samples(&[("c", 10)]), now()),
            Err("missing request for cpu in container c of Pod c".to_string())
        );
        assert_eq!(
            calc().resource_replicas(1, 50, "cpu", None, &[], samples(&[]), now()),
            Err("no pods returned by selector while calculating replica count".to_string())
        );
        let refs: Vec<&Pod> = pods.iter().collect();
        assert_eq!(
            calc().resource_replicas(2, 50, "cpu", None, &refs, samples(&[]), now()),
            Err("did not receive metrics for targeted pods (pods might be unready)".to_string())
        );
    }

    /// `TestReplicaCalcScaleUpCM`-style raw average: 20k, 10k, 30k against 15k → 4.
    #[test]
    fn average_value_targets_use_the_mean_usage() {
        let pods = running(&[("a", 1000, true), ("b", 1000, true), ("c", 1000, true)]);
        let refs: Vec<&Pod> = pods.iter().collect();
        let (replicas, usage) = calc()
            .raw_resource_replicas(
                3,
                15_000,
                "memory",
                &refs,
                samples(&[("a", 20_000), ("b", 10_000), ("c", 30_000)]),
                now(),
            )
            .expect("proposal");
        assert_eq!((replicas, usage), (4, 20_000));
    }

    #[test]
    fn milli_rounds_up_like_upstream() {
        let q = |s| {
            Quantity::parse(s).unwrap_or(Quantity::parse("0").unwrap_or_else(|| unreachable!()))
        };
        assert_eq!(milli(q("250m")), 250);
        assert_eq!(milli(q("1")), 1000);
        assert_eq!(milli(q("64Mi")), 67_108_864_000);
        assert_eq!(milli(q("1n")), 1);
    }
}
