//! Field ownership of non-apply writes — create, update (PUT) and JSON, merge and strategic merge
//! patches — recorded as `operation: Update` entries of `metadata.managedFields`, as upstream's
//! `k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager` (`FieldManager.Update`,
//! `managedFieldsUpdater.Update`) and `sigs.k8s.io/structured-merge-diff` (`merge.Updater.Update`,
//! `typed.TypedValue.Compare`) do it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::apply::{
    Entry, FieldSet, ListKind, Path, Step, canonical, key_step, list_kind, stripped,
};
use super::schema::{Field, Schema, Ty};

/// Upstream's limit on a manager name, in bytes (`validation.FieldManagerMaxLength`).
const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// How deep the comparison walks; deeper parts of absurd objects are not tracked.
const MAX_DEPTH: usize = 200;

/// Records the fields `new` sets or changes relative to `old` (all of `new`'s fields on create) as
/// owned by `manager` with `operation: Update`, in `new`'s `metadata.managedFields`.
///
/// Mirrors upstream's `FieldManager.Update` for main-resource writes:
///
/// - the change is structured-merge-diff's comparison of the two objects: leaves that are added or
///   modified, plus maps, lists and list items that appear (these show as `".": {}` in
///   `fieldsV1`). Field paths use the same encoding as [`super::server_side_apply`]: associative
///   list items `k:{…}`, set members `v:…`, atomic structs (a `LabelSelector`) owned whole;
/// - there is one entry per manager, operation and apiVersion; a change merges into that entry's
///   previous set and stamps it with `now` (an RFC 3339 time); an entry whose fields did not
///   change keeps its time;
/// - an update takes ownership without conflict: the changed fields leave every other manager's
///   set, fields the write removed leave every set, and entries left empty are dropped;
/// - `apiVersion`, `kind`, `status`, `metadata.managedFields` and the system `metadata` fields
///   (`name`, `namespace`, `uid`, `resourceVersion`, `generation`, `creationTimestamp`, …) are
///   never owned;
/// - when nothing changed ownership, `metadata.managedFields` is `old`'s, untouched (a client that
///   dropped the field does not erase it);
/// - when the client sent a non-empty, well-formed `managedFields` different from `old`'s, it is
///   taken as the starting point instead (that is how clients edit or reset managed fields:
///   upstream documents `managedFields: [{}]` as "clear"); an empty list counts as not sent.
///
/// On create `old` is `None`; the comparison then starts from a zero object (an empty `metadata`
/// and, for built-in kinds, an empty `spec`), approximating upstream's comparison with a new
/// zero-valued Go object. Entries are sorted like upstream's `sortEncodedManagedFields` whenever
/// they change. `api_version` names the version the request was made in (`new`'s `apiVersion` if
/// empty); `schema` is the kind's OpenAPI definition or a custom resource's structural schema
/// (an `Option<&str>` definition name converts), if known.
///
/// The API server calls this after defaulting for creates and for every update or patch except
/// `application/apply-patch+yaml`, which records its own ownership.
pub fn track_update<'s>(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    schema: impl Into<Schema<'s>>,
    now: &str,
) {
    if !new.is_object() {
        return;
    }
    let ty = Ty::of(schema.into());
    let old_managed = old.and_then(|o| o.pointer("/metadata/managedFields"));
    let sent = new
        .pointer("/metadata/managedFields")
        .filter(|sent| Some(*sent) != old_managed && is_valid_managed_fields(sent))
        .cloned();
    let from_client = sent.is_some();
    let mut entries: Vec<Entry> = sent
        .as_ref()
        .or(old_managed)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Entry::parse).collect())
        .unwrap_or_default();

    let zero;
    let baseline = match old {
        Some(old) => old,
        None => {
            zero = zero_object(ty);
            &zero
        }
    };
    let Comparison {
        added: mut changed,
        modified,
        removed,
    } = Comparison::of(baseline, new, ty);
    changed.extend(modified);

    let api_version = match api_version {
        "" => new.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
        v => v,
    }
    .to_string();
    let mine = entries.iter().position(|e| {
        e.manager == manager
            && e.operation == "Update"
            && e.raw.get("apiVersion").and_then(Value::as_str) == Some(api_version.as_str())
            && e.is_main_resource()
    });
    for (i, e) in entries.iter_mut().enumerate() {
        let before = e.set.len();
        e.set
            .retain(|p| !removed.contains(p) && (Some(i) == mine || !changed.contains(p)));
        e.touched |= e.set.len() != before;
    }
    if !changed.is_empty() {
        match mine.and_then(|i| entries.get_mut(i)) {
            Some(e) => {
                e.set.extend(changed);
                e.raw.insert("time".into(), Value::String(now.to_string()));
                e.touched = true;
            }
            None => {
                let mut raw = Map::new();
                raw.insert("manager".into(), Value::String(manager.to_string()));
                raw.insert("operation".into(), Value::String("Update".into()));
                raw.insert("apiVersion".into(), Value::String(api_version.clone()));
                raw.insert("time".into(), Value::String(now.to_string()));
                entries.push(Entry {
                    raw,
                    manager: manager.to_string(),
                    operation: "Update".into(),
                    set: changed,
                    touched: true,
                });
            }
        }
    }

    let dirty = from_client || entries.iter().any(|e| e.touched || e.set.is_empty());
    if !dirty {
        set_managed_fields(new, old_managed.cloned());
        return;
    }
    entries.retain(|e| !e.set.is_empty());
    entries.sort_by_cached_key(sort_key);
    let managed: Vec<Value> = entries.into_iter().map(Entry::into_value).collect();
    set_managed_fields(new, (!managed.is_empty()).then_some(Value::Array(managed)));
}

