//! Container logs as `kubectl logs` sees them: reads a log file in the CRI format
//! (`<RFC 3339 time> <stdout|stderr> <P|F> <text>` per line, as containerd writes it) and applies
//! the `PodLogOptions` the kubelet honours: `sinceSeconds`/`sinceTime`, `tailLines`,
//! `timestamps`, `limitBytes` and `follow`. Mirrors the kubelet's `kuberuntime/logs.ReadLogs`.

use std::io::SeekFrom;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

use tandem_core::table::parse_rfc3339;

/// The options of one log request (the query of `/containerLogs/...`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    /// Lines from the end; `None` for all.
    pub tail_lines: Option<u64>,
    pub limit_bytes: Option<u64>,
    /// Only entries at or after this time (Unix nanoseconds).
    pub since_nanos: Option<i128>,
}

/// Why a log query string was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LogOptionsError {
    #[error("{field}: invalid value {value:?}: {reason}")]
    Invalid {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
}

impl LogOptions {
    /// Parses the kubelet's query parameters; `now_nanos` resolves `sinceSeconds`.
    pub fn from_query(query: &str, now_nanos: i128) -> Result<LogOptions, LogOptionsError> {
        let mut o = LogOptions::default();
        for (k, v) in form_pairs(query) {
            let flag = || v.is_empty() || v == "true" || v == "1";
            match k.as_str() {
                "follow" => o.follow = flag(),
                "previous" => o.previous = flag(),
                "timestamps" => o.timestamps = flag(),
                "tailLines" => o.tail_lines = Some(non_negative("tailLines", &v)?),
                "limitBytes" => o.limit_bytes = Some(positive("limitBytes", &v)?),
                "sinceSeconds" => {
                    let s = positive("sinceSeconds", &v)?;
                    o.since_nanos = Some(now_nanos - i128::from(s) * 1_000_000_000);
                }
                "sinceTime" => {
                    let t = rfc3339_nanos(&v).ok_or_else(|| LogOptionsError::Invalid {
                        field: "sinceTime",
                        value: v.clone(),
                        reason: "must be an RFC 3339 time",
                    })?;
                    o.since_nanos = Some(t);
                }
                _ => {}
            }
        }
        Ok(o)
    }
}

fn non_negative(field: &'static str, v: &str) -> Result<u64, LogOptionsError> {
    v.parse::<u64>().map_err(|_| LogOptionsError::Invalid {
        field,
        value: v.to_string(),
        reason: "must be a non-negative integer",
    })
}

fn positive(field: &'static str, v: &str) -> Result<u64, LogOptionsError> {
    match v.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(LogOptionsError::Invalid {
            field,
            value: v.to_string(),
            reason: "must be greater than 0",
        }),
    }
}

/// Unix nanoseconds of an RFC 3339 time, keeping its fraction (CRI log times have nanoseconds).
fn rfc3339_nanos(s: &str) -> Option<i128> {
    let secs = parse_rfc3339(s)?;
    let frac: String = s
        .get(19..)
        .and_then(|rest| rest.strip_prefix('.'))
        .map(|f| f.chars().take_while(char::is_ascii_digit).take(9).collect())
        .unwrap_or_default();
    let nanos = if frac.is_empty() {
        0
    } else {
        frac.parse::<i128>().ok()? * 10i128.pow(9 - frac.len() as u32)
    };
    Some(i128::from(secs) * 1_000_000_000 + nanos)
}

/// The decoded `key=value` pairs of a query string.
pub fn form_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// Decodes `%XX` escapes and `+` (a space in form encoding); bad escapes are kept as they are.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One parsed line of a CRI log file.
#[derive(Clone, Debug, PartialEq)]
pub struct LogLine<'a> {
    /// The timestamp as written (RFC 3339 with nanoseconds).
    pub time: &'a str,
    pub nanos: Option<i128>,
    /// The text without the trailing newline.
    pub text: &'a [u8],
    /// `F`: the text ends a line; `P`: a partial line continued by the next entry.
    pub full: bool,
}

/// Parses one line of a CRI log file (without its newline); `None` for a malformed line.
pub fn parse_line(line: &[u8]) -> Option<LogLine<'_>> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(parts.next()?).ok()?;
    let _stream = parts.next()?;
    let tag = parts.next()?;
    let text = parts.next().unwrap_or(&[]);
    Some(LogLine {
        time,
        nanos: rfc3339_nanos(time),
        text,
        full: tag.first() != Some(&b'P'),
    })
}

