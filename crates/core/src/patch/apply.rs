//! Server-side apply (`application/apply-patch+yaml`): field ownership recorded in
//! `metadata.managedFields`, as `sigs.k8s.io/structured-merge-diff` (`merge.Updater.Apply`) and
//! `k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager` do it, for the common cases.

use std::collections::BTreeSet;
use std::fmt::Write;

use serde_json::{Map, Value};

use super::error::PatchError;
use super::schema::{Field, Schema, Ty};
use super::strategic::strategic_merge_patch;

/// A field another manager owns with a different value than the applied configuration sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager that owns the field.
    pub manager: String,
    /// Its operation, `Apply` or `Update`.
    pub operation: String,
    /// The apiVersion it last wrote the field with, if recorded.
    pub api_version: Option<String>,
    /// When it last wrote, if recorded.
    pub time: Option<String>,
    /// The field, in structured-merge-diff's notation: `.spec.replicas`,
    /// `.spec.template.spec.containers[name="web"].image`.
    pub path: String,
}

impl Conflict {
    /// The manager as upstream's `printManager` shows it: `"kubectl"` for appliers, `"kubectl-edit"
    /// using apps/v1 at 2024-01-01T00:00:00Z` for updaters.
    pub fn manager_display(&self) -> String {
        let name = format!("{:?}", self.manager);
        if self.operation != "Update" {
            return name;
        }
        let api_version = self.api_version.as_deref().unwrap_or("");
        match &self.time {
            Some(t) => format!("{name} using {api_version} at {t}"),
            None => format!("{name} using {api_version}"),
        }
    }

    /// The `StatusCause` message upstream gives this conflict (`conflict with "kubectl"`); the
    /// cause's `field` is [`Conflict::path`] and its type `FieldManagerConflict`.
    pub fn cause_message(&self) -> String {
        format!("conflict with {}", self.manager_display())
    }
}

/// Why a server-side apply failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change; retry with `force` to take them over.
    /// Answered with 409 `Conflict` and one cause per field, like upstream's `NewConflictError`.
    #[error("{}", conflict_message(.0))]
    Conflict(Vec<Conflict>),
    /// The applied configuration is not acceptable (400).
    #[error("{0}")]
    Invalid(String),
    /// Merging the configuration into the live object failed.
    #[error(transparent)]
    Patch(#[from] PatchError),
}

impl ApplyError {
    /// The HTTP status upstream answers with.
    pub fn status_code(&self) -> u16 {
        match self {
            ApplyError::Conflict(_) => 409,
            ApplyError::Invalid(_) => 400,
            ApplyError::Patch(e) => e.status_code(),
        }
    }
}