/// The manager name upstream records for a request without `fieldManager`: the User-Agent up to
/// its first `/`, without unprintable characters, cut to 128 bytes (`prefixFromUserAgent` in
/// `k8s.io/apiserver/pkg/endpoints/handlers/create.go`). `kubectl/v1.32.0 (linux/amd64)
/// kubernetes/abc` gives `kubectl`.
///
/// "Unprintable" follows Go's `unicode.IsPrint` except for unassigned code points, which are kept.
pub fn manager_from_user_agent(user_agent: &str) -> String {
    let prefix = user_agent.split('/').next().unwrap_or_default();
    let mut out = String::new();
    for c in prefix.chars().filter(|c| is_print(*c)) {
        if out.len() + c.len_utf8() > FIELD_MANAGER_MAX_LENGTH {
            break;
        }
        out.push(c);
    }
    out
}

/// Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols and the ASCII space.
fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let format = matches!(c,
        '\u{ad}' | '\u{600}'..='\u{605}' | '\u{61c}' | '\u{6dd}' | '\u{70f}' | '\u{180e}'
        | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}'
        | '\u{e0001}' | '\u{e0020}'..='\u{e007f}');
    let private_use = matches!(c,
        '\u{e000}'..='\u{f8ff}' | '\u{f0000}'..='\u{ffffd}' | '\u{100000}'..='\u{10fffd}');
    !(c.is_control() || c.is_whitespace() || format || private_use)
}

/// Whether a `managedFields` the client sent is one upstream would decode and use: a non-empty
/// list of entries, each an object whose fields have the right shapes.
fn is_valid_managed_fields(v: &Value) -> bool {
    let Some(items) = v.as_array() else {
        return false;
    };
    !items.is_empty()
        && items.iter().all(|item| {
            let Some(m) = item.as_object() else {
                return false;
            };
            let string = |k: &str| m.get(k).is_none_or(Value::is_string);
            string("manager")
                && string("apiVersion")
                && string("time")
                && string("subresource")
                && m.get("operation")
                    .is_none_or(|o| matches!(o.as_str(), Some("Apply" | "Update")))
                && m.get("fieldsType")
                    .is_none_or(|t| t.as_str() == Some("FieldsV1"))
                && m.get("fieldsV1").is_none_or(Value::is_object)
        })
}

