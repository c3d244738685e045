//! Property tests of everything the API server decodes from a request before any handler runs:
//! the body (`decode_body`: JSON, YAML, and the protobuf envelope and messages, as upstream's
//! `runtime.Decoder`s read them), the `Accept` header (content negotiation), the query string
//! and its percent-escapes, the resource path (`RequestInfoFactory.NewRequestInfo`), and the
//! `continue` token of a paginated list.
//!
//! No input may panic or exhaust the stack; a body that does not decode is a 4xx `ApiError`
//! (400, or 415 for a media type or kind that has no decoder). Protobuf bodies are also mutated
//! from valid encodings of real objects (bit flips, truncation, spliced bytes), the way a
//! coverage-guided fuzzer's corpus would start. Inputs that once failed are kept as regressions.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

#[path = "../../core/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use tandem_apiserver::output::negotiate;
use tandem_apiserver::protobuf;
use tandem_apiserver::request::{Query, parse_resource_path, percent_decode};
use tandem_apiserver::rest::{Continue, decode_body};

use fuzz_support::{ensure, hostile_text, property, regressions};

const LIMIT: Duration = Duration::from_secs(40);

const CONTENT_TYPES: &[&str] = &[
    "application/json",
    "application/json; charset=utf-8",
    "application/yaml",
    "application/apply-patch+yaml",
    "text/yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/vnd.kubernetes.protobuf",
    "*/*",
    "",
    "text/plain",
    "application/JSON",
];

fn body_decodes_or_is_refused(
    body: &[u8],
    content_type: Option<&str>,
) -> Result<(), TestCaseError> {
    match decode_body(body, content_type) {
        Ok(_) => Ok(()),
        Err(e) => ensure(matches!(e.code, 400 | 415), || {
            format!("{content_type:?} body {body:?}: answered {e}")
        }),
    }
}

/// Bodies in each format: arbitrary bytes, JSON/YAML-looking text, and deep nesting.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..96),
        hostile_text(24).prop_map(String::into_bytes),
        proptest::collection::vec(
            proptest::sample::select(vec![
                "{",
                "}",
                "[",
                "]",
                ":",
                ",",
                "\"a\"",
                "\"apiVersion\"",
                "\"v1\"",
                "1",
                "-0",
                "1e999",
                "null",
                "true",
                " ",
                "\n",
                "- ",
                "&a ",
                "*a",
                "!!binary ",
                "<<: ",
                "? ",
                "---\n",
                "...\n",
                "%YAML 1.2\n",
                "\"\\ud800\"",
                "\\",
                "'",
                "|\n",
                ">\n",
                "\t",
                "#",
                "@",
                "`",
                "\u{feff}",
            ]),
            0..24,
        )
        .prop_map(|p| p.concat().into_bytes()),
        (1usize..5000, any::<bool>()).prop_map(|(n, array)| {
            let (open, close) = if array { ("[", "]") } else { ("{\"a\":", "}") };
            format!("{}1{}", open.repeat(n), close.repeat(n)).into_bytes()
        }),
    ]
}

/// Inputs that once failed.
fn body_regressions() -> Vec<(Vec<u8>, &'static str)> {
    vec![
        (b"[".repeat(100_000), "application/json"),
        (b"- ".repeat(20_000), "application/yaml"),
        (b"a: &a [*a, *a, *a, *a, *a, *a, *a, *a, *a]".to_vec(), "application/yaml"),
        (
            b"a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: [*f,*f,*f,*f,*f,*f,*f,*f,*f]".to_vec(),
            "application/yaml",
        ),
        (b"!!binary AAAA".to_vec(), "application/yaml"),
        (b"k8s\0".to_vec(), "application/vnd.kubernetes.protobuf"),
        (b"k8s\0\x0a\xff\xff\xff\xff\x0f".to_vec(), "application/vnd.kubernetes.protobuf"),
        (nested_controller_revisions(20_000), "application/vnd.kubernetes.protobuf"),
    ]
}

#[test]
fn body_regressions_are_refused_cleanly() {
    regressions("body", LIMIT, body_regressions(), |(body, ct)| {
        body_decodes_or_is_refused(body, Some(ct)).unwrap()
    });
}