/// Upstream `getConflictMessage` (`fieldmanager/internal/conflict.go`).
fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.manager_display(),
            only.path
        );
    }
    let mut managers: Vec<String> = conflicts.iter().map(Conflict::manager_display).collect();
    managers.sort();
    managers.dedup();
    let mut lines = Vec::new();
    for manager in &managers {
        lines.push(format!("conflicts with {manager}:"));
        for c in conflicts.iter().filter(|c| &c.manager_display() == manager) {
            lines.push(format!("- {}", c.path));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// One step of a field path, ordered so that a field's children sort right after it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Step {
    /// `f:<name>`: a field of an object or a key of a map.
    Field(String),
    /// `k:<json>`: the item of an associative list with these key values (JSON object with sorted
    /// keys).
    Key(String),
    /// `v:<json>`: the item of a set with this value.
    Value(String),
    /// `i:<n>`: the item of a list by position.
    Index(usize),
}

pub(super) type Path = Vec<Step>;
pub(super) type FieldSet = BTreeSet<Path>;

impl Step {
    fn write_fields_v1_key(&self, out: &mut String) {
        let _ = match self {
            Step::Field(n) => write!(out, "f:{n}"),
            Step::Key(j) => write!(out, "k:{j}"),
            Step::Value(j) => write!(out, "v:{j}"),
            Step::Index(i) => write!(out, "i:{i}"),
        };
    }

    fn parse(key: &str) -> Option<Step> {
        let (kind, rest) = key.split_once(':')?;
        match kind {
            "f" => Some(Step::Field(rest.to_string())),
            "k" => Some(Step::Key(canonical_json(rest)?)),
            "v" => Some(Step::Value(canonical_json(rest)?)),
            "i" => rest.parse().ok().map(Step::Index),
            _ => None,
        }
    }
}

/// Re-serialises JSON text so equal values compare equal as strings (object keys sorted).
fn canonical_json(text: &str) -> Option<String> {
    let v: Value = serde_json::from_str(text).ok()?;
    Some(canonical(&v))
}

pub(super) fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    let val = m.get(k).map_or_else(|| "null".to_string(), canonical);
                    format!("{}:{val}", Value::String(k.clone()))
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// A path in structured-merge-diff's `Path.String()` notation.
fn display_path(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(n) => {
                out.push('.');
                out.push_str(n);
            }
            Step::Key(j) => {
                let parts: Vec<String> = serde_json::from_str::<Map<String, Value>>(j)
                    .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                    .unwrap_or_default();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            Step::Value(j) => out.push_str(&format!("[={j}]")),
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Parses a `fieldsV1` tree into the set of paths it marks: leaves (`{}`) and parents of `.`.
fn parse_fields_v1(tree: &Value) -> FieldSet {
    let mut set = FieldSet::new();
    let mut path = Path::new();
    walk_fields_v1(tree, &mut path, &mut set);
    set
}

fn walk_fields_v1(node: &Value, path: &mut Path, set: &mut FieldSet) {
    let Some(map) = node.as_object() else {
        return;
    };
    if path.len() > 200 {
        return;
    }
    for (key, child) in map {
        if key == "." {
            set.insert(path.clone());
            continue;
        }
        let Some(step) = Step::parse(key) else {
            continue;
        };
        path.push(step);
        match child.as_object() {
            Some(m) if !m.is_empty() => walk_fields_v1(child, path, set),
            _ => {
                set.insert(path.clone());
            }
        }
        path.pop();
    }
}

/// Writes a set of paths as a `fieldsV1` tree: members are marked with `"."`, and a member with
/// nothing beneath it is written as a bare `{}`.
fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    let mut key = String::new();
    for path in set {
        insert_fields_v1(&mut root, path, &mut key);
    }
    let mut root = Value::Object(root);
    collapse_leaves(&mut root);
    root
}

/// Adds `path` to a `fieldsV1` tree; `key` is scratch space, so that the steps already in the tree
/// (most of them, as paths share their prefixes) cost no allocation.
fn insert_fields_v1(node: &mut Map<String, Value>, path: &[Step], key: &mut String) {
    let Some((first, rest)) = path.split_first() else {
        node.insert(".".into(), Value::Object(Map::new()));
        return;
    };
    key.clear();
    first.write_fields_v1_key(key);
    if !node.contains_key(key.as_str()) {
        node.insert(key.clone(), Value::Object(Map::new()));
    }
    if let Some(Value::Object(child)) = node.get_mut(key.as_str()) {
        insert_fields_v1(child, rest, key);
    }
}

fn collapse_leaves(node: &mut Value) {
    let Value::Object(map) = node else {
        return;
    };
    if map.len() == 1 && map.contains_key(".") {
        map.clear();
        return;
    }
    for (key, child) in map.iter_mut() {
        if key != "." {
            collapse_leaves(child);
        }
    }
}

/// Fields of the root object and of `metadata` that no manager owns (upstream's `stripSet` in
/// `fieldmanager/internal/stripmeta.go`), plus `status`, which the main resource resets.
pub(super) fn stripped(path: &[Step], name: &str) -> bool {
    match path {
        [] => matches!(name, "apiVersion" | "kind" | "status"),
        [Step::Field(m)] if m == "metadata" => matches!(
            name,
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
                | "selfLink"
                | "managedFields"
        ),
        _ => false,
    }
}

/// How a list's items are identified.
pub(super) enum ListKind<'s> {
    /// By the values of these fields (`+listType=map`).
    Keyed(Vec<&'s str>),
    /// By value (`+listType=set`).
    Set,
    /// The list is one value (`+listType=atomic`).
    Atomic,
}

pub(super) fn list_kind<'s>(field: &Field<'s>) -> ListKind<'s> {
    match field.strategy {
        Some(s) if s.merges() => match (field.list_keys, s.merge_key) {
            (Some(keys), _) => ListKind::Keyed(keys.to_vec()),
            (None, Some(key)) => ListKind::Keyed(vec![key]),
            (None, None) => ListKind::Set,
        },
        _ => ListKind::Atomic,
    }
}

