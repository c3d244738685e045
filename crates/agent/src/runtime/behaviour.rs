//! The data that drives the emulated runtime, like kwok's stages: per-container behaviour read
//! from pod annotations (over defaults from an optional stage file), and the image size table.
//!
//! Annotations (prefix `emulated.tandem.dev/`; append `.<container>` to target one container):
//!
//! | key | value | default |
//! |---|---|---|
//! | `start-delay` | duration (`500ms`, `3s`, `1m`) from start request to running | `0s` |
//! | `run-for` | the container exits after this long | runs until stopped (init containers: `0s`) |
//! | `exit-code` | exit code when it exits (alone: exits at once with it) | `0` |
//! | `readiness` / `liveness` / `startup` | `pass`, `fail`, `fail-after:30s`, `pass-after:30s` | `pass` |
//! | `post-start` / `pre-stop` | hook outcome: `pass`, `fail`, or a duration it takes | `pass` |
//! | `stop-delay` | how long the process takes to exit after the stop signal | `0s` |
//! | `oom-after` | memory limit exceeded after this long (Linux: OOMKilled; Windows pages, never OOM-kills) | never |
//!
//! A readiness/liveness/startup annotation on a container without that probe in its spec acts
//! as a probe with period 1 s and thresholds 1, so annotations alone can model a slow start.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::RuntimeError;

/// Annotation prefix for emulated behaviour.
pub const PREFIX: &str = "emulated.tandem.dev/";

/// A probe's emulated outcome over the container's lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum ProbeBehaviour {
    #[default]
    Pass,
    Fail,
    /// Passes until the container has run this long, then fails.
    FailAfter(Duration),
    /// Fails until the container has run this long, then passes.
    PassAfter(Duration),
}

impl ProbeBehaviour {
    /// Whether the probe passes `elapsed` after the container started.
    pub fn passes(self, elapsed: Duration) -> bool {
        match self {
            ProbeBehaviour::Pass => true,
            ProbeBehaviour::Fail => false,
            ProbeBehaviour::FailAfter(d) => elapsed < d,
            ProbeBehaviour::PassAfter(d) => elapsed >= d,
        }
    }

    fn parse(s: &str) -> Option<ProbeBehaviour> {
        let s = s.trim();
        match s {
            "pass" => Some(ProbeBehaviour::Pass),
            "fail" => Some(ProbeBehaviour::Fail),
            _ => {
                if let Some(d) = s.strip_prefix("fail-after:") {
                    parse_duration(d).map(ProbeBehaviour::FailAfter)
                } else {
                    s.strip_prefix("pass-after:")
                        .and_then(parse_duration)
                        .map(ProbeBehaviour::PassAfter)
                }
            }
        }
    }
}

/// A lifecycle hook's emulated outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum HookBehaviour {
    #[default]
    Pass,
    Fail,
    Takes(Duration),
}

/// Everything the emulated runtime needs to know about one container's life.
#[derive(Clone, Debug, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Behaviour {
    pub start_delay: Duration,
    pub run_for: Option<Duration>,
    pub exit_code: i32,
    pub readiness: Option<ProbeBehaviour>,
    pub liveness: Option<ProbeBehaviour>,
    pub startup: Option<ProbeBehaviour>,
    pub post_start: HookBehaviour,
    pub pre_stop: HookBehaviour,
    pub stop_delay: Duration,
    pub oom_after: Option<Duration>,
}

/// Parses a Go duration (`250ms`, `3s`, `1m30s`) or a bare number of seconds; negative ones are
/// refused.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    tandem_core::time::parse_go_duration_std(s).ok()
}

/// Default behaviour and image sizes from a stage file, matched by pod labels.
///
/// ```yaml
/// images:
///   - prefix: mcr.microsoft.com/windows/servercore
///     sizeBytes: 3000000000
/// stages:
///   - matchLabels: { app: flaky }
///     annotations: { liveness: "fail-after:60s" }
/// ```
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageFile {
    #[serde(default)]
    pub images: Vec<ImageSize>,
    #[serde(default)]
    pub stages: Vec<Stage>,
}

/// One entry of the image size table: references starting with `prefix` weigh `size_bytes`.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageSize {
    pub prefix: String,
    pub size_bytes: i64,
}

