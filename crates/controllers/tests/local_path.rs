//! The built-in local-path provisioner against a real API server with every controller: the
//! default StorageClass and the DefaultStorageClass admission plugin, delayed binding through
//! `volume.kubernetes.io/selected-node` (the scheduler's part is played by the test), the
//! upstream annotations and events, and reclaim through the node handshake (the agent's part is
//! played by the test).
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use anyhow::Result;
use k8s_openapi::api::core::v1::{Event, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tandem_core::local_path as lp;

async fn node(client: &kube::Client, name: &str, runtime: &str, root: Option<&str>) -> Result<()> {
    let mut n = json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": name}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "nodeInfo": {"containerRuntimeVersion": runtime, "architecture": "amd64", "bootID": "",
                         "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                         "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""}
        }
    });
    if let Some(r) = root {
        n["metadata"]["annotations"] = json!({ lp::ROOT_ANNOTATION: r });
    }
    let n: Node = serde_json::from_value(n)?;
    let api: Api<Node> = Api::all(client.clone());
    let created = api.create(&PostParams::default(), &n).await?;
    // Status is the status subresource's: write it there too, whatever create kept.
    api.patch_status(
        &created.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": n.status})),
    )
    .await?;
    Ok(())
}

fn phase(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.status.as_ref().and_then(|s| s.phase.as_deref())
}

async fn reasons(client: &kube::Client, ns: &str, claim: &str) -> Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(claim))
        .filter_map(|e| e.reason)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_claim_is_provisioned_on_the_selected_node_and_reclaimed_through_its_agent()