/// The object a create is compared with: what upstream's new zero-valued object has for the
/// common non-pointer structs, `metadata` and (for built-in kinds) `spec`.
fn zero_object(ty: Ty) -> Value {
    let mut m = Map::new();
    m.insert("metadata".into(), Value::Object(Map::new()));
    if matches!(ty.field("spec").ty, Ty::Def(_)) {
        m.insert("spec".into(), Value::Object(Map::new()));
    }
    Value::Object(m)
}

/// Upstream's `sortEncodedManagedFields` order: operation (`Apply` first), time, manager,
/// apiVersion, subresource.
fn sort_key(e: &Entry) -> [String; 5] {
    let field = |k: &str| {
        e.raw
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    [
        e.operation.clone(),
        field("time"),
        e.manager.clone(),
        field("apiVersion"),
        field("subresource"),
    ]
}

/// Sets (or, for `None`, removes) `metadata.managedFields`, creating `metadata` only if needed.
fn set_managed_fields(obj: &mut Value, managed: Option<Value>) {
    let Value::Object(root) = obj else {
        return;
    };
    match managed {
        Some(managed) => {
            let meta = root
                .entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()));
            if !meta.is_object() {
                *meta = Value::Object(Map::new());
            }
            if let Value::Object(meta) = meta {
                meta.insert("managedFields".into(), managed);
            }
        }
        None => {
            if let Some(Value::Object(meta)) = root.get_mut("metadata") {
                meta.remove("managedFields");
            }
        }
    }
}

/// What changed between two versions of an object: structured-merge-diff's `typed.Comparison`.
/// `null` counts as absent, as in the field sets of server-side apply.
#[derive(Debug, Default)]
struct Comparison {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

impl Comparison {
    fn of(old: &Value, new: &Value, ty: Ty) -> Comparison {
        let mut cmp = Comparison::default();
        let mut path = Path::new();
        cmp.object(Some(old), Some(new), ty, &mut path);
        cmp
    }

    /// Compares the values of one field (either side may be absent).
    fn value(&mut self, old: Option<&Value>, new: Option<&Value>, field: &Field, path: &mut Path) {
        let old = old.filter(|v| !v.is_null());
        let new = new.filter(|v| !v.is_null());
        match (old, new) {
            (None, None) => {}
            (Some(o), Some(n)) if !same_kind(o, n) => {
                self.value(Some(o), None, field, path);
                self.value(None, Some(n), field, path);
            }
            _ => match old.or(new) {
                Some(Value::Object(_)) => self.object(old, new, field.ty, path),
                Some(Value::Array(_)) => self.list(old, new, field, path),
                _ => self.leaf(old, new, path),
            },
        }
    }

    fn object(&mut self, old: Option<&Value>, new: Option<&Value>, ty: Ty, path: &mut Path) {
        if path.len() > MAX_DEPTH {
            return;
        }
        let old_map = old.and_then(Value::as_object);
        let new_map = new.and_then(Value::as_object);
        let atomic = ty.is_atomic();
        let empty = old_map.is_none_or(Map::is_empty) && new_map.is_none_or(Map::is_empty);
        if !path.is_empty() && (atomic || empty) {
            self.leaf(old, new, path);
            return;
        }
        let names: BTreeSet<&String> = old_map
            .into_iter()
            .chain(new_map)
            .flat_map(Map::keys)
            .collect();
        for name in names {
            if stripped(path, name) {
                continue;
            }
            let field = ty.field(name);
            path.push(Step::Field(name.clone()));
            self.value(
                old_map.and_then(|m| m.get(name)),
                new_map.and_then(|m| m.get(name)),
                &field,
                path,
            );
            path.pop();
        }
        self.presence(old, new, path);
    }

    fn list(&mut self, old: Option<&Value>, new: Option<&Value>, field: &Field, path: &mut Path) {
        if path.len() > MAX_DEPTH {
            return;
        }
        let old_items = old.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        let new_items = new.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        let kind = list_kind(field);
        if matches!(kind, ListKind::Atomic) || (old_items.is_empty() && new_items.is_empty()) {
            self.leaf(old, new, path);
            return;
        }
        let old_index = index(old_items, &kind);
        let new_index = index(new_items, &kind);
        let item_field = Field {
            strategy: None,
            ty: field.ty,
            list_keys: None,
        };
        let steps: BTreeSet<&Step> = old_index.keys().chain(new_index.keys()).collect();
        for step in steps {
            let (o, n) = (old_index.get(step).copied(), new_index.get(step).copied());
            path.push(step.clone());
            match kind {
                ListKind::Set => self.leaf(o, n, path),
                _ => self.value(o, n, &item_field, path),
            }
            path.pop();
        }
        self.presence(old, new, path);
    }

