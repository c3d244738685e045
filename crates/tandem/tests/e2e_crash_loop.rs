//! End-to-end crash consistency: a concurrent write load and a watcher run against the server,
//! which is killed with SIGKILL at a random moment and restarted on the same data dir, over and
//! over. After each crash: every acknowledged write is there (an object with the acknowledged
//! resourceVersion, or a later one only if a write to it was in flight; a deleted object stays
//! deleted unless a create was in flight), and a watch resumed from the last resourceVersion
//! the watcher saw brings no duplicate, no out-of-order and no missing event: replaying what
//! the watcher saw before and after the crash on the objects it started from gives exactly what
//! the server lists. This is the check etcd's robustness tests make of its linearizable history,
//! reduced to what a Kubernetes client relies on.
//!
//! Seeded: the seed is printed, and `TANDEM_CRASH_SEED` replays one. `TANDEM_CRASH_ITERATIONS`
//! (default 8) and `TANDEM_CRASH_SECONDS` (default 90; no iteration starts after it) bound the
//! run; the figures for BENCHMARKS.md come from a longer run with those raised.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;
mod raw_api;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::Server;
use raw_api::Api;

const WRITERS: usize = 4;
const KEYS_PER_WRITER: usize = 6;

/// splitmix64: small, seedable, good enough to pick operations and moments.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Create,
    Update,
    Delete,
}

/// What the writers know of one key: its acknowledged state, and the write that was in flight
/// when the server died (its outcome is unknown).
#[derive(Clone, Debug, Default)]
struct Key {
    live: Option<u64>,
    in_flight: Option<Op>,
}

/// One writer's result: its keys, the acknowledged writes (op, name, resourceVersion; the
/// delete's is the deleted object's), and answers that should not have happened.
struct WriterReport {
    keys: BTreeMap<String, Key>,
    acked: Vec<(Op, String, u64)>,
    unexpected: Vec<String>,
}

fn rv_of(v: &serde_json::Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn body(name: &str, rv: Option<u64>, n: u64) -> String {
    let mut meta = serde_json::json!({"name": name, "labels": {"crash-loop": "yes"}});
    if let Some(rv) = rv {
        meta["resourceVersion"] = rv.to_string().into();
    }
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
        "data": {"n": n.to_string()}})
    .to_string()
}

fn write_load(
    api: Api,
    mut keys: BTreeMap<String, Key>,
    seed: u64,
    round: u64,
    stop: Arc<AtomicBool>,
) -> WriterReport {
    let mut rng = Rng(seed);
    let mut acked = Vec::new();
    let mut unexpected = Vec::new();
    let names: Vec<String> = keys.keys().cloned().collect();
    let Ok(mut conn) = api.connect(Duration::from_secs(20)) else {
        return WriterReport {
            keys,
            acked,
            unexpected,
        };
    };
    let base = "/api/v1/namespaces/default/configmaps";
    // Unique across rounds too: an update that changes nothing is not written (upstream answers
    // it with the object as stored, under its old resourceVersion).
    let mut n = round << 32;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let name = &names[rng.below(names.len() as u64) as usize];
        let live = keys[name].live;
        let (op, reply) = match live {
            None => (
                Op::Create,
                conn.request("POST", base, Some(&body(name, None, n))),
            ),
            Some(rv) if rng.below(10) < 6 => (
                Op::Update,
                conn.request(
                    "PUT",
                    &format!("{base}/{name}"),
                    Some(&body(name, Some(rv), n)),
                ),
            ),
            Some(_) => (
                Op::Delete,
                conn.request("DELETE", &format!("{base}/{name}"), None),
            ),
        };
        let key = keys.get_mut(name).unwrap();
        match reply {
            Err(_) => {
                // The server died with this write in flight.
                key.in_flight = Some(op);
                break;
            }
            Ok(r) if r.code == 429 => thread::sleep(Duration::from_millis(20)),
            Ok(r) if (200..300).contains(&r.code) => {
                let rv = rv_of(&r.json());
                key.live = (op != Op::Delete).then_some(rv);
                acked.push((op, name.clone(), rv));
            }
            Ok(r) => unexpected.push(format!("{op:?} {name}: {} {}", r.code, r.body)),
        }
    }
    WriterReport {
        keys,
        acked,
        unexpected,
    }
}

/// `(type, name, resourceVersion)` of the events of a watch from `from`, until the stream
/// breaks (the server died) or `until` returns true for an event or `limit` passes.
fn watch(
    api: &Api,
    from: u64,
    limit: Duration,
    until: impl Fn(&str, u64) -> bool,
) -> Vec<(String, String, u64)> {
    let mut seen = Vec::new();
    let Ok(mut conn) = api.connect(Duration::from_secs(5)) else {
        return seen;
    };
    let path = format!(
        "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={from}&timeoutSeconds=300"
    );
    if conn.start_stream(&path).is_err() {
        return seen;
    }
    let began = Instant::now();
    while began.elapsed() < limit {
        let chunk = match conn.next_chunk() {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            Err(_) => break,
        };
        for line in chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(line).unwrap();
            let kind = v["type"].as_str().unwrap_or_default().to_string();
            assert_ne!(kind, "ERROR", "watch from {from} failed: {v}");
            let name = v["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let rv = rv_of(&v["object"]);
            let done = until(&name, rv);
            seen.push((kind, name, rv));
            if done {
                return seen;
            }
        }
    }
    seen
}

/// name → resourceVersion of the ConfigMaps in `default` and the list's resourceVersion.
fn list(api: &Api) -> (BTreeMap<String, u64>, u64) {
    let reply = api
        .request("GET", "/api/v1/namespaces/default/configmaps", None)
        .unwrap();
    assert_eq!(reply.code, 200, "{}", reply.body);
    let v = reply.json();
    let items = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["metadata"]["name"].as_str().unwrap().to_string(),
                rv_of(i),
            )
        })
        .collect();
    (items, rv_of(&v))
}

