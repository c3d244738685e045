//! Two API servers on one store (as several `tandem server`s on one etcd) creating Services at
//! the same time never give one ClusterIP or NodePort to two Services: each choice is claimed in
//! the store before the Service is written, and a choice the other server claimed first is made
//! again. Released claims (a deleted Service's) can be taken at once.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tandem_apiserver::ApiServer;
use tandem_store::Store;
use tandem_store::sqlite::{SqliteOptions, SqliteStore};
use tandem_test_support::{ServerOptions, start_at_with};

async fn server_on(store: Arc<dyn Store>, dir: &std::path::Path) -> (ApiServer, kube::Client) {
    let options = ServerOptions {
        store: Some(store),
        ..ServerOptions::default()
    };
    start_at_with(dir, options).await.unwrap()
}

fn service(name: &str, node_port: bool) -> Service {
    let mut s = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80}]},
    });
    if node_port {
        s["spec"]["type"] = json!("NodePort");
    }
    serde_json::from_value(s).unwrap()
}

async fn create_many(api: Api<Service>, prefix: &str, count: usize) -> Vec<Service> {
    let mut out = Vec::new();
    for i in 0..count {
        let created = api
            .create(
                &PostParams::default(),
                &service(&format!("{prefix}-{i}"), i % 2 == 0),
            )
            .await
            .unwrap();
        out.push(created);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_servers_on_one_store_never_share_an_address_or_a_port() {
    let (dir_a, dir_b, dir_store) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir_store.path().join("state.db"), SqliteOptions::default()).unwrap(),
    );
    let (_a, client_a) = server_on(store.clone(), dir_a.path()).await;
    let (_b, client_b) = server_on(store.clone(), dir_b.path()).await;
    let api_a: Api<Service> = Api::namespaced(client_a, "default");
    let api_b: Api<Service> = Api::namespaced(client_b, "default");

    let (from_a, from_b) = tokio::join!(
        create_many(api_a.clone(), "a", 40),
        create_many(api_b.clone(), "b", 40)
    );
    let mut ips = HashSet::new();
    let mut ports = HashSet::new();
    for s in from_a.iter().chain(&from_b) {
        let spec = s.spec.as_ref().unwrap();
        let ip = spec.cluster_ip.clone().unwrap();
        assert!(ips.insert(ip.clone()), "{ip} given twice");
        for p in spec.ports.iter().flatten() {
            if let Some(np) = p.node_port {
                assert!(ports.insert(np), "node port {np} given twice");
            }
        }
    }
    assert_eq!(ips.len(), 80);
    assert_eq!(ports.len(), 40);

    // A deleted Service's address is free again at once, through the other server too.
    let gone = from_a[3].spec.as_ref().unwrap().cluster_ip.clone().unwrap();
    api_a.delete("a-3", &DeleteParams::default()).await.unwrap();
    let mut again = service("again", false);
    again.spec.as_mut().unwrap().cluster_ip = Some(gone.clone());
    let created = api_b.create(&PostParams::default(), &again).await.unwrap();
    assert_eq!(created.spec.unwrap().cluster_ip, Some(gone.clone()));

    // An address another Service holds is refused with upstream's message, on either server.
    let held = from_b[5].spec.as_ref().unwrap().cluster_ip.clone().unwrap();
    let mut clash = service("clash", false);
    clash.spec.as_mut().unwrap().cluster_ip = Some(held.clone());
    let status = common::api_error(api_a.create(&PostParams::default(), &clash).await);
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains(&format!(
            "failed to allocate IP {held}: provided IP is already allocated"
        )),
        "{}",
        status.message
    );
    // The claims live outside `/registry/`: one per address and node port held.
    let claims = store.count("/tandem/serviceips/").await.unwrap();
    assert!(claims >= 80, "{claims} address claims");
    assert_eq!(
        store.count("/tandem/servicenodeports/").await.unwrap(),
        ports.len()
            - usize::from(from_a[3].spec.as_ref().unwrap().type_.as_deref() == Some("NodePort"))
    );
}
