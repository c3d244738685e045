//! The node's own CPU and memory figures on a real Linux node, read from `/proc` as the
//! kubelet's node-level stats read them from the root cgroup through cAdvisor:
//!
//! - CPU: the first line of `/proc/stat` (`proc(5)`), whose non-idle jiffies (user, nice,
//!   system, irq, softirq, steal; idle and iowait excluded; guest time is already in user) are
//!   the node's cumulative CPU time; jiffies are `USER_HZ` = 100 per second, the value the
//!   kernel exports to user space on every architecture;
//! - memory: `/proc/meminfo`, working set = `MemTotal − MemAvailable` (what cannot be reclaimed
//!   without swapping, the same idea as cAdvisor's usage minus inactive file pages), usage =
//!   `MemTotal − MemFree`;
//! - the node's start: `btime` of `/proc/stat`; the process's start: field 22 of
//!   `/proc/self/stat` (`process_start_time_seconds`, as Prometheus' process collector), worked
//!   out by `tandem_core::metrics::process` as the API server's is.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tandem_core::metrics::process;

use crate::runtime::NodeStats;

/// Clock ticks per second of every `/proc` time field (`USER_HZ`).
pub use tandem_core::metrics::process::USER_HZ;

/// Why a `/proc` file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("cannot read {path}")]
    Io {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} has no valid {what}")]
    Malformed {
        path: &'static str,
        what: &'static str,
    },
}

/// The figures of `/proc/stat` the stats use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTimes {
    /// Non-idle jiffies of all CPUs since boot.
    pub busy_jiffies: u64,
    /// Boot time, seconds since the Unix epoch.
    pub boot_time: u64,
}

impl CpuTimes {
    /// The busy time in core-nanoseconds.
    pub fn busy_core_nanos(&self) -> u64 {
        self.busy_jiffies.saturating_mul(1_000_000_000 / USER_HZ)
    }
}

/// The figures of `/proc/meminfo` the stats use, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemInfo {
    pub total: u64,
    pub free: u64,
    pub available: u64,
}

impl MemInfo {
    /// `MemTotal − MemAvailable`.
    pub fn working_set(&self) -> u64 {
        self.total.saturating_sub(self.available)
    }
}

/// Parses `/proc/stat`: the aggregate `cpu` line and `btime`.
pub fn parse_stat(text: &str) -> Result<CpuTimes, ProcError> {
    let malformed = |what| ProcError::Malformed {
        path: "/proc/stat",
        what,
    };
    let mut busy = None;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        if fields.next() != Some("cpu") {
            continue;
        }
        let values: Vec<u64> = fields
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| malformed("cpu line"))?;
        // user nice system idle iowait irq softirq steal [guest guest_nice]
        if values.len() < 4 {
            return Err(malformed("cpu line"));
        }
        let at = |i: usize| values.get(i).copied().unwrap_or(0);
        busy = Some(
            [0, 1, 2, 5, 6, 7]
                .iter()
                .fold(0u64, |sum, &i| sum.saturating_add(at(i))),
        );
    }
    Ok(CpuTimes {
        busy_jiffies: busy.ok_or_else(|| malformed("cpu line"))?,
        boot_time: process::boot_time(text).ok_or_else(|| malformed("btime line"))?,
    })
}

/// Parses `/proc/meminfo` (`Name:   value kB` lines).
pub fn parse_meminfo(text: &str) -> Result<MemInfo, ProcError> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let mut parts = rest.split_whitespace();
            let value: u64 = parts.next()?.parse().ok()?;
            match parts.next() {
                Some("kB") => Some(value.saturating_mul(1024)),
                None => Some(value),
                Some(_) => None,
            }
        })
    };
    let malformed = |what| ProcError::Malformed {
        path: "/proc/meminfo",
        what,
    };
    Ok(MemInfo {
        total: field("MemTotal").ok_or_else(|| malformed("MemTotal"))?,
        free: field("MemFree").ok_or_else(|| malformed("MemFree"))?,
        available: field("MemAvailable").ok_or_else(|| malformed("MemAvailable"))?,
    })
}

