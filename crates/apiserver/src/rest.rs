//! Generic REST storage: create, get, list, update, patch, delete and deletecollection for every
//! registered type, with the subresources `status`, `scale`, `binding` and `finalize`. Mirrors
//! upstream's `k8s.io/apiserver/pkg/registry/generic/registry.Store` and the handlers in
//! `k8s.io/apiserver/pkg/endpoints/handlers`.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use serde_json::{Value, json};
use tandem_core::apiextensions::schema::Structural;
use tandem_core::field::FieldError;
use tandem_core::patch::Schema;
use tandem_core::registry::ResourceType;
use tandem_core::selector::{FieldSelector, LabelSelector};
use tandem_store::{Revision, Store, StoreError};

use crate::binding::{self, Assignment};
use crate::cache::{Cache, Object, set_resource_version};
use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::output::{self, Format, IncludeObject};
use crate::request::Query;

/// Largest request body accepted, as upstream's 3 MiB limit.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Unknown fields of a body (`spec.foo`) under `?fieldValidation=`: a 400 when `Strict`,
/// nothing when `Ignore`, a `Warning` header each otherwise (upstream's default, `Warn`).
fn report_unknown_fields(ctx: &mut Ctx, fields: &[String]) -> ApiResult<()> {
    if fields.is_empty() {
        return Ok(());
    }
    let msgs: Vec<String> = fields
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    match ctx.query.get("fieldValidation").unwrap_or("Warn") {
        "Strict" => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            msgs.join(", ")
        ))),
        "Ignore" => Ok(()),
        _ => {
            ctx.warnings.extend(msgs);
            Ok(())
        }
    }
}

/// Upstream `customResourceStrategy.PrepareForCreate`: with a status subresource the status is
/// dropped (only `/status` writes it); `metadata.generation` starts at 1.
fn custom_prepare_for_create(rt: &ResourceType, obj: &mut Value) {
    if let Some(map) = obj.as_object_mut() {
        if rt.has_subresource("status") {
            map.remove("status");
        }
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("generation".into(), json!(1));
        }
    }
}

/// Upstream `customResourceStrategy.PrepareForUpdate`: `metadata.generation` grows when
/// anything but metadata (and status, with a status subresource) changed.
fn custom_prepare_for_update(rt: &ResourceType, new: &mut Value, old: &Value) {
    let status_owned = rt.has_subresource("status");
    let changed = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            map.remove("metadata");
            if status_owned {
                map.remove("status");
            }
        }
        v
    };
    let old_generation = old
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let generation = if changed(new) != changed(old) {
        old_generation + 1
    } else {
        old_generation
    };
    if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("generation".into(), json!(generation));
    }
}

/// Shared state of the API server.
pub struct State {
    /// Built-in types and the custom resources of established CRDs (see `crds`).
    pub registry: crate::crds::CustomResources,
    pub store: Arc<dyn Store>,
    pub cache: Arc<Cache>,
    pub options: Options,
    /// Held by Service writes until the cache reflects them (see `service_alloc`).
    pub service_lock: tokio::sync::Mutex<()>,
    /// The Services' allocations as last read from the cache (see `service_alloc`).
    pub service_alloc_cache: std::sync::Mutex<crate::service_alloc::UsedCache>,
    /// Addresses and ports other servers claimed (`service_claims`) that the Service being
    /// created (under `service_lock`) must not be given.
    pub service_alloc_avoid: std::sync::Mutex<(
        std::collections::HashSet<std::net::Ipv4Addr>,
        std::collections::HashSet<u16>,
    )>,
    /// Authentication and authorization (see `auth`).
    pub auth: crate::auth::Auth,
    /// How `node_proxy` reaches node agents: TLS as `kube-apiserver-kubelet-client`, the agents'
    /// serving certificates not verified (see `node_proxy::kubelet_client`).
    pub kubelet_client: tandem_netproxy::Forwarder,
    /// The resource metrics scraped from node agents (`metrics.k8s.io`, see `metrics_api`).
    pub metrics: crate::metrics_api::MetricsApi,
    /// Seats and queues of the requests being served (see `flowcontrol`).
    pub flow_control: Arc<crate::flowcontrol::FlowControl>,
}

/// Server behaviour switches.
#[derive(Debug, Clone)]
pub struct Options {
    /// Whether privileged (and so HostProcess) pods are allowed: upstream's `--allow-privileged`.
    pub allow_privileged: bool,
    /// Service ClusterIP and NodePort ranges.
    pub service_ranges: crate::service_alloc::ServiceRanges,
    /// Which authorizers run: upstream's `--authorization-mode`.
    pub authorization: crate::auth::authz::AuthorizationMode,
    /// How often node agents' resource metrics are scraped (metrics-server's
    /// `--metric-resolution`); `None` scrapes nothing.
    pub metric_resolution: Option<std::time::Duration>,
    /// What `/metrics` serves and requests are measured with (see `metrics`); `None` builds a
    /// server without Prometheus metrics (not a flag: upstream always has them; `tandem bench
    /// api --metrics both` compares).
    pub server_metrics: Option<crate::metrics::ServerMetrics>,
    /// The bounds on requests in flight and API Priority and Fairness (see `flowcontrol`).
    pub flow_control: crate::flowcontrol::FlowControlConfig,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            allow_privileged: true,
            service_ranges: Default::default(),
            authorization: Default::default(),
            metric_resolution: Some(crate::metrics_api::DEFAULT_RESOLUTION),
            server_metrics: Some(crate::metrics::ServerMetrics::standalone()),
            flow_control: Default::default(),
        }
    }
}

fn is_service(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.kind == "Service"
}

/// Runs admission and collects its field errors into `errors` and its warnings into `ctx`.
async fn run_admission(
    state: &State,
    ctx: &mut Ctx,
    op: tandem_core::admission::Operation,
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
    errors: &mut Vec<FieldError>,
) -> ApiResult<()> {
    match state.admit(op, rt, obj, old).await {
        Ok(warnings) => ctx.warnings.extend(warnings),
        Err(tandem_core::admission::AdmissionError::Invalid(e)) => errors.extend(e),
        Err(other) => return Err(crate::admission::admission_error(rt, obj, other)),
    }
    Ok(())
}

/// Per-request context.
pub struct Ctx {
    pub query: Query,
    pub format: Format,
    pub content_type: Option<String>,
    pub warnings: Vec<String>,
    /// Who makes the request (after impersonation).
    pub user: Arc<crate::auth::UserInfo>,
    pub user_agent: Option<String>,
    /// Set while a server-side apply is being written: apply maintains managedFields itself.
    pub applying: bool,
}

impl Ctx {
    /// A context for requests the server makes on its own behalf.
    pub fn internal(user: &str) -> Ctx {
        Ctx {
            query: Query::default(),
            format: Format::Json,
            content_type: None,
            warnings: Vec::new(),
            user: Arc::new(crate::auth::UserInfo::internal(user)),
            user_agent: None,
            applying: false,
        }
    }