/// The `k:` step of an associative-list item: its key fields, with `protocol` defaulting to TCP
/// as the schema's default does upstream. `None` when the item lacks its keys.
pub(super) fn key_step(item: &Value, keys: &[&str]) -> Option<Step> {
    let map = item.as_object()?;
    let mut key_map = Map::new();
    for key in keys {
        match map.get(*key) {
            Some(v) if !v.is_null() => {
                key_map.insert((*key).to_string(), v.clone());
            }
            _ if *key == "protocol" => {
                key_map.insert("protocol".into(), Value::String("TCP".into()));
            }
            _ => {}
        }
    }
    if key_map.is_empty() {
        return None;
    }
    Some(Step::Key(canonical(&Value::Object(key_map))))
}

/// Upstream `TypedValue.ToFieldSet`: every leaf the object sets, every associative-list item and
/// every set member.
fn field_set(v: &Value, ty: Ty) -> FieldSet {
    let mut set = FieldSet::new();
    let mut path = Path::new();
    collect_object(v, ty, &mut path, &mut set);
    set
}

fn collect_object(v: &Value, ty: Ty, path: &mut Path, set: &mut FieldSet) {
    if path.len() > 200 {
        return;
    }
    let Value::Object(map) = v else {
        if !path.is_empty() {
            set.insert(path.clone());
        }
        return;
    };
    let atomic = ty.is_atomic();
    if (atomic || map.is_empty()) && !path.is_empty() {
        set.insert(path.clone());
        return;
    }
    for (name, child) in map {
        if child.is_null() || stripped(path, name) {
            continue;
        }
        let field = ty.field(name);
        path.push(Step::Field(name.clone()));
        collect_field(child, &field, path, set);
        path.pop();
    }
}

fn collect_field(v: &Value, field: &Field, path: &mut Path, set: &mut FieldSet) {
    let Value::Array(items) = v else {
        collect_object(v, field.ty, path, set);
        return;
    };
    if items.is_empty() {
        set.insert(path.clone());
        return;
    }
    match list_kind(field) {
        ListKind::Atomic => {
            set.insert(path.clone());
        }
        ListKind::Set => {
            for item in items {
                path.push(Step::Value(canonical(item)));
                set.insert(path.clone());
                path.pop();
            }
        }
        ListKind::Keyed(keys) => {
            for (i, item) in items.iter().enumerate() {
                path.push(key_step(item, &keys).unwrap_or(Step::Index(i)));
                set.insert(path.clone());
                if item.is_object() {
                    collect_object(item, field.ty, path, set);
                }
                path.pop();
            }
        }
    }
}

/// Whether a list item is the one a `k:`/`v:` step names.
fn item_matches(item: &Value, step: &Step) -> bool {
    match step {
        Step::Key(j) => {
            let Ok(keys) = serde_json::from_str::<Map<String, Value>>(j) else {
                return false;
            };
            keys.iter().all(|(k, want)| match item.get(k) {
                Some(v) => canonical(v) == canonical(want),
                None => k == "protocol" && want.as_str() == Some("TCP"),
            })
        }
        Step::Value(j) => canonical(item) == *j,
        _ => false,
    }
}

fn value_at<'v>(v: &'v Value, path: &[Step]) -> Option<&'v Value> {
    let mut cur = v;
    for step in path {
        cur = match step {
            Step::Field(n) => cur.get(n.as_str())?,
            Step::Index(i) => cur.get(*i)?,
            Step::Key(_) | Step::Value(_) => cur
                .as_array()?
                .iter()
                .find(|item| item_matches(item, step))?,
        };
    }
    Some(cur)
}

/// Removes the value a path names, if present.
fn remove_at(v: &mut Value, path: &[Step]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for step in parent_path {
        let next = match step {
            Step::Field(n) => cur.get_mut(n.as_str()),
            Step::Index(i) => cur.get_mut(*i),
            Step::Key(_) | Step::Value(_) => cur
                .as_array_mut()
                .and_then(|items| items.iter_mut().find(|item| item_matches(item, step))),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        Step::Field(n) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(n);
            }
        }
        Step::Index(i) => {
            if let Some(items) = cur.as_array_mut()
                && *i < items.len()
            {
                items.remove(*i);
            }
        }
        Step::Key(_) | Step::Value(_) => {
            if let Some(items) = cur.as_array_mut() {
                items.retain(|item| !item_matches(item, last));
            }
        }
    }
}