    fn leaf(&mut self, old: Option<&Value>, new: Option<&Value>, path: &Path) {
        if path.is_empty() {
            return;
        }
        match (old, new) {
            (None, Some(_)) => self.added.insert(path.clone()),
            (Some(_), None) => self.removed.insert(path.clone()),
            (Some(o), Some(n)) if o != n => self.modified.insert(path.clone()),
            _ => false,
        };
    }

    /// Upstream's post-item hook: a map, list or list item that appears or disappears is itself
    /// added or removed.
    fn presence(&mut self, old: Option<&Value>, new: Option<&Value>, path: &Path) {
        if path.is_empty() {
            return;
        }
        match (old, new) {
            (None, Some(_)) => self.added.insert(path.clone()),
            (Some(_), None) => self.removed.insert(path.clone()),
            _ => false,
        };
    }
}

fn same_kind(a: &Value, b: &Value) -> bool {
    matches!(
        (a, b),
        (Value::Object(_), Value::Object(_)) | (Value::Array(_), Value::Array(_))
    ) || !(a.is_object() || a.is_array() || b.is_object() || b.is_array())
}

/// A list's items by the step naming each; the first of repeated items wins, as upstream.
fn index<'v>(items: &'v [Value], kind: &ListKind) -> BTreeMap<Step, &'v Value> {
    let mut out = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        if item.is_null() {
            continue;
        }
        let step = match kind {
            ListKind::Keyed(keys) => key_step(item, keys).unwrap_or(Step::Index(i)),
            ListKind::Set => Step::Value(canonical(item)),
            ListKind::Atomic => Step::Index(i),
        };
        out.entry(step).or_insert(item);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{ApplyError, server_side_apply};
    use super::*;

    const DEPLOYMENT: Option<&str> = Some("io.k8s.api.apps.v1.Deployment");
    const NOW: &str = "2025-01-01T00:00:00Z";
    const LATER: &str = "2025-01-02T00:00:00Z";
    const LATEST: &str = "2025-01-03T00:00:00Z";

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1",
                         "resourceVersion": "7", "labels": {"app": "web"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": image,
                                                           "ports": [{"containerPort": 80}]}]}}},
            "status": {"replicas": 1}
        })
    }

    fn entry<'v>(obj: &'v Value, manager: &str) -> Option<&'v Value> {
        obj.pointer("/metadata/managedFields")?
            .as_array()?
            .iter()
            .find(|e| e.get("manager").and_then(Value::as_str) == Some(manager))
    }

    fn fields<'v>(obj: &'v Value, manager: &str) -> Option<&'v Value> {
        entry(obj, manager)?.get("fieldsV1")
    }

    fn applied(obj: Value, manager: &str, now: &str) -> Value {
        match server_side_apply(None, &obj, manager, false, DEPLOYMENT, now) {
            Ok(v) => v,
            Err(e) => panic!("apply failed: {e}"),
        }
    }

    fn with(mut obj: Value, pointer: &str, value: Value) -> Value {
        if let Some(slot) = obj.pointer_mut(pointer) {
            *slot = value;
        }
        obj
    }

    #[test]
    fn create_records_an_update_entry_owning_every_set_field() {
        let mut obj = deployment(2, "nginx");
        track_update(None, &mut obj, "kubectl-create", "apps/v1", DEPLOYMENT, NOW);
        let managed = obj.pointer("/metadata/managedFields");
        assert_eq!(
            managed,
            Some(&json!([{
                "manager": "kubectl-create", "operation": "Update", "apiVersion": "apps/v1",
                "time": NOW, "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {
                        "f:replicas": {},
                        "f:selector": {},
                        "f:template": {
                            ".": {},
                            "f:metadata": {"f:labels": {".": {}, "f:app": {}}, ".": {}},
                            "f:spec": {".": {}, "f:containers": {
                                ".": {},
                                "k:{\"name\":\"web\"}": {
                                    ".": {}, "f:image": {}, "f:name": {},
                                    "f:ports": {
                                        ".": {},
                                        "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                                            ".": {}, "f:containerPort": {}
                                        }
                                    }
                                }
                            }}
                        }
                    }
                }
            }]))
        );
        // The rest of the object is as sent.
        assert_eq!(obj.pointer("/spec/replicas"), Some(&json!(2)));
        assert_eq!(obj.pointer("/status/replicas"), Some(&json!(1)));
    }

    #[test]
    fn update_takes_ownership_from_apply_manager_without_conflict() {
        let live = applied(deployment(1, "nginx"), "ci", NOW);
        let mut new = with(live.clone(), "/spec/replicas", json!(3));
        track_update(
            Some(&live),
            &mut new,
            "kubectl-scale",
            "apps/v1",
            DEPLOYMENT,
            LATER,
        );
        assert_eq!(new.pointer("/spec/replicas"), Some(&json!(3)));
        assert_eq!(
            entry(&new, "kubectl-scale"),
            Some(&json!({
                "manager": "kubectl-scale", "operation": "Update", "apiVersion": "apps/v1",
                "time": LATER, "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}}}
            }))
        );
        let ci = fields(&new, "ci");
        assert_eq!(ci.and_then(|f| f.pointer("/f:spec/f:replicas")), None);
        assert!(ci.and_then(|f| f.pointer("/f:spec/f:template")).is_some());
        assert_eq!(
            entry(&new, "ci").and_then(|e| e.get("time")),
            Some(&json!(NOW))
        );

        // A second change by the same manager merges into its entry.
        let mut newer = with(
            new.clone(),
            "/spec/template/spec/containers/0/image",
            json!("x"),
        );
        track_update(
            Some(&new),
            &mut newer,
            "kubectl-scale",
            "apps/v1",
            DEPLOYMENT,
            LATEST,
        );
        let managed = newer
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array);
        assert_eq!(managed.map(Vec::len), Some(2));
        let scale = fields(&newer, "kubectl-scale");
        assert_eq!(
            scale,
            Some(&json!({"f:spec": {
                "f:replicas": {},
                "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                    "f:image": {}
                }}}}
            }}))
        );
        assert_eq!(
            entry(&newer, "kubectl-scale").and_then(|e| e.get("time")),
            Some(&json!(LATEST))
        );
    }

    #[test]
    fn later_apply_by_another_manager_conflicts_with_edited_field() {
        let live = applied(deployment(1, "nginx"), "a", NOW);
        let mut edited = with(live.clone(), "/spec/replicas", json!(3));
        track_update(
            Some(&live),
            &mut edited,
            "kubectl-edit",
            "apps/v1",
            DEPLOYMENT,
            LATER,
        );

        let err = server_side_apply(
            Some(&edited),
            &deployment(5, "nginx"),
            "a",
            false,
            DEPLOYMENT,
            LATEST,
        )
        .err();
        let Some(ApplyError::Conflict(conflicts)) = &err else {
            panic!("expected a conflict, got {err:?}");
        };
        assert_eq!(conflicts.len(), 1);
        assert_eq!(
            conflicts.first().map(|c| c.path.as_str()),
            Some(".spec.replicas")
        );
        assert_eq!(
            err.map(|e| e.to_string()),
            Some(format!(
                "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using apps/v1 at \
                 {LATER}: .spec.replicas"
            ))
        );

        // Re-applying the same value the editor set is not a conflict.
        let same = server_side_apply(
            Some(&edited),
            &deployment(3, "nginx"),
            "a",
            false,
            DEPLOYMENT,
            LATEST,
        );
        assert!(same.is_ok());
    }

    #[test]
    fn unchanged_fields_keep_their_owner() {
        let live = applied(deployment(1, "nginx"), "ci", NOW);
        let managed = live.pointer("/metadata/managedFields").cloned();

        // A write that changes nothing (here: a client that dropped managedFields and touched only
        // server-owned fields) leaves managedFields exactly as stored.
        let mut same = live.clone();
        if let Some(meta) = same.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
            meta.insert("resourceVersion".into(), json!("8"));
        }
        let mut same = with(same, "/status/replicas", json!(9));
        track_update(
            Some(&live),
            &mut same,
            "kubectl",
            "apps/v1",
            DEPLOYMENT,
            LATER,
        );
        assert_eq!(same.pointer("/metadata/managedFields"), managed.as_ref());

        // A change to one field leaves the others with their owner.
        let mut labelled = with(
            live.clone(),
            "/metadata/labels",
            json!({"app": "web", "x": "1"}),
        );
        track_update(
            Some(&live),
            &mut labelled,
            "kubectl-label",
            "v1",
            DEPLOYMENT,
            LATER,
        );
        assert_eq!(
            fields(&labelled, "kubectl-label"),
            Some(&json!({"f:metadata": {"f:labels": {"f:x": {}}}}))
        );
        assert_eq!(
            entry(&labelled, "ci"),
            managed.as_ref().and_then(|m| m.get(0))
        );
    }

    #[test]
    fn removed_fields_leave_every_owner_and_empty_entries_go() {
        let live = applied(deployment(1, "nginx"), "ci", NOW);
        let mut scaled = with(live.clone(), "/spec/replicas", json!(3));
        track_update(
            Some(&live),
            &mut scaled,
            "scaler",
            "apps/v1",
            DEPLOYMENT,
            LATER,
        );

        let mut dropped = scaled.clone();
        if let Some(spec) = dropped.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("replicas");
        }
        track_update(
            Some(&scaled),
            &mut dropped,
            "editor",
            "apps/v1",
            DEPLOYMENT,
            LATEST,
        );
        assert_eq!(entry(&dropped, "scaler"), None);
        assert_eq!(entry(&dropped, "editor"), None);
        assert!(entry(&dropped, "ci").is_some());
    }

    #[test]
    fn client_sent_managed_fields_are_kept_and_an_empty_entry_resets_them() {
        let live = applied(deployment(1, "nginx"), "ci", NOW);
        let mut renamed = live.clone();
        if let Some(e) = renamed.pointer_mut("/metadata/managedFields/0/manager") {
            *e = json!("renamed");
        }
        let sent = renamed.pointer("/metadata/managedFields").cloned();
        track_update(
            Some(&live),
            &mut renamed,
            "kubectl",
            "apps/v1",
            DEPLOYMENT,
            LATER,
        );
        assert_eq!(renamed.pointer("/metadata/managedFields"), sent.as_ref());

        let mut reset = with(live.clone(), "/metadata/managedFields", json!([{}]));
        track_update(
            Some(&live),
            &mut reset,
            "kubectl",
            "apps/v1",
            DEPLOYMENT,
            LATER,
        );
        assert_eq!(reset.pointer("/metadata/managedFields"), None);

        // An empty list is "not sent": the stored entries stay.
        let mut omitted = with(live.clone(), "/metadata/managedFields", json!([]));
        track_update(
            Some(&live),
            &mut omitted,
            "kubectl",
            "apps/v1",
            DEPLOYMENT,
            LATER,
        );
        assert_eq!(
            omitted.pointer("/metadata/managedFields"),
            live.pointer("/metadata/managedFields")
        );
    }

    #[test]
    fn entries_are_sorted_like_upstream() {
        let live = applied(deployment(1, "nginx"), "ci", NOW);
        let mut a = with(live.clone(), "/spec/replicas", json!(2));
        track_update(Some(&live), &mut a, "zz", "apps/v1", DEPLOYMENT, LATER);
        let mut b = with(
            a.clone(),
            "/metadata/labels",
            json!({"app": "web", "x": "y"}),
        );
        track_update(Some(&a), &mut b, "aa", "apps/v1", DEPLOYMENT, LATEST);
        let order: Vec<&str> = b
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|e| e.get("manager").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(order, vec!["ci", "zz", "aa"]);
    }

    #[test]
    fn user_agent_prefix_is_the_manager() {
        for (agent, want) in [
            ("kubectl/v1.32.0 (linux/amd64) kubernetes/abc", "kubectl"),
            (
                "kube-controller-manager/v1.32.0 (linux/amd64)",
                "kube-controller-manager",
            ),
            ("Go-http-client/1.1", "Go-http-client"),
            ("curl", "curl"),
            ("", ""),
            ("/v1", ""),
            ("my tool\u{7}\t\u{200b}/1", "my tool"),
        ] {
            assert_eq!(manager_from_user_agent(agent), want, "{agent:?}");
        }
        let long = "é".repeat(100);
        let cut = manager_from_user_agent(&long);
        assert_eq!(cut.len(), 128);
        assert_eq!(cut.chars().count(), 64);
    }

    /// A small deterministic generator of odd shapes: lists where maps are expected, scalars,
    /// nulls, managedFields of every shape.
    struct Shapes(u64);

    impl Shapes {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }

        fn value(&mut self, depth: u32) -> Value {
            const KEYS: &[&str] = &[
                "metadata",
                "spec",
                "template",
                "containers",
                "name",
                "ports",
                "containerPort",
                "labels",
                "finalizers",
                "selector",
                "replicas",
                "managedFields",
                "manager",
                "operation",
                "fieldsV1",
                "f:spec",
                "k:{\"name\":\"a\"}",
                ".",
                "status",
                "",
            ];
            let kind = if depth == 0 {
                self.next() % 5
            } else {
                self.next() % 8
            };
            match kind {
                0 => Value::Null,
                1 => json!(self.next().is_multiple_of(2)),
                2 => json!(self.next() % 10),
                3 => json!("Update"),
                4 => json!("a"),
                5 | 6 => {
                    let mut m = Map::new();
                    for _ in 0..(self.next() % 4) {
                        let i = usize::try_from(self.next()).unwrap_or(0) % KEYS.len();
                        let k = KEYS.get(i).copied().unwrap_or("").to_string();
                        m.insert(k, self.value(depth - 1));
                    }
                    Value::Object(m)
                }
                _ => Value::Array(
                    (0..(self.next() % 4))
                        .map(|_| self.value(depth - 1))
                        .collect(),
                ),
            }
        }
    }

    #[test]
    fn odd_shapes_never_panic() {
        let definitions = [
            None,
            DEPLOYMENT,
            Some("io.k8s.api.core.v1.Pod"),
            Some("io.k8s.api.core.v1.PodSpec"),
            Some("not.a.Definition"),
        ];
        let mut shapes = Shapes(11);
        for round in 0..3000 {
            let old = shapes.value(6);
            let mut new = shapes.value(6);
            let def = definitions
                .get(round % definitions.len())
                .copied()
                .flatten();
            let prior = if round % 4 == 0 { None } else { Some(&old) };
            track_update(prior, &mut new, "m", "v1", def, NOW);
            let again = new.clone();
            track_update(Some(&again), &mut new, "n", "", def, LATER);
            if let Ok(applied) = server_side_apply(Some(&new), &old, "a", round % 2 == 0, def, NOW)
            {
                let mut edited = shapes.value(4);
                track_update(Some(&applied), &mut edited, "e", "v1", def, LATER);
            }
        }
        let mut deep = json!({"x": 1});
        for i in 0..1000 {
            deep = if i % 2 == 0 {
                json!({"spec": deep})
            } else {
                json!([deep])
            };
        }
        let mut new = json!({"spec": deep.clone()});
        track_update(None, &mut new, "m", "v1", None, NOW);
        let mut newer = json!({"spec": [deep]});
        track_update(Some(&new), &mut newer, "m", "v1", DEPLOYMENT, NOW);
        for odd in [json!(null), json!(3), json!([]), json!("x")] {
            let mut v = odd.clone();
            track_update(Some(&odd), &mut v, "m", "v1", None, NOW);
            assert_eq!(v, odd);
        }
    }
}