/// Formats the entries of `data` (whole lines of a CRI log) as the client sees them.
fn render(data: &[u8], opts: &LogOptions, out: &mut Vec<u8>) {
    for raw in data.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Some(line) = parse_line(raw) else {
            continue;
        };
        if let (Some(since), Some(t)) = (opts.since_nanos, line.nanos)
            && t < since
        {
            continue;
        }
        if opts.timestamps {
            out.extend_from_slice(line.time.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(line.text);
        if line.full {
            out.push(b'\n');
        }
    }
}

/// The byte offset where the last `n` lines of `data` start.
fn tail_start(data: &[u8], n: u64) -> usize {
    if n == 0 {
        return data.len();
    }
    let mut seen = 0;
    let end = data
        .len()
        .saturating_sub(usize::from(data.last() == Some(&b'\n')));
    for i in (0..end).rev() {
        if data[i] == b'\n' {
            seen += 1;
            if seen == n {
                return i + 1;
            }
        }
    }
    0
}

/// Streams a container log into `tx` as the options ask. With `follow`, keeps reading what is
/// appended until `running()` says the container stopped (and what it wrote last is sent) or the
/// receiver is dropped. Poll interval: 100 ms, like the kubelet's fallback when inotify is absent.
pub async fn stream_log(
    path: PathBuf,
    opts: LogOptions,
    tx: mpsc::Sender<Vec<u8>>,
    running: impl Fn() -> bool + Send,
) -> std::io::Result<()> {
    let mut file = tokio::fs::File::open(&path).await?;
    let mut data = Vec::new();
    file.read_to_end(&mut data).await?;
    // Only whole lines are rendered; a line still being written waits for its newline.
    let complete = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let start = opts
        .tail_lines
        .map_or(0, |n| tail_start(&data[..complete], n));
    let mut budget = opts.limit_bytes.unwrap_or(u64::MAX);
    let send = |chunk: Vec<u8>, budget: &mut u64| {
        let take = usize::try_from((*budget).min(chunk.len() as u64)).unwrap_or(chunk.len());
        *budget -= take as u64;
        let mut chunk = chunk;
        chunk.truncate(take);
        chunk
    };
    let mut out = Vec::new();
    render(&data[start..complete], &opts, &mut out);
    if !out.is_empty() {
        let chunk = send(out, &mut budget);
        if tx.send(chunk).await.is_err() {
            return Ok(());
        }
    }
    if !opts.follow || budget == 0 {
        return Ok(());
    }
    let mut pending: Vec<u8> = data[complete..].to_vec();
    let mut offset = data.len() as u64;
    loop {
        let was_running = running();
        let mut more = Vec::new();
        file.seek(SeekFrom::Start(offset)).await?;
        file.read_to_end(&mut more).await?;
        offset += more.len() as u64;
        pending.extend_from_slice(&more);
        if let Some(i) = pending.iter().rposition(|b| *b == b'\n') {
            let rest = pending.split_off(i + 1);
            let mut out = Vec::new();
            render(&pending, &opts, &mut out);
            pending = rest;
            if !out.is_empty() {
                let chunk = send(out, &mut budget);
                if tx.send(chunk).await.is_err() || budget == 0 {
                    return Ok(());
                }
            }
        }
        if !was_running {
            return Ok(());
        }
        if tx.is_closed() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    const LOG: &str = "2026-11-21T10:00:00.000000001Z stdout F one\n\
2026-11-21T10:00:01.000000000Z stderr P tw\n\
2026-11-21T10:00:01.500000000Z stderr F o\n\
2026-11-21T10:00:02.000000000Z stdout F three\n";

    async fn collect(path: PathBuf, opts: LogOptions) -> String {
        let (tx, mut rx) = mpsc::channel(16);
        stream_log(path, opts, tx, || false).await.unwrap();
        let mut out = Vec::new();
        while let Some(c) = rx.recv().await {
            out.extend(c);
        }
        String::from_utf8(out).unwrap()
    }

    fn file(content: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.log");
        std::fs::write(&p, content).unwrap();
        (dir, p)
    }

    #[tokio::test]
    async fn partial_lines_are_joined_and_streams_merged() {
        let (_d, p) = file(LOG);
        assert_eq!(collect(p, LogOptions::default()).await, "one\ntwo\nthree\n");
    }

    #[tokio::test]
    async fn tail_counts_file_lines_from_the_end() {
        let (_d, p) = file(LOG);
        let opts = LogOptions {
            tail_lines: Some(1),
            ..LogOptions::default()
        };
        assert_eq!(collect(p.clone(), opts).await, "three\n");
        let none = LogOptions {
            tail_lines: Some(0),
            ..LogOptions::default()
        };
        assert_eq!(collect(p, none).await, "");
    }

    #[tokio::test]
    async fn timestamps_since_and_limit_bytes() {
        let (_d, p) = file(LOG);
        let opts = LogOptions::from_query("timestamps=true&sinceTime=2026-11-21T10%3A00%3A01Z", 0)
            .unwrap();
        assert_eq!(
            collect(p.clone(), opts).await,
            "2026-11-21T10:00:01.000000000Z tw2026-11-21T10:00:01.500000000Z o\n\
2026-11-21T10:00:02.000000000Z three\n"
        );
        let limited = LogOptions {
            limit_bytes: Some(5),
            ..LogOptions::default()
        };
        assert_eq!(collect(p, limited).await, "one\nt");
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(LogOptions::from_query("tailLines=-1", 0).is_err());
        assert!(LogOptions::from_query("limitBytes=0", 0).is_err());
        assert!(LogOptions::from_query("sinceSeconds=x", 0).is_err());
        let o = LogOptions::from_query("sinceSeconds=10&follow=true", 20_000_000_000).unwrap();
        assert_eq!(o.since_nanos, Some(10_000_000_000));
        assert!(o.follow);
    }

    #[tokio::test]
    async fn follow_reads_appended_lines_until_the_container_stops() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let (_d, p) = file("2026-11-21T10:00:00Z stdout F a\n");
        let running = Arc::new(AtomicBool::new(true));
        let (tx, mut rx) = mpsc::channel(16);
        let r = running.clone();
        let task = tokio::spawn(stream_log(
            p.clone(),
            LogOptions {
                follow: true,
                ..LogOptions::default()
            },
            tx,
            move || r.load(Ordering::SeqCst),
        ));
        assert_eq!(rx.recv().await.unwrap(), b"a\n");
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        std::io::Write::write_all(&mut f, b"2026-11-21T10:00:01Z stdout F b\n").unwrap();
        assert_eq!(rx.recv().await.unwrap(), b"b\n");
        running.store(false, Ordering::SeqCst);
        task.await.unwrap().unwrap();
        assert!(rx.recv().await.is_none());
    }
}