/// One `managedFields` entry, with its field set parsed.
pub(super) struct Entry {
    pub(super) raw: Map<String, Value>,
    pub(super) manager: String,
    pub(super) operation: String,
    pub(super) set: FieldSet,
    /// Whether `set` changed, so that `fieldsV1` must be re-encoded.
    pub(super) touched: bool,
}

impl Entry {
    pub(super) fn parse(v: &Value) -> Option<Entry> {
        let raw = v.as_object()?.clone();
        let manager = raw.get("manager")?.as_str()?.to_string();
        let operation = raw
            .get("operation")
            .and_then(Value::as_str)
            .unwrap_or("Update")
            .to_string();
        let set = raw.get("fieldsV1").map(parse_fields_v1).unwrap_or_default();
        Some(Entry {
            raw,
            manager,
            operation,
            set,
            touched: false,
        })
    }

    pub(super) fn is_main_resource(&self) -> bool {
        self.raw
            .get("subresource")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    }

    pub(super) fn into_value(mut self) -> Value {
        if self.touched {
            self.raw
                .insert("fieldsType".into(), Value::String("FieldsV1".into()));
            self.raw.insert("fieldsV1".into(), to_fields_v1(&self.set));
        }
        Value::Object(self.raw)
    }
}

/// Drops `null`s (which apply configurations do not own) everywhere.
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Applies `applied` (the full intended object of `manager`) to `live`, returning the new object
/// with its `metadata.managedFields` updated. Mirrors structured-merge-diff's `Updater.Apply` for
/// the common cases:
///
/// - the configuration is merged into the live object: maps by key, lists with
///   `patchStrategy: merge` by merge key (or as sets), other lists replaced whole;
/// - the manager then owns exactly the fields its configuration sets (leaves, keyed-list items
///   `k:{…}`, set members `v:…`); the entry is `{manager, operation: Apply, apiVersion, time,
///   fieldsType: FieldsV1, fieldsV1}`;
/// - fields it owned before and no longer sets are removed from the object unless another manager
///   owns them (or something beneath them);
/// - a field whose value would change and that another manager (applier or updater) owns is a
///   [`ApplyError::Conflict`], unless `force`, in which case the other manager loses it.
///
/// `apiVersion`, `kind`, `status` and the system `metadata` fields (`name`, `uid`,
/// `resourceVersion`, …) are never owned. With no live object the result is the configuration
/// itself with one managedFields entry. `now` is the RFC 3339 timestamp to record.
///
/// Ownership of fields changed by non-apply requests (`Update` entries) is recorded by
/// [`super::track_update`]. A custom resource (a [`Schema::Structural`]) is merged by its
/// schema instead of by strategic merge patch, as structured-merge-diff does: lists by their
/// `x-kubernetes-list-type` (`map` by `x-kubernetes-list-map-keys`, `set` by value, atomic
/// otherwise) and maps unless `x-kubernetes-map-type: atomic`. Not covered: multi-version
/// conversion of field sets.
pub fn server_side_apply<'s>(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    schema: impl Into<Schema<'s>>,
    now: &str,
) -> Result<Value, ApplyError> {
    let schema = schema.into();
    if !applied.is_object() {
        return Err(ApplyError::Invalid(
            "the applied configuration must be an object".into(),
        ));
    }
    if manager.is_empty() {
        return Err(ApplyError::Invalid(
            "PATCH requests of type apply require a fieldManager".into(),
        ));
    }
    let declared = applied.pointer("/metadata/managedFields");
    if declared.is_some_and(|m| !m.is_null() && m.as_array().is_none_or(|a| !a.is_empty())) {
        return Err(ApplyError::Invalid(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let mut config = without_nulls(applied);
    if let Some(meta) = config.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    let ty = Ty::of(schema);
    let new_set = field_set(&config, ty);
    let api_version = config
        .get("apiVersion")
        .or_else(|| live.and_then(|l| l.get("apiVersion")))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();

    let (mut merged, mut entries) = match live {
        None => (config.clone(), Vec::new()),
        Some(live) => {
            let merged = match schema {
                Schema::Structural(_) => merge_structured(live, &config, ty, 0),
                Schema::Definition(d) => strategic_merge_patch(live, &config, Some(d))?,
                Schema::Unknown => strategic_merge_patch(live, &config, None)?,
            };
            let entries: Vec<Entry> = live
                .pointer("/metadata/managedFields")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Entry::parse).collect())
                .unwrap_or_default();
            (merged, entries)
        }
    };

    let mine = entries
        .iter()
        .position(|e| e.manager == manager && e.operation == "Apply" && e.is_main_resource());
    let previous = mine
        .and_then(|i| entries.get(i))
        .map(|e| e.set.clone())
        .unwrap_or_default();

    // Conflicts: leaves of the new configuration whose value changes and that others own.
    if let Some(live) = live {
        let mut conflicts = Vec::new();
        let mut forced: Vec<(usize, Path)> = Vec::new();
        for path in leaves(&new_set) {
            if value_at(live, path) == value_at(&merged, path) {
                continue;
            }
            for (i, e) in entries.iter().enumerate() {
                if Some(i) == mine || !e.is_main_resource() || !e.set.contains(path) {
                    continue;
                }
                if force {
                    forced.push((i, path.clone()));
                } else {
                    conflicts.push(Conflict {
                        manager: e.manager.clone(),
                        operation: e.operation.clone(),
                        api_version: e
                            .raw
                            .get("apiVersion")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                        time: e
                            .raw
                            .get("time")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                        path: display_path(path),
                    });
                }
            }
        }
        if !conflicts.is_empty() {
            return Err(ApplyError::Conflict(conflicts));
        }
        for (i, path) in forced {
            if let Some(e) = entries.get_mut(i) {
                e.set.remove(&path);
                e.touched = true;
            }
        }
    }

    // Fields this manager dropped from its configuration and nobody else owns go away.
    // A field the new configuration still sets something beneath (`data: {}` applied before,
    // `data: {key1: …}` now) stays: upstream never removes what the applier's new configuration
    // holds.
    let owned_by_others = |path: &Path| {
        entries
            .iter()
            .enumerate()
            .any(|(i, e)| Some(i) != mine && owns_at_or_beneath(&e.set, path))
    };
    let mut removed: Vec<&Path> = Vec::new();
    for path in previous.difference(&new_set) {
        if owns_at_or_beneath(&new_set, path)
            || owned_by_others(path)
            || is_key_field(path)
            || removed.iter().any(|r| path.starts_with(r))
        {
            continue;
        }
        remove_at(&mut merged, path);
        removed.push(path);
    }

    // Record ownership.
    let mut own = Map::new();
    own.insert("manager".into(), Value::String(manager.to_string()));
    own.insert("operation".into(), Value::String("Apply".into()));
    own.insert("apiVersion".into(), Value::String(api_version));
    own.insert("time".into(), Value::String(now.to_string()));
    let own = Entry {
        raw: own,
        manager: manager.to_string(),
        operation: "Apply".into(),
        set: new_set,
        touched: true,
    };
    match mine {
        Some(i) => {
            if let Some(slot) = entries.get_mut(i) {
                *slot = own;
            }
        }
        None => entries.push(own),
    }
    let managed: Vec<Value> = entries
        .into_iter()
        .filter(|e| !(e.touched && e.set.is_empty()))
        .map(Entry::into_value)
        .collect();
    if let Value::Object(root) = &mut merged {
        let meta = root
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        if let Value::Object(meta) = meta {
            meta.insert("managedFields".into(), Value::Array(managed));
        }
    }
    Ok(merged)
}

/// Merges an applied configuration into the live object by a structural schema, as
/// structured-merge-diff's merge does: maps key by key (unless atomic), associative lists item
/// by item (live order kept, new items appended), sets as unions, everything else replaced by
/// the configuration's value.
fn merge_structured(live: &Value, config: &Value, ty: Ty, depth: usize) -> Value {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) if depth <= MAX_MERGE_DEPTH && !ty.is_atomic() => {
            let mut out = l.clone();
            for (name, cv) in c {
                let field = ty.field(name);
                let merged = match l.get(name) {
                    Some(lv) => merge_field(lv, cv, &field, depth + 1),
                    None => cv.clone(),
                };
                out.insert(name.clone(), merged);
            }
            Value::Object(out)
        }
        _ => config.clone(),
    }
}

