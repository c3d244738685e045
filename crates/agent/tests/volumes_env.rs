//! Container environments and pod volumes resolved against an in-process API server, the way
//! the kubelet resolves them before it creates a container: ConfigMap/Secret references,
//! downward API values, hostPath and PVC volumes, subPath mounts, and the kubelet's error
//! messages for what is missing.

#![cfg(unix)]

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tandem_agent::Resources;
use tandem_agent::env::{self, EnvContext};
use tandem_agent::volumes::{self, HostMount};
use tandem_test_support::TestServer;

async fn create<K>(client: &Client, namespace: Option<&str>, obj: serde_json::Value) -> Result<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace.unwrap_or("default"));
    let obj: K = serde_json::from_value(obj)?;
    Ok(api.create(&PostParams::default(), &obj).await?)
}

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).expect("pod fixture")
}

fn ctx() -> EnvContext {
    EnvContext {
        pod_ip: Some("10.244.0.7".into()),
        pod_ips: vec!["10.244.0.7".into()],
        host_ip: Some("192.168.5.10".into()),
        host_ips: vec!["192.168.5.10".into()],
        node_name: "linux-1".into(),
        node_allocatable: Resources {
            cpu_millis: 4000,
            memory: 16 * 1024 * 1024 * 1024,
            ephemeral_storage: 100 * 1024 * 1024 * 1024,
            pods: 110,
        },
    }
}

