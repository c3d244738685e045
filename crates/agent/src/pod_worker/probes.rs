//! Probes of a running container, as the kubelet's prober manager runs them: a startup probe
//! gates liveness and readiness; `successThreshold`/`failureThreshold` consecutive results flip
//! readiness or kill the container (upstream `prober` `worker.doProbe`). Probes the runtime models
//! without a spec (the emulated runtime's annotations) run with period 1 s and thresholds 1.

use std::time::Duration;

use k8s_openapi::api::core::v1::Probe;
use tokio::time::Instant;

use super::{EventType, PodWorker};
use crate::runtime::{ProbeKind, ProbeResult};

/// One probe's schedule and consecutive results.
#[derive(Clone, Debug)]
pub(super) struct ProbeTrack {
    pub(super) kind: ProbeKind,
    pub(super) period: Duration,
    pub(super) success_threshold: i32,
    pub(super) failure_threshold: i32,
    pub(super) next_at: Instant,
    pub(super) successes: i32,
    pub(super) failures: i32,
}

impl ProbeTrack {
    /// The schedule a probe's spec asks for, with the API's defaults (period 10 s, thresholds
    /// 1 and 3); the first run is due `initialDelaySeconds` after `started`.
    pub(super) fn from_spec(kind: ProbeKind, p: &Probe, started: Instant) -> ProbeTrack {
        let secs = |v: Option<i32>, d: i32| {
            Duration::from_secs(u64::try_from(v.unwrap_or(d).max(0)).unwrap_or(0))
        };
        let initial_delay = secs(p.initial_delay_seconds, 0);
        ProbeTrack {
            kind,
            period: secs(p.period_seconds, 10).max(Duration::from_secs(1)),
            success_threshold: p.success_threshold.unwrap_or(1).max(1),
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1),
            next_at: started + initial_delay,
            successes: 0,
            failures: 0,
        }
    }

    /// A probe the runtime models without a spec: period 1 s, thresholds 1, due at once.
    pub(super) fn implicit(kind: ProbeKind, started: Instant) -> ProbeTrack {
        ProbeTrack {
            kind,
            period: Duration::from_secs(1),
            success_threshold: 1,
            failure_threshold: 1,
            next_at: started,
            successes: 0,
            failures: 0,
        }
    }
}

impl PodWorker {
    /// Runs the container's probes that are due; a liveness or startup failure past its
    /// threshold stops the container (it is then restarted by its restart policy).
    pub(super) async fn run_probes(&mut self, i: usize, id: &str) {
        let now = Instant::now();
        let mut kill: Option<ProbeKind> = None;
        let mut events: Vec<String> = Vec::new();
        let probes = self.tracks[i].probes.clone();
        let mut updated = Vec::with_capacity(probes.len());
        let mut started = self.tracks[i].started;
        let mut ready = self.tracks[i].ready;
        for mut p in probes {
            let gated = p.kind != ProbeKind::Startup && !started;
            if p.next_at > now || gated || (p.kind == ProbeKind::Startup && started) {
                if gated && p.next_at <= now {
                    p.next_at = now + p.period;
                }
                updated.push(p);
                continue;
            }
            let result = self.ctx.runtime.probe(id, p.kind).await;
            p.next_at = now + p.period;
            match result {
                ProbeResult::Success => {
                    p.failures = 0;
                    p.successes += 1;
                    match p.kind {
                        ProbeKind::Startup => started = true,
                        ProbeKind::Readiness if p.successes >= p.success_threshold => ready = true,
                        _ => {}
                    }
                }
                ProbeResult::Failure(out) => {
                    p.successes = 0;
                    p.failures += 1;
                    events.push(format!("{} probe failed: {out}", p.kind.title()));
                    if p.failures >= p.failure_threshold {
                        match p.kind {
                            ProbeKind::Readiness => ready = false,
                            k => kill = Some(k),
                        }
                    }
                }
            }
            updated.push(p);
        }
        {
            let t = &mut self.tracks[i];
            t.probes = updated;
            if started && !t.started {
                // Liveness and readiness start counting their initial delay once startup passed
                // (upstream runs them from container start but ignores results until started).
                for p in t.probes.iter_mut().filter(|p| p.kind != ProbeKind::Startup) {
                    p.next_at = p.next_at.max(now);
                }
                if !t.probes.iter().any(|p| p.kind == ProbeKind::Readiness) {
                    ready = true;
                }
            }
            t.started = started;
            t.ready = ready && started;
        }
        for e in events {
            self.event(Some(i), EventType::Warning, "Unhealthy", &e)
                .await;
        }
        if let Some(kind) = kill {
            let name = self.tracks[i].name().to_string();
            let what = if kind == ProbeKind::Startup {
                "startup"
            } else {
                "liveness"
            };
            self.event(
                Some(i),
                EventType::Normal,
                "Killing",
                &format!("Container {name} failed {what} probe, will be restarted"),
            )
            .await;
            let _ = self.ctx.runtime.stop_container(id, self.grace()).await;
            if let Ok(info) = self.ctx.runtime.container_status(id) {
                self.exited(i, &info).await;
            }
        }
    }
}
