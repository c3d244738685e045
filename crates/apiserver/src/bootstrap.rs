//! What exists from the first start: the namespaces `default`, `kube-system`, `kube-public` and
//! `kube-node-lease`, as upstream's `SystemNamespaces` controller ensures.

use serde_json::json;

use crate::error::ApiResult;
use crate::rest::{Ctx, State};

/// The namespaces every cluster has.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Creates any missing system namespace.
pub async fn ensure_namespaces(state: &State) -> ApiResult<()> {
    let rt = state.resource("", "v1", "namespaces")?;
    for ns in SYSTEM_NAMESPACES {
        if state.store.get(&rt.key(None, ns)).await?.is_some() {
            continue;
        }
        let mut ctx = Ctx::internal("system:apiserver");
        match state
            .create(
                &mut ctx,
                &rt,
                None,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
