//! Pod CIDR allocation against a real API server with every controller running.

mod common;

use anyhow::Result;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

async fn create_node(api: &Api<Node>, name: &str, cidr: Option<&str>) -> Result<()> {
    let mut node = json!({ "metadata": { "name": name } });
    if let Some(c) = cidr {
        node["spec"] = json!({ "podCIDR": c, "podCIDRs": [c] });
    }
    api.create(&PostParams::default(), &serde_json::from_value(node)?)
        .await?;
    Ok(())
}

async fn cidr_of(api: &Api<Node>, name: &str) -> Result<(String, Vec<String>)> {
    common::wait_for(10, &format!("pod CIDR of {name}"), || async {
        let n = api.get(name).await?;
        let spec = n.spec.unwrap_or_default();
        Ok(spec
            .pod_cidr
            .map(|c| (c, spec.pod_cidrs.unwrap_or_default())))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_get_distinct_slash_24s_and_existing_ones_are_respected() -> Result<()> {
    let c = common::start().await?;
    let api: Api<Node> = Api::all(c.client.clone());
    // As the agent does at registration: a node that brings its own block.
    create_node(&api, "own", Some("10.244.0.0/24")).await?;
    create_node(&api, "a", None).await?;
    create_node(&api, "b", None).await?;
    let (own, _) = cidr_of(&api, "own").await?;
    let (a, a_list) = cidr_of(&api, "a").await?;
    let (b, _) = cidr_of(&api, "b").await?;
    assert_eq!(own, "10.244.0.0/24", "an existing podCIDR is kept");
    assert_eq!(a_list, vec![a.clone()], "podCIDRs mirrors podCIDR");
    let all = [own.clone(), a.clone(), b.clone()];
    for cidr in &all {
        assert!(
            cidr.starts_with("10.244.") && cidr.ends_with(".0/24"),
            "{cidr}"
        );
    }
    assert!(own != a && a != b && own != b, "distinct: {all:?}");

    // A deleted node's block is not handed to the next node right away.
    api.delete("a", &DeleteParams::default()).await?;
    common::wait_for(10, "node a gone", || async {
        Ok(api.get_opt("a").await?.is_none().then_some(()))
    })
    .await?;
    create_node(&api, "c", None).await?;
    let (cc, _) = cidr_of(&api, "c").await?;
    assert!(!all.contains(&cc), "{cc} reused");
    Ok(())
}
