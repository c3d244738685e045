//! The benchmarks' memory figures: this process's resident set size now (`VmRSS`) and at its
//! peak (`VmHWM`), read from `/proc/self/status` as `ps` and `top` read them (Linux only;
//! `None` elsewhere or when the file cannot be read).

/// The value of a `kB` field of `/proc/self/status` (`field` with its colon, e.g. `"VmHWM:"`).
fn proc_status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find_map(|l| l.strip_prefix(field))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The resident set size of this process now (`VmRSS`), in bytes.
pub fn rss_bytes() -> Option<u64> {
    proc_status_kib("VmRSS:").map(|kb| kb * 1024)
}

/// The peak resident set size of this process (`VmHWM`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    peak_rss_kib().map(|kb| kb * 1024)
}

/// The peak resident set size of this process (`VmHWM`), in KiB.
pub fn peak_rss_kib() -> Option<u64> {
    proc_status_kib("VmHWM:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_and_peak_rss_are_read_from_proc() {
        let (now, peak) = (rss_bytes(), peak_rss_bytes());
        assert!(now.is_some_and(|b| b > 0));
        assert!(peak >= now);
        assert_eq!(peak_rss_kib().map(|k| k > 0), Some(true));
    }
}
