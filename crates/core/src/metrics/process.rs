//! When a process started, from the texts of `/proc/stat` and `/proc/<pid>/stat` (`proc(5)`), as
//! client_golang's process collector computes `process_start_time_seconds` (procfs'
//! `ProcStat.StartTime`): the boot time (`btime`) plus the process's `starttime`, in clock ticks
//! after boot. The callers read the files; nothing here does I/O.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The clock ticks per second of `/proc` time fields on Linux (`USER_HZ`, what `sysconf
/// (_SC_CLK_TCK)` answers on every architecture tandem runs on).
pub const USER_HZ: u64 = 100;

/// The boot time of a `/proc/stat` text (its `btime` line), in seconds since the Unix epoch.
pub fn boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        if fields.next() != Some("btime") {
            return None;
        }
        fields.next()?.parse().ok()
    })
}

/// When the process whose `/proc/<pid>/stat` is `stat` started, given the boot time and the
/// clock ticks per second: field 22 (`starttime`) after boot. The command name (field 2) is in
/// parentheses and may hold spaces or parentheses itself, so fields are counted after its last
/// `)`.
pub fn start_time(stat: &str, boot_time: u64, ticks_per_second: u64) -> Option<SystemTime> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Field 3 is the first after the command name; starttime is field 22.
    let ticks: u64 = after_comm.split_whitespace().nth(22 - 3)?.parse().ok()?;
    let hz = ticks_per_second.max(1);
    let since_boot = Duration::from_secs(ticks / hz)
        + Duration::from_nanos((ticks % hz).saturating_mul(1_000_000_000) / hz);
    UNIX_EPOCH
        .checked_add(Duration::from_secs(boot_time))?
        .checked_add(since_boot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_time_is_the_btime_line() {
        let stat =
            "cpu  4705 356 584 3699176\nintr 1462898 23\nbtime 1769000000\nprocesses 86031\n";
        assert_eq!(boot_time(stat), Some(1_769_000_000));
        assert_eq!(boot_time("cpu 1 2 3 4\n"), None);
        assert_eq!(boot_time("btime soon\n"), None);
    }

    #[test]
    fn process_start_is_counted_after_the_last_parenthesis_of_the_command() {
        // starttime (field 22) is 250 ticks = 2.5 s after boot; the name holds ") (".
        let stat = "4242 (tan dem) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 8 0 \
                    250 1000 200 18446744073709551615";
        let start = start_time(stat, 1_000, USER_HZ).expect("parses");
        assert_eq!(start, UNIX_EPOCH + Duration::from_millis(1_002_500));
        assert_eq!(
            start_time(stat, 1_000, 1000),
            Some(UNIX_EPOCH + Duration::from_millis(1_000_250))
        );
        assert_eq!(start_time("4242 (short) S 1", 1_000, USER_HZ), None);
        assert_eq!(start_time("no command name", 1_000, USER_HZ), None);
    }
}