    /// The field manager of a write: `?fieldManager=`, else derived from the User-Agent as upstream.
    fn field_manager(&self) -> String {
        match (self.query.get("fieldManager"), &self.user_agent) {
            (Some(m), _) => m.to_string(),
            (None, Some(ua)) => tandem_core::patch::manager_from_user_agent(ua),
            (None, None) => "unknown".to_string(),
        }
    }

    /// Records the fields a non-apply write sets in `metadata.managedFields` (upstream's field
    /// manager `Update` entries).
    /// `schema` is a custom resource's structural schema (its lists and maps merge by it).
    fn track(
        &self,
        rt: &ResourceType,
        schema: Option<&Structural>,
        old: Option<&Value>,
        new: &mut Value,
    ) {
        if self.applying {
            return;
        }
        let schema = match schema {
            Some(s) => Schema::Structural(s),
            None => tandem_core::openapi::root_definition(&rt.api_version(), &rt.kind).into(),
        };
        let now = tandem_core::time::now_rfc3339();
        tandem_core::patch::track_update(
            old,
            new,
            &self.field_manager(),
            &rt.api_version(),
            schema,
            &now,
        );
    }

    fn dry_run(&self) -> bool {
        self.query.get("dryRun") == Some("All")
    }
    fn include(&self) -> IncludeObject {
        IncludeObject::parse(self.query.get("includeObject"))
    }
}

/// A successful response.
pub enum Reply {
    /// One object (or Status) to encode in the negotiated format.
    Value(u16, Value),
    /// Already-encoded bytes.
    Raw(u16, Bytes, &'static str),
}

/// Parses a request body as JSON, or YAML when the content type says so.
pub fn decode_body(body: &[u8], content_type: Option<&str>) -> ApiResult<Value> {
    let ct = content_type
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let value: Value = match ct.as_str() {
        "application/yaml" | "application/apply-patch+yaml" | "text/yaml" => {
            serde_yaml::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML body: {e}")))?
        }
        "application/json"
        | ""
        | "*/*"
        | "application/json-patch+json"
        | "application/merge-patch+json"
        | "application/strategic-merge-patch+json" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding JSON body: {e}")))?,
        crate::protobuf::MEDIA_TYPE => crate::protobuf::decode(body)?,
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    Ok(value)
}

fn parse_stored(rt: &ResourceType, kv: &tandem_store::KeyValue) -> ApiResult<Value> {
    let mut v: Value = serde_json::from_slice(&kv.value).map_err(|e| {
        ApiError::internal(format!("stored {} {} is corrupt: {e}", rt.kind, kv.key))
    })?;
    set_resource_version(&mut v, kv.mod_revision);
    Ok(v)
}

/// The stored encoding of an object: its JSON without `metadata.resourceVersion` (the revision
/// is stamped on the way out). Removes `resourceVersion` from `obj` rather than encoding a copy
/// without it; callers stamp the new revision back with [`with_rv`] when they answer.
fn to_stored(obj: &mut Value) -> ApiResult<Bytes> {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    serde_json::to_vec(obj)
        .map(Bytes::from)
        .map_err(|e| ApiError::internal(format!("cannot encode object: {e}")))
}

/// Whether two objects are the same apart from `metadata.resourceVersion`: an update that
/// changes nothing is not written.
fn same_ignoring_resource_version(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    if a.len() != b.len() {
        return false;
    }
    a.iter().all(|(k, va)| match (k.as_str(), b.get(k)) {
        ("metadata", Some(vb)) => match (va.as_object(), vb.as_object()) {
            (Some(ma), Some(mb)) => {
                let count = |m: &serde_json::Map<String, Value>| {
                    m.keys().filter(|k| *k != "resourceVersion").count()
                };
                count(ma) == count(mb)
                    && ma
                        .iter()
                        .filter(|(k, _)| *k != "resourceVersion")
                        .all(|(k, v)| mb.get(k) == Some(v))
            }
            _ => va == vb,
        },
        (_, Some(vb)) => va == vb,
        (_, None) => false,
    })
}

fn with_rv(mut v: Value, rv: Revision) -> Value {
    set_resource_version(&mut v, rv);
    v
}

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

/// Label and field selectors of a list or watch.
pub struct Filter {
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
    /// For a custom resource: the CRD's `selectableFields` (as `spec.color`), which field
    /// selectors may name besides `metadata.name` and `metadata.namespace`.
    custom_fields: Option<Vec<String>>,
}

impl Filter {
    /// The selectors of a request for `rt`, custom resources' selectable fields included.
    pub fn for_request(state: &State, rt: &ResourceType, q: &Query) -> ApiResult<Filter> {
        let Some(custom) = state.registry.custom(rt) else {
            return Filter::from_query(rt, q);
        };
        let labels = Filter::label_selector(q)?;
        let fields = q
            .get("fieldSelector")
            .map(FieldSelector::parse)
            .transpose()
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let paths: Vec<String> = custom
            .selectable_fields
            .iter()
            .map(|p| p.trim_start_matches('.').to_string())
            .collect();
        if let Some(f) = &fields {
            for term in f.terms() {
                let known = matches!(term.field.as_str(), "metadata.name" | "metadata.namespace")
                    || paths.contains(&term.field);
                if !known {
                    return Err(ApiError::bad_request(format!(
                        "field label not supported: {}",
                        term.field
                    )));
                }
            }
        }
        Ok(Filter {
            labels,
            fields,
            custom_fields: Some(paths),
        })
    }

    /// The label selector of a request alone (for reads that take no field selector).
    pub fn labels_only(q: &Query) -> ApiResult<Filter> {
        Ok(Filter {
            labels: Filter::label_selector(q)?,
            fields: None,
            custom_fields: None,
        })
    }

    fn label_selector(q: &Query) -> ApiResult<Option<LabelSelector>> {
        q.get("labelSelector")
            .map(LabelSelector::parse)
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))
    }