/// Deeper than this, values are replaced rather than merged (the API server refuses objects
/// nested this deep long before).
const MAX_MERGE_DEPTH: usize = 200;

fn merge_field(live: &Value, config: &Value, field: &Field, depth: usize) -> Value {
    let (Value::Array(l), Value::Array(c)) = (live, config) else {
        return merge_structured(live, config, field.ty, depth);
    };
    match list_kind(field) {
        ListKind::Atomic => config.clone(),
        ListKind::Set => {
            let mut out = l.clone();
            for item in c {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            Value::Array(out)
        }
        ListKind::Keyed(keys) => {
            let mut out = l.clone();
            for item in c {
                let step = key_step(item, &keys);
                let existing = step
                    .as_ref()
                    .and_then(|step| out.iter().position(|o| item_matches(o, step)));
                match existing {
                    Some(i) => out[i] = merge_structured(&out[i], item, field.ty, depth),
                    None => out.push(item.clone()),
                }
            }
            Value::Array(out)
        }
    }
}

/// Whether a field set holds the path itself or any path beneath it.
fn owns_at_or_beneath(set: &FieldSet, path: &Path) -> bool {
    set.range(path.clone()..)
        .next()
        .is_some_and(|p| p.starts_with(path))
}

/// Whether the path names a key field of an associative-list item (`k:{"name":…}` then
/// `f:name`), which goes only with its item.
fn is_key_field(path: &[Step]) -> bool {
    let [.., Step::Key(keys), Step::Field(name)] = path else {
        return false;
    };
    serde_json::from_str::<Map<String, Value>>(keys).is_ok_and(|m| m.contains_key(name))
}

/// The paths of a set that have no descendants in it.
fn leaves(set: &FieldSet) -> impl Iterator<Item = &Path> {
    let mut iter = set.iter().peekable();
    std::iter::from_fn(move || {
        loop {
            let path = iter.next()?;
            let has_child = iter.peek().is_some_and(|next| next.starts_with(path));
            if !has_child {
                return Some(path);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const DEPLOYMENT: Option<&str> = Some("io.k8s.api.apps.v1.Deployment");
    const NOW: &str = "2025-01-01T00:00:00Z";
    const LATER: &str = "2025-01-02T00:00:00Z";

    fn deployment(replicas: i64, labels: Value, containers: Value) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": containers}}}
        })
    }

    fn apply(
        live: Option<&Value>,
        applied: &Value,
        manager: &str,
        force: bool,
        now: &str,
    ) -> Result<Value, ApplyError> {
        server_side_apply(live, applied, manager, force, DEPLOYMENT, now)
    }

    fn ok(r: Result<Value, ApplyError>) -> Value {
        match r {
            Ok(v) => v,
            Err(e) => panic!("apply failed: {e}"),
        }
    }

    fn entry<'v>(obj: &'v Value, manager: &str) -> Option<&'v Value> {
        obj.pointer("/metadata/managedFields")?
            .as_array()?
            .iter()
            .find(|e| e.get("manager").and_then(Value::as_str) == Some(manager))
    }

    /// A custom resource's schema with one list of each type and an atomic map.
    fn widget_schema() -> crate::apiextensions::schema::Structural {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["name", "protocol"],
                      "items": {"type": "object", "properties": {
                          "name": {"type": "string"}, "protocol": {"type": "string"},
                          "port": {"type": "integer"}}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "args": {"type": "array", "items": {"type": "string"}},
            "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                         "additionalProperties": {"type": "string"}}}}}});
        crate::apiextensions::schema::compile(&schema).expect("schema compiles")
    }

    fn widget(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w", "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn custom_resource_lists_merge_by_their_schema_list_type() {
        let schema = widget_schema();
        let first = widget(json!({
            "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
            "tags": ["a"], "args": ["--one"], "selector": {"app": "w"}}));
        let live = ok(server_side_apply(
            None, &first, "alice", false, &schema, NOW,
        ));
        let second = widget(json!({
            "ports": [{"name": "http", "protocol": "UDP", "port": 81}],
            "tags": ["b"]}));
        let merged = ok(server_side_apply(
            Some(&live),
            &second,
            "bob",
            false,
            &schema,
            LATER,
        ));
        // map: keyed by both keys, so http/UDP is a second item beside alice's http/TCP.
        assert_eq!(
            merged["spec"]["ports"],
            json!([{"name": "http", "protocol": "TCP", "port": 80},
                   {"name": "http", "protocol": "UDP", "port": 81}])
        );
        // set: the union of both managers' members.
        assert_eq!(merged["spec"]["tags"], json!(["a", "b"]));
        let bob = entry(&merged, "bob").expect("bob's entry");
        let fields = bob["fieldsV1"]["f:spec"].to_string();
        assert!(
            fields.contains(r#"k:{\"name\":\"http\",\"protocol\":\"UDP\"}"#),
            "{fields}"
        );
        assert!(fields.contains(r#"v:\"b\""#), "{fields}");

        // atomic list and atomic map: a second applier conflicts on the whole value.
        let third = widget(json!({"args": ["--two"], "selector": {"tier": "x"}}));
        let Err(ApplyError::Conflict(conflicts)) =
            server_side_apply(Some(&merged), &third, "carol", false, &schema, LATER)
        else {
            panic!("atomic fields owned by alice must conflict");
        };
        let paths: Vec<&str> = conflicts.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, [".spec.args", ".spec.selector"], "{conflicts:?}");
        let forced = ok(server_side_apply(
            Some(&merged),
            &third,
            "carol",
            true,
            &schema,
            LATER,
        ));
        assert_eq!(forced["spec"]["args"], json!(["--two"]));
        assert_eq!(
            forced["spec"]["selector"],
            json!({"tier": "x"}),
            "atomic: replaced, not merged"
        );

        // alice drops her port: only her item goes, bob's stays.
        let alice_again = widget(json!({"tags": ["a"]}));
        let after = ok(server_side_apply(
            Some(&forced),
            &alice_again,
            "alice",
            false,
            &schema,
            LATER,
        ));
        assert_eq!(
            after["spec"]["ports"],
            json!([{"name": "http", "protocol": "UDP", "port": 81}])
        );
        assert_eq!(after["spec"]["tags"], json!(["a", "b"]));
    }

    #[test]
    fn apply_creates_object_with_managed_fields() {
        let applied = deployment(
            2,
            json!({"app": "web"}),
            json!([{"name": "web", "image": "nginx", "ports": [{"containerPort": 80}]}]),
        );
        let out = ok(apply(None, &applied, "kubectl", false, NOW));
        assert_eq!(out.pointer("/spec/replicas"), Some(&json!(2)));
        let e = entry(&out, "kubectl");
        assert_eq!(
            e,
            Some(&json!({
                "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
                "time": NOW, "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:replicas": {},
                        "f:selector": {},
                        "f:template": {
                            "f:metadata": {"f:labels": {"f:app": {}}},
                            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                                ".": {}, "f:image": {}, "f:name": {},
                                "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                                    ".": {}, "f:containerPort": {}
                                }}
                            }}}
                        }
                    }
                }
            }))
        );
    }

    #[test]
    fn apply_removes_fields_dropped_by_same_manager() {
        let first = deployment(
            1,
            json!({"app": "web", "tier": "fe"}),
            json!([{"name": "web", "image": "a"}, {"name": "side", "image": "b",
                     "env": [{"name": "X", "value": "1"}]}]),
        );
        let live = ok(apply(None, &first, "kubectl", false, NOW));
        let second = deployment(
            1,
            json!({"app": "web"}),
            json!([{"name": "web", "image": "a"}]),
        );
        let out = ok(apply(Some(&live), &second, "kubectl", false, LATER));
        assert_eq!(
            out.pointer("/metadata/labels"),
            Some(&json!({"app": "web"}))
        );
        assert_eq!(
            out.pointer("/spec/template/spec/containers"),
            Some(&json!([{"name": "web", "image": "a"}]))
        );
        assert_eq!(
            entry(&out, "kubectl").and_then(|e| e.get("time")),
            Some(&json!(LATER))
        );
    }

    #[test]
    fn apply_keeps_a_map_its_manager_now_fills() {
        let cm = |data: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "namespace": "default"}, "data": data})
        };
        let schema = Some("io.k8s.api.core.v1.ConfigMap");
        let live = server_side_apply(None, &cm(json!({})), "m", false, schema, NOW);
        let live = ok(live);
        let out = server_side_apply(
            Some(&live),
            &cm(json!({"key1": "value1"})),
            "m",
            false,
            schema,
            LATER,
        );
        let out = ok(out);
        assert_eq!(out.get("data"), Some(&json!({"key1": "value1"})));
        // And back: emptying the map keeps the empty map and drops the key.
        let out = ok(server_side_apply(
            Some(&out),
            &cm(json!({})),
            "m",
            false,
            schema,
            LATER,
        ));
        assert_eq!(out.get("data"), Some(&json!({})));
    }

    #[test]
    fn apply_keeps_fields_another_manager_still_owns() {
        let base = deployment(
            1,
            json!({"app": "web", "shared": "x"}),
            json!([{"name": "web", "image": "a"}]),
        );
        let live = ok(apply(None, &base, "one", false, NOW));
        let live = ok(apply(Some(&live), &base, "two", false, NOW));
        let dropped = deployment(
            1,
            json!({"app": "web"}),
            json!([{"name": "web", "image": "a"}]),
        );
        let out = ok(apply(Some(&live), &dropped, "one", false, LATER));
        assert_eq!(out.pointer("/metadata/labels/shared"), Some(&json!("x")));
    }

    #[test]
    fn apply_conflicts_with_other_manager_unless_forced() {
        let mine = deployment(
            1,
            json!({"app": "web"}),
            json!([{"name": "web", "image": "a"}]),
        );
        let live = ok(apply(None, &mine, "kubectl", false, NOW));
        let theirs = deployment(
            3,
            json!({"app": "web"}),
            json!([{"name": "web", "image": "b"}]),
        );
        let err = apply(Some(&live), &theirs, "ci", false, LATER).err();
        let Some(ApplyError::Conflict(conflicts)) = &err else {
            panic!("expected a conflict, got {err:?}");
        };
        let paths: Vec<&str> = conflicts.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                ".spec.replicas",
                ".spec.template.spec.containers[name=\"web\"].image"
            ]
        );
        assert_eq!(err.as_ref().map(ApplyError::status_code), Some(409));
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some(
                "Apply failed with 2 conflicts: conflicts with \"kubectl\":\n- .spec.replicas\n\
                 - .spec.template.spec.containers[name=\"web\"].image"
            )
        );

        let out = ok(apply(Some(&live), &theirs, "ci", true, LATER));
        assert_eq!(out.pointer("/spec/replicas"), Some(&json!(3)));
        let kubectl = entry(&out, "kubectl").and_then(|e| e.get("fieldsV1"));
        assert_eq!(kubectl.and_then(|f| f.pointer("/f:spec/f:replicas")), None);
        let ci = entry(&out, "ci").and_then(|e| e.get("fieldsV1"));
        assert_eq!(
            ci.and_then(|f| f.pointer("/f:spec/f:replicas")),
            Some(&json!({}))
        );
    }

    #[test]
    fn apply_with_same_values_shares_ownership_without_conflict() {
        let mine = deployment(
            1,
            json!({"app": "web"}),
            json!([{"name": "web", "image": "a"}]),
        );
        let live = ok(apply(None, &mine, "kubectl", false, NOW));
        let out = ok(apply(Some(&live), &mine, "other", false, LATER));
        assert!(entry(&out, "kubectl").is_some() && entry(&out, "other").is_some());
    }

    #[test]
    fn apply_conflict_names_updaters_like_upstream() {
        let c = Conflict {
            manager: "kubectl-edit".into(),
            operation: "Update".into(),
            api_version: Some("apps/v1".into()),
            time: Some(NOW.into()),
            path: ".spec.replicas".into(),
        };
        assert_eq!(
            ApplyError::Conflict(vec![c.clone()]).to_string(),
            format!(
                "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using apps/v1 at {NOW}: .spec.replicas"
            )
        );
        assert_eq!(
            c.cause_message(),
            format!("conflict with \"kubectl-edit\" using apps/v1 at {NOW}")
        );
    }

    #[test]
    fn apply_rejects_declared_managed_fields() {
        let mut applied = deployment(1, json!({}), json!([]));
        if let Some(m) = applied
            .pointer_mut("/metadata")
            .and_then(Value::as_object_mut)
        {
            m.insert("managedFields".into(), json!([{"manager": "x"}]));
        }
        let err = apply(None, &applied, "kubectl", false, NOW).err();
        assert_eq!(err.map(|e| e.status_code()), Some(400));
    }

    #[test]
    fn fields_v1_round_trips() {
        let tree = json!({
            "f:metadata": {"f:finalizers": {"v:\"a\"": {}}, "f:labels": {"f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}},
                       "f:list": {"i:0": {}}}
        });
        assert_eq!(to_fields_v1(&parse_fields_v1(&tree)), tree);
    }
}
