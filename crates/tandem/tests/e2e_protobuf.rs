//! End-to-end: the protobuf wire format (issue 17). kubectl's typed generators send protobuf
//! bodies; a kube-rs client lists and watches in protobuf and decodes with the `k8s-pb`
//! bindings; errors keep upstream's exact JSON text.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::time::Duration;

use common::Server;
use futures::AsyncReadExt;
use http_body_util::BodyExt;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::json;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A kube-rs client for `s`; call inside the runtime that will drive it.
async fn client(s: &Server) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(s.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// The object inside `k8s\0` + `runtime.Unknown`, with its kind.
fn unwrap_envelope(bytes: &[u8]) -> (String, Vec<u8>) {
    let rest = bytes
        .strip_prefix(b"k8s\0")
        .unwrap_or_else(|| panic!("no protobuf magic in {:?}", &bytes[..bytes.len().min(40)]));
    let u = Unknown::decode(rest).unwrap();
    (
        u.type_meta.and_then(|t| t.kind).unwrap_or_default(),
        u.raw.unwrap_or_default(),
    )
}

#[test]
fn kubectl_generators_send_protobuf_and_the_objects_are_upstreams() {
    let s = Server::start_up(None);
    for args in [
        vec!["create", "namespace", "pbx"],
        vec![
            "create",
            "deployment",
            "web",
            "--image=tandem.local/busybox:1",
            "--replicas=0",
            "-n",
            "pbx",
        ],
        vec![
            "create",
            "service",
            "clusterip",
            "websvc",
            "--tcp=80:8080",
            "-n",
            "pbx",
        ],
        vec![
            "create",
            "configmap",
            "cm1",
            "--from-literal=a=b",
            "-n",
            "pbx",
        ],
        vec![
            "create",
            "secret",
            "generic",
            "s1",
            "--from-literal=k=hello",
            "-n",
            "pbx",
        ],
        vec![
            "create",
            "job",
            "j1",
            "--image=tandem.local/busybox:1",
            "-n",
            "pbx",
        ],
        vec![
            "create",
            "cronjob",
            "cj1",
            "--image=tandem.local/busybox:1",
            "--schedule=*/5 * * * *",
            "-n",
            "pbx",
        ],
        vec![
            "create",
            "role",
            "r1",
            "--verb=get",
            "--resource=pods",
            "-n",
            "pbx",
        ],
        vec![
            "create",
            "rolebinding",
            "rb1",
            "--role=r1",
            "--user=jane",
            "-n",
            "pbx",
        ],
        vec![
            "create",
            "clusterrole",
            "cr1",
            "--verb=list",
            "--resource=nodes",
        ],
        vec![
            "create",
            "clusterrolebinding",
            "crb1",
            "--clusterrole=cr1",
            "--group=auditors",
        ],
        vec!["create", "quota", "q1", "--hard=pods=10,cpu=2", "-n", "pbx"],
        vec!["create", "serviceaccount", "sa1", "-n", "pbx"],
    ] {
        let out = s.kubectl(&args);
        assert!(out.success(), "kubectl {args:?}: {}", out.combined());
        assert!(
            out.stdout.contains("created"),
            "kubectl {args:?}: {}",
            out.combined()
        );
    }
    // kubectl really sent protobuf: its verbose log names the content type.
    let out = s.kubectl(&["create", "configmap", "cm2", "-n", "pbx", "-v=8"]);
    assert!(out.success(), "{}", out.combined());
    assert!(
        out.stderr
            .contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "kubectl's request: {}",
        out.stderr
    );

    let d = s.get_json(&["deployment", "web", "-n", "pbx"]).unwrap();
    assert_eq!(d["spec"]["replicas"], 0, "replicas: 0 survives the wire");
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
    assert!(
        d["metadata"]["creationTimestamp"]
            .as_str()
            .is_some_and(|t| !t.starts_with("1970"))
    );
    let svc = s.get_json(&["service", "websvc", "-n", "pbx"]).unwrap();
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    assert!(svc["spec"]["ports"][0].get("nodePort").is_none(), "{svc}");
    assert!(svc["spec"].get("healthCheckNodePort").is_none(), "{svc}");
    let secret = s.get_json(&["secret", "s1", "-n", "pbx"]).unwrap();
    assert_eq!(secret["data"]["k"], "aGVsbG8=");
    let quota = s.get_json(&["quota", "q1", "-n", "pbx"]).unwrap();
    assert_eq!(quota["spec"]["hard"], json!({"pods": "10", "cpu": "2"}));
    let cj = s.get_json(&["cronjob", "cj1", "-n", "pbx"]).unwrap();
    assert_eq!(cj["spec"]["schedule"], "*/5 * * * *");
    let rb = s.get_json(&["rolebinding", "rb1", "-n", "pbx"]).unwrap();
    assert_eq!(rb["subjects"][0]["name"], "jane");

    // Deleting sends DeleteOptions in protobuf.
    let out = s.kubectl(&["delete", "configmap", "cm2", "-n", "pbx"]);
    assert!(
        out.success(),
        "a protobuf DeleteOptions body: {}",
        out.combined()
    );
    assert!(s.get_json(&["configmap", "cm2", "-n", "pbx"]).is_none());
}

#[test]
fn a_kube_client_lists_and_watches_in_protobuf() {
    let s = Server::start();
    s.create(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"first","namespace":"default"},"data":{"a":"1"}}"#);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = client(&s).await;
        // LIST
        let req = http::Request::get("/api/v1/namespaces/default/configmaps")
            .header("Accept", format!("{PROTOBUF}, application/json"))
            .body(Vec::new())
            .unwrap();
        let resp = client.send(req.map(Into::into)).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], PROTOBUF);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let (kind, raw) = unwrap_envelope(&body);
        assert_eq!(kind, "ConfigMapList");
        let list = core::ConfigMapList::decode(raw.as_slice()).unwrap();
        let rv = list.metadata.and_then(|m| m.resource_version).unwrap();
        let first = &list.items[0];
        assert_eq!(first.metadata.as_ref().and_then(|m| m.name.as_deref()), Some("first"));
        assert_eq!(first.data.get("a").map(String::as_str), Some("1"));

        // GET of a missing object: a protobuf Status.
        let req = http::Request::get("/api/v1/namespaces/default/configmaps/nope")
            .header("Accept", PROTOBUF)
            .body(Vec::new())
            .unwrap();
        let resp = client.send(req.map(Into::into)).await.unwrap();
        assert_eq!(resp.status(), 404);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let (kind, raw) = unwrap_envelope(&body);
        assert_eq!(kind, "Status");
        let status = meta::Status::decode(raw.as_slice()).unwrap();
        assert_eq!(status.reason.as_deref(), Some("NotFound"));
        assert_eq!(status.code, Some(404));

        // WATCH from the list's revision: length-prefixed WatchEvents.
        let req = http::Request::get(format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"
        ))
        .header("Accept", PROTOBUF)
        .body(Vec::new())
        .unwrap();
        let mut stream = client.request_stream(req).await.unwrap();
        let created = s.create(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"second","namespace":"default"},"data":{"b":"2"}}"#);
        assert!(created.contains("second"), "{created}");
        let mut len = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(20), stream.read_exact(&mut len))
            .await
            .expect("a watch frame within 20 s")
            .unwrap();
        let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
        stream.read_exact(&mut frame).await.unwrap();
        let event = meta::WatchEvent::decode(frame.as_slice()).unwrap();
        assert_eq!(event.r#type.as_deref(), Some("ADDED"));
        let (kind, raw) = unwrap_envelope(&event.object.and_then(|o| o.raw).unwrap());
        assert_eq!(kind, "ConfigMap");
        let cm = core::ConfigMap::decode(raw.as_slice()).unwrap();
        assert_eq!(cm.metadata.and_then(|m| m.name).as_deref(), Some("second"));

        // A protobuf-only client of a kind with no protobuf form: 406.
        let req = http::Request::get("/apis/windows.k8s.io/v1/gmsacredentialspecs")
            .header("Accept", PROTOBUF)
            .body(Vec::new())
            .unwrap();
        let resp = client.send(req.map(Into::into)).await.unwrap();
        assert_eq!(resp.status(), 406);

        // Errors in JSON are written as upstream writes them, byte for byte.
        let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"first"}}"#;
        let req = http::Request::post("/api/v1/namespaces/default/configmaps")
            .header("Content-Type", "application/json")
            .body(body.to_vec())
            .unwrap();
        let resp = client.send(req.map(Into::into)).await.unwrap();
        assert_eq!(resp.status(), 409);
        let text = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            String::from_utf8_lossy(&text),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"configmaps \\\"first\\\" already exists\",\"reason\":\"AlreadyExists\",\"details\":{\"name\":\"first\",\"kind\":\"configmaps\"},\"code\":409}\n"
        );
    });
}