    /// A custom resource's value of a selectable field as a selector compares it: strings as
    /// they are, numbers and booleans printed, anything missing as "".
    fn custom_field(v: &Value, field: &str) -> String {
        match v.pointer(&crate::crds::json_pointer(field)) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(Value::Bool(b)) => b.to_string(),
            _ => String::new(),
        }
    }

    fn custom_matches(&self, v: &Value) -> bool {
        let Some(f) = &self.fields else {
            return true;
        };
        f.terms().iter().all(|t| {
            let actual = Filter::custom_field(v, &t.field);
            match t.op {
                tandem_core::selector::FieldOp::Equals => actual == t.value,
                tandem_core::selector::FieldOp::NotEquals => actual != t.value,
            }
        })
    }

    pub fn from_query(rt: &ResourceType, q: &Query) -> ApiResult<Filter> {
        let labels = Filter::label_selector(q)?;
        let fields = q
            .get("fieldSelector")
            .map(FieldSelector::parse)
            .transpose()
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        if let Some(f) = &fields {
            f.validate(rt)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        Ok(Filter {
            labels,
            fields,
            custom_fields: None,
        })
    }

    pub fn matches(&self, rt: &ResourceType, v: &Value) -> bool {
        if let Some(l) = &self.labels
            && !l.matches(&meta::labels(v))
        {
            return false;
        }
        if self.custom_fields.is_some() {
            return self.custom_matches(v);
        }
        if let Some(f) = &self.fields {
            return f.matches(rt, v).unwrap_or(false);
        }
        true
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_none() && self.fields.is_none()
    }

    /// [`Filter::matches`] for a cached object, through its kept labels and fields: the object
    /// is parsed at most once, whatever the number of watchers and selectors.
    pub fn accepts(&self, rt: &ResourceType, o: &Object) -> bool {
        if self.is_empty() {
            return true;
        }
        let attrs = o.attrs(rt);
        if let Some(l) = &self.labels
            && !l.matches(&attrs.labels)
        {
            return false;
        }
        if self.custom_fields.is_some() && self.fields.is_some() {
            return self.custom_matches(&o.value());
        }
        if let Some(f) = &self.fields {
            return f.matches_fields(rt, &attrs.fields).unwrap_or(false);
        }
        true
    }
}

fn int_param(q: &Query, key: &str) -> ApiResult<Option<i64>> {
    q.int(key).map_err(ApiError::bad_request)
}