fn read(path: &'static str) -> Result<String, ProcError> {
    std::fs::read_to_string(Path::new(path)).map_err(|source| ProcError::Io { path, source })
}

/// The node's figures now, from `/proc/stat` and `/proc/meminfo`.
pub fn read_node(now: SystemTime) -> Result<NodeStats, ProcError> {
    let cpu = parse_stat(&read("/proc/stat")?)?;
    let mem = parse_meminfo(&read("/proc/meminfo")?)?;
    Ok(NodeStats {
        start_time: UNIX_EPOCH + Duration::from_secs(cpu.boot_time),
        timestamp: now,
        cpu_core_nanos: cpu.busy_core_nanos(),
        cpu_nano_cores: None,
        memory_working_set_bytes: mem.working_set(),
        memory_available_bytes: Some(mem.available),
        memory_usage_bytes: Some(mem.total.saturating_sub(mem.free)),
    })
}

/// When this process started, if `/proc` tells.
pub fn process_start_time() -> Option<SystemTime> {
    let boot = parse_stat(&read("/proc/stat").ok()?).ok()?.boot_time;
    process::start_time(&read("/proc/self/stat").ok()?, boot, USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "\
cpu  4705 356 584 3699176 23060 0 277 12 0 0
cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0
intr 1462898 23 0 0
ctxt 115315
btime 1769000000
processes 86031
";

    const MEMINFO: &str = "\
MemTotal:       16315508 kB
MemFree:         9162600 kB
MemAvailable:   12504280 kB
Buffers:          221144 kB
HugePages_Total:       0
";

    #[test]
    fn busy_time_counts_user_nice_system_irq_softirq_and_steal_only() {
        let cpu = parse_stat(STAT).expect("parses");
        assert_eq!(cpu.busy_jiffies, 4705 + 356 + 584 + 277 + 12);
        assert_eq!(cpu.boot_time, 1_769_000_000);
        // 100 jiffies a second: one jiffy is 10 ms of one core.
        assert_eq!(
            cpu.busy_core_nanos(),
            (4705 + 356 + 584 + 277 + 12) * 10_000_000
        );
    }

    #[test]
    fn a_stat_without_the_cpu_line_or_with_garbage_is_an_error() {
        assert!(matches!(
            parse_stat("btime 5\n"),
            Err(ProcError::Malformed {
                what: "cpu line",
                ..
            })
        ));
        assert!(parse_stat("cpu 1 x 3 4\nbtime 5\n").is_err());
        assert!(parse_stat("cpu 1 2\nbtime 5\n").is_err());
        assert!(matches!(
            parse_stat("cpu 1 2 3 4\n"),
            Err(ProcError::Malformed {
                what: "btime line",
                ..
            })
        ));
    }

    #[test]
    fn meminfo_working_set_is_total_minus_available_in_bytes() {
        let mem = parse_meminfo(MEMINFO).expect("parses");
        assert_eq!(mem.total, 16_315_508 * 1024);
        assert_eq!(mem.free, 9_162_600 * 1024);
        assert_eq!(mem.working_set(), (16_315_508 - 12_504_280) * 1024);
        assert!(matches!(
            parse_meminfo("MemTotal: 5 kB\nMemFree: 1 kB\n"),
            Err(ProcError::Malformed {
                what: "MemAvailable",
                ..
            })
        ));
    }

    #[test]
    fn this_machines_proc_reads() {
        let node = read_node(SystemTime::now()).expect("/proc is readable");
        assert!(node.cpu_core_nanos > 0);
        assert!(node.memory_working_set_bytes > 0);
        assert!(process_start_time().is_some_and(|t| t <= SystemTime::now()));
    }
}