#[test]
fn request_bodies_in_any_content_type_decode_or_are_refused_with_4xx() {
    let input = (
        body(),
        proptest::option::of(proptest::sample::select(CONTENT_TYPES)),
    );
    property("decode-body", 1000, LIMIT, input, |(body, ct)| {
        body_decodes_or_is_refused(&body, ct)
    });
}

// ---------------------------------------------------------------------------------------------
// Protobuf.

/// Valid protobuf bodies of objects of several kinds, the seeds of the mutations.
fn protobuf_seeds() -> Vec<Vec<u8>> {
    let objects = [
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "default", "labels": {"a": "b"},
                            "creationTimestamp": "2024-01-01T00:00:00Z"},
               "spec": {"containers": [{"name": "c", "image": "nginx",
                        "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                        "ports": [{"containerPort": 80}]}],
                        "activeDeadlineSeconds": 30}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
               "data": {"k": "v"}, "binaryData": {"b": "AAEC"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                        "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                        "template": {"metadata": {"labels": {"a": "b"}},
                                     "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
        json!({"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": "r"},
               "data": {"spec": {"x": 1}}, "revision": 3}),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "foos.example.com"},
               "spec": {"group": "example.com", "scope": "Namespaced",
                        "names": {"plural": "foos", "kind": "Foo"},
                        "versions": [{"name": "v1", "served": true, "storage": true,
                            "schema": {"openAPIV3Schema": {"type": "object",
                                "properties": {"spec": {"type": "object",
                                    "x-kubernetes-preserve-unknown-fields": true,
                                    "properties": {"n": {"type": "integer", "default": 3}}}}}}}]}}),
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
               "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {
                   "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
               "spec": {"ports": [{"port": 80, "targetPort": "http"}], "selector": {"a": "b"}}}),
    ];
    objects
        .iter()
        .map(|o| protobuf::encode(o).unwrap().unwrap())
        .collect()
}