fn parse_rv(s: &str) -> ApiResult<Revision> {
    s.parse::<Revision>()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

impl State {
    pub fn resource(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> ApiResult<Arc<ResourceType>> {
        self.registry
            .by_plural(group, version, plural)
            .ok_or_else(ApiError::no_route)
    }

    // ----- reads -----

    /// GET of one object, from the store (a consistent read).
    pub async fn get(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> ApiResult<Value> {
        let kv = self
            .store
            .get(&rt.key(ns, name))
            .await?
            .ok_or_else(|| ApiError::not_found(rt, name))?;
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
                return Ok(self.page_reply(ctx, rt, after, snap.revision, limit, &filter));
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
                    return Ok(self.list_reply(ctx, rt, items, revision, next, None));
                }
            } else if let Some(min) = rv_param.and_then(|r| r.parse::<Revision>().ok()) {
                self.cache.wait_for(min, Duration::from_secs(3)).await;
            }
            let snap = self.cache.snapshot(rt, &prefix, |o| filter.accepts(rt, o));
            return Ok(self.page_reply(ctx, rt, snap.items, snap.revision, limit, &filter));
        };
        Ok(self.list_reply(ctx, rt, items, revision, next, None))
    }

    /// One page of a cached snapshot: the first `limit` items, a continue token when more remain,
    /// and `remainingItemCount` when no selector filtered the list (upstream only knows it then).
    fn page_reply(
        &self,
        ctx: &Ctx,
        rt: &ResourceType,
        mut items: Vec<Arc<Object>>,
        revision: Revision,
        limit: Option<usize>,
        filter: &Filter,
    ) -> Reply {
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
        self.list_reply(ctx, rt, items, revision, next, remaining)
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

    // ----- the write pipeline -----

    /// Decodes a body into the type of `rt`, applying `fieldValidation` to unknown fields.
    fn decode_typed(&self, ctx: &mut Ctx, rt: &ResourceType, body: Value) -> ApiResult<Value> {
        if let Some(av) = body.get("apiVersion").and_then(Value::as_str)
            && av != rt.api_version()
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                rt.api_version()
            )));
        }
        if let Some(kind) = body.get("kind").and_then(Value::as_str)
            && kind != rt.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                rt.kind
            )));
        }
        let decoded = tandem_core::typed::roundtrip(rt, body)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        report_unknown_fields(ctx, &decoded.unknown_fields)?;
        let mut object = decoded.object;
        // A built-in kind written at another served version is stored converted.
        tandem_core::conversion::to_storage(rt, &mut object);
        drop_empty_metadata(&mut object);
        if let Some(schema) = self.custom_schema(rt) {
            // Upstream prunes unknown fields of custom resources (reported like unknown fields
            // of built-in kinds under `fieldValidation`), then applies the schema's defaults.
            report_unknown_fields(ctx, &schema.prune(&mut object))?;
            schema.default(&mut object);
        }
        Ok(object)
    }

    /// The compiled schema of a custom resource's version (`None` for built-in kinds).
    pub fn custom_schema(
        &self,
        rt: &ResourceType,
    ) -> Option<Arc<tandem_core::apiextensions::schema::Structural>> {
        self.registry.custom(rt)?.schema.clone()
    }

    async fn namespace_allows_create(&self, ns: &str) -> ApiResult<()> {
        let nsrt = self.resource("", "v1", "namespaces")?;
        let key = nsrt.key(None, ns);
        let terminating = |value: &Value| {
            meta::is_deleting(value)
                || value.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating")
        };
        let is_terminating = match self.cache.get(&nsrt, &key) {
            Some(o) => terminating(&o.value()),
            None => match self.store.get(&key).await? {
                Some(kv) => terminating(&parse_stored(&nsrt, &kv)?),
                None => return Err(ApiError::not_found(&nsrt, ns)),
            },
        };
        if is_terminating {
            return Err(ApiError {
                details: Some(
                    json!({"causes": [{"reason": "NamespaceTerminating", "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}]}),
                ),
                ..ApiError::forbidden(format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ))
            });
        }
        Ok(())
    }

    /// Create: decode, fill system metadata, default, validate, store.
    pub async fn create(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        body: Value,
    ) -> ApiResult<Reply> {
        if is_service(rt) {
            return self.create_service(ctx, rt, ns, body).await;
        }
        let mut obj = self.prepare_create(ctx, rt, ns, body).await?;
        let name = meta::name(&obj).unwrap_or_default().to_string();
        self.admit_quota(rt, &obj, None, ctx.dry_run()).await?;
        if ctx.dry_run() {
            return Ok(Reply::Value(201, obj));
        }
        let key = rt.key(ns, &name);
        let stored = to_stored(&mut obj)?;
        let kv = self
            .store
            .create(&key, stored.clone())
            .await
            .map_err(|e| match e {
                StoreError::AlreadyExists(_) => ApiError::already_exists(rt, &name),
                other => other.into(),
            })?;
        Ok(self.created_reply(ctx, obj, &stored, kv.mod_revision))
    }

    /// The 201 answer to a create: the stored encoding with the revision stamped in where the
    /// client takes JSON or protobuf (no re-encoding).
    fn created_reply(&self, ctx: &Ctx, obj: Value, stored: &Bytes, rev: Revision) -> Reply {
        if matches!(ctx.format, Format::Json | Format::Protobuf { .. })
            && let Some(bytes) = crate::cache::stamp_resource_version(stored, rev)
        {
            return Reply::Raw(201, bytes, "application/json");
        }
        Reply::Value(201, with_rv(obj, rev))
    }

    /// Create of a Service: under the Service lock, addresses and ports chosen from the cache
    /// and claimed in the store before the write (`service_claims`); one another server claimed
    /// meanwhile is avoided and the choice made again, unless the request asked for it.
    async fn create_service(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        body: Value,
    ) -> ApiResult<Reply> {
        let _service_guard = self.service_lock.lock().await;
        let result = self.create_service_locked(ctx, rt, ns, body).await;
        *self
            .service_alloc_avoid
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Default::default();
        result
    }

    async fn create_service_locked(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        body: Value,
    ) -> ApiResult<Reply> {
        const ATTEMPTS: usize = 8;
        for attempt in 1..=ATTEMPTS {
            let mut obj = self.prepare_create(ctx, rt, ns, body.clone()).await?;
            let name = meta::name(&obj).unwrap_or_default().to_string();
            self.admit_quota(rt, &obj, None, ctx.dry_run()).await?;
            if ctx.dry_run() {
                return Ok(Reply::Value(201, obj));
            }
            let key = rt.key(ns, &name);
            let made = match crate::service_claims::claim(self, &key, &obj, None).await? {
                Ok(made) => made,
                Err(crate::service_claims::Taken(r)) => {
                    if attempt == ATTEMPTS || crate::service_claims::asked_for(&body, r) {
                        let error = crate::service_claims::taken_error(&obj, r);
                        return Err(ApiError::invalid(rt, &name, &[error]));
                    }
                    let mut avoid = self
                        .service_alloc_avoid
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    match r {
                        crate::service_claims::Resource::Ip(ip) => avoid.0.insert(ip),
                        crate::service_claims::Resource::NodePort(p) => avoid.1.insert(p),
                    };
                    continue;
                }
            };
            let stored = to_stored(&mut obj)?;
            let kv = match self.store.create(&key, stored.clone()).await {
                Ok(kv) => kv,
                Err(e) => {
                    crate::service_claims::release_made(self, made).await;
                    return Err(match e {
                        StoreError::AlreadyExists(_) => ApiError::already_exists(rt, &name),
                        other => other.into(),
                    });
                }
            };
            self.cache
                .wait_for(kv.mod_revision, Duration::from_secs(3))
                .await;
            return Ok(self.created_reply(ctx, obj, &stored, kv.mod_revision));
        }
        Err(ApiError::internal(
            "no free service address or port could be claimed",
        ))
    }

    async fn prepare_create(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        body: Value,
    ) -> ApiResult<Value> {
        if let (Some(body_ns), Some(url_ns)) = (meta::namespace(&body), ns)
            && !body_ns.is_empty()
            && body_ns != url_ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let mut obj = self.decode_typed(ctx, rt, body)?;
        let m = meta::meta_mut(&mut obj);
        if rt.namespaced {
            if let Some(ns) = ns {
                m.insert("namespace".into(), json!(ns));
            }
        } else {
            m.remove("namespace");
        }
        let has_name = m
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if !has_name {
            match m
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                Some(prefix) => {
                    let n = meta::generate_name(prefix);
                    m.insert("name".into(), json!(n));
                }
                None => {
                    return Err(ApiError::invalid(
                        rt,
                        "",
                        &[FieldError::required(
                            "metadata.name",
                            "name or generateName is required",
                        )],
                    ));
                }
            }
        }
        if let Some(rv) = m
            .get("resourceVersion")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            let name = m
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            return Err(ApiError::invalid(
                rt,
                &name,
                &[FieldError::invalid(
                    "metadata.resourceVersion",
                    &json!(rv),
                    "resourceVersion should not be set on objects to be created",
                )],
            ));
        }
        let uid = meta::new_uid();
        m.insert("uid".into(), json!(uid));
        m.insert(
            "creationTimestamp".into(),
            json!(tandem_core::time::now_rfc3339()),
        );
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        let name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if rt.namespaced {
            match ns {
                Some(ns) => self.namespace_allows_create(ns).await?,
                None => {
                    return Err(ApiError::bad_request(
                        "the namespace of the object must be set for a namespaced resource",
                    ));
                }
            }
        }
        crate::pipeline::apply_defaults(rt, &mut obj);
        crate::pipeline::prepare_for_create(rt, &mut obj, &uid);
        if self.registry.custom(rt).is_some() {
            custom_prepare_for_create(rt, &mut obj);
        }
        let mut errors = Vec::new();
        run_admission(
            self,
            ctx,
            tandem_core::admission::Operation::Create,
            rt,
            &mut obj,
            None,
            &mut errors,
        )
        .await?;
        crate::auth::set_requester(&ctx.user, rt, &mut obj);
        crate::auth::admit_write(self, &ctx.user, "create", rt, None, Some(&obj), None)?;
        if is_service(rt) {
            errors.extend(crate::service_alloc::allocate(self, rt, &mut obj, None));
        }
        errors.extend(crate::pipeline::validate_create(rt, &obj));
        let schema = self.custom_schema(rt);
        if let Some(schema) = &schema {
            errors.extend(schema.validate(&obj));
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(rt, &name, &errors));
        }
        ctx.track(rt, schema.as_deref(), None, &mut obj);
        Ok(obj)
    }

    /// Finishes an update of `old` (stored at `old_rev`) to `new`: system fields, strategy,
    /// defaults, validation, then a compare-and-swap write. Removing the last finalizer of an
    /// object being deleted deletes it, as upstream's store does.
    async fn commit_update(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        at: ObjectKey<'_>,
        mut new: Value,
        stored: Stored<'_>,
        sub: Option<&str>,
    ) -> ApiResult<Reply> {
        let ObjectKey { ns, name } = at;
        let Stored {
            value: old,
            rev: old_rev,
        } = stored;
        {
            let m = meta::meta_mut(&mut new);
            for f in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ] {
                match old.pointer(&format!("/metadata/{f}")) {
                    Some(v) => m.insert(f.into(), v.clone()),
                    None => m.remove(f),
                };
            }
            m.insert("name".into(), json!(name));
            if let Some(ns) = ns {
                m.insert("namespace".into(), json!(ns));
            }
            m.remove("selfLink");
        }
        crate::pipeline::apply_defaults(rt, &mut new);
        match sub {
            Some("status") => crate::pipeline::prepare_for_status_update(rt, &mut new, old),
            Some("ephemeralcontainers") => {
                tandem_core::strategy::prepare_for_ephemeral_containers_update(&mut new, old)
            }
            Some("approval") => {
                // Only the Approved/Denied conditions change through `approval` (upstream's
                // `csrApprovalStrategy`); the rest of the object stays as stored.
                let conditions = new
                    .pointer("/status/conditions")
                    .cloned()
                    .unwrap_or_else(|| json!([]));
                new = old.clone();
                new["status"]["conditions"] = conditions;
            }
            Some("finalize") => {
                // Only spec.finalizers of a Namespace changes through `finalize`
                // (upstream `namespaceFinalizeStrategy`).
                let finalizers = new
                    .pointer("/spec/finalizers")
                    .cloned()
                    .unwrap_or_else(|| json!([]));
                new = old.clone();
                new["spec"]["finalizers"] = finalizers;
            }
            _ => {
                crate::pipeline::prepare_for_update(rt, &mut new, old);
                if self.registry.custom(rt).is_some() {
                    custom_prepare_for_update(rt, &mut new, old);
                }
            }
        }
        crate::auth::admit_write(self, &ctx.user, "update", rt, sub, Some(&new), Some(old))?;
        let mut errors = Vec::new();
        if sub.is_none() {
            run_admission(
                self,
                ctx,
                tandem_core::admission::Operation::Update,
                rt,
                &mut new,
                Some(old),
                &mut errors,
            )
            .await?;
            if is_service(rt) {
                errors.extend(crate::service_alloc::allocate(
                    self,
                    rt,
                    &mut new,
                    Some(old),
                ));
            }
        }
        errors.extend(match sub {
            Some("status" | "finalize" | "approval") => {
                crate::pipeline::validate_status_update(rt, &new, old)
            }
            Some("ephemeralcontainers") => {
                let mut errs =
                    tandem_core::validation::ephemeral::validate_ephemeral_containers_update(
                        &new, old,
                    );
                errs.extend(self.ephemeral_container_os_errors(&new));
                errs
            }
            _ => crate::pipeline::validate_update(rt, &new, old),
        });
        let schema = self.custom_schema(rt);
        if let Some(schema) = &schema {
            errors.extend(schema.validate_update(&new, old));
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(rt, name, &errors));
        }
        if sub.is_none() {
            ctx.track(rt, schema.as_deref(), Some(old), &mut new);
            self.admit_quota(rt, &new, Some(old), ctx.dry_run()).await?;
        }
        let key = rt.key(ns, name);
        let finished = meta::is_deleting(&new)
            && meta::finalizers(&new).is_empty()
            && !has_spec_finalizers(rt, &new);
        if ctx.dry_run() {
            return Ok(Reply::Value(200, new));
        }
        let service = is_service(rt) && sub.is_none();
        if finished {
            let kv = self
                .store
                .delete(&key, Some(old_rev))
                .await
                .map_err(|e| map_write_err(rt, name, e))?;
            if service {
                crate::service_claims::release_dropped(self, &key, old, None).await;
            }
            return Ok(Reply::Value(200, with_rv(new, kv.mod_revision)));
        }
        if same_ignoring_resource_version(&new, old) {
            // Nothing changed: upstream skips the write and keeps the resourceVersion.
            return Ok(Reply::Value(200, with_rv(new, old_rev)));
        }
        let made = if service {
            match crate::service_claims::claim(self, &key, &new, Some(old)).await? {
                Ok(made) => Some(made),
                Err(crate::service_claims::Taken(r)) => {
                    let error = crate::service_claims::taken_error(&new, r);
                    return Err(ApiError::invalid(rt, name, &[error]));
                }
            }
        } else {
            None
        };
        let bytes = to_stored(&mut new)?;
        let kv = match self.store.update(&key, bytes, Some(old_rev)).await {
            Ok(kv) => kv,
            Err(e) => {
                if let Some(made) = made {
                    crate::service_claims::release_made(self, made).await;
                }
                return Err(map_write_err(rt, name, e));
            }
        };
        if service {
            crate::service_claims::release_dropped(self, &key, old, Some(&new)).await;
        }
        Ok(Reply::Value(200, with_rv(new, kv.mod_revision)))
    }

    /// PUT of an object or its status.
    pub async fn update(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
        sub: Option<&str>,
    ) -> ApiResult<Reply> {
        if let Some(body_name) = meta::name(&body)
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let (Some(body_ns), Some(url_ns)) = (meta::namespace(&body), ns)
            && !body_ns.is_empty()
            && body_ns != url_ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let new = self.decode_typed(ctx, rt, body)?;
        let _service_guard = if is_service(rt) {
            Some(self.service_lock.lock().await)
        } else {
            None
        };
        let precondition = meta::resource_version(&new).map(parse_rv).transpose()?;
        let key = rt.key(ns, name);
        let kv = self
            .store
            .get(&key)
            .await?
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        if precondition.is_some_and(|p| p != kv.mod_revision) {
            return Err(ApiError::conflict(rt, name));
        }
        let old = parse_stored(rt, &kv)?;
        self.commit_update(
            ctx,
            rt,
            ObjectKey { ns, name },
            new,
            Stored {
                value: &old,
                rev: kv.mod_revision,
            },
            sub,
        )
        .await
    }

    /// PATCH (JSON, merge, strategic merge) and server-side apply.
    pub async fn patch(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: &[u8],
        sub: Option<&str>,
    ) -> ApiResult<Reply> {
        let ct = ctx.content_type.clone().unwrap_or_default();
        let ct = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let kind = match ct.as_str() {
            "application/json-patch+json" => PatchKind::Json,
            "application/merge-patch+json" => PatchKind::Merge,
            "application/strategic-merge-patch+json" => PatchKind::Strategic,
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => PatchKind::Apply,
            other => return Err(ApiError::unsupported_media_type(other)),
        };
        let patch = decode_body(
            body,
            Some(if kind == PatchKind::Apply {
                "application/yaml"
            } else {
                "application/json"
            }),
        )?;
        let key = rt.key(ns, name);
        let mut service_guard = if is_service(rt) {
            Some(self.service_lock.lock().await)
        } else {
            None
        };
        for _attempt in 0..8 {
            let current = self.store.get(&key).await?;
            let Some(kv) = current else {
                if kind == PatchKind::Apply {
                    let manager = ctx
                        .query
                        .get("fieldManager")
                        .unwrap_or("unknown")
                        .to_string();
                    let force = ctx.query.bool("force");
                    let now = tandem_core::time::now_rfc3339();
                    let def = tandem_core::openapi::root_definition(&rt.api_version(), &rt.kind);
                    let schema = self.custom_schema(rt);
                    let schema = schema.as_deref().map_or(def.into(), Schema::Structural);
                    let obj = tandem_core::patch::server_side_apply(
                        None, &patch, &manager, force, schema, &now,
                    )
                    .map_err(|e| apply_error(rt, name, e))?;
                    ctx.applying = true;
                    // `create` takes the Service lock itself.
                    drop(service_guard.take());
                    return self.create(ctx, rt, ns, obj).await;
                }
                return Err(ApiError::not_found(rt, name));
            };
            let old = parse_stored(rt, &kv)?;
            // A scale patch applies to the Scale view of the object.
            let base = if sub == Some("scale") {
                self.scale_of(rt, &old)
            } else if tandem_core::conversion::converts(rt) {
                // The patch speaks the requested version: apply it to the object at it.
                let mut view = old.clone();
                tandem_core::conversion::convert_object(&mut view, &rt.api_version());
                view
            } else {
                old.clone()
            };
            let patched = self.apply_patch(ctx, rt, name, kind, &base, &patch)?;
            if let Some(rv) = meta::resource_version(&patched)
                && parse_rv(rv)? != kv.mod_revision
            {
                return Err(ApiError::conflict(rt, name));
            }
            if let (Some(pn), true) = (meta::name(&patched), kind != PatchKind::Apply)
                && pn != name
            {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({pn}) does not match the name on the URL ({name})"
                )));
            }
            if sub == Some("scale") {
                return self
                    .write_scale(
                        ctx,
                        rt,
                        ObjectKey { ns, name },
                        Stored {
                            value: &old,
                            rev: kv.mod_revision,
                        },
                        &patched,
                    )
                    .await;
            }
            let new = self.decode_typed(ctx, rt, patched)?;
            ctx.applying = kind == PatchKind::Apply;
            match self
                .commit_update(
                    ctx,
                    rt,
                    ObjectKey { ns, name },
                    new,
                    Stored {
                        value: &old,
                        rev: kv.mod_revision,
                    },
                    sub,
                )
                .await
            {
                // A patch without its own resourceVersion precondition is re-applied to the new
                // state, as upstream's patcher retries on conflict.
                Err(e)
                    if e.code == 409
                        && e.reason == "Conflict"
                        && !patch_sets_resource_version(kind, &patch) =>
                {
                    continue;
                }
                other => return other,
            }
        }
        Err(ApiError::conflict(rt, name))
    }

    fn apply_patch(
        &self,
        ctx: &Ctx,
        rt: &ResourceType,
        name: &str,
        kind: PatchKind,
        old: &Value,
        patch: &Value,
    ) -> ApiResult<Value> {
        let patch_error = |e: tandem_core::patch::PatchError| match e.status_code() {
            422 => ApiError::invalid(
                rt,
                name,
                &[FieldError::invalid(
                    "patch",
                    &json!(patch.to_string()),
                    e.to_string(),
                )],
            ),
            413 => ApiError::new(413, "RequestEntityTooLarge", e.to_string()),
            _ => ApiError::bad_request(e.to_string()),
        };
        let def = if old.get("kind").and_then(Value::as_str) == Some("Scale") {
            None
        } else {
            tandem_core::openapi::root_definition(&rt.api_version(), &rt.kind)
        };
        match kind {
            PatchKind::Json => tandem_core::patch::json_patch(old, patch).map_err(patch_error),
            PatchKind::Merge => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("merge patch must be a JSON object"));
                }
                Ok(tandem_core::patch::merge_patch(old, patch))
            }
            PatchKind::Strategic => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request(
                        "strategic merge patch must be a JSON object",
                    ));
                }
                tandem_core::patch::strategic_merge_patch(old, patch, def).map_err(patch_error)
            }
            PatchKind::Apply => {
                let manager = ctx.query.get("fieldManager").ok_or_else(|| ApiError::bad_request("PATCH requests of type application/apply-patch+yaml require a fieldManager query parameter"))?;
                let now = tandem_core::time::now_rfc3339();
                // A custom resource merges by its structural schema (not the Scale view's).
                let custom =
                    def.is_none() && old.get("kind").and_then(Value::as_str) != Some("Scale");
                let schema = custom.then(|| self.custom_schema(rt)).flatten();
                tandem_core::patch::server_side_apply(
                    Some(old),
                    patch,
                    manager,
                    ctx.query.bool("force"),
                    schema.as_deref().map_or(def.into(), Schema::Structural),
                    &now,
                )
                .map_err(|e| apply_error(rt, name, e))
            }
        }
    }

    // ----- scale -----

    /// The `autoscaling/v1` Scale of a workload.
    pub fn scale_of(&self, rt: &ResourceType, obj: &Value) -> Value {
        if let Some(paths) = self.registry.custom(rt).and_then(|c| c.scale.clone()) {
            return custom_scale(obj, &paths);
        }
        let replicas_at = |pointer: &str| obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0);
        let selector =
            obj.pointer("/spec/selector")
                .map(|s| match s.get("matchLabels").or(Some(s)) {
                    Some(Value::Object(m))
                        if rt.kind != "ReplicationController" || !m.is_empty() =>
                    {
                        let mut parts: Vec<String> = m
                            .iter()
                            .filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}")))
                            .collect();
                        parts.sort();
                        parts.join(",")
                    }
                    _ => String::new(),
                });
        scale_object(
            obj,
            replicas_at("/spec/replicas"),
            replicas_at("/status/replicas"),
            &selector.unwrap_or_default(),
        )
    }

    /// PUT of a Scale.
    pub async fn update_scale(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
    ) -> ApiResult<Reply> {
        let key = rt.key(ns, name);
        let kv = self
            .store
            .get(&key)
            .await?
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        let old = parse_stored(rt, &kv)?;
        if let Some(rv) = meta::resource_version(&body)
            && parse_rv(rv)? != kv.mod_revision
        {
            return Err(ApiError::conflict(rt, name));
        }
        self.write_scale(
            ctx,
            rt,
            ObjectKey { ns, name },
            Stored {
                value: &old,
                rev: kv.mod_revision,
            },
            &body,
        )
        .await
    }

    async fn write_scale(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        at: ObjectKey<'_>,
        stored: Stored<'_>,
        scale: &Value,
    ) -> ApiResult<Reply> {
        let name = at.name;
        let old = stored.value;
        let replicas = match scale.pointer("/spec/replicas") {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_i64()
                .ok_or_else(|| ApiError::bad_request("Scale spec.replicas must be an integer"))?,
        };
        if replicas < 0 {
            let scale_rt = ResourceType {
                kind: "Scale".into(),
                ..rt.clone()
            };
            return Err(ApiError::invalid(
                &scale_rt,
                name,
                &[FieldError::invalid(
                    "spec.replicas",
                    &json!(replicas),
                    "must be greater than or equal to 0",
                )],
            ));
        }
        let mut new = old.clone();
        match self.registry.custom(rt).and_then(|c| c.scale.clone()) {
            Some(paths) => set_at_pointer(
                &mut new,
                &crate::crds::json_pointer(&paths.spec_replicas),
                json!(replicas),
            ),
            None => new["spec"]["replicas"] = json!(replicas),
        }
        match self.commit_update(ctx, rt, at, new, stored, None).await? {
            Reply::Value(code, v) => Ok(Reply::Value(code, self.scale_of(rt, &v))),
            other => Ok(other),
        }
    }

    // ----- binding -----

    /// POST pods/<name>/binding: assigns the pod to a node, once (upstream `BindingREST.Create`).
    pub async fn bind(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
    ) -> ApiResult<Reply> {
        let node = body
            .pointer("/target/name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let Some(node) = node else {
            let binding = ResourceType {
                kind: "Binding".into(),
                ..rt.clone()
            };
            return Err(ApiError::invalid(
                &binding,
                name,
                &[FieldError::required("target.name", "")],
            ));
        };
        let key = rt.key(ns, name);
        // Upstream names the resource `pods/binding` in these conflicts.
        let binding_rt = ResourceType {
            plural: "pods/binding".into(),
            ..rt.clone()
        };
        // The first attempt starts from the watch cache, as upstream's `GuaranteedUpdate` starts
        // from a cached object: the compare-and-swap on its revision catches a stale copy, and any
        // refusal based on the cached copy is re-checked against the store before it is returned.
        // Binding a pod the scheduler saw on a watch almost always finds it cached, which saves a
        // store read per binding.
        let mut from_cache = true;
        for _ in 0..5 {
            let cached = if from_cache {
                self.cache.get(rt, &key)
            } else {
                None
            };
            let (stored, rev, cached) = match cached {
                Some(o) => (o.json.clone(), o.rv, true),
                None => {
                    let kv = self
                        .store
                        .get(&key)
                        .await?
                        .ok_or_else(|| ApiError::not_found(rt, name))?;
                    (kv.value, kv.mod_revision, false)
                }
            };
            from_cache = false;
            let now = tandem_core::time::now_rfc3339();
            let bytes = match binding::assign(&stored, name, &node, &now) {
                Ok(Assignment::Assigned(bytes)) => bytes,
                // A refusal based on the cached copy is checked again against the store.
                Ok(Assignment::Refused(_)) if cached => continue,
                Ok(Assignment::Refused(message)) => {
                    return Err(ApiError::conflict_msg(&binding_rt, name, &message));
                }
                Err(e) => {
                    return Err(ApiError::internal(format!(
                        "stored {} {key} is corrupt: {e}",
                        rt.kind
                    )));
                }
            };
            if ctx.dry_run() {
                return Ok(Reply::Value(201, success_status()));
            }
            match self.store.update(&key, bytes, Some(rev)).await {
                Ok(_) => return Ok(Reply::Value(201, success_status())),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(map_write_err(rt, name, e)),
            }
        }
        Err(ApiError::conflict(rt, name))
    }

    // ----- delete -----

    /// DELETE of one object, honouring preconditions, grace periods, finalizers and the
    /// propagation policy (upstream `Store.Delete` with `BeforeDelete`).
    pub async fn delete(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        opts: &Value,
    ) -> ApiResult<Reply> {
        let key = rt.key(ns, name);
        let grace_param = int_param(&ctx.query, "gracePeriodSeconds")?
            .or_else(|| opts.get("gracePeriodSeconds").and_then(Value::as_i64));
        let propagation = ctx
            .query
            .get("propagationPolicy")
            .map(str::to_string)
            .or_else(|| {
                opts.get("propagationPolicy")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .or_else(
                || match opts.get("orphanDependents").and_then(Value::as_bool) {
                    Some(true) => Some("Orphan".to_string()),
                    _ => None,
                },
            );
        if let Some(p) = &propagation
            && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
        {
            return Err(ApiError::invalid(
                rt,
                name,
                &[FieldError::not_supported(
                    "propagationPolicy",
                    &json!(p),
                    &["Foreground", "Background", "Orphan"],
                )],
            ));
        }
        if ctx.query.get("dryRun").is_some_and(|d| d != "All") {
            return Err(ApiError::bad_request(
                "unsupported dryRun value: only All is supported",
            ));
        }
        // DeleteOptions may carry the dry run in the body (kube-rs does) instead of the query.
        let body_dry_run = opts
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v.as_str() == Some("All")));
        let dry_run = ctx.dry_run() || body_dry_run;
        for _ in 0..8 {
            let kv = self
                .store
                .get(&key)
                .await?
                .ok_or_else(|| ApiError::not_found(rt, name))?;
            let old = parse_stored(rt, &kv)?;
            crate::auth::admit_write(self, &ctx.user, "delete", rt, None, None, Some(&old))?;
            if let Some(uid) = opts.pointer("/preconditions/uid").and_then(Value::as_str)
                && Some(uid) != meta::uid(&old)
            {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta::uid(&old).unwrap_or("")
                    ),
                ));
            }
            if let Some(rv) = opts
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                && parse_rv(rv)? != kv.mod_revision
            {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        kv.mod_revision
                    ),
                ));
            }
            let grace = self.grace_period(rt, &old, grace_param);
            let mut finalizers = meta::finalizers(&old);
            match propagation.as_deref() {
                Some("Foreground") if !finalizers.iter().any(|f| f == "foregroundDeletion") => {
                    finalizers.retain(|f| f != "orphan");
                    finalizers.push("foregroundDeletion".into());
                }
                Some("Orphan") if !finalizers.iter().any(|f| f == "orphan") => {
                    finalizers.retain(|f| f != "foregroundDeletion");
                    finalizers.push("orphan".into());
                }
                Some("Background") => {
                    finalizers.retain(|f| f != "orphan" && f != "foregroundDeletion")
                }
                _ => {}
            }
            let pending_spec = has_spec_finalizers(rt, &old);
            if finalizers.is_empty() && grace == 0 && !pending_spec {
                if dry_run {
                    return Ok(Reply::Value(200, old));
                }
                match self.store.delete(&key, Some(kv.mod_revision)).await {
                    Ok(d) => {
                        if is_service(rt) {
                            crate::service_claims::release_dropped(self, &key, &old, None).await;
                        }
                        return Ok(Reply::Value(200, with_rv(old, d.mod_revision)));
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(StoreError::NotFound(_)) => return Err(ApiError::not_found(rt, name)),
                    Err(e) => return Err(e.into()),
                }
            }
            // Graceful or finalized deletion: mark, and let the owner of the finalizer (or the
            // node agent, for pods) finish it.
            let mut new = old.clone();
            let now = tandem_core::time::unix(std::time::SystemTime::now()).0;
            let m = meta::meta_mut(&mut new);
            let existing_grace = m.get("deletionGracePeriodSeconds").and_then(Value::as_i64);
            if m.get("deletionTimestamp").is_none_or(Value::is_null)
                || existing_grace.is_some_and(|g| grace < g)
            {
                m.insert(
                    "deletionTimestamp".into(),
                    json!(tandem_core::time::format_rfc3339(now + grace)),
                );
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            if finalizers.is_empty() {
                m.remove("finalizers");
            } else {
                m.insert("finalizers".into(), json!(finalizers));
            }
            if rt.kind == "Namespace" && rt.group.is_empty() {
                new["status"]["phase"] = json!("Terminating");
            }
            if dry_run {
                return Ok(Reply::Value(200, new));
            }
            if same_ignoring_resource_version(&new, &old) {
                return Ok(Reply::Value(200, old));
            }
            let bytes = to_stored(&mut new)?;
            match self.store.update(&key, bytes, Some(kv.mod_revision)).await {
                Ok(u) => return Ok(Reply::Value(200, with_rv(new, u.mod_revision))),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(map_write_err(rt, name, e)),
            }
        }
        Err(ApiError::conflict(rt, name))
    }

    /// The grace period a deletion gets: pods on a node that are not finished get their
    /// `terminationGracePeriodSeconds` (or the request's), everything else is immediate.
    fn grace_period(&self, rt: &ResourceType, obj: &Value, requested: Option<i64>) -> i64 {
        if !(rt.group.is_empty() && rt.kind == "Pod") {
            return 0;
        }
        let scheduled = obj
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let finished = matches!(
            obj.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        if !scheduled || finished {
            return 0;
        }
        let grace = requested.unwrap_or_else(|| {
            obj.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(30)
        });
        // Upstream turns a requested 0 into 1 for pods unless forced; a 0 from the client after
        // the node agent has stopped the containers is the agent's final delete.
        grace.max(0)
    }

    /// DELETE of a collection: every object matching the selectors.
    pub async fn delete_collection(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        opts: &Value,
    ) -> ApiResult<Reply> {
        let filter = Filter::for_request(self, rt, &ctx.query)?;
        let prefix = rt.namespace_prefix(ns);
        let items = if crate::cache::caches(rt) {
            self.cache
                .snapshot(rt, &prefix, |o| filter.accepts(rt, o))
                .items
        } else {
            let rev = self.store.current_revision();
            self.list_from_store(rt, &prefix, None, None, rev, &filter)
                .await?
                .0
        };
        let mut deleted = Vec::new();
        for obj in items {
            let name = meta::name(&obj.value()).unwrap_or_default().to_string();
            let ns = obj.namespace();
            match self.delete(ctx, rt, ns.as_deref(), &name, opts).await {
                Ok(Reply::Value(_, v)) => deleted.push(v),
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Reply::Value(
            200,
            json!({"kind": rt.list_kind(), "apiVersion": rt.api_version(), "metadata": {"resourceVersion": self.store.current_revision().to_string()}, "items": deleted}),
        ))
    }
}

/// Maps a server-side apply failure: conflicts are 409 Conflict with upstream's message and one
/// cause per conflicting field, as upstream's `fieldmanager.NewConflictError` builds them.
fn apply_error(rt: &ResourceType, name: &str, e: tandem_core::patch::ApplyError) -> ApiError {
    use tandem_core::patch::ApplyError;
    match e {
        ApplyError::Conflict(conflicts) => {
            let causes: Vec<Value> = conflicts.iter().map(|c| json!({"reason": "FieldManagerConflict", "message": c.cause_message(), "field": c.path})).collect();
            let message = ApplyError::Conflict(conflicts).to_string();
            let mut d = json!({"name": name, "kind": rt.plural, "causes": causes});
            if !rt.group.is_empty() {
                d["group"] = json!(rt.group);
            }
            ApiError {
                details: Some(d),
                ..ApiError::new(409, "Conflict", message)
            }
        }
        ApplyError::Invalid(msg) => ApiError::bad_request(msg),
        ApplyError::Patch(p) => match p.status_code() {
            422 => ApiError::invalid(
                rt,
                name,
                &[FieldError::invalid("patch", &json!(""), p.to_string())],
            ),
            _ => ApiError::bad_request(p.to_string()),
        },
    }
}

/// Whether a patch body states a resourceVersion (an optimistic-concurrency precondition).
fn patch_sets_resource_version(kind: PatchKind, patch: &Value) -> bool {
    match kind {
        PatchKind::Json => patch.as_array().is_some_and(|ops| {
            ops.iter().any(|op| {
                op.get("path").and_then(Value::as_str) == Some("/metadata/resourceVersion")
                    && op.get("op").and_then(Value::as_str) != Some("test")
            })
        }),
        _ => patch
            .pointer("/metadata/resourceVersion")
            .is_some_and(|v| !v.is_null()),
    }
}

/// Upstream's ObjectMeta fields are `omitempty`: an empty labels or annotations map (or finalizer,
/// owner reference or managed field list) is not stored, so `kubectl label x key-` leaves no `{}`.
fn drop_empty_metadata(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "managedFields",
        ] {
            let empty = match m.get(key) {
                Some(Value::Object(o)) => o.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::Null) => true,
                _ => false,
            };
            if empty {
                m.remove(key);
            }
        }
    }
}

