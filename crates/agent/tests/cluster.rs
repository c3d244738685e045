//! Three node agents (Linux, Windows Server 2019, Windows Server 2022) against an in-process API
//! server on an ephemeral port, driven with kube-rs.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use tandem_agent::{NodeConfig, default_nodes};
use tandem_test_support::{TestServer, eventually};

fn pod(name: &str, node: &str, os: &str, image: &str, annotations: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"nodeName": node, "os": {"name": os}, "terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "app", "image": image}]}
    }))
    .expect("pod fixture")
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn waiting(p: &Pod) -> Option<(String, String)> {
    let w = p
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .clone()?;
    Some((w.reason.unwrap_or_default(), w.message.unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_cluster_nodes_and_pods_behave_like_kubelets() {
    let ts = TestServer::start().await.expect("server");
    let client = ts.client.clone();
    let nodes: Vec<NodeConfig> = default_nodes()
        .into_iter()
        .map(|mut n| {
            n.image_bandwidth = 10_000_000_000; // keep the emulated pulls short in a test
            n.timing.node_status_update_frequency = Duration::from_secs(1);
            n.state_dir = Some(ts.data_dir.join("agents").join(&n.name));
            n
        })
        .collect();
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    assert_eq!(names, ["linux-1", "windows-2019-1", "windows-2022-1"]);
    let mut agents = Vec::new();
    for n in nodes {
        let c = client.clone();
        agents.push(tokio::spawn(async move { tandem_agent::run(c, n).await }));
    }

    // Nodes are registered Ready with the kubelet's labels, nodeInfo and allocatable.
    let node_api: Api<Node> = Api::all(client.clone());
    for name in &names {
        let n = eventually(20, "node Ready", || async {
            let n = node_api.get_opt(name).await.ok().flatten()?;
            let ready = n
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(n)
        })
        .await;
        let labels = n.metadata.labels.clone().unwrap_or_default();
        let info = n
            .status
            .as_ref()
            .and_then(|s| s.node_info.clone())
            .expect("nodeInfo");
        assert_eq!(labels.get("kubernetes.io/hostname"), Some(name));
        assert!(
            info.container_runtime_version
                .starts_with("emulated://tandem-")
        );
        assert_eq!(info.kubelet_version, "v1.33.0");
        let conditions: Vec<String> = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.type_)
            .collect();
        let alloc = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.clone())
            .expect("allocatable");
        match name.as_str() {
            "linux-1" => {
                assert_eq!(
                    labels.get("kubernetes.io/os").map(String::as_str),
                    Some("linux")
                );
                assert!(conditions.contains(&"PIDPressure".to_string()));
            }
            "windows-2019-1" => {
                assert_eq!(
                    labels.get("kubernetes.io/os").map(String::as_str),
                    Some("windows")
                );
                assert_eq!(
                    labels
                        .get("node.kubernetes.io/windows-build")
                        .map(String::as_str),
                    Some("10.0.17763")
                );
                assert_eq!(info.os_image, "Windows Server 2019 Datacenter");
                assert_eq!(info.kernel_version, "10.0.17763.5820");
                assert!(!conditions.contains(&"PIDPressure".to_string()));
                // 16Gi − 2Gi system-reserved − 500Mi eviction
                assert_eq!(
                    alloc["memory"].0,
                    format!("{}Ki", (16 * 1024 - 2048 - 500) * 1024)
                );
            }
            _ => {
                assert_eq!(
                    labels
                        .get("node.kubernetes.io/windows-build")
                        .map(String::as_str),
                    Some("10.0.20348")
                );
                assert_eq!(info.os_image, "Windows Server 2022 Datacenter");
            }
        }
    }
    // Leases are held by their nodes.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    for name in &names {
        let l = eventually(10, "lease", || async {
            leases.get_opt(name).await.ok().flatten()
        })
        .await;
        let spec = l.spec.expect("lease spec");
        assert_eq!(spec.holder_identity.as_deref(), Some(name.as_str()));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert!(spec.renew_time.is_some());
    }

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    let ltsc2019 = "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019";
    pods.create(
        &pp,
        &pod(
            "iis-2019",
            "windows-2019-1",
            "windows",
            ltsc2019,
            serde_json::json!({}),
        ),
    )
    .await
    .expect("create");
    pods.create(
        &pp,
        &pod(
            "iis-on-2022",
            "windows-2022-1",
            "windows",
            ltsc2019,
            serde_json::json!({}),
        ),
    )
    .await
    .expect("create");
    pods.create(
        &pp,
        &pod(
            "linux-on-windows",
            "windows-2019-1",
            "linux",
            "nginx:1.27",
            serde_json::json!({}),
        ),
    )
    .await
    .expect("create");
    let slow = serde_json::json!({"emulated.tandem.dev/readiness": "pass-after:3s"});
    pods.create(
        &pp,
        &pod("slow-ready", "linux-1", "linux", "nginx:1.27", slow),
    )
    .await
    .expect("create");

    // The ltsc2019 pod runs and becomes Ready on the 2019 node, with a pod IP from its CIDR.
    let p = eventually(20, "iis-2019 Running and Ready", || async {
        let p = pods.get("iis-2019").await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running") && ready(&p)).then_some(p)
    })
    .await;
    let st = p.status.expect("status");
    assert!(
        st.pod_ip
            .as_deref()
            .is_some_and(|ip| ip.starts_with("10.244.")),
        "{:?}",
        st.pod_ip
    );
    let cs = st
        .container_statuses
        .and_then(|v| v.first().cloned())
        .expect("container status");
    assert!(
        cs.container_id
            .as_deref()
            .is_some_and(|id| id.starts_with("emulated://"))
    );

    // The same image on the 2022 node waits with the OS mismatch.
    let (reason, message) = eventually(20, "OS mismatch waiting reason", || async {
        waiting(&pods.get("iis-on-2022").await.ok()?).filter(|(r, _)| r == "CreateContainerError")
    })
    .await;
    assert_eq!(
        message,
        "The operating system of the container does not match the operating system of the host.",
        "{reason}"
    );

    // A Linux pod bound to a Windows node is rejected.
    let st = eventually(20, "PodOSNotSupported", || async {
        let p = pods.get("linux-on-windows").await.ok()?;
        p.status.filter(|s| s.phase.as_deref() == Some("Failed"))
    })
    .await;
    assert_eq!(st.reason.as_deref(), Some("PodOSNotSupported"));
    assert!(
        st.message
            .as_deref()
            .is_some_and(|m| m.starts_with("Pod was rejected: ")),
        "{:?}",
        st.message
    );

    // Readiness comes only after the emulated 3 s delay.
    let running_at = eventually(20, "slow-ready Running", || async {
        let p = pods.get("slow-ready").await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running")).then(tokio::time::Instant::now)
    })
    .await;
    assert!(
        !ready(&pods.get("slow-ready").await.expect("get")),
        "not ready before its readiness delay"
    );
    eventually(20, "slow-ready Ready", || async {
        ready(&pods.get("slow-ready").await.ok()?).then_some(())
    })
    .await;
    assert!(
        running_at.elapsed() >= Duration::from_secs(2),
        "ready too early: {:?}",
        running_at.elapsed()
    );

    // Deleting terminates gracefully (Killing event) and the agent removes the pod.
    pods.delete("iis-2019", &DeleteParams::default())
        .await
        .expect("delete");
    eventually(20, "iis-2019 removed", || async {
        pods.get_opt("iis-2019").await.ok()?.is_none().then_some(())
    })
    .await;
    // The agent writes events in the background, as the kubelet's recorder does, so the
    // Killing event may land after the pod is gone: wait for it, then check them all.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let reasons_now = || async {
        let evs = events.list(&Default::default()).await.expect("events");
        evs.items
            .iter()
            .filter(|e| e.involved_object.name.as_deref() == Some("iis-2019"))
            .map(|e| {
                (
                    e.reason.clone().unwrap_or_default(),
                    e.source
                        .as_ref()
                        .and_then(|s| s.component.clone())
                        .unwrap_or_default(),
                )
            })
            .collect::<Vec<(String, String)>>()
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while !reasons_now().await.iter().any(|(r, _)| r == "Killing") {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let reasons = reasons_now().await;
    for r in ["Pulling", "Pulled", "Created", "Started", "Killing"] {
        assert!(
            reasons.iter().any(|(x, c)| x == r && c == "kubelet"),
            "missing {r} in {reasons:?}"
        );
    }

    for a in agents {
        a.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_restart_keeps_running_pods_and_reregisters() {
    let ts = TestServer::start().await.expect("server");
    let client = ts.client.clone();
    let mut cfg = NodeConfig::linux("linux-restart");
    cfg.pod_cidr = Some("10.244.9.0/24".into());
    cfg.state_dir = Some(ts.data_dir.join("agent"));
    let agent = tokio::spawn(tandem_agent::run(client.clone(), cfg.clone()));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod(
            "keeper",
            "linux-restart",
            "linux",
            "nginx:1.27",
            serde_json::json!({}),
        ),
    )
    .await
    .expect("create");
    let before = eventually(20, "keeper Running", || async {
        let p = pods.get("keeper").await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running") && ready(&p)).then_some(p)
    })
    .await;
    agent.abort();
    let _ = agent.await;
    let agent = tokio::spawn(tandem_agent::run(client.clone(), cfg));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = pods.get("keeper").await.expect("get");
    let id = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|v| v.first())
            .map(|c| (c.container_id.clone(), c.restart_count))
    };
    assert_eq!(id(&before), id(&after), "same container, no restart");
    assert!(ready(&after));
    assert_eq!(
        after.status.and_then(|s| s.pod_ip),
        before.status.and_then(|s| s.pod_ip)
    );
    agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_on_a_shared_pod_watch_run_and_delete_only_their_own_pods() {
    let ts = TestServer::start().await.expect("server");
    let client = ts.client.clone();
    let mut shared = tandem_agent::SharedPodWatch::new(client.clone());
    let mut agents = Vec::new();
    for (i, name) in ["shared-a", "shared-b"].into_iter().enumerate() {
        let mut cfg = NodeConfig::linux(name);
        cfg.pod_cidr = Some(format!("10.244.{}.0/24", 20 + i));
        cfg.streaming_port = None;
        cfg.timing.lease_renew_interval = Duration::from_millis(300);
        let feed = shared.subscribe(name);
        agents.push(tokio::spawn(tandem_agent::run_shared(
            client.clone(),
            cfg,
            feed,
        )));
    }
    let watch = shared.start();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, node) in [("on-a", "shared-a"), ("on-b", "shared-b")] {
        let p = pod(name, node, "linux", "nginx:1.27", serde_json::json!({}));
        pods.create(&PostParams::default(), &p)
            .await
            .expect("create");
    }
    for name in ["on-a", "on-b"] {
        let p = eventually(20, "pod Running", || async {
            let p = pods.get(name).await.ok()?;
            (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
        })
        .await;
        // Each pod got an address from its own node's CIDR: only that node's agent ran it.
        let (ip, host) = (
            p.status.as_ref().and_then(|s| s.pod_ip.clone()),
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
        );
        let want = if host.as_deref() == Some("shared-a") {
            "10.244.20."
        } else {
            "10.244.21."
        };
        assert!(ip.is_some_and(|ip| ip.starts_with(want)), "{name}: {p:?}");
    }
    // Graceful deletion reaches the right agent, which stops the pod and deletes it.
    pods.delete("on-b", &DeleteParams::default())
        .await
        .expect("delete");
    eventually(20, "on-b gone", || async {
        pods.get_opt("on-b").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(pods.get_opt("on-a").await.expect("get").is_some());
    // Leases keep being renewed (updates of the Lease last written, no read first).
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let renew = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone());
    let first = renew(&leases.get("shared-a").await.expect("lease"));
    eventually(10, "lease renewed", || async {
        let now = renew(&leases.get("shared-a").await.ok()?);
        (now.is_some() && now != first).then_some(())
    })
    .await;
    for a in agents {
        a.abort();
    }
    watch.abort();
}
