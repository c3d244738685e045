//! ServiceAccounts controller behaviour against a real API server.

mod common;

use anyhow::Result;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DeleteParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_service_account_exists_in_new_namespaces() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "sa1").await?;
    let api: Api<ServiceAccount> = Api::namespaced(c.client.clone(), "sa1");
    common::wait_for(20, "default service account", || async {
        Ok(api.get_opt("default").await?)
    })
    .await?;
    // Deleted, it comes back.
    api.delete("default", &DeleteParams::default()).await?;
    common::wait_for(20, "default service account recreated", || async {
        Ok(api
            .get_opt("default")
            .await?
            .filter(|sa| sa.metadata.deletion_timestamp.is_none()))
    })
    .await?;
    // Namespaces that existed before the controller started get one too.
    let default_ns: Api<ServiceAccount> = Api::namespaced(c.client.clone(), "default");
    common::wait_for(20, "default/default", || async {
        Ok(default_ns.get_opt("default").await?)
    })
    .await?;
    Ok(())
}