#[test]
fn acknowledged_writes_and_watch_history_survive_repeated_sigkill_under_load() {
    let seed = env_u64("TANDEM_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let iterations = env_u64("TANDEM_CRASH_ITERATIONS").unwrap_or(8);
    let budget = Duration::from_secs(env_u64("TANDEM_CRASH_SECONDS").unwrap_or(90));
    println!("crash loop seed {seed} (TANDEM_CRASH_SEED={seed} replays it)");
    let mut rng = Rng(seed);
    let mut s = Server::start();
    let began = Instant::now();
    let mut keys: Vec<BTreeMap<String, Key>> = (0..WRITERS)
        .map(|w| {
            (0..KEYS_PER_WRITER)
                .map(|k| (format!("w{w}-k{k}"), Key::default()))
                .collect()
        })
        .collect();
    let (mut runs, mut checked, mut resumed_events) = (0u64, 0, 0);
    while runs < iterations && began.elapsed() < budget {
        runs += 1;
        let api = Api::new(&s.data_dir(), &s.url()).unwrap();
        let (start_state, start_rv) = list(&api);

        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let api = api.clone();
            thread::spawn(move || watch(&api, start_rv, Duration::from_secs(30), |_, _| false))
        };
        let writers: Vec<_> = keys
            .iter()
            .map(|k| {
                let (api, k, stop, seed) = (api.clone(), k.clone(), stop.clone(), rng.next());
                thread::spawn(move || write_load(api, k, seed, runs, stop))
            })
            .collect();
        thread::sleep(Duration::from_millis(300 + rng.below(1200)));
        s.kill9();
        stop.store(true, Ordering::SeqCst);
        let reports: Vec<WriterReport> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        let before_crash = watcher.join().unwrap();
        s.restart();
        let api = Api::new(&s.data_dir(), &s.url()).unwrap();

        // Every acknowledged write is there.
        let (after, _) = list(&api);
        for report in &reports {
            assert!(
                report.unexpected.is_empty(),
                "seed {seed}: unexpected answers: {:?}",
                report.unexpected
            );
            checked += report.acked.len();
            for (name, key) in &report.keys {
                let now = after.get(name).copied();
                let ok = match (key.live, key.in_flight) {
                    (live, None) => now == live,
                    (None, Some(_)) => true,
                    (Some(rv), Some(Op::Update)) => now.is_some_and(|n| n >= rv),
                    (Some(rv), Some(_)) => now.is_none() || now == Some(rv),
                };
                assert!(
                    ok,
                    "seed {seed}, iteration {runs}: {name} acknowledged as {:?} (in flight: {:?}) but is {now:?}",
                    key.live, key.in_flight
                );
            }
        }

        // A watch resumed from the last resourceVersion seen continues the history exactly.
        let last_seen = before_crash.last().map_or(start_rv, |e| e.2);
        let marker = format!("marker-{runs}");
        let reply = api
            .request(
                "POST",
                "/api/v1/namespaces/default/configmaps",
                Some(&body(&marker, None, 0)),
            )
            .unwrap();
        assert_eq!(reply.code, 201, "{}", reply.body);
        let marker_rv = rv_of(&reply.json());
        let resumed = watch(&api, last_seen, Duration::from_secs(30), |name, rv| {
            name == marker && rv == marker_rv
        });
        assert!(
            resumed.last().is_some_and(|e| e.1 == marker),
            "seed {seed}, iteration {runs}: the resumed watch from {last_seen} did not reach the marker: {resumed:?}"
        );
        resumed_events += resumed.len();
        let history: Vec<&(String, String, u64)> =
            before_crash.iter().chain(resumed.iter()).collect();
        for pair in history.windows(2) {
            assert!(
                pair[0].2 < pair[1].2,
                "seed {seed}, iteration {runs}: resourceVersion {} after {} (duplicate or out of order)",
                pair[1].2,
                pair[0].2
            );
        }
        let mut replayed = start_state.clone();
        for (kind, name, rv) in &history {
            match kind.as_str() {
                "DELETED" => {
                    replayed.remove(name);
                }
                _ => {
                    replayed.insert(name.clone(), *rv);
                }
            }
        }
        let (listed, _) = list(&api);
        let ours = |m: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
            m.iter()
                .filter(|(k, _)| k.starts_with('w') || k.starts_with("marker-"))
                .map(|(k, v)| (k.clone(), *v))
                .collect()
        };
        assert_eq!(
            ours(&replayed),
            ours(&listed),
            "seed {seed}, iteration {runs}: the watch history does not add up to the stored state"
        );
        let watched: std::collections::BTreeSet<u64> = history.iter().map(|e| e.2).collect();
        for report in &reports {
            for (op, name, rv) in &report.acked {
                if *op != Op::Delete {
                    assert!(
                        watched.contains(rv),
                        "seed {seed}, iteration {runs}: acknowledged {op:?} of {name}@{rv} never reached the watch"
                    );
                }
            }
        }

        // The next round starts from what is stored.
        for (name, key) in keys.iter_mut().flat_map(|k| k.iter_mut()) {
            *key = Key {
                live: listed.get(name).copied(),
                in_flight: None,
            };
        }
    }
    println!(
        "crash loop: {runs} iterations (SIGKILL + restart), {checked} acknowledged writes checked, 0 lost, {resumed_events} events on resumed watches, in {:?}",
        began.elapsed()
    );
    assert!(runs >= 1);
}
