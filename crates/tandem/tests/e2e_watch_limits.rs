//! End-to-end: the limits of a watch. A watcher that stops reading is cut off once its buffer
//! stays full (upstream's cacher stops an unresponsive `cacheWatcher` the same way) and resumes
//! from the last resourceVersion it saw without a gap or a duplicate; and a server that shuts down
//! (SIGTERM) ends every open watch with the chunked stream's terminating chunk, as
//! kube-apiserver's graceful shutdown does, so clients do not report `Response ended
//! prematurely`. Both read the raw HTTP/1.1 chunked framing.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;
mod raw_api;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::Server;
use raw_api::Api;

/// ConfigMaps written while the watcher does not read, and the size of each one's data: more
/// than the watcher's buffer and the socket buffers between it and the server can hold.
const WRITES: usize = 400;
const DATA_BYTES: usize = 64 * 1024;

/// The `(type, name, resourceVersion)` of each event line in `chunk`.
fn events(chunk: &[u8]) -> Vec<(String, String, u64)> {
    chunk
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_slice(l).unwrap();
            let meta = &v["object"]["metadata"];
            (
                v["type"].as_str().unwrap_or_default().to_string(),
                meta["name"].as_str().unwrap_or_default().to_string(),
                meta["resourceVersion"]
                    .as_str()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0),
            )
        })
        .collect()
}

fn list_rv(api: &Api) -> u64 {
    let reply = api
        .request("GET", "/api/v1/namespaces/default/configmaps", None)
        .unwrap();
    assert_eq!(reply.code, 200, "{}", reply.body);
    reply.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_watcher_that_stops_reading_is_cut_off_and_resumes_from_its_last_resource_version() {
    let s = Server::start();
    let api = Api::new(&s.data_dir(), &s.url()).unwrap();
    let start = list_rv(&api);
    let mut stalled = api.connect(Duration::from_secs(60)).unwrap();
    let code = stalled
        .start_stream(&format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={start}&timeoutSeconds=600"
        ))
        .unwrap();
    assert_eq!(code, 200);

    // The watcher reads nothing while the writes go in.
    let data = "x".repeat(DATA_BYTES);
    let mut writer = api.connect(Duration::from_secs(60)).unwrap();
    for i in 0..WRITES {
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("stall-{i:03}")},
            "data": {"blob": data},
        })
        .to_string();
        let reply = writer
            .request("POST", "/api/v1/namespaces/default/configmaps", Some(&body))
            .unwrap();
        assert_eq!(reply.code, 201, "{}", reply.body);
    }
    // Longer than the server waits for a blocked watcher (5 s).
    std::thread::sleep(Duration::from_secs(8));

    // Reading now drains what was buffered, then the stream ends properly: the watch was cut
    // off long before its 600 s timeout.
    let began = Instant::now();
    let mut seen = Vec::new();
    loop {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the stalled watch was not ended"
        );
        match stalled.next_chunk() {
            Ok(Some(chunk)) => seen.extend(events(&chunk)),
            Ok(None) => break,
            Err(e) => panic!("stream failed after {} events: {e}", seen.len()),
        }
    }
    assert!(
        seen.len() < WRITES,
        "the watcher got all {WRITES} events; it was never blocked"
    );
    let rvs: Vec<u64> = seen.iter().map(|e| e.2).collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "out of order: {rvs:?}");
    println!(
        "stalled watcher was cut off after {} of {WRITES} events",
        seen.len()
    );

    // A fresh watch from the last resourceVersion it saw brings exactly the rest.
    let last = rvs.last().copied().unwrap_or(start);
    let mut resumed = api.connect(Duration::from_secs(30)).unwrap();
    let code = resumed
        .start_stream(&format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={last}&timeoutSeconds=60"
        ))
        .unwrap();
    assert_eq!(code, 200);
    let mut names: Vec<String> = seen.iter().map(|e| e.1.clone()).collect();
    let mut prev = last;
    while names.len() < WRITES {
        let chunk = resumed
            .next_chunk()
            .unwrap()
            .expect("the resumed watch ended early");
        for (kind, name, rv) in events(&chunk) {
            assert_eq!(kind, "ADDED", "{name}");
            assert!(rv > prev, "resourceVersion {rv} after {prev}");
            prev = rv;
            names.push(name);
        }
    }
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), WRITES, "duplicates among the events");
    assert_eq!(names.len(), WRITES);
}

#[test]
fn server_shutdown_ends_open_watches_with_the_final_chunk() {
    let mut s = Server::start();
    let api = Api::new(&s.data_dir(), &s.url()).unwrap();
    let mut watches = Vec::new();
    for path in [
        // From the watch cache.
        "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=600",
        // Served from the store (events are not cached).
        "/api/v1/namespaces/default/events?watch=1&timeoutSeconds=600",
    ] {
        let mut conn = api.connect(Duration::from_secs(30)).unwrap();
        assert_eq!(conn.start_stream(path).unwrap(), 200);
        watches.push(conn);
    }
    let reader = std::thread::spawn(move || {
        watches
            .into_iter()
            .map(|mut conn| {
                loop {
                    match conn.next_chunk() {
                        Ok(Some(_)) => continue,
                        Ok(None) => break Ok(()),
                        Err(e) => break Err(e.to_string()),
                    }
                }
            })
            .collect::<Vec<_>>()
    });
    std::thread::sleep(Duration::from_millis(500));
    s.terminate();
    let ends = reader.join().unwrap();
    for end in ends {
        assert_eq!(
            end,
            Ok(()),
            "a watch stream did not end with its final chunk"
        );
    }
}