fn has_spec_finalizers(rt: &ResourceType, obj: &Value) -> bool {
    rt.group.is_empty()
        && rt.kind == "Namespace"
        && obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
}

fn map_write_err(rt: &ResourceType, name: &str, e: StoreError) -> ApiError {
    match e {
        StoreError::Conflict { .. } => ApiError::conflict(rt, name),
        StoreError::NotFound(_) => ApiError::not_found(rt, name),
        StoreError::AlreadyExists(_) => ApiError::already_exists(rt, name),
        other => other.into(),
    }
}

/// A `Status` of success, as binding and some deletes return.
pub fn success_status() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

/// Where an object lives: its namespace (for namespaced types) and name.
#[derive(Debug, Clone, Copy)]
struct ObjectKey<'a> {
    ns: Option<&'a str>,
    name: &'a str,
}

/// An object as read from the store, with the revision a conditional write must match.
#[derive(Debug, Clone, Copy)]
struct Stored<'a> {
    value: &'a Value,
    rev: Revision,
}

/// The kinds of PATCH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

/// The `Scale` of a custom resource, read at its CRD's paths (upstream's
/// `apiextensions-apiserver/pkg/registry/customresource` `scaleFromCustomResource`): replicas
/// missing or not integers count as 0, the selector is the string at `labelSelectorPath`.
fn custom_scale(obj: &Value, paths: &crate::crds::ScalePaths) -> Value {
    let at = |path: &str| tandem_core::apiextensions::crd::evaluate_json_path(obj, path);
    let int_at = |path: &str| at(path).and_then(|v| v.as_i64()).unwrap_or(0);
    let selector = paths
        .label_selector
        .as_deref()
        .and_then(at)
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    scale_object(
        obj,
        int_at(&paths.spec_replicas),
        int_at(&paths.status_replicas),
        &selector,
    )
}

/// An `autoscaling/v1` `Scale` of `obj` with these figures.
fn scale_object(obj: &Value, spec_replicas: i64, status_replicas: i64, selector: &str) -> Value {
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta::name(obj),
            "namespace": meta::namespace(obj),
            "uid": meta::uid(obj),
            "resourceVersion": meta::resource_version(obj),
            "creationTimestamp": obj.pointer("/metadata/creationTimestamp"),
        },
        "spec": {"replicas": spec_replicas},
        "status": {"replicas": status_replicas, "selector": selector},
    })
}

/// Sets `value` at JSON pointer `pointer`, creating the objects on the way.
fn set_at_pointer(target: &mut Value, pointer: &str, value: Value) {
    let mut at = target;
    let parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    let Some((last, path)) = parts.split_last() else {
        return;
    };
    for part in path {
        if !at.get(part.as_str()).is_some_and(Value::is_object) {
            at[part.as_str()] = json!({});
        }
        at = &mut at[part.as_str()];
    }
    at[last.as_str()] = value;
}