fn container_of(p: &Pod) -> Container {
    p.spec.as_ref().expect("spec").containers[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_resolves_config_maps_secrets_fields_resources_and_services() {
    let ts = TestServer::start().await.expect("server");
    let client = ts.client.clone();
    create::<ConfigMap>(
        &client,
        None,
        serde_json::json!({"metadata": {"name": "app-config"},
            "data": {"LOG_LEVEL": "debug", "GREETING": "hello", "MODE": "from-cm"}}),
    )
    .await
    .expect("configmap");
    create::<Secret>(
        &client,
        None,
        serde_json::json!({"metadata": {"name": "app-secret"},
            "stringData": {"password": "s3cr3t!", "token": "abc"}}),
    )
    .await
    .expect("secret");
    let svc: Service = create(
        &client,
        None,
        serde_json::json!({"metadata": {"name": "db"},
            "spec": {"ports": [{"port": 5432, "name": "pg"}], "selector": {"app": "db"}}}),
    )
    .await
    .expect("service");
    let cluster_ip = svc
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("allocated cluster IP");

    let p = pod(serde_json::json!({
        "metadata": {"name": "web-0", "namespace": "default", "uid": "5f0c-uid",
                     "labels": {"app": "web"}, "annotations": {"team": "storefront"}},
        "spec": {"nodeName": "linux-1", "serviceAccountName": "web",
            "containers": [{"name": "app", "image": "busybox",
                "command": ["sh", "-c"],
                "args": ["echo $(GREETING) $(POD_NAME) $$(GREETING) $(UNSET)"],
                "resources": {"requests": {"cpu": "250m", "memory": "64Mi"},
                              "limits": {"memory": "256Mi"}},
                "envFrom": [
                    {"configMapRef": {"name": "app-config"}},
                    {"prefix": "SECRET_", "secretRef": {"name": "app-secret"}},
                    {"configMapRef": {"name": "absent", "optional": true}}],
                "env": [
                    {"name": "MODE", "value": "literal-wins"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['team']"}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
                    {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                    {"name": "HOST_IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIPs"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "POD_IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
                    {"name": "CPU_REQ_M", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
                    {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                    {"name": "MEM_LIMIT_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "MEM_REQ", "valueFrom": {"resourceFieldRef": {"containerName": "app", "resource": "requests.memory"}}},
                    {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "password"}}},
                    {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "LOG_LEVEL"}}},
                    {"name": "OPT_KEY", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "nope", "optional": true}}},
                    {"name": "OPT_CM", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k", "optional": true}}},
                    {"name": "OPT_SECRET", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": true}}},
                    {"name": "URL", "value": "http://$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)/$(POD_NAME)?l=$(LEVEL)&x=$$(LEVEL)&y=$(LATER)"},
                    {"name": "LATER", "value": "later"},
                    {"name": "EMPTY", "value": ""}
                ]}]}
    }));
    let c = container_of(&p);
    let vars = env::container_env(&client, &p, &c, &ctx())
        .await
        .expect("environment");
    let names: Vec<&str> = vars.iter().map(|(k, _)| k.as_str()).collect();
    let map: BTreeMap<&str, &str> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(map.len(), vars.len(), "names are unique: {names:?}");
    let get = |k: &str| map.get(k).copied();

    // envFrom, with prefix; `env` overrides in place.
    assert_eq!(get("LOG_LEVEL"), Some("debug"));
    assert_eq!(get("GREETING"), Some("hello"));
    assert_eq!(get("MODE"), Some("literal-wins"));
    assert_eq!(get("SECRET_password"), Some("s3cr3t!"));
    assert_eq!(get("SECRET_token"), Some("abc"));
    assert_eq!(&names[..3], ["GREETING", "LOG_LEVEL", "MODE"]);
    // Field references.
    assert_eq!(get("POD_NAME"), Some("web-0"));
    assert_eq!(get("POD_NS"), Some("default"));
    assert_eq!(get("POD_UID"), Some("5f0c-uid"));
    assert_eq!(get("APP"), Some("web"));
    assert_eq!(get("TEAM"), Some("storefront"));
    assert_eq!(get("NODE"), Some("linux-1"));
    assert_eq!(get("SA"), Some("web"));
    assert_eq!(get("HOST_IP"), Some("192.168.5.10"));
    assert_eq!(get("HOST_IPS"), Some("192.168.5.10"));
    assert_eq!(get("POD_IP"), Some("10.244.0.7"));
    assert_eq!(get("POD_IPS"), Some("10.244.0.7"));
    // Resource references: an unset limit is the node's allocatable.
    assert_eq!(get("CPU_REQ_M"), Some("250"));
    assert_eq!(get("CPU_LIMIT"), Some("4"));
    assert_eq!(get("MEM_LIMIT_MI"), Some("256"));
    assert_eq!(get("MEM_REQ"), Some("67108864"));
    // Key references, decoded; optional misses leave the variable out.
    assert_eq!(get("DB_PASSWORD"), Some("s3cr3t!"));
    assert_eq!(get("LEVEL"), Some("debug"));
    assert_eq!(get("OPT_KEY"), None);
    assert_eq!(get("OPT_CM"), None);
    assert_eq!(get("OPT_SECRET"), None);
    // Expansion sees earlier variables and service links, not later ones.
    assert_eq!(
        get("URL"),
        Some(format!("http://{cluster_ip}:5432/web-0?l=debug&x=$(LEVEL)&y=$(LATER)").as_str())
    );
    assert_eq!(get("EMPTY"), Some(""));
    // Service links come last.
    assert_eq!(get("DB_SERVICE_HOST"), Some(cluster_ip.as_str()));
    assert_eq!(get("DB_SERVICE_PORT_PG"), Some("5432"));
    assert_eq!(
        get("DB_PORT_5432_TCP"),
        Some(format!("tcp://{cluster_ip}:5432").as_str())
    );
    let is_link = |n: &str| n.starts_with("DB_SERVICE_") || n.starts_with("DB_PORT");
    let first_link = names.iter().position(|n| is_link(n)).expect("service vars");
    assert!(names[first_link..].iter().all(|n| is_link(n)));

    let (command, args) = env::expand_command(&c, &vars);
    assert_eq!(command, ["sh", "-c"]);
    assert_eq!(args, ["echo hello web-0 $(GREETING) $(UNSET)"]);

    // enableServiceLinks: false drops the namespace's services.
    let mut quiet = p.clone();
    if let Some(spec) = quiet.spec.as_mut() {
        spec.enable_service_links = Some(false);
    }
    let vars = env::container_env(&client, &quiet, &c, &ctx())
        .await
        .expect("environment");
    assert!(!vars.iter().any(|(k, _)| is_link(k)));
    assert!(vars.iter().any(|(k, _)| k == "DB_PASSWORD"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_missing_references_fail_with_the_kubelet_messages() {
    let ts = TestServer::start().await.expect("server");
    let client = ts.client.clone();
    create::<ConfigMap>(
        &client,
        None,
        serde_json::json!({"metadata": {"name": "present"}, "data": {"a": "1"}}),
    )
    .await
    .expect("configmap");
    let with_env = |env: serde_json::Value, env_from: serde_json::Value| {
        pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "app", "env": env, "envFrom": env_from}]}
        }))
    };
    let cases = [
        (
            with_env(
                serde_json::json!([]),
                serde_json::json!([{"configMapRef": {"name": "x"}}]),
            ),
            "configmap \"x\" not found",
        ),
        (
            with_env(
                serde_json::json!([]),
                serde_json::json!([{"secretRef": {"name": "s"}}]),
            ),
            "secret \"s\" not found",
        ),
        (
            with_env(
                serde_json::json!([{"name": "V", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k"}}}]),
                serde_json::json!([]),
            ),
            "configmap \"x\" not found",
        ),
        (
            with_env(
                serde_json::json!([{"name": "V", "valueFrom": {"configMapKeyRef": {"name": "present", "key": "k"}}}]),
                serde_json::json!([]),
            ),
            "couldn't find key k in ConfigMap default/present",
        ),
        (
            with_env(
                serde_json::json!([{"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}]),
                serde_json::json!([]),
            ),
            "unsupported fieldPath: status.phase",
        ),
    ];
    for (p, want) in cases {
        let err = env::container_env(&client, &p, &container_of(&p), &ctx())
            .await
            .expect_err(want);
        assert_eq!(err.to_string(), want);
    }
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_are_materialised_and_mounted_like_the_kubelet() {
    let ts = TestServer::start().await.expect("server");
    let client = ts.client.clone();
    create::<ConfigMap>(
        &client,
        None,
        serde_json::json!({"metadata": {"name": "nginx-conf"},
            "data": {"nginx.conf": "worker_processes 1;\n", "mime.types": "types {}\n", "unused": "x"}}),
    )
    .await
    .expect("configmap");
    create::<Secret>(
        &client,
        None,
        serde_json::json!({"metadata": {"name": "tls"},
            "data": {"tls.key": "a2V5LWJ5dGVz", "tls.crt": "Y2VydA=="}}),
    )
    .await
    .expect("secret");
    let pv_dir = ts.data_dir.join("pv-data");
    std::fs::create_dir(&pv_dir).expect("pv dir");
    let pvc: PersistentVolumeClaim = create(
        &client,
        None,
        serde_json::json!({"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1",
                     "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await
    .expect("pvc");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pv-1"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "hostPath": {"path": pv_dir.to_string_lossy(), "type": "Directory"},
                 "claimRef": {"namespace": "default", "name": "data", "uid": pvc.metadata.uid}}
    }))
    .expect("pv fixture");
    pvs.create(&PostParams::default(), &pv).await.expect("pv");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    claims
        .patch_status(
            "data",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Bound"}})),
        )
        .await
        .expect("bind claim");

    let host_dir = ts.data_dir.join("host/logs");
    let p = pod(serde_json::json!({
        "metadata": {"name": "web-0", "namespace": "default", "uid": "uid-42",
                     "labels": {"tier": "frontend", "app": "web"},
                     "annotations": {"build": "1.2.3"}},
        "spec": {"nodeName": "linux-1",
            "containers": [{"name": "app", "image": "nginx",
                "resources": {"limits": {"cpu": "500m"}},
                "env": [{"name": "POD_NAME", "value": "web-0"}],
                "volumeMounts": [
                    {"name": "conf", "mountPath": "/etc/nginx"},
                    {"name": "conf", "mountPath": "/etc/nginx/nginx.conf", "subPath": "nginx.conf"},
                    {"name": "tls", "mountPath": "/tls"},
                    {"name": "info", "mountPath": "/info"},
                    {"name": "cache", "mountPath": "/cache", "subPath": "nested/dir"},
                    {"name": "logs", "mountPath": "/logs", "subPathExpr": "$(POD_NAME)"},
                    {"name": "data", "mountPath": "/data", "readOnly": true},
                    {"name": "all", "mountPath": "/all"}
                ]}],
            "volumes": [
                {"name": "conf", "configMap": {"name": "nginx-conf", "defaultMode": 0o640,
                    "items": [{"key": "nginx.conf", "path": "nginx.conf", "mode": 0o600},
                              {"key": "mime.types", "path": "conf.d/mime.types"}]}},
                {"name": "tls", "secret": {"secretName": "tls", "defaultMode": 0o400}},
                {"name": "info", "downwardAPI": {"items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
                    {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}},
                    {"path": "cpu_limit", "resourceFieldRef": {"containerName": "app", "resource": "limits.cpu", "divisor": "1m"}},
                    {"path": "mem_limit", "resourceFieldRef": {"containerName": "app", "resource": "limits.memory", "divisor": "1Gi"}}]}},
                {"name": "cache", "emptyDir": {"medium": "Memory"}},
                {"name": "logs", "hostPath": {"path": host_dir.to_string_lossy(), "type": "DirectoryOrCreate"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "all", "projected": {"sources": [
                    {"configMap": {"name": "nginx-conf", "items": [{"key": "unused", "path": "cm/unused"}]}},
                    {"secret": {"name": "tls", "items": [{"key": "tls.crt", "path": "tls.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}
            ]}
    }));
    // The token projection asks the API server for a token bound to the pod: the pod and its
    // ServiceAccount must exist there (the pod opts out of the automatic token volume, whose
    // CA ConfigMap no controller publishes here).
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), "default");
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}}))
                .expect("account fixture"),
        )
        .await
        .expect("service account");
    let mut stored = p.clone();
    stored.metadata.uid = None;
    if let Some(spec) = stored.spec.as_mut() {
        spec.automount_service_account_token = Some(false);
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p = pods
        .create(&PostParams::default(), &stored)
        .await
        .expect("pod");
    let pod_dir = ts.data_dir.join("pods/uid-42");
    let vols = volumes::prepare(&client, &p, &pod_dir, &ctx())
        .await
        .expect("volumes");
    let vol_dir = |name: &str| pod_dir.join("volumes").join(name);

    // configMap items: content, per-item mode and defaultMode, atomic writer layout.
    let conf = vol_dir("conf");
    assert_eq!(
        std::fs::read_to_string(conf.join("nginx.conf")).expect("nginx.conf"),
        "worker_processes 1;\n"
    );
    assert_eq!(mode_of(&conf.join("nginx.conf")), 0o600);
    assert_eq!(
        std::fs::read_to_string(conf.join("conf.d/mime.types")).expect("mime.types"),
        "types {}\n"
    );
    assert_eq!(mode_of(&conf.join("conf.d/mime.types")), 0o640);
    assert!(!conf.join("unused").exists());
    assert!(
        std::fs::symlink_metadata(conf.join("nginx.conf"))
            .expect("lstat")
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::read_link(conf.join("..data"))
            .expect("..data")
            .to_string_lossy()
            .starts_with("..")
    );
    // Secret: decoded bytes, defaultMode.
    let tls = vol_dir("tls");
    assert_eq!(
        std::fs::read(tls.join("tls.key")).expect("key"),
        b"key-bytes"
    );
    assert_eq!(std::fs::read(tls.join("tls.crt")).expect("crt"), b"cert");
    assert_eq!(mode_of(&tls.join("tls.key")), 0o400);
    // Downward API: sorted key="value" lines, no trailing newline; limits default to allocatable.
    let info = vol_dir("info");
    assert_eq!(
        std::fs::read_to_string(info.join("labels")).expect("labels"),
        "app=\"web\"\ntier=\"frontend\""
    );
    assert_eq!(
        std::fs::read_to_string(info.join("annotations")).expect("annotations"),
        "build=\"1.2.3\""
    );
    assert_eq!(
        std::fs::read_to_string(info.join("uid")).expect("uid"),
        p.metadata.uid.clone().unwrap_or_default()
    );
    assert_eq!(
        std::fs::read_to_string(info.join("cpu_limit")).expect("cpu"),
        "500"
    );
    assert_eq!(
        std::fs::read_to_string(info.join("mem_limit")).expect("mem"),
        "16"
    );
    assert_eq!(mode_of(&info.join("uid")), 0o644);
    // emptyDir (Memory is a plain directory), world-writable.
    assert!(vol_dir("cache").is_dir());
    assert_eq!(mode_of(&vol_dir("cache")), 0o777);
    // hostPath DirectoryOrCreate made the directory.
    assert!(host_dir.is_dir());
    // Projected: sources merged, the token requested from the API server.
    let all = vol_dir("all");
    assert_eq!(
        std::fs::read_to_string(all.join("cm/unused")).expect("cm"),
        "x"
    );
    assert_eq!(std::fs::read(all.join("tls.crt")).expect("crt"), b"cert");
    assert_eq!(
        std::fs::read_to_string(all.join("name")).expect("name"),
        "web-0"
    );
    let token = std::fs::read_to_string(all.join("token")).expect("token");
    assert_eq!(token.matches('.').count(), 2, "a JWT: {token}");
    assert!(vols.warnings().is_empty(), "{:?}", vols.warnings());

    // The PVC resolves to the bound PV's hostPath.
    let data = vols.get("data").expect("data volume");
    assert_eq!(data.host_path, pv_dir);
    assert!(!data.read_only);
    assert!(vols.get("conf").expect("conf").read_only);

    let mounts = volumes::container_mounts(
        &container_of(&p),
        &vols,
        &[("POD_NAME".to_string(), "web-0".to_string())],
    )
    .expect("mounts");
    let by_path: BTreeMap<&str, &HostMount> = mounts
        .iter()
        .map(|m| (m.container_path.as_str(), m))
        .collect();
    assert_eq!(mounts.len(), 8);
    assert_eq!(by_path["/etc/nginx"].host_path, conf);
    assert!(by_path["/etc/nginx"].read_only);
    // A subPath of a configMap volume binds the real file (no updates, as upstream).
    let conf_file = &by_path["/etc/nginx/nginx.conf"].host_path;
    assert!(conf_file.is_file());
    assert!(conf_file.starts_with(std::fs::canonicalize(&conf).expect("canonical")));
    assert_eq!(
        std::fs::read_to_string(conf_file).expect("subPath file"),
        "worker_processes 1;\n"
    );
    let cache = &by_path["/cache"];
    assert!(cache.host_path.ends_with("cache/nested/dir") && cache.host_path.is_dir());
    assert!(!cache.read_only);
    assert_eq!(
        by_path["/logs"].host_path,
        std::fs::canonicalize(&host_dir)
            .expect("canonical")
            .join("web-0")
    );
    assert!(host_dir.join("web-0").is_dir());
    assert_eq!(by_path["/data"].host_path, pv_dir);
    assert!(by_path["/data"].read_only);

    // Preparing again is idempotent; cleanup removes the volumes but not host paths.
    volumes::prepare(&client, &p, &pod_dir, &ctx())
        .await
        .expect("second prepare");
    volumes::cleanup(&pod_dir);
    assert!(!pod_dir.join("volumes").exists());
    assert!(host_dir.is_dir() && pv_dir.is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_that_cannot_be_set_up_fail_with_the_kubelet_messages() {
    let ts = TestServer::start().await.expect("server");
    let client = ts.client.clone();
    create::<PersistentVolumeClaim>(
        &client,
        None,
        serde_json::json!({"metadata": {"name": "pending"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await
    .expect("pvc");
    create::<ConfigMap>(
        &client,
        None,
        serde_json::json!({"metadata": {"name": "present"}, "data": {"a": "1"}}),
    )
    .await
    .expect("configmap");
    let missing_dir = ts.data_dir.join("does/not/exist");
    let pod_with = |volume: serde_json::Value| {
        pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "app"}], "volumes": [volume]}
        }))
    };
    let cases = [
        (
            serde_json::json!({"name": "host", "hostPath": {"path": missing_dir.to_string_lossy(), "type": "Directory"}}),
            format!(
                "MountVolume.SetUp failed for volume \"host\" : hostPath type check failed: {} is not a directory",
                missing_dir.display()
            ),
        ),
        (
            serde_json::json!({"name": "claim", "persistentVolumeClaim": {"claimName": "pending"}}),
            "error processing PVC default/pending: PVC is not bound".to_string(),
        ),
        (
            serde_json::json!({"name": "claim", "persistentVolumeClaim": {"claimName": "ghost"}}),
            "error processing PVC default/ghost: failed to fetch PVC from API server: persistentvolumeclaims \"ghost\" not found".to_string(),
        ),
        (
            serde_json::json!({"name": "conf", "configMap": {"name": "gone"}}),
            "MountVolume.SetUp failed for volume \"conf\" : configmap \"gone\" not found"
                .to_string(),
        ),
        (
            serde_json::json!({"name": "conf", "configMap": {"name": "present", "items": [{"key": "b", "path": "b"}]}}),
            "MountVolume.SetUp failed for volume \"conf\" : configmap references non-existent config key: b"
                .to_string(),
        ),
        (
            serde_json::json!({"name": "tls", "secret": {"secretName": "gone"}}),
            "MountVolume.SetUp failed for volume \"tls\" : secret \"gone\" not found".to_string(),
        ),
        (
            serde_json::json!({"name": "all", "projected": {"sources": [
                {"configMap": {"name": "gone"}}, {"secret": {"name": "nope"}}]}}),
            "MountVolume.SetUp failed for volume \"all\" : [configmap \"gone\" not found, secret \"nope\" not found]"
                .to_string(),
        ),
        (
            serde_json::json!({"name": "share", "nfs": {"server": "nas", "path": "/x"}}),
            "MountVolume.SetUp failed for volume \"share\" : unsupported volume type \"nfs\": the tandem agent sets up emptyDir, configMap, secret, downwardAPI, projected, hostPath, persistentVolumeClaim and ephemeral volumes".to_string(),
        ),
    ];
    for (volume, want) in cases {
        let p = pod_with(volume);
        let err = volumes::prepare(&client, &p, &ts.data_dir.join("pod"), &ctx())
            .await
            .expect_err(&want);
        assert_eq!(err.to_string(), want);
    }
    assert!(!missing_dir.exists());

    // Optional sources that are missing give empty volumes.
    let p = pod_with(
        serde_json::json!({"name": "conf", "configMap": {"name": "gone", "optional": true}}),
    );
    let vols = volumes::prepare(&client, &p, &ts.data_dir.join("pod"), &ctx())
        .await
        .expect("optional configmap");
    let conf = &vols.get("conf").expect("conf").host_path;
    assert!(conf.is_dir());
}