/// One mutation of a seed.
#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Set { at: usize, byte: u8 },
    Truncate { at: usize },
    Insert { at: usize, bytes: Vec<u8> },
    Remove { at: usize, len: usize },
    Duplicate { from: usize, len: usize, at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<usize>();
    prop_oneof![
        (at, 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (
            at,
            prop_oneof![Just(0u8), Just(0xff), Just(0x80), Just(0x7f), any::<u8>()]
        )
            .prop_map(|(at, byte)| Mutation::Set { at, byte }),
        at.prop_map(|at| Mutation::Truncate { at }),
        (at, proptest::collection::vec(any::<u8>(), 1..12))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (at, 1usize..16).prop_map(|(at, len)| Mutation::Remove { at, len }),
        (at, 1usize..64, at).prop_map(|(from, len, at)| Mutation::Duplicate { from, len, at }),
    ]
}

fn mutate(seed: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for m in mutations {
        if b.is_empty() {
            break;
        }
        let n = b.len();
        match m {
            Mutation::Flip { at, bit } => b[at % n] ^= 1 << bit,
            Mutation::Set { at, byte } => b[at % n] = *byte,
            Mutation::Truncate { at } => b.truncate(at % n),
            Mutation::Insert { at, bytes } => {
                let at = at % n;
                b.splice(at..at, bytes.iter().copied());
            }
            Mutation::Remove { at, len } => {
                let at = at % n;
                b.drain(at..(at + len).min(n));
            }
            Mutation::Duplicate { from, len, at } => {
                let from = from % n;
                let piece = b[from..(from + len).min(n)].to_vec();
                let at = at % n;
                b.splice(at..at, piece);
            }
        }
    }
    b
}

#[test]
fn valid_protobuf_seeds_decode() {
    for seed in protobuf_seeds() {
        let decoded = decode_body(&seed, Some(protobuf::MEDIA_TYPE));
        assert!(decoded.is_ok(), "{decoded:?}");
    }
}

#[test]
fn mutated_protobuf_bodies_decode_or_are_refused_with_4xx() {
    let seeds = protobuf_seeds();
    let count = seeds.len();
    let input = (0..count, proptest::collection::vec(mutation(), 1..6));
    property(
        "protobuf-mutations",
        3000,
        LIMIT,
        input,
        move |(i, mutations)| {
            let body = mutate(&seeds[i], &mutations);
            body_decodes_or_is_refused(&body, Some(protobuf::MEDIA_TYPE))?;
            // A decoded object encodes again (or has no protobuf form) without panicking.
            if let Ok(v) = protobuf::decode(&body) {
                let _ = protobuf::encode(&v);
            }
            Ok(())
        },
    );
}

/// Appends `value` as a protobuf varint to `out`.
fn varint(mut value: usize, out: &mut Vec<u8>) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A ControllerRevision whose `data` (a `RawExtension`) holds the protobuf envelope of another
/// ControllerRevision, `depth` times over. Built back to front so it costs linear time.
fn nested_controller_revisions(depth: usize) -> Vec<u8> {
    let mut type_meta = Vec::new();
    for (tag, text) in [(0x0a, "apps/v1"), (0x12, "ControllerRevision")] {
        type_meta.push(tag);
        varint(text.len(), &mut type_meta);
        type_meta.extend_from_slice(text.as_bytes());
    }
    // `rev` holds the message reversed; `prepend` puts bytes in front of it.
    let mut rev: Vec<u8> = Vec::new();
    let prepend = |rev: &mut Vec<u8>, bytes: &[u8]| rev.extend(bytes.iter().rev());
    let field = |rev: &mut Vec<u8>, tag: u8| {
        let mut head = vec![tag];
        varint(rev.len(), &mut head);
        prepend(rev, &head);
    };
    for _ in 0..depth {
        // Unknown{typeMeta: 1, raw: 2} behind the magic, in RawExtension{raw: 1}, in
        // ControllerRevision{data: 2}.
        field(&mut rev, 0x12);
        let mut tm = vec![0x0a];
        varint(type_meta.len(), &mut tm);
        tm.extend_from_slice(&type_meta);
        prepend(&mut rev, &tm);
        prepend(&mut rev, b"k8s\0");
        field(&mut rev, 0x0a);
        field(&mut rev, 0x12);
    }
    let mut body = b"k8s\0".to_vec();
    let mut tm = vec![0x0a];
    varint(type_meta.len(), &mut tm);
    tm.extend_from_slice(&type_meta);
    body.extend_from_slice(&tm);
    body.push(0x12);
    varint(rev.len(), &mut body);
    body.extend(rev.iter().rev());
    body
}

#[test]
fn objects_nested_in_raw_extensions_cannot_exhaust_a_worker_stack() {
    // The API server decodes on tokio worker threads (2 MiB stacks): embedding an object in a
    // RawExtension over and over must hit the depth limit, not the end of the stack (which
    // aborts the whole process).
    let shallow = nested_controller_revisions(3);
    assert!(decode_body(&shallow, Some(protobuf::MEDIA_TYPE)).is_ok());
    let body = nested_controller_revisions(20_000);
    let outcome = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || decode_body(&body, Some(protobuf::MEDIA_TYPE)).map(|_| ()))
        .unwrap()
        .join()
        .unwrap();
    let err = outcome.unwrap_err();
    assert_eq!(err.code, 400, "{err}");
    assert!(err.message.contains("nests too deeply"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Headers, query strings, paths and continue tokens.

#[test]
fn accept_headers_never_panic() {
    let accept = prop_oneof![
        hostile_text(24),
        proptest::collection::vec(
            proptest::sample::select(vec![
                "application/json",
                "application/yaml",
                "application/vnd.kubernetes.protobuf",
                "*/*",
                "application/*",
                ";as=Table",
                ";as=PartialObjectMetadataList",
                ";g=meta.k8s.io",
                ";v=v1",
                ";v=v1beta1",
                ";q=0.9",
                ";stream=watch",
                ",",
                " ",
                ";",
                "=",
                "as=",
            ]),
            0..10,
        )
        .prop_map(|p| p.concat()),
    ];
    property("accept", 3000, LIMIT, accept, |accept| {
        let _ = negotiate(Some(&accept));
        Ok(())
    });
}

#[test]
fn query_strings_and_paths_never_panic() {
    let methods = [
        "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "WATCH",
    ];
    let path = prop_oneof![
        hostile_text(24).prop_map(|s| format!("/{s}")),
        proptest::collection::vec(
            proptest::sample::select(vec![
                "api",
                "apis",
                "v1",
                "apps",
                "namespaces",
                "default",
                "pods",
                "p",
                "status",
                "watch",
                "proxy",
                "scale",
                "%",
                "%2F",
                "%zz",
                "%e2%82",
                "..",
                ".",
                "",
                "日本",
                "nodes",
                "n1",
                "finalize",
            ]),
            0..8,
        )
        .prop_map(|s| format!("/{}", s.join("/"))),
    ];
    let query = prop_oneof![
        hostile_text(24),
        proptest::collection::vec(
            (
                proptest::sample::select(vec![
                    "watch",
                    "limit",
                    "continue",
                    "labelSelector",
                    "fieldSelector",
                    "resourceVersion",
                    "timeoutSeconds",
                    "dryRun",
                    "fieldManager",
                    "%",
                    "",
                ]),
                hostile_text(6),
            ),
            0..5,
        )
        .prop_map(|kv| {
            kv.into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("&")
        }),
    ];
    let input = (0..methods.len(), path, query);
    property(
        "request-line",
        2000,
        LIMIT,
        input,
        move |(m, path, query)| {
            let _ = percent_decode(&path);
            let q = Query::parse(Some(&query));
            for key in ["limit", "timeoutSeconds", "watch"] {
                let _ = q.int(key);
                let _ = q.bool(key);
            }
            let method = http::Method::from_bytes(methods[m].as_bytes()).unwrap();
            let _ = parse_resource_path(&method, &path, &q);
            Ok(())
        },
    );
}

#[test]
fn continue_tokens_decode_or_are_refused_with_400() {
    let token = prop_oneof![
        hostile_text(32),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(|raw| {
            use base64::Engine as _;
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
        }),
        (any::<i64>(), hostile_text(6), any::<bool>()).prop_map(|(rv, start, pad)| {
            use base64::Engine as _;
            let raw = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).to_string();
            let mut t = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
            if pad {
                t.push_str("==");
            }
            t
        }),
    ];
    property(
        "continue",
        2000,
        LIMIT,
        token,
        |token| match Continue::decode(&token) {
            Ok(c) => {
                let again = Continue::decode(&c.encode());
                ensure(again.as_ref().ok() == Some(&c), || {
                    format!("{token:?} decodes to {c:?}, which does not round-trip: {again:?}")
                })
            }
            Err(e) => ensure(e.code == 400, || format!("{token:?}: {e}")),
        },
    );
    let _: Value = json!(null);
}

// ---------------------------------------------------------------------------------------------
// What nodes and clients send besides bodies: the kubelet's metrics text and bearer tokens.

#[test]
fn kubelet_metrics_text_parses_or_is_refused() {
    let line = prop_oneof![
        hostile_text(24),
        proptest::collection::vec(
            proptest::sample::select(vec![
                "node_cpu_usage_seconds_total",
                "container_memory_working_set_bytes",
                "{",
                "}",
                "container=\"a\"",
                ",",
                "pod=\"p\"",
                "namespace=\"n\"",
                "=",
                "\"",
                "\\\"",
                "\\",
                " ",
                "1",
                "1.5e3",
                "NaN",
                "+Inf",
                "-Inf",
                "1700000000000",
                "# HELP x",
                "# TYPE x counter",
                "#",
                "\t",
                "-",
                "9223372036854775808",
            ]),
            0..12,
        )
        .prop_map(|p| p.concat()),
    ];
    let body = proptest::collection::vec(line, 0..6).prop_map(|l| l.join("\n"));
    property("metrics-text", 2000, LIMIT, body, |body| {
        let _ = tandem_apiserver::metrics_api::text::parse(&body);
        Ok(())
    });
}

#[test]
fn bearer_tokens_of_any_shape_are_refused_without_panicking() {
    use tandem_apiserver::auth::sa_token::TokenIssuer;
    let key = rcgen::KeyPair::generate().unwrap();
    let issuer =
        TokenIssuer::from_key(&key, "https://kubernetes.default.svc.cluster.local").unwrap();
    let segment = || {
        prop_oneof![
            hostile_text(12),
            proptest::collection::vec(any::<u8>(), 0..48).prop_map(|raw| {
                use base64::Engine as _;
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
            }),
            Just("eyJhbGciOiJFUzI1NiIsImtpZCI6IngifQ".to_string()),
            Just("eyJhbGciOiJub25lIn0".to_string()),
        ]
    };
    let token = (segment(), segment(), segment()).prop_map(|(h, c, s)| format!("{h}.{c}.{s}"));
    property("bearer-token", 1000, LIMIT, token, move |token| {
        ensure(issuer.verify(&token, &[], 1_700_000_000).is_err(), || {
            format!("forged token {token:?} was accepted")
        })
    });
}