-> Result<()> {
    let c = common::start().await?;
    tokio::spawn(tandem_controllers::local_path::install_default_class(
        c.client.clone(),
    ));
    let classes: Api<StorageClass> = Api::all(c.client.clone());
    let class = common::wait_for(30, "default StorageClass", || async {
        Ok(classes.get_opt(lp::DEFAULT_CLASS).await?)
    })
    .await?;
    assert_eq!(class.provisioner, lp::PROVISIONER);
    assert_eq!(
        class.volume_binding_mode.as_deref(),
        Some("WaitForFirstConsumer")
    );
    node(
        &c.client,
        "node-a",
        "containerd://2.0",
        Some("/srv/tandem/storage"),
    )
    .await?;

    // No class named: the DefaultStorageClass plugin names the default one.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "default");
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))?;
    let created = pvcs.create(&PostParams::default(), &claim).await?;
    assert_eq!(
        created
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref()),
        Some(lp::DEFAULT_CLASS)
    );
    let uid = created.uid().unwrap();

    // Pending, waiting for its first consumer, with upstream's event; no volume yet.
    common::wait_for(20, "WaitForFirstConsumer event", || async {
        let r = reasons(&c.client, "default", "data").await?;
        Ok(r.iter().any(|x| x == "WaitForFirstConsumer").then_some(()))
    })
    .await?;
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    assert!(pvs.get_opt(&lp::volume_name(&uid)).await?.is_none());
    assert_eq!(phase(&pvcs.get("data").await?), Some("Pending"));

    // The scheduler's part: select the node.
    pvcs.patch(
        "data",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {lp::SELECTED_NODE: "node-a"}}})),
    )
    .await?;
    let bound = common::wait_for(30, "claim Bound", || async {
        Ok(pvcs
            .get_opt("data")
            .await?
            .filter(|p| phase(p) == Some("Bound")))
    })
    .await?;
    let pv_name = lp::volume_name(&uid);
    assert_eq!(
        bound.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some(pv_name.as_str())
    );
    assert_eq!(
        bound
            .annotations()
            .get(lp::STORAGE_PROVISIONER)
            .map(String::as_str),
        Some(lp::PROVISIONER)
    );
    let pv = pvs.get(&pv_name).await?;
    assert_eq!(
        pv.annotations().get(lp::PROVISIONED_BY).map(String::as_str),
        Some(lp::PROVISIONER)
    );
    assert!(pv.annotations().get(lp::EMULATED_ANNOTATION).is_none());
    let spec = pv.spec.clone().unwrap();
    let path = spec.host_path.unwrap().path;
    assert_eq!(path, format!("/srv/tandem/storage/pvc-{uid}_default_data"));
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    assert_eq!(
        tandem_controllers::local_path::provisioned_node(&pv).as_deref(),
        Some("node-a")
    );
    let r = reasons(&c.client, "default", "data").await?;
    for expected in [
        "ExternalProvisioning",
        "Provisioning",
        "ProvisioningSucceeded",
    ] {
        assert!(
            r.iter().any(|x| x == expected),
            "{expected} missing from {r:?}"
        );
    }

    // Deleting the claim releases the volume; the controller asks the node to remove it.
    pvcs.delete("data", &DeleteParams::default()).await?;
    let nodes: Api<Node> = Api::all(c.client.clone());
    common::wait_for(30, "cleanup requested on the node", || async {
        let n = nodes.get("node-a").await?;
        let req = lp::parse_cleanup(
            n.annotations()
                .get(lp::CLEANUP_ANNOTATION)
                .map(String::as_str),
        );
        Ok((req.get(&pv_name) == Some(&path)).then_some(()))
    })
    .await?;
    assert!(
        pvs.get_opt(&pv_name).await?.is_some(),
        "kept until the node answers"
    );

    // The agent's part: the directory is gone.
    let done = lp::format_cleaned(&[pv_name.clone()].into_iter().collect());
    nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {lp::CLEANED_ANNOTATION: done}}})),
        )
        .await?;
    common::wait_for(30, "volume deleted and request withdrawn", || async {
        let gone = pvs.get_opt(&pv_name).await?.is_none();
        let n = nodes.get("node-a").await?;
        let withdrawn = !n.annotations().contains_key(lp::CLEANUP_ANNOTATION);
        Ok((gone && withdrawn).then_some(()))
    })
    .await?;

    // A claim one node directory cannot serve fails and gives its selected node back.
    let shared: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "shared", "annotations": {lp::SELECTED_NODE: "node-a"}},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}
    }))?;
    pvcs.create(&PostParams::default(), &shared).await?;
    common::wait_for(30, "ProvisioningFailed and the node given back", || async {
        let p = pvcs.get("shared").await?;
        let r = reasons(&c.client, "default", "shared").await?;
        let failed = r.iter().any(|x| x == "ProvisioningFailed");
        Ok((failed && !p.annotations().contains_key(lp::SELECTED_NODE)).then_some(()))
    })
    .await?;
    assert_eq!(phase(&pvcs.get("shared").await?), Some("Pending"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immediate_claims_of_emulated_nodes_are_marked_and_retain_keeps_released_volumes()
-> Result<()> {
    let c = common::start().await?;
    node(&c.client, "emu", "emulated://tandem-0.1.0", None).await?;
    let classes: Api<StorageClass> = Api::all(c.client.clone());
    for (name, policy) in [("now", "Delete"), ("keep", "Retain")] {
        let class: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": name}, "provisioner": lp::PROVISIONER,
            "reclaimPolicy": policy, "volumeBindingMode": "Immediate"
        }))?;
        classes.create(&PostParams::default(), &class).await?;
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "default");
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    let mut volumes = Vec::new();
    for class in ["now", "keep"] {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": class},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": "512Mi"}}}
        }))?;
        pvcs.create(&PostParams::default(), &claim).await?;
        let bound = common::wait_for(30, "Immediate claim Bound", || async {
            Ok(pvcs
                .get_opt(class)
                .await?
                .filter(|p| phase(p) == Some("Bound")))
        })
        .await?;
        let pv = pvs
            .get(bound.spec.unwrap().volume_name.as_deref().unwrap())
            .await?;
        let why = pv
            .annotations()
            .get(lp::EMULATED_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        assert!(why.contains("emulated runtime"), "{why}");
        assert_eq!(
            pv.spec.as_ref().unwrap().host_path.as_ref().unwrap().path,
            format!(
                "{}/pvc-{}_default_{class}",
                lp::DEFAULT_ROOT,
                bound.metadata.uid.unwrap()
            )
        );
        volumes.push(pv.name_any());
    }
    for class in ["now", "keep"] {
        pvcs.delete(class, &DeleteParams::default()).await?;
    }
    // Delete on an emulated node: no directory was written, the volume goes at once.
    common::wait_for(30, "Delete volume gone", || async {
        Ok(pvs.get_opt(&volumes[0]).await?.is_none().then_some(()))
    })
    .await?;
    // Retain: Released, and it stays.
    common::wait_for(30, "Retain volume Released", || async {
        Ok(pvs
            .get_opt(&volumes[1])
            .await?
            .filter(|v| v.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released")))
    })
    .await?;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(pvs.get_opt(&volumes[1]).await?.is_some());
    Ok(())
}
