//! GET and LIST (upstream's `registry.Store.Get`/`List` with the cacher in front): a GET reads
//! the store; a LIST is served from the watch cache once it has caught up with the store (a
//! consistent read), or from the store at the revision a continue token or an exact
//! `resourceVersion` pins, a page at a time.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use serde_json::{Value, json};
use tandem_core::registry::ResourceType;
use tandem_store::{Revision, StoreError};

use super::{Ctx, Filter, Reply, int_param, parse_rv, parse_stored};
use crate::cache::Object;
use crate::error::{ApiError, ApiResult};
use crate::output::{self, Format};
use crate::state::State;

/// The continue token of a paginated list: the revision the list is pinned to and the last key sent.
#[derive(Debug, PartialEq, Eq)]
pub struct Continue {
    pub revision: Revision,
    pub start_after: String,
}

impl Continue {
    pub fn encode(&self) -> String {
        let raw = json!({"v": "meta.k8s.io/v1", "rv": self.revision, "start": self.start_after})
            .to_string();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }
    pub fn decode(token: &str) -> ApiResult<Continue> {
        let bad = || ApiError::bad_request("continue key is not valid: the token is malformed");
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| bad())?;
        let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
        let revision = v
            .get("rv")
            .and_then(Value::as_i64)
            .filter(|r| *r > 0)
            .ok_or_else(bad)?;
        let start_after = v
            .get("start")
            .and_then(Value::as_str)
            .ok_or_else(bad)?
            .to_string();
        Ok(Continue {
            revision,
            start_after,
        })
    }
}

