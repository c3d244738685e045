//! PersistentVolume binder behaviour against a real API server.

mod common;

use anyhow::Result;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

fn volume(name: &str, size: &str, class: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": class, "hostPath": {"path": format!("/tmp/{name}")}}
    }))
    .unwrap_or_default()
}

fn claim(name: &str, size: &str, class: &str, volume: Option<&str>) -> PersistentVolumeClaim {
    let mut spec = json!({"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                          "resources": {"requests": {"storage": size}}});
    if let Some(v) = volume {
        spec["volumeName"] = json!(v);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap_or_default()
}

fn phase_pv(pv: &PersistentVolume) -> Option<String> {
    pv.status.as_ref().and_then(|s| s.phase.clone())
}

fn phase_pvc(pvc: &PersistentVolumeClaim) -> Option<String> {
    pvc.status.as_ref().and_then(|s| s.phase.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_bind_to_named_or_smallest_matching_volumes_and_release_them() -> Result<()> {
    let c = common::start().await?;
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "default");
    let pp = PostParams::default();
    for (n, size) in [("big", "10Gi"), ("small", "2Gi"), ("named", "1Gi")] {
        pvs.create(&pp, &volume(n, size, "manual")).await?;
    }
    common::wait_for(20, "volumes Available", || async {
        let all = pvs.list(&Default::default()).await?;
        Ok(all
            .items
            .iter()
            .all(|v| phase_pv(v).as_deref() == Some("Available"))
            .then_some(()))
    })
    .await?;

    // A claim naming its volume gets that one.
    pvcs.create(&pp, &claim("by-name", "1Gi", "manual", Some("named")))
        .await?;
    // A claim without one gets the smallest that fits.
    pvcs.create(&pp, &claim("by-size", "1500Mi", "manual", None))
        .await?;
    // Nothing matches another class: the claim waits.
    pvcs.create(&pp, &claim("no-match", "1Gi", "fast", None))
        .await?;

    for (claim_name, volume_name) in [("by-name", "named"), ("by-size", "small")] {
        let bound = common::wait_for(20, "claim Bound", || async {
            Ok(pvcs
                .get_opt(claim_name)
                .await?
                .filter(|p| phase_pvc(p).as_deref() == Some("Bound")))
        })
        .await?;
        let spec = bound.spec.unwrap_or_default();
        assert_eq!(spec.volume_name.as_deref(), Some(volume_name));
        let status = bound.status.unwrap_or_default();
        assert!(status.capacity.is_some_and(|c| c.contains_key("storage")));
        let pv = common::wait_for(20, "volume Bound", || async {
            Ok(pvs
                .get_opt(volume_name)
                .await?
                .filter(|v| phase_pv(v).as_deref() == Some("Bound")))
        })
        .await?;
        let claim_ref = pv.spec.and_then(|s| s.claim_ref).unwrap_or_default();
        assert_eq!(claim_ref.name.as_deref(), Some(claim_name));
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let waiting = pvcs.get("no-match").await?;
    assert_eq!(phase_pvc(&waiting).as_deref(), Some("Pending"));
    assert_eq!(
        phase_pv(&pvs.get("big").await?).as_deref(),
        Some("Available")
    );

    // Deleting a claim releases its (Retain) volume.
    pvcs.delete("by-size", &DeleteParams::default()).await?;
    common::wait_for(20, "volume Released", || async {
        Ok(pvs
            .get_opt("small")
            .await?
            .filter(|v| phase_pv(v).as_deref() == Some("Released")))
    })
    .await?;
    Ok(())
}