/// Behaviour annotations (keys without the prefix) applied to pods whose labels match.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl StageFile {
    /// Reads a YAML (or JSON) stage file.
    pub fn load(path: &Path) -> Result<StageFile, RuntimeError> {
        let text = std::fs::read_to_string(path).map_err(|e| RuntimeError::Refused {
            message: format!("cannot read stage file {}: {e}", path.display()),
        })?;
        serde_yaml::from_str(&text).map_err(|e| RuntimeError::Refused {
            message: format!("invalid stage file {}: {e}", path.display()),
        })
    }

    /// The emulated size of an image: the stage file's table first, then the built-in one —
    /// Windows Server Core ≈ 3 GB, Server ≈ 5 GB, .NET Framework on Server Core ≈ 5 GB,
    /// Nano Server ≈ 100 MB, pause ≈ 300 KB, anything else 30 MB.
    pub fn image_size(&self, image: &str) -> i64 {
        if let Some(s) = self
            .images
            .iter()
            .filter(|i| image.starts_with(&i.prefix))
            .max_by_key(|i| i.prefix.len())
        {
            return s.size_bytes;
        }
        let repo = image
            .split('@')
            .next()
            .unwrap_or(image)
            .to_ascii_lowercase();
        if repo.contains("dotnet/framework")
            || repo.contains("windows/server:")
            || repo.ends_with("windows/server")
        {
            5_000_000_000
        } else if repo.contains("servercore") {
            3_000_000_000
        } else if repo.contains("nanoserver") {
            100_000_000
        } else if repo.contains("pause") {
            300_000
        } else {
            30_000_000
        }
    }

    /// The container's behaviour: stage defaults for matching labels, then pod annotations,
    /// then container-specific annotations (`key.<container>`).
    pub fn behaviour(
        &self,
        pod: &Pod,
        container: &str,
        is_init: bool,
    ) -> Result<Behaviour, String> {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let mut kv: BTreeMap<String, String> = BTreeMap::new();
        for stage in &self.stages {
            if stage
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
            {
                kv.extend(stage.annotations.clone());
            }
        }
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let mut specific = BTreeMap::new();
        for (k, v) in annotations {
            let Some(key) = k.strip_prefix(PREFIX) else {
                continue;
            };
            match key.split_once('.') {
                Some((key, c)) if c == container => {
                    specific.insert(key.to_string(), v);
                }
                Some(_) => {}
                None => {
                    kv.insert(key.to_string(), v);
                }
            }
        }
        kv.extend(specific);
        let mut b = Behaviour::default();
        if is_init {
            b.run_for = Some(Duration::ZERO);
        }
        let dur = |k: &str, v: &str| {
            parse_duration(v).ok_or_else(|| format!("{PREFIX}{k}: invalid duration {v:?}"))
        };
        let probe = |k: &str, v: &str| {
            ProbeBehaviour::parse(v).ok_or_else(|| format!("{PREFIX}{k}: expected pass, fail, fail-after:<duration> or pass-after:<duration>, got {v:?}"))
        };
        let hook = |k: &str, v: &str| match v.trim() {
            "pass" => Ok(HookBehaviour::Pass),
            "fail" => Ok(HookBehaviour::Fail),
            other => parse_duration(other)
                .map(HookBehaviour::Takes)
                .ok_or_else(|| {
                    format!("{PREFIX}{k}: expected pass, fail or a duration, got {v:?}")
                }),
        };
        let mut exit_code_given = false;
        for (k, v) in &kv {
            match k.as_str() {
                "start-delay" => b.start_delay = dur(k, v)?,
                "run-for" => b.run_for = Some(dur(k, v)?),
                "exit-code" => {
                    b.exit_code = v
                        .trim()
                        .parse()
                        .map_err(|_| format!("{PREFIX}{k}: invalid exit code {v:?}"))?;
                    exit_code_given = true;
                }
                "readiness" => b.readiness = Some(probe(k, v)?),
                "liveness" => b.liveness = Some(probe(k, v)?),
                "startup" => b.startup = Some(probe(k, v)?),
                "post-start" => b.post_start = hook(k, v)?,
                "pre-stop" => b.pre_stop = hook(k, v)?,
                "stop-delay" => b.stop_delay = dur(k, v)?,
                "oom-after" => b.oom_after = Some(dur(k, v)?),
                _ => {}
            }
        }
        if exit_code_given && b.run_for.is_none() {
            b.run_for = Some(Duration::ZERO);
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotations: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string()))
                .collect(),
        );
        p
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5m"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("3d"), None);
        assert_eq!(parse_duration("-1s"), None);
    }

    #[test]
    fn annotations_drive_behaviour_with_container_overrides() {
        let s = StageFile::default();
        let p = pod(&[
            ("exit-code", "3"),
            ("readiness", "pass-after:30s"),
            ("exit-code.sidecar", "0"),
            ("run-for.sidecar", "5s"),
        ]);
        let app = s.behaviour(&p, "app", false).expect("valid");
        assert_eq!((app.exit_code, app.run_for), (3, Some(Duration::ZERO)));
        assert_eq!(
            app.readiness,
            Some(ProbeBehaviour::PassAfter(Duration::from_secs(30)))
        );
        let side = s.behaviour(&p, "sidecar", false).expect("valid");
        assert_eq!(
            (side.exit_code, side.run_for),
            (0, Some(Duration::from_secs(5)))
        );
        assert!(
            s.behaviour(&pod(&[("liveness", "sometimes")]), "app", false)
                .is_err()
        );
        assert_eq!(
            s.behaviour(&Pod::default(), "init", true)
                .map(|b| b.run_for),
            Ok(Some(Duration::ZERO))
        );
    }

    #[test]
    fn stage_file_defaults_and_image_sizes() {
        let s: StageFile = serde_yaml::from_str(
            "images: [{prefix: example.com/big, sizeBytes: 7}]\nstages: [{matchLabels: {app: flaky}, annotations: {liveness: 'fail-after:60s'}}]",
        )
        .expect("valid yaml");
        assert_eq!(s.image_size("example.com/big:1"), 7);
        assert_eq!(
            s.image_size("mcr.microsoft.com/windows/servercore:ltsc2019"),
            3_000_000_000
        );
        assert_eq!(
            s.image_size("mcr.microsoft.com/windows/nanoserver:ltsc2022"),
            100_000_000
        );
        let mut p = Pod::default();
        p.metadata.labels = Some(BTreeMap::from([("app".to_string(), "flaky".to_string())]));
        assert_eq!(
            s.behaviour(&p, "c", false).map(|b| b.liveness),
            Ok(Some(ProbeBehaviour::FailAfter(Duration::from_secs(60))))
        );
        assert!(ProbeBehaviour::FailAfter(Duration::from_secs(60)).passes(Duration::from_secs(59)));
        assert!(
            !ProbeBehaviour::FailAfter(Duration::from_secs(60)).passes(Duration::from_secs(60))
        );
    }
}