impl State {
    /// GET of one object, from the store (a consistent read).
    pub async fn get(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> ApiResult<Value> {
        let kv = self.stored_kv(rt, &rt.key(ns, name), name).await?;
        parse_stored(rt, &kv)
    }

    /// LIST, from the watch cache when it can answer consistently, else from the store at the
    /// revision a continue token or `resourceVersion` pins.
    pub async fn list(&self, ctx: &Ctx, rt: &ResourceType, ns: Option<&str>) -> ApiResult<Reply> {
        let q = &ctx.query;
        let filter = Filter::for_request(self, rt, q)?;
        let limit = int_param(q, "limit")?
            .filter(|l| *l > 0)
            .map(|l| l as usize);
        let prefix = rt.namespace_prefix(ns);
        let cont = q.get("continue").map(Continue::decode).transpose()?;
        let rv_param = q.get("resourceVersion");
        let rv_match = q.get("resourceVersionMatch");
        if cont.is_some() && rv_param.is_some_and(|r| r != "0") {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let exact = match (rv_param, rv_match) {
            (Some(rv), Some("Exact")) => Some(parse_rv(rv)?),
            (None, Some(m)) => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersionMatch is forbidden unless resourceVersion is provided (got {m:?})"
                )));
            }
            _ => None,
        };

        if !crate::cache::caches(rt) {
            // Served from the store at the revision asked for (a continue token's or an exact
            // one), else at the current one: there is no cached copy to read.
            let (start, revision) = match (&cont, exact) {
                (Some(c), _) => (Some(c.start_after.as_str()), c.revision),
                (None, Some(rev)) => (None, rev),
                (None, None) => (None, self.store.current_revision()),
            };
            let (items, revision, next) = self
                .list_from_store(rt, &prefix, start, limit, revision, &filter)
                .await?;
            let items = self.items_at_request_version(rt, items).await?;
            return Ok(self.list_reply(ctx, rt, items, revision, next, None));
        }
        let (items, revision, next) = if let Some(c) = cont {
            // Nothing written since the first page: the cache still holds exactly that revision.
            let snap = self.cache.snapshot(rt, &prefix, |o| filter.accepts(rt, o));
            if snap.revision == c.revision {
                let after: Vec<Arc<Object>> = snap
                    .items
                    .into_iter()
                    .filter(|o| o.key.as_str() > c.start_after.as_str())
                    .collect();
                return self
                    .page_reply(ctx, rt, after, snap.revision, limit, &filter)
                    .await;
            }
            self.list_from_store(
                rt,
                &prefix,
                Some(&c.start_after),
                limit,
                c.revision,
                &filter,
            )
            .await?
        } else if let Some(rev) = exact {
            self.list_from_store(rt, &prefix, None, limit, rev, &filter)
                .await?
        } else {
            // Consistent read from cache: wait until it reflects the store's current revision,
            // unless the client accepts any state (resourceVersion=0).
            if rv_param != Some("0") {
                // The store's latest revision (with etcd, a quorum read: another API server
                // may have written since this one's cache last heard), as upstream's
                // consistent reads from cache ask etcd first.
                let target = match self.store.latest_revision().await {
                    Ok(rev) => rev,
                    Err(_) => self.store.current_revision(),
                };
                if !self.cache.wait_for(target, Duration::from_secs(3)).await {
                    let rev = self.store.current_revision();
                    let (items, revision, next) = self
                        .list_from_store(rt, &prefix, None, limit, rev, &filter)
                        .await?;
                    let items = self.items_at_request_version(rt, items).await?;
                    return Ok(self.list_reply(ctx, rt, items, revision, next, None));
                }
            } else if let Some(min) = rv_param.and_then(|r| r.parse::<Revision>().ok()) {
                self.cache.wait_for(min, Duration::from_secs(3)).await;
            }
            let snap = self.cache.snapshot(rt, &prefix, |o| filter.accepts(rt, o));
            return self
                .page_reply(ctx, rt, snap.items, snap.revision, limit, &filter)
                .await;
        };
        let items = self.items_at_request_version(rt, items).await?;
        Ok(self.list_reply(ctx, rt, items, revision, next, None))
    }

    /// A LIST's items (or a watch's objects) converted to the version `rt` serves, when its CRD
    /// converts with a webhook (in one review; items already there are not sent). Tables and
    /// the JSON list are then built from the converted objects. Other kinds are returned as
    /// they are.
    pub(crate) async fn items_at_request_version(
        &self,
        rt: &ResourceType,
        items: Vec<Arc<Object>>,
    ) -> ApiResult<Vec<Arc<Object>>> {
        if items.is_empty() || !self.converts_by_webhook(rt) {
            return Ok(items);
        }
        let mut values: Vec<Value> = items.iter().map(|o| o.value().into_owned()).collect();
        let list = values.len() > 1;
        self.convert_custom(rt, &mut values, &rt.version, list)
            .await?;
        Ok(items
            .iter()
            .zip(values)
            .map(|(o, v)| {
                let json = Bytes::from(serde_json::to_vec(&v).unwrap_or_default());
                Arc::new(Object::with_value(o.key.clone(), o.rv, v, json))
            })
            .collect())
    }

    /// One page of a cached snapshot: the first `limit` items, a continue token when more remain,
    /// and `remainingItemCount` when no selector filtered the list (upstream only knows it then).
    async fn page_reply(
        &self,
        ctx: &Ctx,
        rt: &ResourceType,
        mut items: Vec<Arc<Object>>,
        revision: Revision,
        limit: Option<usize>,
        filter: &Filter,
    ) -> ApiResult<Reply> {
        let mut next = None;
        let mut remaining = None;
        if let Some(l) = limit
            && items.len() > l
        {
            let rest = items.len() - l;
            items.truncate(l);
            next = items.last().map(|o| {
                Continue {
                    revision,
                    start_after: o.key.clone(),
                }
                .encode()
            });
            if filter.is_empty() {
                remaining = Some(rest as i64);
            }
        }
        let items = self.items_at_request_version(rt, items).await?;
        Ok(self.list_reply(ctx, rt, items, revision, next, remaining))
    }

    /// The objects under `prefix` that `filter` accepts, read from the store at `revision` a
    /// page at a time, with a continue token after `limit` of them.
    pub(crate) async fn list_from_store(
        &self,
        rt: &ResourceType,
        prefix: &str,
        start: Option<&str>,
        limit: Option<usize>,
        revision: Revision,
        filter: &Filter,
    ) -> ApiResult<(Vec<Arc<Object>>, Revision, Option<String>)> {
        let mut items = Vec::new();
        let mut after = start.map(str::to_string);
        loop {
            let page = self.store.list(prefix, after.as_deref(), limit.map(|l| l.max(16)), Some(revision)).await.map_err(|e| match e {
                StoreError::Compacted { .. } => ApiError::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter."),
                other => other.into(),
            })?;
            let more = page.more;
            for kv in &page.items {
                after = Some(kv.key.clone());
                if let Some(obj) = Object::from_kv(kv)
                    && filter.accepts(rt, &obj)
                {
                    items.push(Arc::new(obj));
                    if limit.is_some_and(|l| items.len() >= l) {
                        let next = (more
                            || kv.key
                                != page.items.last().map(|k| k.key.clone()).unwrap_or_default())
                        .then(|| {
                            Continue {
                                revision,
                                start_after: kv.key.clone(),
                            }
                            .encode()
                        });
                        return Ok((items, revision, next));
                    }
                }
            }
            if !more {
                return Ok((items, revision, None));
            }
        }
    }

    fn list_reply(
        &self,
        ctx: &Ctx,
        rt: &ResourceType,
        items: Vec<Arc<Object>>,
        revision: Revision,
        next: Option<String>,
        remaining: Option<i64>,
    ) -> Reply {
        match ctx.format {
            Format::Table { beta } => {
                let parsed: Vec<_> = items.iter().map(|o| o.value()).collect();
                let values: Vec<&Value> = parsed.iter().map(|v| &**v).collect();
                let custom = self.registry.custom(rt);
                let table = output::table(
                    rt,
                    custom.as_ref().map(|c| c.columns.as_slice()),
                    &values,
                    Some(revision),
                    next.as_deref(),
                    ctx.include(),
                    beta,
                    true,
                );
                Reply::Raw(
                    200,
                    Bytes::from(serde_json::to_vec(&table).unwrap_or_default()),
                    "application/json",
                )
            }
            Format::Metadata { beta } => {
                let list = output::metadata_list(&items, revision, next.as_deref(), beta);
                Reply::Raw(
                    200,
                    Bytes::from(serde_json::to_vec(&list).unwrap_or_default()),
                    "application/json",
                )
            }
            Format::Protobuf { .. } => {
                let mut meta = json!({"resourceVersion": revision.to_string()});
                if let Some(c) = &next {
                    meta["continue"] = json!(c);
                }
                if let Some(r) = remaining {
                    meta["remainingItemCount"] = json!(r);
                }
                match crate::protobuf::encode_list(
                    &rt.api_version(),
                    &rt.list_kind(),
                    &meta,
                    items.iter().map(|o| o.protobuf_message()),
                ) {
                    Some(bytes) => Reply::Raw(200, Bytes::from(bytes), crate::protobuf::MEDIA_TYPE),
                    None => Reply::Raw(
                        200,
                        output::encode_list(rt, &items, revision, next.as_deref(), remaining),
                        "application/json",
                    ),
                }
            }
            Format::Json | Format::Yaml => Reply::Raw(
                200,
                output::encode_list(rt, &items, revision, next.as_deref(), remaining),
                "application/json",
            ),
        }
    }
}
