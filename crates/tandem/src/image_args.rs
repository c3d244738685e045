//! The image flags `tandem up` and `tandem agent` share: the kubelet's pull concurrency
//! (`--serialize-image-pulls`, `--max-parallel-image-pulls`) and k3s' `--registry-config`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tandem_agent::NodeConfig;
use tandem_agent::registries::RegistriesConfig;
use tandem_agent::runtime::cri::image_gc::GcPolicy;

/// How many pulls run at once when pulls are not serialized and no maximum is given (the
/// kubelet has no limit then; a bound keeps a burst of pods from opening hundreds of pulls).
const UNBOUNDED_PULLS: usize = 64;

#[derive(clap::Args, Clone, Debug)]
pub struct ImageArgs {
    /// Pull one image at a time (the kubelet's default). `--serialize-image-pulls=false`
    /// lets up to `--max-parallel-image-pulls` run at once.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub serialize_image_pulls: bool,
    /// With `--serialize-image-pulls=false`: the most pulls at once (default: 64).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_parallel_image_pulls: Option<u16>,
    /// A k3s-style `registries.yaml` (mirrors, and per host `auth` and `tls` with `ca_file`,
    /// `cert_file`, `key_file`, `insecure_skip_verify`), written for the node's containerd as
    /// `hosts.toml` files and CRI registry credentials at every start.
    #[arg(long)]
    pub registry_config: Option<PathBuf>,
    /// Image garbage collection starts when the image filesystem is this full (percent).
    #[arg(long, default_value_t = 85)]
    pub image_gc_high_threshold: u8,
    /// Image garbage collection frees unused images until the image filesystem is this full
    /// (percent; below the high threshold).
    #[arg(long, default_value_t = 80)]
    pub image_gc_low_threshold: u8,
    /// How often image garbage collection runs (the kubelet's fixed 5 minutes; tandem-only).
    #[arg(long, default_value = "5m", value_parser = parse_period)]
    pub image_gc_period: Duration,
}

/// `30s`, `5m`, `1h`, or plain seconds.
fn parse_period(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 30s or 5m"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err(format!("{text:?} is not a duration such as 30s or 5m")),
    };
    if seconds == 0 {
        return Err("the period must be at least 1s".into());
    }
    Ok(Duration::from_secs(seconds))
}

impl ImageArgs {
    /// Sets the node's pull concurrency and registry configuration, refusing contradictory
    /// flags (as the kubelet's config validation does) and a bad registry file.
    pub fn apply(&self, node: &mut NodeConfig) -> anyhow::Result<()> {
        node.parallel_image_pulls =
            match (self.serialize_image_pulls, self.max_parallel_image_pulls) {
                (true, Some(n)) if n > 1 => anyhow::bail!(
                    "--max-parallel-image-pulls={n} needs --serialize-image-pulls=false"
                ),
                (true, _) => 1,
                (false, Some(n)) => usize::from(n),
                (false, None) => UNBOUNDED_PULLS,
            };
        node.image_gc = GcPolicy::new(self.image_gc_high_threshold, self.image_gc_low_threshold)
            .map_err(anyhow::Error::msg)?;
        node.image_gc_period = self.image_gc_period;
        if let Some(path) = &self.registry_config {
            let config = RegistriesConfig::load(path).context("--registry-config")?;
            for warning in config.warnings() {
                tracing::warn!(node = %node.name, "{warning}");
            }
            node.registries = config;
        }
        Ok(())
    }
}
