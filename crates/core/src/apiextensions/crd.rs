//! The CustomResourceDefinition object itself (`apiextensions.k8s.io/v1`): defaulting,
//! validation, the naming and establishing status, and what an accepted CRD serves.
//!
//! Mirrors upstream `k8s.io/apiextensions-apiserver`:
//! - defaulting ([`default_crd`]) from `pkg/apis/apiextensions/v1/defaults.go`
//!   (`SetObjectDefaults_CustomResourceDefinition`);
//! - the strategy ([`prepare_for_create`], [`prepare_for_update`]) from
//!   `pkg/registry/customresourcedefinition/strategy.go`;
//! - validation ([`validate_crd`], [`validate_crd_update`], [`validate_crd_status_update`]) from
//!   `pkg/apis/apiextensions/validation/validation.go` (`ValidateCustomResourceDefinition`,
//!   `ValidateCustomResourceDefinitionUpdate`, `ValidateUpdateCustomResourceDefinitionStatus`);
//! - the status ([`names_accepted`], [`status_conditions`]) from
//!   `pkg/controller/status/naming_controller.go`,
//!   `pkg/controller/establish/establishing_controller.go` and `pkg/controller/apiapproval`;
//! - serving ([`resource_type`], [`served_versions`]) from
//!   `pkg/apiserver/customresource_discovery_controller.go`;
//! - printing ([`printer_columns`], [`printer_cells`], [`evaluate_json_path`]) from
//!   `pkg/registry/customresource/tableconvertor` over the subset of client-go's `jsonpath`
//!   that CRDs use.
//!
//! The API server runs [`default_crd`], then [`prepare_for_create`] / [`prepare_for_update`],
//! then [`validate_crd`] / [`validate_crd_update`] (which include the ObjectMeta checks, so not
//! also `crate::validation::validate_create`). A controller keeps the status: for each CRD it
//! calls [`names_accepted`] against the other CRDs and the built-in registry, and writes
//! [`status_conditions`] through the `status` subresource.
//!
//! **Error paths.** Upstream validates the *internal* form of a CRD, which its v1 conversion
//! builds by lifting `schema`, `subresources`, `additionalPrinterColumns` and
//! `selectableFields` to the top of the spec when every version carries the same value. So a
//! single-version CRD with a bad schema is reported at `spec.validation.openAPIV3Schema…`, its
//! scale paths at `spec.subresources.scale…` and its columns at
//! `spec.additionalPrinterColumns[0]…`, while versions that differ are reported at
//! `spec.versions[i].schema.openAPIV3Schema…` and so on. This module reproduces that, and the
//! other internal field names upstream's paths show (`spec.version`,
//! `…additionalPrinterColumns[0].JSONPath`, `spec.conversion.webhookClientConfig`).
//!
//! Every function takes plain JSON, tolerates any shape (a missing or mistyped field reads as
//! Go's zero value) and never panics.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value, json};

use crate::apiextensions::conversion_review::ReviewVersion as ConversionReviewVersion;
use crate::field::{ErrorKind, FieldError, Path, go_quote};
use crate::registry::{Registry, ResourceType};
use crate::table::{human_duration, parse_rfc3339};
use crate::validation::json::{arr_at, bool_at, str_at};
use crate::validation::meta::{self, NameRule};
use crate::validation::names;

/// The API group of CustomResourceDefinitions.
pub const GROUP: &str = "apiextensions.k8s.io";

/// The annotation a CRD in a protected community group (`*.k8s.io`, `*.kubernetes.io`) must
/// carry: a URL of the approving pull request, or a reason starting with `unapproved`.
pub const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";

/// Upstream `MaxSelectableFields`.
pub const MAX_SELECTABLE_FIELDS: usize = 8;

/// Condition types of `status.conditions`.
pub const NAMES_ACCEPTED: &str = "NamesAccepted";
pub const ESTABLISHED: &str = "Established";
pub const TERMINATING: &str = "Terminating";
pub const API_APPROVAL_CONFORMANT: &str = "KubernetesAPIApprovalPolicyConformant";

/// Upstream `printerColumnDatatypes`, sorted as its messages list them.
const PRINTER_COLUMN_TYPES: &[&str] = &["boolean", "date", "integer", "number", "string"];
/// Upstream `customResourceColumnDefinitionFormats`, sorted.
const PRINTER_COLUMN_FORMATS: &[&str] = &[
    "byte",
    "date",
    "date-time",
    "double",
    "float",
    "int32",
    "int64",
    "password",
];

/// What a custom resource serves, sorted as discovery lists verbs (the same eight as a built-in
/// stored resource).
const CUSTOM_RESOURCE_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
/// What it serves while its CRD is being deleted (`Terminating=True`): no new or changed objects.
const TERMINATING_VERBS: &[&str] = &["delete", "deletecollection", "get", "list", "watch"];

const PLURAL_GROUP_MSG: &str = "must be spec.names.plural+\".\"+spec.group";

/// `metav1.ObjectMeta` documentation of `name` and `creationTimestamp`, which upstream uses as the
/// descriptions of the `Name` and default `Age` columns (the same text `crate::table` uses).
const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

static NULL: Value = Value::Null;

// ---------------------------------------------------------------------------------------------
// Accessors
// ---------------------------------------------------------------------------------------------

/// The string at `key`, `""` when absent or not a string.
fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    str_at(v, key).unwrap_or_default()
}

/// The value at `key` unless absent or `null`.
fn some<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

/// The object at `key`, or `null`.
fn child<'a>(v: &'a Value, key: &str) -> &'a Value {
    v.get(key).unwrap_or(&NULL)
}

/// The strings of the array at `key`; a non-string item reads as `""`.
fn texts<'a>(v: &'a Value, key: &str) -> Vec<&'a str> {
    arr_at(v, key)
        .iter()
        .map(|x| x.as_str().unwrap_or_default())
        .collect()
}

fn truthy(v: &Value, key: &str) -> bool {
    bool_at(v, key) == Some(true)
}

fn versions(crd: &Value) -> &[Value] {
    arr_at(child(crd, "spec"), "versions")
}

/// Go's `%#v` of a `[]string` as `field.Invalid` prints it: `[]string{"v1", "v2"}`, or
/// `[]string(nil)` when the field is absent.
fn go_string_slice(v: Option<&Value>) -> String {
    match v.and_then(Value::as_array) {
        None => "[]string(nil)".to_string(),
        Some(items) => {
            let quoted: Vec<String> = items
                .iter()
                .map(|x| go_quote(x.as_str().unwrap_or_default()))
                .collect();
            format!("[]string{{{}}}", quoted.join(", "))
        }
    }
}

/// `field.TooMany` (rendered by [`FieldError`] without the count).
fn too_many(path: &Path, actual: usize, max: usize) -> FieldError {
    FieldError::new(
        ErrorKind::TooMany,
        path,
        Some(actual.to_string()),
        format!("must have at most {max} items"),
    )
}

/// `field.Invalid` for a value upstream prints as a Go struct (`%#v` of a version list or a
/// schema), which this port leaves out.
fn invalid_struct(path: impl Into<String>, detail: impl Into<String>) -> FieldError {
    FieldError::new(ErrorKind::Invalid, path, None, detail)
}

fn condition<'a>(conditions: &'a [Value], type_: &str) -> Option<&'a Value> {
    conditions.iter().find(|c| text(c, "type") == type_)
}

fn condition_true(crd: &Value, type_: &str) -> bool {
    condition(arr_at(child(crd, "status"), "conditions"), type_)
        .is_some_and(|c| text(c, "status") == "True")
}

/// `spec.names` or `status.acceptedNames`, read the way Go decodes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Names {
    plural: String,
    singular: String,
    short_names: Vec<String>,
    kind: String,
    list_kind: String,
    categories: Vec<String>,
}

impl Names {
    fn of(v: &Value) -> Names {
        let owned = |key: &str| texts(v, key).into_iter().map(str::to_string).collect();
        Names {
            plural: text(v, "plural").to_string(),
            singular: text(v, "singular").to_string(),
            short_names: owned("shortNames"),
            kind: text(v, "kind").to_string(),
            list_kind: text(v, "listKind").to_string(),
            categories: owned("categories"),
        }
    }

    /// JSON as upstream serializes `CustomResourceDefinitionNames` (omitempty fields left out).
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("plural".into(), json!(self.plural));
        if !self.singular.is_empty() {
            m.insert("singular".into(), json!(self.singular));
        }
        if !self.short_names.is_empty() {
            m.insert("shortNames".into(), json!(self.short_names));
        }
        m.insert("kind".into(), json!(self.kind));
        if !self.list_kind.is_empty() {
            m.insert("listKind".into(), json!(self.list_kind));
        }
        if !self.categories.is_empty() {
            m.insert("categories".into(), json!(self.categories));
        }
        Value::Object(m)
    }
}

// ---------------------------------------------------------------------------------------------
// Defaulting and strategy
// ---------------------------------------------------------------------------------------------

/// Applies upstream's v1 defaults in place (`SetObjectDefaults_CustomResourceDefinition`):
/// `spec.names.singular` = lower-case kind, `spec.names.listKind` = kind + `List`,
/// `spec.conversion` = `{strategy: None}`, port 443 for a conversion webhook service, and
/// `status.storedVersions` = the storage version when empty. `served` and `storage` of each
/// version are materialized as `false` when absent, as upstream serializes them.
/// Idempotent; does nothing to a non-object.
pub fn default_crd(crd: &mut Value) {
    let Some(obj) = crd.as_object_mut() else {
        return;
    };
    let spec = obj
        .entry("spec")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(spec) = spec.as_object_mut() {
        default_spec(spec);
    }
    let storage = storage_version_of(obj.get("spec").unwrap_or(&NULL));
    let status = obj
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if status.is_null() {
        *status = Value::Object(Map::new());
    }
    if let (Some(status), Some(storage)) = (status.as_object_mut(), storage) {
        let empty = status
            .get("storedVersions")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if empty {
            status.insert("storedVersions".into(), json!([storage]));
        }
    }
}

fn default_spec(spec: &mut Map<String, Value>) {
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let blank = |m: &Map<String, Value>, k: &str| {
            m.get(k).and_then(Value::as_str).is_none_or(str::is_empty)
        };
        if blank(names, "singular") && !kind.is_empty() {
            names.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if blank(names, "listKind") && !kind.is_empty() {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    let conversion = spec
        .entry("conversion")
        .or_insert_with(|| json!({"strategy": "None"}));
    if conversion.is_null() {
        *conversion = json!({"strategy": "None"});
    }
    if let Some(service) = conversion
        .get_mut("webhook")
        .and_then(|w| w.get_mut("clientConfig"))
        .and_then(|c| c.get_mut("service"))
        .and_then(Value::as_object_mut)
    {
        let port = service.entry("port").or_insert(Value::Null);
        if port.is_null() {
            *port = json!(443);
        }
    }
    if let Some(versions) = spec.get_mut("versions").and_then(Value::as_array_mut) {
        for v in versions.iter_mut().filter_map(Value::as_object_mut) {
            for key in ["served", "storage"] {
                let slot = v.entry(key).or_insert(Value::Null);
                if slot.is_null() {
                    *slot = json!(false);
                }
            }
        }
    }
}

/// Adds the storage version to `status.storedVersions` when missing (both strategies do).
fn record_storage_version(crd: &mut Value) {
    let Some(storage) = storage_version(crd) else {
        return;
    };
    let Some(obj) = crd.as_object_mut() else {
        return;
    };
    let status = obj
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    let Some(status) = status.as_object_mut() else {
        return;
    };
    let stored = status.entry("storedVersions").or_insert_with(|| json!([]));
    if !stored.is_array() {
        *stored = json!([]);
    }
    if let Some(list) = stored.as_array_mut()
        && !list.iter().any(|v| v.as_str() == Some(storage.as_str()))
    {
        list.push(json!(storage));
    }
}

fn generation(v: &Value) -> i64 {
    child(v, "metadata")
        .get("generation")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

fn set_generation(crd: &mut Value, g: i64) {
    if let Some(obj) = crd.as_object_mut() {
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("generation".into(), json!(g));
        }
    }
}

/// Upstream strategy `PrepareForCreate`: the status a client sent is dropped (the controllers
/// own it), `status.storedVersions` starts with the storage version, and
/// `metadata.generation` is 1. Run after [`default_crd`], before [`validate_crd`].
pub fn prepare_for_create(crd: &mut Value) {
    if let Some(obj) = crd.as_object_mut() {
        obj.insert(
            "status".into(),
            json!({"acceptedNames": {"plural": "", "kind": ""}}),
        );
    }
    set_generation(crd, 1);
    record_storage_version(crd);
}

/// Upstream strategy `PrepareForUpdate` (with `rest.BeforeUpdate`'s generation rule): the
/// status is the stored one, `metadata.generation` is bumped when the spec changed, and a new
/// storage version is appended to `status.storedVersions`. Run after [`default_crd`], before
/// [`validate_crd_update`].
pub fn prepare_for_update(new: &mut Value, old: &Value) {
    let old_status = old.get("status").cloned().unwrap_or_else(|| json!({}));
    let spec_changed = new.get("spec") != old.get("spec");
    if let Some(obj) = new.as_object_mut() {
        obj.insert("status".into(), old_status);
    }
    let g = generation(old);
    set_generation(new, if spec_changed { g + 1 } else { g });
    record_storage_version(new);
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

/// One per-version field after upstream's v1 → internal conversion.
#[derive(Debug, Clone, Copy)]
struct Lifted<'a> {
    key: &'static str,
    /// A list, for which Go's semantic equality treats empty as absent.
    list: bool,
    /// `Some` when every version had the same value: it moved to the top of the spec (`None`
    /// inside when every version left it out) and the versions no longer carry it.
    top: Option<Option<&'a Value>>,
}

impl<'a> Lifted<'a> {
    fn of(versions: &'a [Value], key: &'static str, list: bool) -> Self {
        let top = versions.first().and_then(|first| {
            let value = normalized(first, key, list);
            versions
                .iter()
                .all(|v| normalized(v, key, list) == value)
                .then_some(value)
        });
        Lifted { key, list, top }
    }

    /// The top-level value of the internal form.
    fn top(&self) -> Option<&'a Value> {
        self.top.flatten()
    }

    /// What `version` still carries in the internal form.
    fn own(&self, version: &'a Value) -> Option<&'a Value> {
        match self.top {
            Some(_) => None,
            None => normalized(version, self.key, self.list),
        }
    }

    /// The value that applies to `version`, wherever it is kept (upstream
    /// `getSubresourcesForVersion` and friends).
    fn for_version(&self, version: &'a Value) -> Option<&'a Value> {
        match self.top {
            Some(top) => top,
            None => normalized(version, self.key, self.list),
        }
    }
}

/// Where upstream's internal CRD keeps the per-version fields (see the module documentation).
#[derive(Debug, Clone, Copy)]
struct Layout<'a> {
    schema: Lifted<'a>,
    subresources: Lifted<'a>,
    columns: Lifted<'a>,
    selectable: Lifted<'a>,
}

impl<'a> Layout<'a> {
    fn of(versions: &'a [Value]) -> Self {
        Layout {
            schema: Lifted::of(versions, "schema", false),
            subresources: Lifted::of(versions, "subresources", false),
            columns: Lifted::of(versions, "additionalPrinterColumns", true),
            selectable: Lifted::of(versions, "selectableFields", true),
        }
    }
}

/// The value at `key` as Go's semantic equality sees it: `null` is absent, and for lists an
/// empty list equals an absent one.
fn normalized<'a>(v: &'a Value, key: &str, list: bool) -> Option<&'a Value> {
    some(v, key).filter(|x| !(list && x.as_array().is_some_and(Vec::is_empty)))
}

fn has_status(subresources: Option<&Value>) -> bool {
    subresources.is_some_and(|s| some(s, "status").is_some())
}

/// Validation options upstream derives from the old object on update (its ratcheting).
#[derive(Debug, Clone, Default)]
struct Options {
    /// Every version must carry `schema.openAPIV3Schema` (false on update when the stored CRD
    /// already lacks one).
    require_schema: bool,
    /// Lists of selectable fields allowed to stay over the limit because the stored CRD already
    /// had them: version names, and `""` for the lifted list.
    allow_too_many_selectable: BTreeSet<String>,
    /// A conversion webhook's `conversionReviewVersions` must name a version tandem speaks
    /// (false on update when the stored CRD's already named none).
    require_recognized_review_version: bool,
}

/// Validates a CustomResourceDefinition about to be created, after [`default_crd`] and
/// [`prepare_for_create`]: ObjectMeta (the name must be `<plural>.<group>`), the spec, the
/// status names, the stored versions, the API-approval annotation of protected groups and
/// `spec.preserveUnknownFields`. Mirrors upstream `ValidateCustomResourceDefinition` with its
/// messages and (internal-form) paths.
pub fn validate_crd(crd: &Value) -> Vec<FieldError> {
    let opts = Options {
        require_schema: true,
        require_recognized_review_version: true,
        ..Options::default()
    };
    let mut errs = validate_meta_create(crd);
    errs.extend(validate_spec(child(crd, "spec"), &opts));
    errs.extend(validate_status(crd));
    errs.extend(validate_stored_versions(crd));
    errs.extend(validate_api_approval(crd, None));
    errs.extend(validate_preserve_unknown_fields(crd, None));
    errs
}

/// Validates an update of a CustomResourceDefinition, after [`default_crd`] and
/// [`prepare_for_update`]: everything [`validate_crd`] checks (relaxed where the stored object
/// already broke a rule, as upstream ratchets), plus the immutable fields: `spec.group` and
/// `spec.names.plural` always, `spec.scope` and `spec.names.kind` once the CRD is established.
/// A version still listed in `status.storedVersions` cannot be removed. Mirrors upstream
/// `ValidateCustomResourceDefinitionUpdate`.
pub fn validate_crd_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let old_versions = versions(old);
    let opts = Options {
        require_schema: old_versions
            .iter()
            .all(|v| some(child(v, "schema"), "openAPIV3Schema").is_some()),
        allow_too_many_selectable: too_many_selectable_allowed(new, old),
        require_recognized_review_version: review_versions_recognized_or_empty(old),
    };
    let mut errs = meta::validate_object_meta_update(new, old);
    let spec = child(new, "spec");
    let old_spec = child(old, "spec");
    errs.extend(validate_spec(spec, &opts));
    let path = Path::new("spec");
    let immutable = |key: &[&str], p: Path| {
        meta::immutable(
            crate::validation::json::path(spec, key),
            crate::validation::json::path(old_spec, key),
            &p,
        )
    };
    if condition_true(old, ESTABLISHED) {
        errs.extend(immutable(&["scope"], path.child("scope")));
        errs.extend(immutable(
            &["names", "kind"],
            path.child("names").child("kind"),
        ));
    }
    errs.extend(immutable(&["group"], path.child("group")));
    errs.extend(immutable(
        &["names", "plural"],
        path.child("names").child("plural"),
    ));
    errs.extend(validate_status(new));
    errs.extend(validate_stored_versions(new));
    errs.extend(validate_api_approval(new, Some(old)));
    errs.extend(validate_preserve_unknown_fields(new, Some(old)));
    errs
}

/// Validates a write to the `status` subresource of a CRD: ObjectMeta update rules and the
/// format of `status.acceptedNames` (upstream `ValidateUpdateCustomResourceDefinitionStatus`).
pub fn validate_crd_status_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = meta::validate_object_meta_update(new, old);
    errs.extend(validate_status(new));
    errs
}

/// ObjectMeta of a new CRD, with upstream's name function: a DNS subdomain equal to
/// `<spec.names.plural>.<spec.group>` (also applied to `generateName`).
fn validate_meta_create(crd: &Value) -> Vec<FieldError> {
    let errs = meta::validate_object_meta(crd, false, NameRule::Subdomain);
    let spec = child(crd, "spec");
    let required = format!(
        "{}.{}",
        text(child(spec, "names"), "plural"),
        text(spec, "group")
    );
    let metadata = child(crd, "metadata");
    let extra = |field: &str| {
        let value = text(metadata, field);
        (!value.is_empty() && value != required).then(|| {
            FieldError::invalid(format!("metadata.{field}"), &json!(value), PLURAL_GROUP_MSG)
        })
    };
    let (mut generate, rest): (Vec<_>, Vec<_>) = errs
        .into_iter()
        .partition(|e| e.field == "metadata.generateName");
    let (name, rest): (Vec<_>, Vec<_>) = rest.into_iter().partition(|e| e.field == "metadata.name");
    generate.extend(extra("generateName"));
    generate.extend(name);
    generate.extend(extra("name"));
    generate.extend(rest);
    generate
}

/// Upstream `validateCustomResourceDefinitionSpec` on the internal form of a v1 spec.
fn validate_spec(spec: &Value, opts: &Options) -> Vec<FieldError> {
    let path = Path::new("spec");
    let mut errs = Vec::new();

    let group = text(spec, "group");
    if group.is_empty() {
        errs.push(FieldError::required(path.child("group"), ""));
    } else {
        let msgs = names::dns1123_subdomain(group);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                path.child("group"),
                &json!(group),
                msgs.join(","),
            ));
        } else if !group.contains('.') {
            errs.push(FieldError::invalid(
                path.child("group"),
                &json!(group),
                "should be a domain with at least one dot",
            ));
        }
    }

    errs.extend(enum_string(
        path.child("scope"),
        text(spec, "scope"),
        &["Cluster", "Namespaced"],
    ));

    let versions = arr_at(spec, "versions");
    let layout = Layout::of(versions);
    let preserve_unknown = truthy(spec, "preserveUnknownFields");
    let top_schema = layout.schema.top();
    let has_top_schema = top_schema.is_some_and(|s| some(s, "openAPIV3Schema").is_some());
    if !has_top_schema && (opts.require_schema || !preserve_unknown) {
        for (i, v) in versions.iter().enumerate() {
            let missing = layout
                .schema
                .own(v)
                .and_then(|s| some(s, "openAPIV3Schema"))
                .is_none();
            // On update, a CRD stored without schemas needs them only for served versions.
            let detail = if opts.require_schema {
                Some("")
            } else if truthy(v, "served") {
                Some("because otherwise all fields are pruned")
            } else {
                None
            };
            if let (true, Some(detail)) = (missing, detail) {
                errs.push(FieldError::required(
                    path.child("versions")
                        .index(i)
                        .child("schema")
                        .child("openAPIV3Schema"),
                    detail,
                ));
            }
        }
    }
    let has_defaults = versions.iter().any(|v| {
        some(child(v, "schema"), "openAPIV3Schema")
            .is_some_and(|s| schema_has(s, &|x| some(x, "default").is_some()))
    });
    if has_defaults && preserve_unknown {
        errs.push(FieldError::invalid(
            path.child("preserveUnknownFields"),
            &json!(true),
            "must be false in order to use defaults in the schema",
        ));
    }

    let mut storage_count = 0;
    let mut seen = BTreeSet::new();
    let mut unique = true;
    let any_status = has_status(layout.subresources.top())
        || versions.iter().any(|v| has_status(some(v, "subresources")));
    for (i, v) in versions.iter().enumerate() {
        let vpath = path.child("versions").index(i);
        if truthy(v, "storage") {
            storage_count += 1;
        }
        let name = text(v, "name");
        unique &= seen.insert(name);
        let msgs = names::dns1035_label(name);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                vpath.child("name"),
                &json!(name),
                msgs.join(","),
            ));
        }
        errs.extend(validate_version(v, &vpath, &layout, opts));
    }

    if !unique {
        errs.push(invalid_struct(
            path.child("versions"),
            "must contain unique version names",
        ));
    }
    if storage_count != 1 {
        errs.push(invalid_struct(
            path.child("versions"),
            "must have exactly one version marked as storage version",
        ));
    }
    // The internal form's `spec.version` is `versions[0].name`, checked again under that path.
    if let Some(first) = versions.first().map(|v| text(v, "name"))
        && !first.is_empty()
    {
        let msgs = names::dns1035_label(first);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                path.child("version"),
                &json!(first),
                msgs.join(","),
            ));
        }
    }

    let names_path = path.child("names");
    let names = child(spec, "names");
    for key in ["plural", "singular", "kind", "listKind"] {
        if text(names, key).is_empty() {
            errs.push(FieldError::required(names_path.child(key), ""));
        }
    }
    errs.extend(validate_names(names, &names_path));

    if let Some(validation) = top_schema {
        errs.extend(validate_schema(
            validation,
            any_status,
            &path.child("validation"),
        ));
    }
    errs.extend(validate_subresources(
        layout.subresources.top(),
        &path.child("subresources"),
    ));
    if let Some(columns) = layout.columns.top().and_then(Value::as_array) {
        let cpath = path.child("additionalPrinterColumns");
        for (i, col) in columns.iter().enumerate() {
            errs.extend(validate_column(col, &cpath.index(i)));
        }
    }
    if let Some(fields) = layout.selectable.top().and_then(Value::as_array) {
        // Checked against each version's own schema: upstream's lifting can separate the list
        // from the schemas it refers to and then rejects it outright.
        let spath = path.child("selectableFields");
        let allow = opts.allow_too_many_selectable.contains("");
        for v in versions {
            match some(child(v, "schema"), "openAPIV3Schema") {
                Some(schema) => {
                    for e in validate_selectable_fields(fields, schema, &spath, allow) {
                        if !errs.contains(&e) {
                            errs.push(e);
                        }
                    }
                }
                None => {
                    let e = FieldError::invalid(
                        &spath,
                        &json!(""),
                        "may only be set when validations.schema is included",
                    );
                    if !errs.contains(&e) {
                        errs.push(e);
                    }
                }
            }
        }
    }

    let conversion = some(spec, "conversion");
    let strategy = conversion.map(|c| text(c, "strategy"));
    if let Some(strategy) = strategy
        && strategy != "None"
        && preserve_unknown
    {
        errs.push(FieldError::invalid(
            path.child("conversion").child("strategy"),
            &json!(strategy),
            "must be None if spec.preserveUnknownFields is true",
        ));
    }
    if let Some(conversion) = conversion {
        errs.extend(validate_conversion(
            conversion,
            &path.child("conversion"),
            opts.require_recognized_review_version,
        ));
    }
    errs
}

/// Upstream `validateEnumStrings` for a required field.
fn enum_string(path: Path, value: &str, accepted: &[&str]) -> Option<FieldError> {
    if value.is_empty() {
        Some(FieldError::required(path, ""))
    } else if accepted.contains(&value) {
        None
    } else {
        Some(FieldError::not_supported(path, &json!(value), accepted))
    }
}

/// Upstream `validateCustomResourceDefinitionVersion`: the deprecation warning and what stays
/// per version after lifting (schema, subresources, columns, selectable fields).
fn validate_version(v: &Value, path: &Path, layout: &Layout, opts: &Options) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(warning) = some(v, "deprecationWarning") {
        let warning = warning.as_str().unwrap_or_default();
        for msg in deprecation_warning_errors(truthy(v, "deprecated"), warning) {
            errs.push(FieldError::invalid(
                path.child("deprecationWarning"),
                &json!(warning),
                msg,
            ));
        }
    }
    if let Some(validation) = layout.schema.own(v) {
        let status = has_status(layout.subresources.for_version(v));
        errs.extend(validate_schema(validation, status, &path.child("schema")));
    }
    errs.extend(validate_subresources(
        layout.subresources.own(v),
        &path.child("subresources"),
    ));
    if let Some(columns) = layout.columns.own(v).and_then(Value::as_array) {
        let cpath = path.child("additionalPrinterColumns");
        for (i, col) in columns.iter().enumerate() {
            errs.extend(validate_column(col, &cpath.index(i)));
        }
    }
    if let Some(fields) = layout.selectable.own(v).and_then(Value::as_array) {
        let spath = path.child("selectableFields");
        match some(child(v, "schema"), "openAPIV3Schema") {
            None => errs.push(FieldError::invalid(
                &spath,
                &json!(""),
                "may only be set when `version.schema.openAPIV3Schema` is not included",
            )),
            Some(schema) => {
                let allow = opts.allow_too_many_selectable.contains(text(v, "name"));
                errs.extend(validate_selectable_fields(fields, schema, &spath, allow));
            }
        }
    }
    errs
}

/// Upstream `validateDeprecationWarning`.
fn deprecation_warning_errors(deprecated: bool, warning: &str) -> Vec<String> {
    if !deprecated {
        return vec!["can only be set for deprecated versions".to_string()];
    }
    let mut errs = Vec::new();
    if warning.len() > 256 {
        errs.push("must be <= 256 characters long".to_string());
    }
    if warning.is_empty() {
        errs.push("must not be an empty string".to_string());
    }
    if let Some((i, _)) = warning.char_indices().find(|(_, c)| !is_go_printable(*c)) {
        errs.push(format!(
            "must only contain printable UTF-8 characters; non-printable character found at index {i}"
        ));
    }
    errs
}

/// An approximation of Go's `unicode.IsPrint`: graphic characters and the ASCII space.
fn is_go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    // Format characters (soft hyphen, zero-width and bidi controls, BOM) are not printable.
    let format = matches!(
        c,
        '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2064}'
    ) || c == '\u{feff}';
    !(c.is_control() || c.is_whitespace() || format)
}

/// Upstream `ValidateCustomResourceDefinitionNames`, for `spec.names` and
/// `status.acceptedNames`.
fn validate_names(names: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for key in ["plural", "singular"] {
        let value = text(names, key);
        let msgs = names::dns1035_label(value);
        if !value.is_empty() && !msgs.is_empty() {
            errs.push(FieldError::invalid(
                path.child(key),
                &json!(value),
                msgs.join(","),
            ));
        }
    }
    for key in ["kind", "listKind"] {
        let value = text(names, key);
        let msgs = names::dns1035_label(&value.to_lowercase());
        if !value.is_empty() && !msgs.is_empty() {
            errs.push(FieldError::invalid(
                path.child(key),
                &json!(value),
                format!(
                    "may have mixed case, but should otherwise match: {}",
                    msgs.join(",")
                ),
            ));
        }
    }
    for (i, short) in texts(names, "shortNames").into_iter().enumerate() {
        let msgs = names::dns1035_label(short);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                path.child("shortNames").index(i),
                &json!(short),
                msgs.join(","),
            ));
        }
    }
    let kind = text(names, "kind");
    if !kind.is_empty() && kind == text(names, "listKind") {
        errs.push(FieldError::invalid(
            path.child("listKind"),
            &json!(kind),
            "kind and listKind may not be the same",
        ));
    }
    for (i, category) in texts(names, "categories").into_iter().enumerate() {
        let msgs = names::dns1035_label(category);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                path.child("categories").index(i),
                &json!(category),
                msgs.join(","),
            ));
        }
    }
    errs
}

/// How Go reads a `JSONSchemaProps` field as its zero value (which the root check skips).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Zero {
    /// A `string`: `""`.
    Str,
    /// A `bool`: `false`.
    Bool,
    /// A pointer, slice or map: only `null` (an empty list decodes to a non-nil slice).
    Null,
}

/// The fields of upstream's internal `JSONSchemaProps` in declaration order, with their JSON
/// names and whether `allowedFieldsAtRootSchema` lists them.
const SCHEMA_FIELDS: &[(&str, Zero, bool)] = &[
    ("id", Zero::Str, false),
    ("$schema", Zero::Str, false),
    ("$ref", Zero::Null, false),
    ("description", Zero::Str, true),
    ("type", Zero::Str, true),
    ("nullable", Zero::Bool, false),
    ("format", Zero::Str, true),
    ("title", Zero::Str, true),
    ("default", Zero::Null, false),
    ("maximum", Zero::Null, true),
    ("exclusiveMaximum", Zero::Bool, true),
    ("minimum", Zero::Null, true),
    ("exclusiveMinimum", Zero::Bool, true),
    ("maxLength", Zero::Null, true),
    ("minLength", Zero::Null, true),
    ("pattern", Zero::Str, true),
    ("maxItems", Zero::Null, true),
    ("minItems", Zero::Null, true),
    ("uniqueItems", Zero::Bool, true),
    ("multipleOf", Zero::Null, true),
    ("enum", Zero::Null, false),
    ("maxProperties", Zero::Null, false),
    ("minProperties", Zero::Null, false),
    ("required", Zero::Null, true),
    ("items", Zero::Null, true),
    ("allOf", Zero::Null, false),
    ("oneOf", Zero::Null, false),
    ("anyOf", Zero::Null, false),
    ("not", Zero::Null, false),
    ("properties", Zero::Null, true),
    ("additionalProperties", Zero::Null, false),
    ("patternProperties", Zero::Null, false),
    ("dependencies", Zero::Null, false),
    ("additionalItems", Zero::Null, false),
    ("definitions", Zero::Null, false),
    ("externalDocs", Zero::Null, true),
    ("example", Zero::Null, true),
    ("x-kubernetes-preserve-unknown-fields", Zero::Null, true),
    ("x-kubernetes-embedded-resource", Zero::Bool, false),
    ("x-kubernetes-int-or-string", Zero::Bool, false),
    ("x-kubernetes-list-map-keys", Zero::Null, false),
    ("x-kubernetes-list-type", Zero::Null, false),
    ("x-kubernetes-map-type", Zero::Null, false),
    ("x-kubernetes-validations", Zero::Null, true),
];

const ROOT_FIELDS_MSG: &str = "only [Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations] fields are allowed at the root of the schema if the status subresource is enabled";

/// Upstream `validateCustomResourceDefinitionValidation` for one `CustomResourceValidation`
/// (`{openAPIV3Schema: …}`) at `path`: the root restrictions that come with the status
/// subresource, `nullable` at the root, then the schema engine's structural and CEL checks.
fn validate_schema(validation: &Value, status_enabled: bool, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(schema) = some(validation, "openAPIV3Schema") else {
        return errs;
    };
    let spath = path.child("openAPIV3Schema");
    if status_enabled {
        for &(key, zero, allowed) in SCHEMA_FIELDS {
            let Some(value) = some(schema, key) else {
                continue;
            };
            let is_zero = match zero {
                Zero::Str => value.as_str() == Some(""),
                Zero::Bool => value.as_bool() == Some(false),
                Zero::Null => false,
            };
            if is_zero {
                continue;
            }
            if key == "type" {
                if value.as_str() != Some("object") {
                    errs.push(FieldError::invalid(
                        path.child("openAPIV3Schema.type"),
                        value,
                        "only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled",
                    ));
                    break;
                }
                continue;
            }
            if !allowed {
                errs.push(invalid_struct(&spath, ROOT_FIELDS_MSG));
                break;
            }
        }
    }
    if truthy(schema, "nullable") {
        errs.push(FieldError::forbidden(
            path.child("openAPIV3Schema.nullable"),
            "nullable cannot be true at the root",
        ));
    }
    for e in schema_engine_errors(schema, spath.as_str()) {
        if !errs.contains(&e) {
            errs.push(e);
        }
    }
    errs
}

/// The schema engine's checks of one `openAPIV3Schema`, reported under `path`: the
/// structural-schema rules (OpenAPI restrictions, types, pruning, defaults) and the
/// `x-kubernetes-validations` rules. Upstream compiles CEL rules only for a structural schema
/// and then reports compilation errors only when there are no others; tandem reports both.
fn schema_engine_errors(schema: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = super::schema::structural_errors(schema, path);
    errs.extend(super::schema::cel_rule_errors(schema, path));
    errs
}

/// Whether `pred` holds for `schema` or any schema nested in it (upstream `SchemaHas`).
fn schema_has(schema: &Value, pred: &dyn Fn(&Value) -> bool) -> bool {
    if !schema.is_object() {
        return false;
    }
    if pred(schema) {
        return true;
    }
    let nested_one = ["not", "additionalProperties", "additionalItems"];
    let nested_list = ["allOf", "anyOf", "oneOf"];
    let nested_map = [
        "properties",
        "patternProperties",
        "definitions",
        "dependencies",
    ];
    if let Some(items) = some(schema, "items") {
        let hit = match items {
            Value::Array(list) => list.iter().any(|s| schema_has(s, pred)),
            other => schema_has(other, pred),
        };
        if hit {
            return true;
        }
    }
    nested_one
        .iter()
        .filter_map(|k| some(schema, k))
        .any(|s| schema_has(s, pred))
        || nested_list
            .iter()
            .flat_map(|k| arr_at(schema, k))
            .any(|s| schema_has(s, pred))
        || nested_map
            .iter()
            .filter_map(|k| some(schema, k).and_then(Value::as_object))
            .flat_map(|m| m.values())
            .any(|s| schema_has(s, pred))
}

/// Upstream `ValidateCustomResourceDefinitionSubresources`.
fn validate_subresources(subresources: Option<&Value>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(sub) = subresources else {
        return errs;
    };
    if let Some(status) = some(sub, "status")
        && !status.is_object()
    {
        errs.push(FieldError::invalid(
            path.child("status"),
            status,
            "must be an empty object",
        ));
    }
    let Some(scale) = some(sub, "scale") else {
        return errs;
    };
    for (key, prefix, under) in [
        ("specReplicasPath", ".spec.", ".spec"),
        ("statusReplicasPath", ".status.", ".status"),
    ] {
        let p = path.child(&format!("scale.{key}"));
        let value = text(scale, key);
        if value.is_empty() {
            errs.push(FieldError::required(&p, ""));
            continue;
        }
        let simple = simple_json_path_errors(value, &p);
        if !simple.is_empty() {
            errs.extend(simple);
        } else if !value.starts_with(prefix) {
            errs.push(FieldError::invalid(
                &p,
                &json!(value),
                format!("should be a json path under {under}"),
            ));
        }
    }
    let selector = text(scale, "labelSelectorPath");
    if !selector.is_empty() {
        let p = path.child("scale.labelSelectorPath");
        let simple = simple_json_path_errors(selector, &p);
        if !simple.is_empty() {
            errs.extend(simple);
        } else if !selector.starts_with(".spec.") && !selector.starts_with(".status.") {
            errs.push(FieldError::invalid(
                &p,
                &json!(selector),
                "should be a json path under either .spec or .status",
            ));
        }
    }
    errs
}

/// Upstream `validateSimpleJSONPath`.
fn simple_json_path_errors(s: &str, path: &Path) -> Vec<FieldError> {
    if s.is_empty() {
        vec![FieldError::invalid(path, &json!(s), "must not be empty")]
    } else if !s.starts_with('.') {
        vec![FieldError::invalid(
            path,
            &json!(s),
            "must be a simple json path starting with .",
        )]
    } else {
        Vec::new()
    }
}

/// Upstream `ValidateCustomResourceColumnDefinition` (its path says `JSONPath`, the internal
/// field name).
fn validate_column(col: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if text(col, "name").is_empty() {
        errs.push(FieldError::required(path.child("name"), ""));
    }
    let types = format!("must be one of {}", PRINTER_COLUMN_TYPES.join(","));
    let type_ = text(col, "type");
    if type_.is_empty() {
        errs.push(FieldError::required(path.child("type"), types));
    } else if !PRINTER_COLUMN_TYPES.contains(&type_) {
        errs.push(FieldError::invalid(
            path.child("type"),
            &json!(type_),
            types,
        ));
    }
    let format = text(col, "format");
    if !format.is_empty() && !PRINTER_COLUMN_FORMATS.contains(&format) {
        errs.push(FieldError::invalid(
            path.child("format"),
            &json!(format),
            format!("must be one of {}", PRINTER_COLUMN_FORMATS.join(",")),
        ));
    }
    let json_path = text(col, "jsonPath");
    if json_path.is_empty() {
        errs.push(FieldError::required(path.child("JSONPath"), ""));
    } else {
        errs.extend(simple_json_path_errors(json_path, &path.child("JSONPath")));
    }
    errs
}

/// Upstream `ValidateCustomResourceSelectableFields` against one version's schema.
fn validate_selectable_fields(
    fields: &[Value],
    schema: &Value,
    path: &Path,
    allow_too_many: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut unique = BTreeSet::new();
    for (i, field) in fields.iter().enumerate() {
        let p = path.index(i).child("jsonPath");
        let json_path = text(field, "jsonPath");
        if json_path.is_empty() {
            errs.push(FieldError::required(&p, ""));
            continue;
        }
        let value = json!(json_path);
        let (field_path, found) = match resolve_field_path(json_path, schema) {
            Ok(found) => found,
            Err(e) => {
                errs.push(FieldError::invalid(
                    &p,
                    &value,
                    format!("is an invalid path: {e}"),
                ));
                continue;
            }
        };
        if field_path.split(['.', '[']).next() == Some("metadata") {
            errs.push(FieldError::invalid(
                &p,
                &value,
                "must not point to fields in metadata",
            ));
        }
        let type_ = found.map(|s| text(s, "type")).unwrap_or_default();
        if !matches!(type_, "string" | "boolean" | "integer") {
            errs.push(FieldError::invalid(
                &p,
                &value,
                "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
            ));
        }
        if !unique.insert(field_path) {
            errs.push(FieldError::duplicate(&p, &value));
        }
    }
    if unique.len() > MAX_SELECTABLE_FIELDS && !allow_too_many {
        errs.push(too_many(path, unique.len(), MAX_SELECTABLE_FIELDS));
    }
    errs
}

/// Upstream `cel.ValidFieldPath` without array notation: follows a `.a.b` path through a
/// schema's `properties` (or `additionalProperties`), returning the field path it names
/// (`a.b`, `a[key]`) and the schema found there.
fn resolve_field_path<'a>(
    json_path: &str,
    schema: &'a Value,
) -> Result<(String, Option<&'a Value>), String> {
    let mut tokens = Vec::new();
    let mut start = 0;
    for (i, c) in json_path.char_indices() {
        if matches!(c, '.' | '[' | ']') {
            if start < i {
                tokens.push(&json_path[start..i]);
            }
            tokens.push(&json_path[i..i + 1]);
            start = i + 1;
        }
    }
    if start < json_path.len() {
        tokens.push(&json_path[start..]);
    }
    let mut current = Some(schema);
    let mut out = String::new();
    let mut it = tokens.into_iter();
    while let Some(tok) = it.next() {
        match tok {
            "[" => return Err("array notation is not allowed".to_string()),
            "." => {
                let Some(name) = it.next() else {
                    return Err("unexpected end of JSON path".to_string());
                };
                let s = current.ok_or("does not refer to a valid field")?;
                let properties = some(s, "properties")
                    .and_then(Value::as_object)
                    .filter(|p| !p.is_empty());
                if let Some(properties) = properties {
                    let next = properties
                        .get(name)
                        .ok_or("does not refer to a valid field")?;
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                    current = Some(next);
                } else if let Some(additional) = some(s, "additionalProperties") {
                    out.push_str(&format!("[{name}]"));
                    current = additional.is_object().then_some(additional);
                } else {
                    return Err("does not refer to a valid field".to_string());
                }
            }
            other => return Err(format!("expected [ or . but got: {other}")),
        }
    }
    Ok((out, current))
}

/// `spec.conversion`: upstream `validateCustomResourceConversion`, on the internal form's paths
/// (`spec.conversion.webhookClientConfig`). A webhook needs a `url` or a `service` (checked by
/// the rules admission webhooks share, `ValidateWebhookURL` and `ValidateWebhookService`) and
/// `conversionReviewVersions` naming one version tandem speaks, unless the stored CRD already
/// named none (`require_recognized` false, as upstream ratchets). `caBundle` is not checked
/// here: an unreadable one fails every call instead.
fn validate_conversion(
    conversion: &Value,
    path: &Path,
    require_recognized: bool,
) -> Vec<FieldError> {
    use crate::validation::admissionregistration::{webhook_service, webhook_url};
    let mut errs = Vec::new();
    let strategy = text(conversion, "strategy");
    errs.extend(enum_string(
        path.child("strategy"),
        strategy,
        &["None", "Webhook"],
    ));
    let webhook = child(conversion, "webhook");
    let client_config = some(webhook, "clientConfig");
    if strategy == "Webhook" {
        let cc_path = path.child("webhookClientConfig");
        match client_config {
            None => errs.push(FieldError::required(
                &cc_path,
                "required when strategy is set to Webhook",
            )),
            Some(cc) => match (some(cc, "url"), some(cc, "service")) {
                (Some(url), None) => errs.extend(webhook_url(
                    &cc_path.child("url"),
                    url.as_str().unwrap_or_default(),
                )),
                (None, Some(service)) => {
                    errs.extend(webhook_service(service, &cc_path.child("service")))
                }
                _ => errs.push(FieldError::required(
                    &cc_path,
                    "exactly one of url or service is required",
                )),
            },
        }
        errs.extend(validate_conversion_review_versions(
            webhook,
            &path.child("conversionReviewVersions"),
            require_recognized,
        ));
    } else {
        if client_config.is_some() {
            errs.push(FieldError::forbidden(
                path.child("webhookClientConfig"),
                "should not be set when strategy is not set to Webhook",
            ));
        }
        if !arr_at(webhook, "conversionReviewVersions").is_empty() {
            errs.push(FieldError::forbidden(
                path.child("conversionReviewVersions"),
                "should not be set when strategy is not set to Webhook",
            ));
        }
    }
    errs
}

/// Upstream `validateConversionReviewVersions`: required, no duplicates, DNS labels, and one
/// version the server speaks (`v1` or `v1beta1`) when `require_recognized`.
fn validate_conversion_review_versions(
    webhook: &Value,
    path: &Path,
    require_recognized: bool,
) -> Vec<FieldError> {
    let versions = texts(webhook, "conversionReviewVersions");
    if versions.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let mut errs = Vec::new();
    let mut seen = BTreeSet::new();
    let mut recognized = false;
    for (i, v) in versions.iter().enumerate() {
        if !seen.insert(*v) {
            errs.push(FieldError::invalid(
                path.index(i),
                &json!(v),
                "duplicate version",
            ));
            continue;
        }
        for msg in names::dns1035_label(v) {
            errs.push(FieldError::invalid(path.index(i), &json!(v), msg));
        }
        recognized |= ConversionReviewVersion::parse(v).is_some();
    }
    if require_recognized && !recognized {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            path,
            Some(go_string_slice(webhook.get("conversionReviewVersions"))),
            format!(
                "must include at least one of {}",
                ConversionReviewVersion::NAMES.join(", ")
            ),
        ));
    }
    errs
}

/// Upstream `hasValidConversionReviewVersionOrEmpty`: whether a stored CRD's webhook names a
/// version the server speaks, or none at all (then an update must name one).
fn review_versions_recognized_or_empty(crd: &Value) -> bool {
    let versions = texts(
        child(child(child(crd, "spec"), "conversion"), "webhook"),
        "conversionReviewVersions",
    );
    versions.is_empty()
        || versions
            .iter()
            .any(|v| ConversionReviewVersion::parse(v).is_some())
}

/// Upstream `ValidateCustomResourceDefinitionStatus`.
fn validate_status(crd: &Value) -> Vec<FieldError> {
    validate_names(
        child(child(crd, "status"), "acceptedNames"),
        &Path::new("status").child("acceptedNames"),
    )
}

/// Upstream `ValidateCustomResourceDefinitionStoredVersions`: at least one stored version, the
/// storage version among them, and none missing from `spec.versions` (a version cannot be
/// dropped while objects may still be stored in it).
fn validate_stored_versions(crd: &Value) -> Vec<FieldError> {
    let path = Path::new("status").child("storedVersions");
    let raw = child(crd, "status").get("storedVersions");
    let stored = texts(child(crd, "status"), "storedVersions");
    if stored.is_empty() {
        return vec![FieldError::new(
            ErrorKind::Invalid,
            path,
            Some(go_string_slice(raw)),
            "must have at least one stored version",
        )];
    }
    let mut errs = Vec::new();
    let mut remaining: Vec<(usize, &str)> = Vec::new();
    for (i, v) in stored.iter().enumerate() {
        match remaining.iter_mut().find(|(_, name)| name == v) {
            Some(slot) => slot.0 = i,
            None => remaining.push((i, v)),
        }
    }
    for v in versions(crd) {
        let name = text(v, "name");
        let listed = remaining.iter().position(|(_, n)| *n == name);
        if truthy(v, "storage") && listed.is_none() {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                &path,
                Some(go_string_slice(raw)),
                format!("must have the storage version {name}"),
            ));
        }
        if let Some(pos) = listed {
            remaining.remove(pos);
        }
    }
    remaining.sort_unstable();
    for (i, v) in remaining {
        errs.push(FieldError::invalid(
            path.index(i),
            &json!(v),
            format!(
                "missing from spec.versions; {v} was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in {v} and removes {v} from status.storedVersions"
            ),
        ));
    }
    errs
}

/// Upstream `IsProtectedCommunityGroup`.
fn is_protected_group(group: &str) -> bool {
    group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io")
}

/// Upstream `APIApprovalState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Approval {
    Invalid,
    Approved,
    Bypassed,
    Missing,
}

/// Upstream `GetAPIApprovalState`: the state of the approval annotation and its explanation.
fn approval_state(crd: &Value) -> (Approval, String) {
    let annotation = text(
        child(child(crd, "metadata"), "annotations"),
        API_APPROVED_ANNOTATION,
    );
    if annotation.is_empty() {
        (
            Approval::Missing,
            format!(
                "protected groups must have approval annotation {}, see https://github.com/kubernetes/enhancements/pull/1111",
                go_quote(API_APPROVED_ANNOTATION)
            ),
        )
    } else if annotation.starts_with("unapproved") {
        (
            Approval::Bypassed,
            format!("not approved: {}", go_quote(annotation)),
        )
    } else if is_request_url_with_host(annotation) {
        (Approval::Approved, format!("approved in {annotation}"))
    } else {
        (
            Approval::Invalid,
            format!(
                "protected groups must have approval annotation {} with either a URL or a reason starting with \"unapproved\", see https://github.com/kubernetes/enhancements/pull/1111",
                go_quote(API_APPROVED_ANNOTATION)
            ),
        )
    }
}

/// What Go's `url.ParseRequestURI` accepts with a non-empty scheme and host.
fn is_request_url_with_host(s: &str) -> bool {
    if s.chars().any(|c| c.is_control() || c == ' ') {
        return false;
    }
    let Some((scheme, rest)) = s.split_once("://") else {
        return false;
    };
    let scheme_ok = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    scheme_ok && !host.is_empty()
}

/// Upstream `validateAPIApproval`: CRDs of `*.k8s.io` and `*.kubernetes.io` groups need the
/// approval annotation; an update that leaves its state unchanged is not re-checked.
fn validate_api_approval(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    if !is_protected_group(text(child(crd, "spec"), "group")) {
        return Vec::new();
    }
    let (state, reason) = approval_state(crd);
    if old.is_some_and(|o| approval_state(o).0 == state) {
        return Vec::new();
    }
    let path = Path::new("metadata")
        .child("annotations")
        .key(API_APPROVED_ANNOTATION);
    let annotation = text(
        child(child(crd, "metadata"), "annotations"),
        API_APPROVED_ANNOTATION,
    );
    match state {
        Approval::Approved | Approval::Bypassed => Vec::new(),
        Approval::Missing => vec![FieldError::required(path, reason)],
        Approval::Invalid => vec![FieldError::invalid(path, &json!(annotation), reason)],
    }
}

/// Upstream `validatePreserveUnknownFields`: `spec.preserveUnknownFields: true` is refused
/// unless the stored CRD already had it.
fn validate_preserve_unknown_fields(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    if old.is_some_and(|o| truthy(child(o, "spec"), "preserveUnknownFields")) {
        return Vec::new();
    }
    if truthy(child(crd, "spec"), "preserveUnknownFields") {
        return vec![FieldError::invalid(
            Path::new("spec").child("preserveUnknownFields"),
            &json!(true),
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        )];
    }
    Vec::new()
}

/// Upstream `findTooManySelectableFieldsAllowed`: lists already over the limit in the stored
/// CRD may stay as long as they are unchanged.
fn too_many_selectable_allowed(new: &Value, old: &Value) -> BTreeSet<String> {
    let mut allowed = BTreeSet::new();
    let selectable = |v: &Value| arr_at(v, "selectableFields").to_vec();
    let old_versions = versions(old);
    let new_versions = versions(new);
    for v in new_versions {
        let name = text(v, "name");
        if let Some(o) = old_versions.iter().find(|o| text(o, "name") == name) {
            let list = selectable(o);
            if list.len() > MAX_SELECTABLE_FIELDS && list == selectable(v) {
                allowed.insert(name.to_string());
            }
        }
    }
    if !new_versions.is_empty()
        && new_versions
            .iter()
            .all(|v| allowed.contains(text(v, "name")))
    {
        allowed.insert(String::new());
    }
    allowed
}

// ---------------------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------------------

/// A requested name of a CRD that is already in use in its group (upstream naming
/// controller's `equalToAcceptedOrFresh` failures). Plural, singular and short names share one
/// namespace; kind and list kind share another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameConflict {
    Plural(String),
    Singular(String),
    /// The requested short names already in use, in the order requested.
    ShortNames(Vec<String>),
    Kind(String),
    ListKind(String),
}

impl NameConflict {
    /// The `NamesAccepted=False` reason upstream gives for this conflict.
    pub fn reason(&self) -> &'static str {
        match self {
            NameConflict::Plural(_) => "PluralConflict",
            NameConflict::Singular(_) => "SingularConflict",
            NameConflict::ShortNames(_) => "ShortNamesConflict",
            NameConflict::Kind(_) => "KindConflict",
            NameConflict::ListKind(_) => "ListKindConflict",
        }
    }

    /// Upstream's message: `"foos" is already in use`; several short names aggregate as
    /// `["a" is already in use, "b" is already in use]`.
    pub fn message(&self) -> String {
        let in_use = |n: &str| format!("{} is already in use", go_quote(n));
        match self {
            NameConflict::ShortNames(list) => {
                let mut msgs: Vec<String> = Vec::new();
                for m in list.iter().map(|n| in_use(n)) {
                    if !msgs.contains(&m) {
                        msgs.push(m);
                    }
                }
                match msgs.as_slice() {
                    [one] => one.clone(),
                    all => format!("[{}]", all.join(", ")),
                }
            }
            NameConflict::Plural(n)
            | NameConflict::Singular(n)
            | NameConflict::Kind(n)
            | NameConflict::ListKind(n) => in_use(n),
        }
    }
}

/// Why a CRD's requested names were not all accepted: every conflict, in the order upstream
/// checks them (plural, singular, short names, kind, list kind). Like upstream's condition,
/// [`reason`](Self::reason) and [`message`](Self::message) report the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamesRejected {
    pub conflicts: Vec<NameConflict>,
}

impl NamesRejected {
    /// The `NamesAccepted=False` reason (`PluralConflict`, `KindConflict`, …).
    pub fn reason(&self) -> &'static str {
        self.conflicts
            .last()
            .map_or("NamesConflict", NameConflict::reason)
    }

    /// The `NamesAccepted=False` message (`"foos" is already in use`).
    pub fn message(&self) -> String {
        self.conflicts
            .last()
            .map(NameConflict::message)
            .unwrap_or_default()
    }

    /// Upstream keeps the previously accepted value of each conflicting name and takes the
    /// requested value of every other one (categories are always taken).
    fn accepted_names(&self, requested: &Names, accepted: &Names) -> Names {
        let conflicts = |f: fn(&NameConflict) -> bool| self.conflicts.iter().any(f);
        let mut out = accepted.clone();
        if !conflicts(|c| matches!(c, NameConflict::Plural(_))) {
            out.plural.clone_from(&requested.plural);
        }
        if !conflicts(|c| matches!(c, NameConflict::Singular(_))) {
            out.singular.clone_from(&requested.singular);
        }
        if !conflicts(|c| matches!(c, NameConflict::ShortNames(_))) {
            out.short_names.clone_from(&requested.short_names);
        }
        if !conflicts(|c| matches!(c, NameConflict::Kind(_))) {
            out.kind.clone_from(&requested.kind);
        }
        if !conflicts(|c| matches!(c, NameConflict::ListKind(_))) {
            out.list_kind.clone_from(&requested.list_kind);
        }
        out.categories.clone_from(&requested.categories);
        out
    }
}

impl fmt::Display for NamesRejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for NamesRejected {}

/// Whether the names `crd` requests in `spec.names` can be accepted (upstream naming
/// controller, `calculateNamesAndConditions`). A name is free when it equals the one already
/// accepted for this CRD, or when nothing else in the group uses it: not the accepted names of
/// any CRD of the same `spec.group` (`others` may include `crd` itself; entries with its
/// `metadata.name` are skipped and its own `status.acceptedNames` count, as upstream's lister
/// includes it), and — tandem-specific — not a built-in resource of that group in `builtin`
/// (its plural, singular and short names; its kind and list kind).
pub fn names_accepted(
    crd: &Value,
    others: &[&Value],
    builtin: &Registry,
) -> Result<(), NamesRejected> {
    let spec = child(crd, "spec");
    let group = text(spec, "group");
    let own_name = text(child(crd, "metadata"), "name");
    let requested = Names::of(child(spec, "names"));
    let accepted = Names::of(child(child(crd, "status"), "acceptedNames"));

    let mut resources: BTreeSet<String> = BTreeSet::new();
    let mut kinds: BTreeSet<String> = BTreeSet::new();
    let mut claim = |n: &Names| {
        resources.insert(n.plural.clone());
        resources.insert(n.singular.clone());
        resources.extend(n.short_names.iter().cloned());
        kinds.insert(n.kind.clone());
        kinds.insert(n.list_kind.clone());
    };
    claim(&accepted);
    for other in others {
        let same_object =
            !own_name.is_empty() && text(child(other, "metadata"), "name") == own_name;
        if same_object || text(child(other, "spec"), "group") != group {
            continue;
        }
        claim(&Names::of(child(child(other, "status"), "acceptedNames")));
    }
    for rt in builtin.all().iter().filter(|rt| rt.group == group) {
        resources.insert(rt.plural.clone());
        resources.insert(rt.singular.clone());
        resources.extend(rt.short_names.iter().cloned());
        kinds.insert(rt.kind.clone());
        kinds.insert(rt.list_kind());
    }
    resources.remove("");
    kinds.remove("");

    let taken = |req: &str, acc: &str, used: &BTreeSet<String>| req != acc && used.contains(req);
    let mut conflicts = Vec::new();
    if taken(&requested.plural, &accepted.plural, &resources) {
        conflicts.push(NameConflict::Plural(requested.plural.clone()));
    }
    if taken(&requested.singular, &accepted.singular, &resources) {
        conflicts.push(NameConflict::Singular(requested.singular.clone()));
    }
    if requested.short_names != accepted.short_names {
        let in_use: Vec<String> = requested
            .short_names
            .iter()
            .filter(|s| !accepted.short_names.contains(s) && taken(s, "", &resources))
            .cloned()
            .collect();
        if !in_use.is_empty() {
            conflicts.push(NameConflict::ShortNames(in_use));
        }
    }
    if taken(&requested.kind, &accepted.kind, &kinds) {
        conflicts.push(NameConflict::Kind(requested.kind.clone()));
    }
    if taken(&requested.list_kind, &accepted.list_kind, &kinds) {
        conflicts.push(NameConflict::ListKind(requested.list_kind.clone()));
    }
    if conflicts.is_empty() {
        Ok(())
    } else {
        Err(NamesRejected { conflicts })
    }
}

// ---------------------------------------------------------------------------------------------
// Status
// ---------------------------------------------------------------------------------------------

/// Upstream `SetCRDCondition`: updates the condition of `type_` in place (its
/// `lastTransitionTime` moves only when the status changes or was unset) or appends it.
fn set_condition(
    conditions: &mut Vec<Value>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
) {
    let existing = conditions
        .iter_mut()
        .find(|c| text(c, "type") == type_)
        .and_then(Value::as_object_mut);
    let Some(c) = existing else {
        let mut c = Map::new();
        c.insert("type".into(), json!(type_));
        c.insert("status".into(), json!(status));
        c.insert("lastTransitionTime".into(), json!(now));
        if !reason.is_empty() {
            c.insert("reason".into(), json!(reason));
        }
        if !message.is_empty() {
            c.insert("message".into(), json!(message));
        }
        conditions.push(Value::Object(c));
        return;
    };
    let changed = c.get("status").and_then(Value::as_str) != Some(status);
    let unset = c
        .get("lastTransitionTime")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if changed || unset {
        c.insert("lastTransitionTime".into(), json!(now));
    }
    c.insert("status".into(), json!(status));
    for (key, value) in [("reason", reason), ("message", message)] {
        if value.is_empty() {
            c.remove(key);
        } else {
            c.insert(key.into(), json!(value));
        }
    }
}

/// Upstream API-approval controller's `calculateCondition`: status, reason and message of
/// `KubernetesAPIApprovalPolicyConformant` for CRDs of protected groups.
fn approval_condition(crd: &Value) -> Option<(&'static str, &'static str, String)> {
    if !is_protected_group(text(child(crd, "spec"), "group")) {
        return None;
    }
    let (state, reason) = approval_state(crd);
    Some(match state {
        Approval::Invalid => ("False", "InvalidAnnotation", reason),
        Approval::Missing => ("False", "MissingAnnotation", reason),
        Approval::Approved => ("True", "ApprovedAnnotation", reason),
        Approval::Bypassed => ("False", "UnapprovedAnnotation", reason),
    })
}

/// The CRD's new `status`, given the outcome of [`names_accepted`] and the current time:
/// what upstream's naming, establishing and API-approval controllers write, collapsed into
/// one step.
///
/// - `acceptedNames`: the requested names, except that a conflicting name keeps its
///   previously accepted value.
/// - `NamesAccepted`: `True`/`NoConflicts`/`no conflicts found`, or `False` with the conflict's
///   reason and message.
/// - `Established`: once the names are accepted, `True`/`InitialNamesAccepted`/`the initial
///   names have been accepted` (upstream passes through `False`/`Installing` first); it stays
///   `True` afterwards, even if a later rename conflicts. Before, `False`/`NotAccepted`.
/// - `KubernetesAPIApprovalPolicyConformant` for `*.k8s.io` and `*.kubernetes.io` groups.
/// - `storedVersions`: the storage version is added when missing.
///
/// A condition's `lastTransitionTime` is set to `now_rfc3339` only when its status changes;
/// other conditions (`Terminating`, …) and status fields are kept.
pub fn status_conditions(
    crd: &Value,
    names: Result<(), NamesRejected>,
    now_rfc3339: &str,
) -> Value {
    let now = now_rfc3339;
    let mut status = child(crd, "status")
        .as_object()
        .cloned()
        .unwrap_or_default();
    let requested = Names::of(child(child(crd, "spec"), "names"));
    let accepted = Names::of(status.get("acceptedNames").unwrap_or(&NULL));
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .map(|c| c.iter().filter(|c| c.is_object()).cloned().collect())
        .unwrap_or_default();

    let new_names = match &names {
        Ok(()) => {
            set_condition(
                &mut conditions,
                NAMES_ACCEPTED,
                "True",
                "NoConflicts",
                "no conflicts found",
                now,
            );
            requested
        }
        Err(rejected) => {
            set_condition(
                &mut conditions,
                NAMES_ACCEPTED,
                "False",
                rejected.reason(),
                &rejected.message(),
                now,
            );
            rejected.accepted_names(&requested, &accepted)
        }
    };
    let established = condition(&conditions, ESTABLISHED).map(|c| text(c, "status") == "True");
    match (names.is_ok(), established) {
        (true, Some(true)) | (false, Some(_)) => {}
        (true, _) => set_condition(
            &mut conditions,
            ESTABLISHED,
            "True",
            "InitialNamesAccepted",
            "the initial names have been accepted",
            now,
        ),
        (false, None) => set_condition(
            &mut conditions,
            ESTABLISHED,
            "False",
            "NotAccepted",
            "not all names are accepted",
            now,
        ),
    }
    if let Some((st, reason, message)) = approval_condition(crd) {
        set_condition(
            &mut conditions,
            API_APPROVAL_CONFORMANT,
            st,
            reason,
            &message,
            now,
        );
    }

    let mut stored: Vec<Value> = status
        .get("storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(storage) = storage_version(crd)
        && !stored.iter().any(|v| v.as_str() == Some(storage.as_str()))
    {
        stored.push(json!(storage));
    }

    status.insert("conditions".into(), Value::Array(conditions));
    status.insert("acceptedNames".into(), new_names.to_json());
    status.insert("storedVersions".into(), Value::Array(stored));
    Value::Object(status)
}

/// Whether the CRD's `Established` condition is `True`: its resources may be served (upstream
/// discovery and the custom resource handler serve only established CRDs).
pub fn is_established(crd: &Value) -> bool {
    condition_true(crd, ESTABLISHED)
}

// ---------------------------------------------------------------------------------------------
// Serving
// ---------------------------------------------------------------------------------------------

fn storage_version_of(spec: &Value) -> Option<String> {
    arr_at(spec, "versions")
        .iter()
        .find(|v| truthy(v, "storage"))
        .map(|v| text(v, "name").to_string())
}

/// The version marked `storage: true` (the first, if a broken object has several): objects
/// are stored in it.
pub fn storage_version(crd: &Value) -> Option<String> {
    storage_version_of(child(crd, "spec"))
}

/// The names of the versions with `served: true`, highest priority first as discovery lists
/// them (upstream `version.CompareKubeAwareVersionStrings`: GA before beta before alpha, then
/// by major and minor number, then other names alphabetically), so the first one is the
/// preferred version.
pub fn served_versions(crd: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in versions(crd).iter().filter(|v| truthy(v, "served")) {
        let name = text(v, "name");
        if !name.is_empty() && !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    }
    out.sort_by(|a, b| compare_kube_aware_versions(b, a));
    out
}

/// Splits `v2beta3` into (2, beta, 3): the stability is 0 for alpha, 1 for beta, 2 for GA.
fn parse_kube_version(v: &str) -> Option<(u64, u8, u64)> {
    let rest = v.strip_prefix('v')?;
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (major, tail) = rest.split_at(digits);
    let major: u64 = major.parse().ok()?;
    if tail.is_empty() {
        return Some((major, 2, 0));
    }
    let (stability, minor) = if let Some(m) = tail.strip_prefix("alpha") {
        (0, m)
    } else if let Some(m) = tail.strip_prefix("beta") {
        (1, m)
    } else {
        return None;
    };
    if minor.is_empty() || !minor.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((major, stability, minor.parse().ok()?))
}

/// Upstream `version.CompareKubeAwareVersionStrings`: `Greater` when `a` has the higher
/// priority (`v2` > `v1` > `v1beta2` > `v1beta1` > `v1alpha1` > `bar` > `foo`).
pub fn compare_kube_aware_versions(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    match (parse_kube_version(a), parse_kube_version(b)) {
        (None, None) => b.cmp(a),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some((ma, sa, na)), Some((mb, sb, nb))) => sa.cmp(&sb).then(ma.cmp(&mb)).then(na.cmp(&nb)),
    }
}

/// The resource type one served version of the CRD adds to the API (what upstream's
/// discovery controller publishes): group and version, the accepted names (kind, plural,
/// singular, short names, categories), the scope, the `status` and `scale` subresources the
/// version declares, and the verbs — all eight, or only `delete deletecollection get list
/// watch` while the CRD is `Terminating`. `None` when the version is not served or the names
/// have not been accepted yet (empty `status.acceptedNames`); callers serve it only while the
/// CRD [`is_established`].
pub fn resource_type(crd: &Value, version: &str) -> Option<ResourceType> {
    let spec = child(crd, "spec");
    let v = arr_at(spec, "versions")
        .iter()
        .find(|v| text(v, "name") == version && truthy(v, "served"))?;
    let names = Names::of(child(child(crd, "status"), "acceptedNames"));
    if names.plural.is_empty() || names.kind.is_empty() {
        return None;
    }
    let sub = some(v, "subresources");
    let mut subresources = Vec::new();
    if has_status(sub) {
        subresources.push("status".to_string());
    }
    if sub.and_then(|s| some(s, "scale")).is_some() {
        subresources.push("scale".to_string());
    }
    let verbs = if condition_true(crd, TERMINATING) {
        TERMINATING_VERBS
    } else {
        CUSTOM_RESOURCE_VERBS
    };
    let singular = if names.singular.is_empty() {
        names.kind.to_lowercase()
    } else {
        names.singular
    };
    Some(ResourceType {
        group: text(spec, "group").to_string(),
        version: version.to_string(),
        kind: names.kind,
        plural: names.plural,
        singular,
        namespaced: text(spec, "scope") == "Namespaced",
        short_names: names.short_names,
        categories: names.categories,
        subresources,
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
    })
}

// ---------------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------------

/// One column of a custom resource's table: a `metav1.TableColumnDefinition` and the JSONPath
/// its cells come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// `name` for the object-name column, otherwise the declared OpenAPI format (often empty).
    pub format: String,
    pub description: String,
    /// 0 for columns shown by default, more for columns shown only with `-o wide`.
    pub priority: i32,
    pub json_path: String,
}

impl PrinterColumn {
    /// The column as `TableColumnDefinition` JSON (every field present, as upstream encodes it).
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.type_,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

/// The table columns of one version of the CRD (upstream `tableconvertor.New` over
/// `GetColumnsForVersion`): `Name` (format `name`), then the version's
/// `additionalPrinterColumns`, or — when it declares none, or the version is unknown — the
/// default `Age` column (type `date`, `.metadata.creationTimestamp`). This matches what
/// `crate::table::columns` gives a type without a printer; the API server should use this and
/// [`printer_cells`] for CRD-backed types instead.
pub fn printer_columns(crd: &Value, version: &str) -> Vec<PrinterColumn> {
    let mut columns = vec![PrinterColumn {
        name: "Name".into(),
        type_: "string".into(),
        format: "name".into(),
        description: NAME_DESC.into(),
        priority: 0,
        json_path: ".metadata.name".into(),
    }];
    let declared = versions(crd)
        .iter()
        .find(|v| text(v, "name") == version)
        .map_or(&[][..], |v| arr_at(v, "additionalPrinterColumns"));
    if declared.is_empty() {
        columns.push(PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: AGE_DESC.into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        });
        return columns;
    }
    for c in declared {
        let json_path = text(c, "jsonPath");
        let description = match text(c, "description") {
            "" => format!("Custom resource definition column (in JSONPath format): {json_path}"),
            d => d.to_string(),
        };
        let priority = c.get("priority").and_then(Value::as_i64).unwrap_or(0);
        columns.push(PrinterColumn {
            name: text(c, "name").to_string(),
            type_: text(c, "type").to_string(),
            format: text(c, "format").to_string(),
            description,
            priority: i32::try_from(priority).unwrap_or(if priority < 0 {
                i32::MIN
            } else {
                i32::MAX
            }),
            json_path: json_path.to_string(),
        });
    }
    columns
}

/// Unix seconds of Go's zero `time.Time`, which reads as unset.
const GO_ZERO_TIME: i64 = -62_135_596_800;

/// The cells of one row for `obj`, in `columns` order (upstream `convertor.ConvertToTable`):
/// the object name for the leading `Name` column, then each column's JSONPath value shaped by
/// its type — `string` prints any value (numbers as Go prints them, objects and lists as
/// JSON), `integer`/`number`/`boolean` keep values of that type, `date` is an age against
/// `now_unix_secs` (`<unknown>` for an empty time, `<invalid>` for an unparsable one). Cells
/// with no value, or a value of the wrong type, are `null`.
pub fn printer_cells(columns: &[PrinterColumn], obj: &Value, now_unix_secs: i64) -> Vec<Value> {
    columns
        .iter()
        .enumerate()
        .map(|(i, col)| {
            if i == 0 && col.format == "name" {
                json!(text(child(obj, "metadata"), "name"))
            } else {
                cell(col, obj, now_unix_secs)
            }
        })
        .collect()
}

/// Upstream `cellForJSONValue`, and the jsonpath printer for `string` columns.
fn cell(col: &PrinterColumn, obj: &Value, now: i64) -> Value {
    let Some(value) = evaluate_json_path(obj, &col.json_path) else {
        return Value::Null;
    };
    match (col.type_.as_str(), &value) {
        (_, Value::Null) => Value::Null,
        ("string", Value::String(_)) | ("boolean", Value::Bool(_)) => value,
        ("string", Value::Number(n)) => json!(go_number(n)),
        ("string", Value::Bool(b)) => json!(b.to_string()),
        ("string", other) => json!(other.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        ("number", Value::Number(n)) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 => json!(f as i64),
            _ => value,
        },
        ("date", Value::String(s)) => json!(date_cell(s, now)),
        _ => Value::Null,
    }
}

/// `metav1.Time.UnmarshalQueryParameter` then `ConvertToHumanReadableDateType`.
fn date_cell(s: &str, now: i64) -> String {
    if s.is_empty() || s == "null" {
        return "<unknown>".to_string();
    }
    match parse_rfc3339(s) {
        None => "<invalid>".to_string(),
        Some(GO_ZERO_TIME) => "<unknown>".to_string(),
        Some(t) => human_duration(now.saturating_sub(t)),
    }
}

/// A JSON number as Go's `fmt.Fprint` prints the `int64` or `float64` it decodes to.
fn go_number(n: &serde_json::Number) -> String {
    match n.as_f64() {
        Some(f) if n.is_f64() => go_float(f),
        _ => n.to_string(),
    }
}

/// Go's `%v` of a `float64`: the shortest representation, in exponent form (`1e+06`) when the
/// exponent is below -4 or at least 6.
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return "0".to_string();
    }
    let sci = format!("{f:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return format!("{f}");
    };
    let Ok(exp) = exp.parse::<i32>() else {
        return format!("{f}");
    };
    if (-4..6).contains(&exp) {
        return format!("{f}");
    }
    let sign = if mantissa.starts_with('-') { "-" } else { "" };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let (first, rest) = digits.split_at(digits.len().min(1));
    let dot = if rest.is_empty() { "" } else { "." };
    let esign = if exp < 0 { '-' } else { '+' };
    format!("{sign}{first}{dot}{rest}e{esign}{:02}", exp.unsigned_abs())
}

// ---------------------------------------------------------------------------------------------
// JSONPath
// ---------------------------------------------------------------------------------------------

/// One step of a parsed JSONPath.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// `.name` or `['name']`.
    Field(String),
    /// `..name`: every `name` field at any depth (`..*`: every value below).
    Descend(String),
    /// `.*` or `[*]`.
    Wildcard,
    /// `[n]`, counted from the end when negative.
    Index(i64),
    /// `[start:end]`.
    Slice(Option<i64>, Option<i64>),
    /// `[?(…)]`.
    Filter(Box<Filter>),
}

/// `[?(@.path)]` (the path exists) or `[?(@.path <op> literal)]`.
#[derive(Debug, Clone, PartialEq)]
struct Filter {
    left: Vec<Step>,
    compare: Option<(CmpOp, Value)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Evaluates a JSONPath of the forms CRDs use (printer columns, scale paths) against `obj` and
/// returns the first result, as upstream's table convertor uses it: `.spec.replicas`,
/// `.metadata.creationTimestamp`, `.items[0]`, `.items[-1]`, `.items[1:3]`, `.items[*].name`,
/// `['a.b']`, `..name`, and filters `[?(@.type=="Ready")]` with `==`, `!=`, `<`, `<=`, `>`,
/// `>=` against a string, number, boolean or `null`, or bare existence `[?(@.ready)]`.
/// A `{…}` wrapper and a leading `$` are accepted. Missing keys yield `None`, as client-go's
/// `jsonpath` with `AllowMissingKeys(true)` yields no result; so does a path that does not parse.
pub fn evaluate_json_path(obj: &Value, path: &str) -> Option<Value> {
    let steps = parse_json_path(path)?;
    eval_steps(&steps, vec![obj]).into_iter().next().cloned()
}

fn parse_json_path(path: &str) -> Option<Vec<Step>> {
    let mut p = path.trim();
    if let Some(inner) = p.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        p = inner.trim();
    }
    parse_steps(p.strip_prefix('$').unwrap_or(p))
}

/// The end of a dotted name: the next `.` or `[`.
fn name_end(b: &[u8], start: usize) -> usize {
    b.iter()
        .skip(start)
        .position(|&c| c == b'.' || c == b'[')
        .map_or(b.len(), |n| start + n)
}

fn parse_steps(s: &str) -> Option<Vec<Step>> {
    let b = s.as_bytes();
    let mut steps = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'.' => {
                let descend = b.get(i + 1) == Some(&b'.');
                let start = if descend { i + 2 } else { i + 1 };
                let end = name_end(b, start);
                let name = s.get(start..end)?;
                match name {
                    // A lone trailing `.` (as in `{.}`) is the current value.
                    "" if !descend && end == b.len() => {}
                    "" => return None,
                    "*" if !descend => steps.push(Step::Wildcard),
                    n if descend => steps.push(Step::Descend(n.to_string())),
                    n => steps.push(Step::Field(n.to_string())),
                }
                i = end;
            }
            b'[' => {
                let close = bracket_end(b, i)?;
                steps.push(parse_bracket(s.get(i + 1..close)?.trim())?);
                i = close + 1;
            }
            _ => return None,
        }
    }
    Some(steps)
}

/// The `]` closing the bracket opened at `open`, outside quotes and parentheses.
fn bracket_end(b: &[u8], open: usize) -> Option<usize> {
    let mut quote: Option<u8> = None;
    let mut depth = 0i32;
    for (j, &c) in b.iter().enumerate().skip(open + 1) {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                b'\'' | b'"' => quote = Some(c),
                b'(' => depth += 1,
                b')' => depth -= 1,
                b']' if depth <= 0 => return Some(j),
                _ => {}
            },
        }
    }
    None
}

/// The text inside matching single or double quotes.
fn unquote(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    let quoted = b.len() >= 2 && matches!(b[0], b'\'' | b'"') && b[b.len() - 1] == b[0];
    if quoted { s.get(1..s.len() - 1) } else { None }
}

fn parse_bracket(inner: &str) -> Option<Step> {
    if inner == "*" {
        return Some(Step::Wildcard);
    }
    if let Some(expr) = inner.strip_prefix("?(").and_then(|e| e.strip_suffix(')')) {
        return parse_filter(expr.trim()).map(|f| Step::Filter(Box::new(f)));
    }
    if let Some(key) = unquote(inner) {
        return Some(Step::Field(key.to_string()));
    }
    if let Some((start, rest)) = inner.split_once(':') {
        let end = rest.split(':').next().unwrap_or_default();
        let bound = |s: &str| -> Option<Option<i64>> {
            let s = s.trim();
            if s.is_empty() {
                Some(None)
            } else {
                s.parse().ok().map(Some)
            }
        };
        return Some(Step::Slice(bound(start)?, bound(end)?));
    }
    inner.parse().ok().map(Step::Index)
}

fn parse_filter(expr: &str) -> Option<Filter> {
    let b = expr.as_bytes();
    let mut quote: Option<u8> = None;
    for (j, &c) in b.iter().enumerate() {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            continue;
        }
        let op = match (c, b.get(j + 1)) {
            (b'\'' | b'"', _) => {
                quote = Some(c);
                continue;
            }
            (b'=', Some(b'=')) => (CmpOp::Eq, 2),
            (b'!', Some(b'=')) => (CmpOp::Ne, 2),
            (b'<', Some(b'=')) => (CmpOp::Le, 2),
            (b'>', Some(b'=')) => (CmpOp::Ge, 2),
            (b'<', _) => (CmpOp::Lt, 1),
            (b'>', _) => (CmpOp::Gt, 1),
            _ => continue,
        };
        let left = relative_path(expr.get(..j)?.trim())?;
        let right = literal(expr.get(j + op.1..)?.trim())?;
        return Some(Filter {
            left,
            compare: Some((op.0, right)),
        });
    }
    Some(Filter {
        left: relative_path(expr)?,
        compare: None,
    })
}

fn relative_path(s: &str) -> Option<Vec<Step>> {
    parse_steps(s.strip_prefix('@')?)
}

fn literal(s: &str) -> Option<Value> {
    if let Some(text) = unquote(s) {
        return Some(json!(text));
    }
    match s {
        "true" => Some(json!(true)),
        "false" => Some(json!(false)),
        "null" => Some(Value::Null),
        _ => serde_json::from_str::<Value>(s)
            .ok()
            .filter(Value::is_number),
    }
}

fn eval_steps<'a>(steps: &[Step], input: Vec<&'a Value>) -> Vec<&'a Value> {
    steps.iter().fold(input, |current, step| {
        let mut next = Vec::new();
        for v in current {
            apply_step(step, v, &mut next);
        }
        next
    })
}

fn apply_step<'a>(step: &Step, v: &'a Value, out: &mut Vec<&'a Value>) {
    match step {
        Step::Field(name) => out.extend(v.as_object().and_then(|m| m.get(name))),
        Step::Descend(name) => descend(v, name, out),
        Step::Wildcard => match v {
            Value::Object(m) => out.extend(m.values()),
            Value::Array(a) => out.extend(a.iter()),
            _ => {}
        },
        Step::Index(i) => {
            if let Some(a) = v.as_array() {
                let len = i64::try_from(a.len()).unwrap_or(i64::MAX);
                let idx = if *i < 0 { len.saturating_add(*i) } else { *i };
                out.extend(usize::try_from(idx).ok().and_then(|k| a.get(k)));
            }
        }
        Step::Slice(start, end) => {
            if let Some(a) = v.as_array() {
                let len = i64::try_from(a.len()).unwrap_or(i64::MAX);
                let clamp = |x: i64| {
                    let x = if x < 0 {
                        len.saturating_add(x).max(0)
                    } else {
                        x.min(len)
                    };
                    usize::try_from(x).unwrap_or(0)
                };
                let (s, e) = (clamp(start.unwrap_or(0)), clamp(end.unwrap_or(len)));
                if s < e {
                    out.extend(a.get(s..e).unwrap_or(&[]));
                }
            }
        }
        Step::Filter(f) => {
            if let Some(a) = v.as_array() {
                out.extend(a.iter().filter(|e| f.matches(e)));
            }
        }
    }
}

fn descend<'a>(v: &'a Value, name: &str, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if name == "*" || k == name {
                    out.push(child);
                }
                descend(child, name, out);
            }
        }
        Value::Array(a) => {
            for child in a {
                if name == "*" {
                    out.push(child);
                }
                descend(child, name, out);
            }
        }
        _ => {}
    }
}

impl Filter {
    fn matches(&self, v: &Value) -> bool {
        let lefts = eval_steps(&self.left, vec![v]);
        match (&self.compare, lefts.as_slice()) {
            (None, found) => !found.is_empty(),
            (Some((op, right)), [left]) => compare(left, *op, right),
            (Some(_), _) => false,
        }
    }
}

fn compare(left: &Value, op: CmpOp, right: &Value) -> bool {
    let equality_only = matches!(op, CmpOp::Eq | CmpOp::Ne);
    let ord = match (left, right) {
        (Value::String(a), Value::String(b)) => a.cmp(b),
        (Value::Number(a), Value::Number(b)) => match a.as_f64().zip(b.as_f64()) {
            Some((x, y)) => match x.partial_cmp(&y) {
                Some(o) => o,
                None => return false,
            },
            None => return false,
        },
        (Value::Bool(a), Value::Bool(b)) if equality_only => a.cmp(b),
        (Value::Null, Value::Null) if equality_only => Ordering::Equal,
        _ => return false,
    };
    match op {
        CmpOp::Eq => ord == Ordering::Equal,
        CmpOp::Ne => ord != Ordering::Equal,
        CmpOp::Lt => ord == Ordering::Less,
        CmpOp::Le => ord != Ordering::Greater,
        CmpOp::Gt => ord == Ordering::Greater,
        CmpOp::Ge => ord != Ordering::Less,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table;

    const T0: &str = "2024-05-01T10:00:00Z";
    const T1: &str = "2024-05-01T11:00:00Z";
    const T2: &str = "2024-05-01T12:00:00Z";

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "replicas": {"type": "integer"},
                        "color": {"type": "string", "enum": ["red", "blue"]},
                        "paused": {"type": "boolean"},
                        "ratio": {"type": "number"},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "items": {"type": "array", "items": {"type": "string"}}
                    }
                },
                "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}
            }
        })
    }

    fn version(name: &str, storage: bool) -> Value {
        json!({"name": name, "served": true, "storage": storage, "schema": {"openAPIV3Schema": schema()}})
    }

    fn foo() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "foos.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "foos", "kind": "Foo", "shortNames": ["fo"], "categories": ["all"]},
                "versions": [version("v1", true)]
            }
        })
    }

    fn created(mut crd: Value) -> Value {
        default_crd(&mut crd);
        prepare_for_create(&mut crd);
        crd
    }

    fn strings(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    /// The error messages of creating `crd` (after defaulting and the create strategy).
    fn create_errors(crd: Value) -> Vec<String> {
        strings(&validate_crd(&created(crd)))
    }

    #[track_caller]
    fn assert_has(msgs: &[String], expected: &str) {
        assert!(
            msgs.iter().any(|m| m == expected),
            "missing {expected:?} in {msgs:#?}"
        );
    }

    /// `crd` with its names accepted and established, as the controller leaves it.
    fn established(crd: Value) -> Value {
        let mut crd = created(crd);
        let status = status_conditions(&crd, Ok(()), T0);
        crd["status"] = status;
        crd
    }

    fn fixtures() -> Vec<(String, Value)> {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/crds");
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&dir).expect("fixtures directory") {
            let path = entry.expect("directory entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("fixture readable");
            let crd: Value = serde_yaml::from_str(&text).expect("fixture is one YAML document");
            out.push((path.display().to_string(), crd));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(out.len(), 5, "five real CRDs");
        out
    }

    // --- real CRDs ------------------------------------------------------------------------

    #[test]
    fn real_world_crds_validate_without_errors() {
        for (file, crd) in fixtures() {
            let crd = created(crd);
            assert_eq!(strings(&validate_crd(&crd)), Vec::<String>::new(), "{file}");
            let crd = established(crd);
            assert_eq!(
                strings(&validate_crd_update(&crd, &crd)),
                Vec::<String>::new(),
                "{file}"
            );
            let storage = storage_version(&crd).expect("a storage version");
            let rt = resource_type(&crd, &storage).expect("served storage version");
            assert_eq!(
                format!("{}.{}", rt.plural, rt.group),
                text(&crd["metadata"], "name")
            );
        }
    }

    #[test]
    fn gmsa_crd_with_identical_versions_is_served_in_both_and_stored_in_v1() {
        let (_, crd) = fixtures()
            .into_iter()
            .find(|(f, _)| f.ends_with("windows.k8s.io_gmsacredentialspecs.yaml"))
            .expect("gmsa fixture");
        let crd = established(crd);
        assert_eq!(served_versions(&crd), ["v1", "v1alpha1"]);
        assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
        let rt = resource_type(&crd, "v1alpha1").expect("served");
        assert_eq!(rt.singular, "gmsacredentialspec");
        assert!(!rt.namespaced);
        assert!(rt.subresources.is_empty());
        // A protected group with a URL approval gets the approval condition.
        let approval = condition(
            arr_at(&crd["status"], "conditions"),
            API_APPROVAL_CONFORMANT,
        )
        .expect("approval condition");
        assert_eq!(approval["status"], "True");
        assert_eq!(approval["reason"], "ApprovedAnnotation");
    }

    // --- defaulting and strategy --------------------------------------------------------------

    #[test]
    fn defaults_fill_singular_list_kind_conversion_served_and_stored_versions() {
        let mut crd = json!({
            "spec": {
                "names": {"plural": "foos", "kind": "FooBar"},
                "versions": [{"name": "v1", "storage": true}]
            }
        });
        default_crd(&mut crd);
        assert_eq!(crd["spec"]["names"]["singular"], "foobar");
        assert_eq!(crd["spec"]["names"]["listKind"], "FooBarList");
        assert_eq!(crd["spec"]["conversion"], json!({"strategy": "None"}));
        assert_eq!(crd["spec"]["versions"][0]["served"], false);
        assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
        let again = {
            let mut c = crd.clone();
            default_crd(&mut c);
            c
        };
        assert_eq!(again, crd, "defaulting is idempotent");

        let mut kept = json!({
            "spec": {
                "names": {"kind": "Foo", "singular": "thing", "listKind": "Things"},
                "conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "s", "namespace": "n"}}}}
            }
        });
        default_crd(&mut kept);
        assert_eq!(kept["spec"]["names"]["singular"], "thing");
        assert_eq!(kept["spec"]["names"]["listKind"], "Things");
        assert_eq!(
            kept["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"],
            443
        );
    }

    #[test]
    fn create_resets_status_and_update_bumps_generation_only_for_spec_changes() {
        let mut crd = foo();
        crd["status"] = json!({"acceptedNames": {"plural": "hijack", "kind": "Hijack"}});
        let crd = created(crd);
        assert_eq!(crd["metadata"]["generation"], 1);
        assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
        assert_eq!(crd["status"]["acceptedNames"]["plural"], "");

        let old = established(crd);
        let mut same = old.clone();
        same["status"] = json!({});
        prepare_for_update(&mut same, &old);
        assert_eq!(same["status"], old["status"]);
        assert_eq!(same["metadata"]["generation"], 1);

        let mut changed = old.clone();
        changed["spec"]["versions"] = json!([version("v1", false), version("v2", true)]);
        prepare_for_update(&mut changed, &old);
        assert_eq!(changed["metadata"]["generation"], 2);
        assert_eq!(changed["status"]["storedVersions"], json!(["v1", "v2"]));
    }

    // --- metadata, group, scope -----------------------------------------------------------------

    #[test]
    fn name_must_be_plural_dot_group() {
        let mut crd = foo();
        crd["metadata"]["name"] = json!("bars.example.com");
        assert_eq!(
            create_errors(crd),
            [
                "metadata.name: Invalid value: \"bars.example.com\": must be spec.names.plural+\".\"+spec.group"
            ]
        );
        let mut crd = foo();
        crd["metadata"] = json!({"generateName": "foo-"});
        assert_eq!(
            create_errors(crd),
            [
                "metadata.generateName: Invalid value: \"foo-\": must be spec.names.plural+\".\"+spec.group",
                "metadata.name: Required value: name or generateName is required"
            ]
        );
    }

    #[test]
    fn group_is_a_required_dns_subdomain_with_a_dot() {
        let with_group = |group: &str| {
            let mut crd = foo();
            crd["spec"]["group"] = json!(group);
            crd["metadata"]["name"] = json!(format!("foos.{group}"));
            create_errors(crd)
        };
        assert_eq!(
            with_group("example"),
            ["spec.group: Invalid value: \"example\": should be a domain with at least one dot"]
        );
        assert_eq!(
            with_group("Example.com"),
            [
                format!(
                    "metadata.name: Invalid value: \"foos.Example.com\": {}",
                    names::dns1123_subdomain("foos.Example.com").join(",")
                ),
                format!(
                    "spec.group: Invalid value: \"Example.com\": {}",
                    names::dns1123_subdomain("Example.com").join(",")
                ),
            ]
        );
        let mut crd = foo();
        crd["spec"]["group"] = json!("");
        crd["metadata"]["name"] = json!("foos.");
        let msgs = create_errors(crd);
        assert_has(&msgs, "spec.group: Required value");
    }

    #[test]
    fn scope_is_namespaced_or_cluster() {
        let mut crd = foo();
        crd["spec"]["scope"] = json!("Global");
        assert_eq!(
            create_errors(crd),
            [
                "spec.scope: Unsupported value: \"Global\": supported values: \"Cluster\", \"Namespaced\""
            ]
        );
        let mut crd = foo();
        crd["spec"].as_object_mut().expect("spec").remove("scope");
        assert_eq!(create_errors(crd), ["spec.scope: Required value"]);
    }

    // --- versions ----------------------------------------------------------------------------------

    #[test]
    fn exactly_one_storage_version_is_required() {
        let mut crd = foo();
        crd["spec"]["versions"] = json!([]);
        assert_eq!(
            create_errors(crd),
            [
                "spec.versions: Invalid value: must have exactly one version marked as storage version",
                "status.storedVersions: Invalid value: []string(nil): must have at least one stored version"
            ]
        );
        let mut crd = foo();
        crd["spec"]["versions"] = json!([version("v1", true), version("v2", true)]);
        assert_eq!(
            create_errors(crd),
            [
                "spec.versions: Invalid value: must have exactly one version marked as storage version",
                // The create strategy records only the first storage version.
                "status.storedVersions: Invalid value: []string{\"v1\"}: must have the storage version v2"
            ]
        );
    }

    #[test]
    fn version_names_are_unique_dns_1035_labels() {
        let mut crd = foo();
        crd["spec"]["versions"] = json!([version("v1", true), version("v1", false)]);
        assert_eq!(
            create_errors(crd),
            ["spec.versions: Invalid value: must contain unique version names"]
        );
        let mut crd = foo();
        crd["spec"]["versions"] = json!([version("V1", true)]);
        let msg = names::dns1035_label("V1").join(",");
        assert_eq!(
            create_errors(crd),
            [
                format!("spec.versions[0].name: Invalid value: \"V1\": {msg}"),
                // Upstream's internal `spec.version` mirrors `versions[0].name`.
                format!("spec.version: Invalid value: \"V1\": {msg}"),
            ]
        );
    }

    #[test]
    fn every_version_needs_an_openapi_schema() {
        let mut crd = foo();
        crd["spec"]["versions"] =
            json!([version("v1", true), {"name": "v2", "served": false, "storage": false}]);
        assert_eq!(
            create_errors(crd),
            ["spec.versions[1].schema.openAPIV3Schema: Required value"]
        );
    }

    #[test]
    fn a_version_with_no_served_flag_is_accepted_as_upstream_does() {
        // Upstream has no "at least one served version" rule.
        let mut crd = foo();
        crd["spec"]["versions"][0]["served"] = json!(false);
        assert_eq!(create_errors(crd), Vec::<String>::new());
    }

    #[test]
    fn deprecation_warnings_need_a_deprecated_version_and_printable_text() {
        let with = |deprecated: bool, warning: &str| {
            let mut crd = foo();
            crd["spec"]["versions"][0]["deprecated"] = json!(deprecated);
            crd["spec"]["versions"][0]["deprecationWarning"] = json!(warning);
            create_errors(crd)
        };
        assert_eq!(
            with(false, "old"),
            [
                "spec.versions[0].deprecationWarning: Invalid value: \"old\": can only be set for deprecated versions"
            ]
        );
        assert_eq!(
            with(true, ""),
            [
                "spec.versions[0].deprecationWarning: Invalid value: \"\": must not be an empty string"
            ]
        );
        let long = "x".repeat(257);
        assert_eq!(
            with(true, &long),
            [format!(
                "spec.versions[0].deprecationWarning: Invalid value: \"{long}\": must be <= 256 characters long"
            )]
        );
        assert_eq!(with(true, "a\tb").len(), 1, "a tab is not printable");
        assert!(with(true, "a\tb")[0].ends_with("non-printable character found at index 1"));
        assert_eq!(with(true, "use v2 instead"), Vec::<String>::new());
    }

    // --- names -------------------------------------------------------------------------------------

    #[test]
    fn names_are_required_and_well_formed() {
        let mut crd = foo();
        crd["spec"]["names"] = json!({"plural": "Foos", "kind": "Foo Bar", "listKind": "Foo Bar", "shortNames": ["f-"], "categories": ["All"]});
        crd["metadata"]["name"] = json!("Foos.example.com");
        let msgs = create_errors(crd);
        let dns = |s: &str| names::dns1035_label(s).join(",");
        assert_has(
            &msgs,
            &format!(
                "spec.names.plural: Invalid value: \"Foos\": {}",
                dns("Foos")
            ),
        );
        assert_has(
            &msgs,
            &format!(
                "spec.names.kind: Invalid value: \"Foo Bar\": may have mixed case, but should otherwise match: {}",
                dns("foo bar")
            ),
        );
        assert_has(
            &msgs,
            "spec.names.listKind: Invalid value: \"Foo Bar\": kind and listKind may not be the same",
        );
        assert_has(
            &msgs,
            &format!(
                "spec.names.shortNames[0]: Invalid value: \"f-\": {}",
                dns("f-")
            ),
        );
        assert_has(
            &msgs,
            &format!(
                "spec.names.categories[0]: Invalid value: \"All\": {}",
                dns("All")
            ),
        );

        let mut crd = foo();
        crd["spec"]["names"] = json!({});
        crd["metadata"]["name"] = json!(".example.com");
        let msgs = create_errors(crd);
        for key in ["plural", "singular", "kind", "listKind"] {
            assert_has(&msgs, &format!("spec.names.{key}: Required value"));
        }
    }

    #[test]
    fn accepted_names_are_checked_on_status_updates() {
        let old = established(foo());
        let mut new = old.clone();
        new["status"]["acceptedNames"]["plural"] = json!("Foos");
        assert_eq!(
            strings(&validate_crd_status_update(&new, &old)),
            [format!(
                "status.acceptedNames.plural: Invalid value: \"Foos\": {}",
                names::dns1035_label("Foos").join(",")
            )]
        );
    }

    // --- conversion --------------------------------------------------------------------------------

    #[test]
    fn conversion_webhooks_need_a_client_config_and_a_review_version_tandem_speaks() {
        let with = |conversion: Value| {
            let mut crd = foo();
            crd["spec"]["conversion"] = conversion;
            create_errors(crd)
        };
        assert!(
            with(
                json!({"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://x"}, "conversionReviewVersions": ["v1"]}})
            )
            .is_empty()
        );
        assert!(
            with(
                json!({"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "s", "namespace": "n", "path": "/convert"}}, "conversionReviewVersions": ["v2", "v1beta1"]}})
            )
            .is_empty()
        );
        assert_eq!(
            with(json!({"strategy": "Webhook"})),
            [
                "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook",
                "spec.conversion.conversionReviewVersions: Required value"
            ]
        );
        assert_eq!(
            with(
                json!({"strategy": "Webhook", "webhook": {"clientConfig": {"url": "http://x?a=b"}, "conversionReviewVersions": ["v2", "v2", "V3"]}})
            ),
            [
                "spec.conversion.webhookClientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
                "spec.conversion.webhookClientConfig.url: Invalid value: \"a=b\": query parameters are not permitted in the URL",
                "spec.conversion.conversionReviewVersions[1]: Invalid value: \"v2\": duplicate version",
                "spec.conversion.conversionReviewVersions[2]: Invalid value: \"V3\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
                "spec.conversion.conversionReviewVersions: Invalid value: []string{\"v2\", \"v2\", \"V3\"}: must include at least one of v1, v1beta1"
            ]
        );
        assert_eq!(
            with(
                json!({"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://x", "service": {"name": "s", "namespace": "n"}}, "conversionReviewVersions": ["v1"]}})
            ),
            [
                "spec.conversion.webhookClientConfig: Required value: exactly one of url or service is required"
            ]
        );
        assert_eq!(
            with(
                json!({"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "s"}}, "conversionReviewVersions": ["v1"]}})
            ),
            [
                "spec.conversion.webhookClientConfig.service.name: Required value: service name is required"
            ]
        );
        // An update keeps a stored webhook that named no version tandem speaks, as upstream
        // ratchets; a new CRD may not.
        let mut old = established(foo());
        old["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://x"}, "conversionReviewVersions": ["v9"]}});
        let new = old.clone();
        assert!(
            !strings(&validate_crd_update(&new, &old))
                .iter()
                .any(|m| m.contains("must include at least one of")),
        );
        assert_eq!(
            with(json!({"strategy": "Bogus"})),
            [
                "spec.conversion.strategy: Unsupported value: \"Bogus\": supported values: \"None\", \"Webhook\""
            ]
        );
        assert_eq!(
            with(json!({"strategy": ""})),
            ["spec.conversion.strategy: Required value"]
        );
        assert_eq!(
            with(
                json!({"strategy": "None", "webhook": {"clientConfig": {"url": "https://x"}, "conversionReviewVersions": ["v1"]}})
            ),
            [
                "spec.conversion.webhookClientConfig: Forbidden: should not be set when strategy is not set to Webhook",
                "spec.conversion.conversionReviewVersions: Forbidden: should not be set when strategy is not set to Webhook"
            ]
        );
    }

    #[test]
    fn preserve_unknown_fields_cannot_be_turned_on() {
        let mut crd = foo();
        crd["spec"]["preserveUnknownFields"] = json!(true);
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["default"] =
            json!({});
        crd["spec"]["conversion"] = json!({"strategy": "Webhook"});
        let msgs = create_errors(crd);
        assert_has(
            &msgs,
            "spec.preserveUnknownFields: Invalid value: true: must be false in order to use defaults in the schema",
        );
        assert_has(
            &msgs,
            "spec.conversion.strategy: Invalid value: \"Webhook\": must be None if spec.preserveUnknownFields is true",
        );
        assert_has(
            &msgs,
            "spec.preserveUnknownFields: Invalid value: true: cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        );

        let mut old = established(foo());
        old["spec"]["preserveUnknownFields"] = json!(true);
        let new = old.clone();
        assert!(
            !strings(&validate_crd_update(&new, &old))
                .iter()
                .any(|m| m.contains("cannot set to true")),
            "kept when the stored CRD already had it"
        );
    }

    // --- API approval --------------------------------------------------------------------------------

    #[test]
    fn protected_groups_need_the_api_approval_annotation() {
        let in_group = |annotation: Option<&str>| {
            let mut crd = foo();
            crd["spec"]["group"] = json!("widgets.k8s.io");
            crd["metadata"]["name"] = json!("foos.widgets.k8s.io");
            if let Some(a) = annotation {
                crd["metadata"]["annotations"] = json!({API_APPROVED_ANNOTATION: a});
            }
            create_errors(crd)
        };
        assert_eq!(
            in_group(None),
            [
                "metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111"
            ]
        );
        assert_eq!(
            in_group(Some("yes please")),
            [
                "metadata.annotations[api-approved.kubernetes.io]: Invalid value: \"yes please\": protected groups must have approval annotation \"api-approved.kubernetes.io\" with either a URL or a reason starting with \"unapproved\", see https://github.com/kubernetes/enhancements/pull/1111"
            ]
        );
        assert_eq!(
            in_group(Some("unapproved, experimental")),
            Vec::<String>::new()
        );
        assert_eq!(
            in_group(Some("https://github.com/kubernetes/enhancements/pull/1111")),
            Vec::<String>::new()
        );
    }

    // --- schemas -----------------------------------------------------------------------------------

    #[test]
    fn status_subresource_restricts_the_root_schema() {
        let with_root = |patch: Value| {
            let mut crd = foo();
            crd["spec"]["versions"][0]["subresources"] = json!({"status": {}});
            let root = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
            for (k, v) in patch.as_object().expect("patch object") {
                root[k.as_str()] = v.clone();
            }
            create_errors(crd)
        };
        // The schema engine adds its own complaints about a root array; this rule comes first.
        assert_eq!(
            with_root(json!({"type": "array"}))
                .first()
                .map(String::as_str),
            Some(
                "spec.validation.openAPIV3Schema.type: Invalid value: \"array\": only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled"
            )
        );
        assert_eq!(
            with_root(json!({"maxProperties": 5})),
            [format!(
                "spec.validation.openAPIV3Schema: Invalid value: {ROOT_FIELDS_MSG}"
            )]
        );
        let msgs = with_root(json!({"additionalProperties": {"type": "string"}}));
        assert_eq!(
            msgs.first(),
            Some(&format!(
                "spec.validation.openAPIV3Schema: Invalid value: {ROOT_FIELDS_MSG}"
            ))
        );
        assert_eq!(
            with_root(json!({"nullable": true})),
            [
                format!("spec.validation.openAPIV3Schema: Invalid value: {ROOT_FIELDS_MSG}"),
                "spec.validation.openAPIV3Schema.nullable: Forbidden: nullable cannot be true at the root".to_string()
            ]
        );
        assert_eq!(
            with_root(
                json!({"nullable": false, "x-kubernetes-preserve-unknown-fields": true, "description": "d"})
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn identical_version_fields_are_reported_at_the_top_level_and_different_ones_per_version() {
        let mut crd = foo();
        let mut v2 = version("v2", false);
        v2["schema"]["openAPIV3Schema"]["nullable"] = json!(true);
        crd["spec"]["versions"] = json!([version("v1", true), v2]);
        assert_eq!(
            create_errors(crd),
            [
                "spec.versions[1].schema.openAPIV3Schema.nullable: Forbidden: nullable cannot be true at the root"
            ]
        );
        let mut crd = foo();
        let mut v1 = version("v1", true);
        v1["schema"]["openAPIV3Schema"]["nullable"] = json!(true);
        let mut v2 = v1.clone();
        v2["name"] = json!("v2");
        v2["storage"] = json!(false);
        crd["spec"]["versions"] = json!([v1, v2]);
        assert_eq!(
            create_errors(crd),
            [
                "spec.validation.openAPIV3Schema.nullable: Forbidden: nullable cannot be true at the root"
            ]
        );
    }

    #[test]
    fn schema_engine_errors_are_reported_under_the_schema_path() {
        let mut crd = foo();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            .as_object_mut()
            .expect("spec schema")
            .remove("type");
        let msgs = create_errors(crd);
        assert!(
            msgs.iter().any(|m| m.starts_with(
                "spec.validation.openAPIV3Schema.properties[spec].type: Required value"
            )),
            "{msgs:#?}"
        );

        let mut crd = foo();
        let mut v2 = version("v2", false);
        v2["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] = json!([{"rule": " "}]);
        crd["spec"]["versions"] = json!([version("v1", true), v2]);
        assert_eq!(
            create_errors(crd),
            [
                "spec.versions[1].schema.openAPIV3Schema.x-kubernetes-validations[0].rule: Required value: rule is not specified"
            ]
        );
    }

    // --- subresources --------------------------------------------------------------------------------

    #[test]
    fn scale_paths_are_simple_json_paths_under_spec_and_status() {
        let with_scale = |scale: Value| {
            let mut crd = foo();
            crd["spec"]["versions"][0]["subresources"] = json!({"scale": scale});
            create_errors(crd)
        };
        assert_eq!(
            with_scale(
                json!({"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"})
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            with_scale(
                json!({"specReplicasPath": ".status.replicas", "statusReplicasPath": "status.replicas", "labelSelectorPath": ".selector"})
            ),
            [
                "spec.subresources.scale.specReplicasPath: Invalid value: \".status.replicas\": should be a json path under .spec",
                "spec.subresources.scale.statusReplicasPath: Invalid value: \"status.replicas\": must be a simple json path starting with .",
                "spec.subresources.scale.labelSelectorPath: Invalid value: \".selector\": should be a json path under either .spec or .status"
            ]
        );
        assert_eq!(
            with_scale(json!({"specReplicasPath": ".spec", "statusReplicasPath": ""})),
            [
                "spec.subresources.scale.specReplicasPath: Invalid value: \".spec\": should be a json path under .spec",
                "spec.subresources.scale.statusReplicasPath: Required value"
            ]
        );
        let mut crd = foo();
        let mut v2 = version("v2", false);
        v2["subresources"] =
            json!({"scale": {"specReplicasPath": ".status.x", "statusReplicasPath": ".status.y"}});
        crd["spec"]["versions"] = json!([version("v1", true), v2]);
        assert_eq!(
            create_errors(crd),
            [
                "spec.versions[1].subresources.scale.specReplicasPath: Invalid value: \".status.x\": should be a json path under .spec"
            ]
        );
        let mut crd = foo();
        crd["spec"]["versions"][0]["subresources"] = json!({"status": "yes"});
        assert_eq!(
            create_errors(crd),
            ["spec.subresources.status: Invalid value: \"yes\": must be an empty object"]
        );
    }

    // --- printer columns -----------------------------------------------------------------------------

    #[test]
    fn printer_columns_need_a_name_a_known_type_and_format_and_a_json_path() {
        let with_column = |col: Value| {
            let mut crd = foo();
            crd["spec"]["versions"][0]["additionalPrinterColumns"] = json!([col]);
            create_errors(crd)
        };
        assert_eq!(
            with_column(
                json!({"name": "Replicas", "type": "integer", "format": "int32", "jsonPath": ".spec.replicas"})
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            with_column(json!({"type": "time", "format": "uuid", "jsonPath": "spec.replicas"})),
            [
                "spec.additionalPrinterColumns[0].name: Required value",
                "spec.additionalPrinterColumns[0].type: Invalid value: \"time\": must be one of boolean,date,integer,number,string",
                "spec.additionalPrinterColumns[0].format: Invalid value: \"uuid\": must be one of byte,date,date-time,double,float,int32,int64,password",
                "spec.additionalPrinterColumns[0].JSONPath: Invalid value: \"spec.replicas\": must be a simple json path starting with ."
            ]
        );
        assert_eq!(
            with_column(json!({"name": "X"})),
            [
                "spec.additionalPrinterColumns[0].type: Required value: must be one of boolean,date,integer,number,string",
                "spec.additionalPrinterColumns[0].JSONPath: Required value"
            ]
        );
    }

    // --- selectable fields ---------------------------------------------------------------------------

    #[test]
    fn selectable_fields_point_at_scalar_fields_outside_metadata() {
        let with_fields = |paths: &[&str], schema_patch: Option<Value>| {
            let mut crd = foo();
            let fields: Vec<Value> = paths.iter().map(|p| json!({"jsonPath": p})).collect();
            crd["spec"]["versions"][0]["selectableFields"] = json!(fields);
            if let Some(p) = schema_patch {
                crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"] =
                    p;
            }
            create_errors(crd)
        };
        assert_eq!(
            with_fields(
                &[
                    ".spec.color",
                    ".spec.replicas",
                    ".spec.paused",
                    ".spec.labels.app"
                ],
                None
            ),
            Vec::<String>::new()
        );
        let p = |i: usize| format!("spec.selectableFields[{i}].jsonPath");
        assert_eq!(
            with_fields(
                &[
                    ".spec",
                    ".spec.nope",
                    ".spec.items[0]",
                    "spec.color",
                    ".spec.ratio",
                    ".spec.",
                    ""
                ],
                None
            ),
            [
                format!(
                    "{}: Invalid value: \".spec\": must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
                    p(0)
                ),
                format!(
                    "{}: Invalid value: \".spec.nope\": is an invalid path: does not refer to a valid field",
                    p(1)
                ),
                format!(
                    "{}: Invalid value: \".spec.items[0]\": is an invalid path: array notation is not allowed",
                    p(2)
                ),
                format!(
                    "{}: Invalid value: \"spec.color\": is an invalid path: expected [ or . but got: spec",
                    p(3)
                ),
                format!(
                    "{}: Invalid value: \".spec.ratio\": must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
                    p(4)
                ),
                format!(
                    "{}: Invalid value: \".spec.\": is an invalid path: unexpected end of JSON path",
                    p(5)
                ),
                format!("{}: Required value", p(6)),
            ]
        );
        assert_eq!(
            with_fields(
                &[".metadata.name"],
                Some(json!({"type": "object", "properties": {"name": {"type": "string"}}}))
            ),
            [format!(
                "{}: Invalid value: \".metadata.name\": must not point to fields in metadata",
                p(0)
            )]
        );
        assert_eq!(
            with_fields(&[".spec.color", ".spec.color"], None),
            [format!("{}: Duplicate value: \".spec.color\"", p(1))]
        );
        let mut props = serde_json::Map::new();
        let mut paths = Vec::new();
        for i in 0..9 {
            props.insert(format!("f{i}"), json!({"type": "string"}));
            paths.push(format!(".spec.f{i}"));
        }
        let mut crd = foo();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"] =
            Value::Object(props);
        let fields: Vec<Value> = paths.iter().map(|p| json!({"jsonPath": p})).collect();
        crd["spec"]["versions"][0]["selectableFields"] = json!(fields);
        let errs = validate_crd(&created(crd.clone()));
        assert_eq!(
            strings(&errs),
            ["spec.selectableFields: Too many: must have at most 8 items"]
        );
        assert_eq!(errs[0].kind, ErrorKind::TooMany);
        // An unchanged over-long list on an established CRD is kept (upstream's ratchet).
        let old = established(crd);
        assert_eq!(
            strings(&validate_crd_update(&old, &old)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn per_version_selectable_fields_are_checked_against_their_own_schema() {
        let mut crd = foo();
        let mut v1 = version("v1", true);
        v1["selectableFields"] = json!([{"jsonPath": ".spec.color"}]);
        let mut v2 = version("v2", false);
        v2["selectableFields"] = json!([{"jsonPath": ".spec.nope"}]);
        crd["spec"]["versions"] = json!([v1, v2]);
        assert_eq!(
            create_errors(crd),
            [
                "spec.versions[1].selectableFields[0].jsonPath: Invalid value: \".spec.nope\": is an invalid path: does not refer to a valid field"
            ]
        );
    }

    // --- update --------------------------------------------------------------------------------------

    #[test]
    fn scope_and_kind_are_immutable_once_established_group_and_plural_always() {
        let old = established(foo());
        let mut new = old.clone();
        new["spec"]["scope"] = json!("Cluster");
        new["spec"]["names"]["kind"] = json!("Bar");
        new["spec"]["names"]["listKind"] = json!("BarList");
        assert_eq!(
            strings(&validate_crd_update(&new, &old)),
            [
                "spec.scope: Invalid value: \"Cluster\": field is immutable",
                "spec.names.kind: Invalid value: \"Bar\": field is immutable"
            ]
        );
        let not_established = created(foo());
        let mut new = not_established.clone();
        new["spec"]["scope"] = json!("Cluster");
        assert_eq!(
            strings(&validate_crd_update(&new, &not_established)),
            Vec::<String>::new()
        );

        let mut new = old.clone();
        new["spec"]["group"] = json!("other.com");
        new["spec"]["names"]["plural"] = json!("bars");
        assert_eq!(
            strings(&validate_crd_update(&new, &old)),
            [
                "spec.group: Invalid value: \"other.com\": field is immutable",
                "spec.names.plural: Invalid value: \"bars\": field is immutable"
            ]
        );
    }

    #[test]
    fn a_stored_version_cannot_be_removed_from_spec_versions() {
        let mut crd = foo();
        crd["spec"]["versions"] = json!([version("v1", false), version("v2", true)]);
        let mut old = established(crd);
        old["status"]["storedVersions"] = json!(["v1", "v2"]);
        let mut new = old.clone();
        new["spec"]["versions"] = json!([version("v2", true)]);
        prepare_for_update(&mut new, &old);
        assert_eq!(
            strings(&validate_crd_update(&new, &old)),
            [
                "status.storedVersions[0]: Invalid value: \"v1\": missing from spec.versions; v1 was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in v1 and removes v1 from status.storedVersions"
            ]
        );
        // Without the update strategy the new storage version would be missing too.
        let mut raw = old.clone();
        raw["spec"]["versions"] = json!([version("v1", true), version("v3", false)]);
        raw["status"]["storedVersions"] = json!(["v2"]);
        assert_eq!(
            strings(&validate_crd_update(&raw, &old)),
            [
                "status.storedVersions: Invalid value: []string{\"v2\"}: must have the storage version v1",
                "status.storedVersions[0]: Invalid value: \"v2\": missing from spec.versions; v2 was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in v2 and removes v2 from status.storedVersions"
            ]
        );
    }

    #[test]
    fn schemas_are_required_on_update_only_if_the_stored_crd_had_them() {
        let mut old = established(foo());
        old["spec"]["versions"] = json!([
            {"name": "v1", "served": true, "storage": true},
            {"name": "v2", "served": false, "storage": false}
        ]);
        let new = old.clone();
        assert_eq!(
            strings(&validate_crd_update(&new, &old)),
            [
                "spec.versions[0].schema.openAPIV3Schema: Required value: because otherwise all fields are pruned"
            ]
        );
        let with_schemas = established(foo());
        let mut new = with_schemas.clone();
        new["spec"]["versions"][0]
            .as_object_mut()
            .expect("version")
            .remove("schema");
        assert_eq!(
            strings(&validate_crd_update(&new, &with_schemas)),
            ["spec.versions[0].schema.openAPIV3Schema: Required value"]
        );
    }

    // --- names ---------------------------------------------------------------------------------------

    fn widget() -> Value {
        established(json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd", "fo"]},
                "versions": [version("v1", true)]
            }
        }))
    }

    #[test]
    fn names_used_by_another_crd_of_the_group_conflict() {
        let other = widget();
        let registry = Registry::builtin();
        let crd = created(foo());
        let rejected = names_accepted(&crd, &[&other, &crd], &registry).expect_err("fo is taken");
        assert_eq!(
            rejected.conflicts,
            [NameConflict::ShortNames(vec!["fo".into()])]
        );
        assert_eq!(rejected.reason(), "ShortNamesConflict");
        assert_eq!(rejected.message(), "\"fo\" is already in use");

        let mut kind_clash = foo();
        kind_clash["spec"]["names"] = json!({"plural": "foos", "singular": "widget", "kind": "Widget", "shortNames": ["wd", "fo"]});
        let kind_clash = created(kind_clash);
        let rejected = names_accepted(&kind_clash, &[&other], &registry).expect_err("taken");
        assert_eq!(
            rejected.conflicts,
            [
                NameConflict::Singular("widget".into()),
                NameConflict::ShortNames(vec!["wd".into(), "fo".into()]),
                NameConflict::Kind("Widget".into()),
                NameConflict::ListKind("WidgetList".into()),
            ]
        );
        assert_eq!(rejected.reason(), "ListKindConflict");
        assert_eq!(rejected.message(), "\"WidgetList\" is already in use");
        assert_eq!(
            rejected.conflicts[1].message(),
            "[\"wd\" is already in use, \"fo\" is already in use]"
        );

        // Another group, or names not yet accepted by the other CRD, do not conflict.
        let mut elsewhere = other.clone();
        elsewhere["spec"]["group"] = json!("other.com");
        assert_eq!(names_accepted(&crd, &[&elsewhere], &registry), Ok(()));
        let mut pending = other.clone();
        pending["status"]["acceptedNames"] = json!({"plural": "", "kind": ""});
        assert_eq!(names_accepted(&crd, &[&pending], &registry), Ok(()));
        // Names this CRD already holds stay accepted.
        let holder = established(foo());
        let mut claimant = other.clone();
        claimant["status"]["acceptedNames"]["shortNames"] = json!(["fo"]);
        assert_eq!(names_accepted(&holder, &[&claimant], &registry), Ok(()));
    }

    #[test]
    fn names_of_built_in_resources_of_the_group_conflict() {
        let registry = Registry::builtin();
        let pods = json!({
            "metadata": {"name": "pods"},
            "spec": {"group": "", "names": {"plural": "pods", "singular": "pod", "kind": "Pod", "listKind": "PodList"}}
        });
        let rejected = names_accepted(&pods, &[], &registry).expect_err("pods are built in");
        assert_eq!(
            rejected.conflicts,
            [
                NameConflict::Plural("pods".into()),
                NameConflict::Singular("pod".into()),
                NameConflict::Kind("Pod".into()),
                NameConflict::ListKind("PodList".into()),
            ]
        );
        assert_eq!(
            rejected.conflicts[0].message(),
            "\"pods\" is already in use"
        );

        let deployments = json!({
            "metadata": {"name": "deploys.apps"},
            "spec": {"group": "apps", "names": {"plural": "deploys", "singular": "deploy2", "kind": "Deploy", "listKind": "DeployList", "shortNames": ["deploy"]}}
        });
        let rejected =
            names_accepted(&deployments, &[], &registry).expect_err("deploy is built in");
        assert_eq!(
            rejected.conflicts,
            [NameConflict::ShortNames(vec!["deploy".into()])]
        );

        let (_, gmsa) = fixtures()
            .into_iter()
            .find(|(f, _)| f.ends_with("windows.k8s.io_gmsacredentialspecs.yaml"))
            .expect("gmsa fixture");
        let gmsa = created(gmsa);
        let rejected =
            names_accepted(&gmsa, &[], &registry).expect_err("tandem serves GMSACredentialSpec");
        assert_eq!(
            rejected.conflicts[0],
            NameConflict::Plural("gmsacredentialspecs".into())
        );
        assert_eq!(names_accepted(&created(foo()), &[], &registry), Ok(()));
    }

    // --- status --------------------------------------------------------------------------------------

    #[test]
    fn accepted_names_establish_the_crd_and_transition_times_only_move_on_change() {
        let mut crd = created(foo());
        let status = status_conditions(&crd, Ok(()), T0);
        assert_eq!(
            status["conditions"],
            json!([
                {"type": "NamesAccepted", "status": "True", "lastTransitionTime": T0, "reason": "NoConflicts", "message": "no conflicts found"},
                {"type": "Established", "status": "True", "lastTransitionTime": T0, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
            ])
        );
        assert_eq!(
            status["acceptedNames"],
            json!({"plural": "foos", "singular": "foo", "shortNames": ["fo"], "kind": "Foo", "listKind": "FooList", "categories": ["all"]})
        );
        assert_eq!(status["storedVersions"], json!(["v1"]));
        crd["status"] = status;
        assert!(is_established(&crd));

        let again = status_conditions(&crd, Ok(()), T1);
        assert_eq!(again, crd["status"], "nothing changed, nothing moves");

        // A rename that conflicts: the old short names stay, the condition flips, Established stays.
        crd["spec"]["names"]["shortNames"] = json!(["wd"]);
        crd["spec"]["names"]["categories"] = json!(["mine"]);
        let rejected =
            names_accepted(&crd, &[&widget()], &Registry::builtin()).expect_err("wd taken");
        let status = status_conditions(&crd, Err(rejected), T2);
        assert_eq!(
            status["conditions"][0],
            json!({"type": "NamesAccepted", "status": "False", "lastTransitionTime": T2, "reason": "ShortNamesConflict", "message": "\"wd\" is already in use"})
        );
        assert_eq!(status["conditions"][1]["status"], "True");
        assert_eq!(status["conditions"][1]["lastTransitionTime"], T0);
        assert_eq!(status["acceptedNames"]["shortNames"], json!(["fo"]));
        assert_eq!(status["acceptedNames"]["categories"], json!(["mine"]));
    }

    #[test]
    fn a_crd_whose_names_conflict_from_the_start_is_not_established() {
        let mut crd = foo();
        crd["spec"]["names"]["kind"] = json!("Widget");
        let crd = created(crd);
        let rejected =
            names_accepted(&crd, &[&widget()], &Registry::builtin()).expect_err("Widget taken");
        let status = status_conditions(&crd, Err(rejected), T0);
        assert_eq!(
            status["conditions"],
            json!([
                {"type": "NamesAccepted", "status": "False", "lastTransitionTime": T0, "reason": "ListKindConflict", "message": "\"WidgetList\" is already in use"},
                {"type": "Established", "status": "False", "lastTransitionTime": T0, "reason": "NotAccepted", "message": "not all names are accepted"}
            ])
        );
        assert_eq!(
            status["acceptedNames"],
            // Only the plural is free: singular `widget`, short name `fo`, kind and list kind are taken.
            json!({"plural": "foos", "kind": "", "categories": ["all"]})
        );
        let mut with_status = crd.clone();
        with_status["status"] = status;
        assert!(!is_established(&with_status));
        assert_eq!(
            resource_type(&with_status, "v1"),
            None,
            "no kind accepted yet"
        );

        // Once the other CRD is gone, the names are accepted and the CRD established.
        let status = status_conditions(&with_status, Ok(()), T1);
        assert_eq!(status["conditions"][0]["lastTransitionTime"], T1);
        assert_eq!(status["conditions"][1]["status"], "True");
        assert_eq!(status["conditions"][1]["reason"], "InitialNamesAccepted");
        assert_eq!(status["conditions"][1]["lastTransitionTime"], T1);
    }

    #[test]
    fn protected_groups_get_the_api_approval_condition() {
        let mut crd = foo();
        crd["spec"]["group"] = json!("widgets.k8s.io");
        crd["metadata"]["annotations"] = json!({API_APPROVED_ANNOTATION: "unapproved, testing"});
        let status = status_conditions(&created(crd), Ok(()), T0);
        assert_eq!(
            status["conditions"][2],
            json!({"type": API_APPROVAL_CONFORMANT, "status": "False", "lastTransitionTime": T0, "reason": "UnapprovedAnnotation", "message": "not approved: \"unapproved, testing\""})
        );
        let status = status_conditions(&created(foo()), Ok(()), T0);
        assert_eq!(status["conditions"].as_array().map(Vec::len), Some(2));
    }

    // --- serving -------------------------------------------------------------------------------------

    #[test]
    fn resource_type_describes_one_served_version_from_the_accepted_names() {
        let mut crd = foo();
        let mut v1beta1 = version("v1beta1", false);
        v1beta1["served"] = json!(false);
        crd["spec"]["versions"][0]["subresources"] = json!({"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}});
        crd["spec"]["versions"] = json!([crd["spec"]["versions"][0].clone(), v1beta1]);
        assert_eq!(
            resource_type(&created(crd.clone()), "v1"),
            None,
            "names not accepted yet"
        );
        let crd = established(crd);
        let rt = resource_type(&crd, "v1").expect("served");
        assert_eq!(
            rt,
            ResourceType {
                group: "example.com".into(),
                version: "v1".into(),
                kind: "Foo".into(),
                plural: "foos".into(),
                singular: "foo".into(),
                namespaced: true,
                short_names: vec!["fo".into()],
                categories: vec!["all".into()],
                subresources: vec!["status".into(), "scale".into()],
                verbs: CUSTOM_RESOURCE_VERBS
                    .iter()
                    .map(|v| v.to_string())
                    .collect(),
            }
        );
        assert_eq!(rt.api_version(), "example.com/v1");
        assert_eq!(rt.key_prefix(), "/registry/foos.example.com/");
        let mut sorted = rt.verbs.clone();
        sorted.sort();
        assert_eq!(rt.verbs, sorted);
        assert_eq!(resource_type(&crd, "v1beta1"), None, "not served");
        assert_eq!(resource_type(&crd, "v9"), None);

        let mut terminating = crd.clone();
        terminating["status"]["conditions"]
            .as_array_mut()
            .expect("conditions")
            .push(json!({"type": "Terminating", "status": "True"}));
        assert_eq!(
            resource_type(&terminating, "v1").expect("served").verbs,
            ["delete", "deletecollection", "get", "list", "watch"]
        );
    }

    #[test]
    fn served_versions_are_sorted_by_kube_aware_priority() {
        let mut crd = foo();
        let mut hidden = version("v3", false);
        hidden["served"] = json!(false);
        crd["spec"]["versions"] = json!([
            version("v1alpha1", false),
            version("foo", false),
            version("v1", true),
            version("v2beta1", false),
            version("bar", false),
            version("v1beta2", false),
            version("v10", false),
            version("v1beta10", false),
            hidden
        ]);
        assert_eq!(
            served_versions(&crd),
            [
                "v10", "v1", "v2beta1", "v1beta10", "v1beta2", "v1alpha1", "bar", "foo"
            ]
        );
        assert_eq!(storage_version(&crd).as_deref(), Some("v1"));
        assert_eq!(storage_version(&json!({})), None);
        assert_eq!(compare_kube_aware_versions("v1", "v1"), Ordering::Equal);
        assert_eq!(
            compare_kube_aware_versions("v2alpha1", "v1beta1"),
            Ordering::Less
        );
        assert_eq!(
            compare_kube_aware_versions("v1gamma1", "foo"),
            Ordering::Less
        );
    }

    // --- printing --------------------------------------------------------------------------------

    #[test]
    fn default_columns_match_the_custom_resource_table_fallback() {
        let crd = established(foo());
        let rt = resource_type(&crd, "v1").expect("served");
        let expected: Vec<Value> = table::columns(&rt)
            .iter()
            .map(table::ColumnDefinition::to_json)
            .collect();
        let columns = printer_columns(&crd, "v1");
        let got: Vec<Value> = columns.iter().map(PrinterColumn::to_json).collect();
        assert_eq!(got, expected);

        let obj = json!({"metadata": {"name": "a", "creationTimestamp": "2024-05-01T09:00:00Z"}});
        let now = parse_rfc3339(T0).expect("time");
        assert_eq!(
            printer_cells(&columns, &obj, now),
            table::cells(&rt, &obj, now)
        );
        assert_eq!(
            printer_cells(&columns, &obj, now),
            [json!("a"), json!("60m")]
        );
    }

    #[test]
    fn declared_columns_print_cells_by_type() {
        let (_, certs) = fixtures()
            .into_iter()
            .find(|(f, _)| f.ends_with("cert-manager.io_certificates.yaml"))
            .expect("certificates fixture");
        let columns = printer_columns(&certs, "v1");
        let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Name",
                "Ready",
                "Secret",
                "Issuer",
                "Status",
                "Expiration",
                "Age"
            ]
        );
        assert_eq!(
            columns[1].description,
            "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type == \"Ready\")].status"
        );
        assert_eq!(columns[3].priority, 1);
        assert_eq!(columns[6].type_, "date");
        let cert = json!({
            "metadata": {"name": "web", "creationTimestamp": "2024-04-30T10:00:00Z"},
            "spec": {"secretName": "web-tls", "issuerRef": {"name": "letsencrypt"}},
            "status": {"conditions": [
                {"type": "Issuing", "status": "False"},
                {"type": "Ready", "status": "True", "message": "Certificate is up to date"}
            ]}
        });
        let now = parse_rfc3339(T0).expect("time");
        assert_eq!(
            printer_cells(&columns, &cert, now),
            [
                json!("web"),
                json!("True"),
                json!("web-tls"),
                json!("letsencrypt"),
                json!("Certificate is up to date"),
                Value::Null,
                json!("24h")
            ]
        );

        let col = |type_: &str, path: &str| PrinterColumn {
            name: "C".into(),
            type_: type_.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: path.into(),
        };
        let obj = json!({"spec": {"n": 3, "f": 2.5, "big": 1234567.0, "whole": 3.0, "b": true, "s": "x", "o": {"b": 1, "a": [1]}, "t": "", "bad": "yesterday"}});
        let cells = |cols: Vec<PrinterColumn>| {
            let mut all = vec![PrinterColumn {
                format: "name".into(),
                ..col("string", ".metadata.name")
            }];
            all.extend(cols);
            printer_cells(&all, &obj, now)[1..].to_vec()
        };
        assert_eq!(
            cells(vec![
                col("integer", ".spec.n"),
                col("integer", ".spec.f"),
                col("integer", ".spec.s"),
                col("number", ".spec.f"),
                col("number", ".spec.whole"),
                col("boolean", ".spec.b"),
                col("boolean", ".spec.s"),
                col("string", ".spec.n"),
                col("string", ".spec.f"),
                col("string", ".spec.big"),
                col("string", ".spec.b"),
                col("string", ".spec.o"),
                col("date", ".spec.t"),
                col("date", ".spec.bad"),
                col("date", ".spec.n"),
                col("string", ".spec.missing"),
            ]),
            [
                json!(3),
                json!(2),
                Value::Null,
                json!(2.5),
                json!(3),
                json!(true),
                Value::Null,
                json!("3"),
                json!("2.5"),
                json!("1.234567e+06"),
                json!("true"),
                json!("{\"a\":[1],\"b\":1}"),
                json!("<unknown>"),
                json!("<invalid>"),
                Value::Null,
                Value::Null,
            ]
        );
    }

    #[test]
    fn json_paths_cover_the_forms_crds_use() {
        let obj = json!({
            "metadata": {"name": "x", "creationTimestamp": "2024-05-01T10:00:00Z", "labels": {"app.kubernetes.io/name": "web"}},
            "spec": {"replicas": 3, "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]},
            "status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "Pending"},
                {"type": "Synced", "status": "True"}
            ]}
        });
        let eval = |p: &str| evaluate_json_path(&obj, p);
        assert_eq!(eval(".spec.replicas"), Some(json!(3)));
        assert_eq!(eval("{.spec.replicas}"), Some(json!(3)));
        assert_eq!(eval("$.spec.replicas"), Some(json!(3)));
        assert_eq!(
            eval(".metadata.creationTimestamp"),
            Some(json!("2024-05-01T10:00:00Z"))
        );
        assert_eq!(
            eval(".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("False"))
        );
        assert_eq!(
            eval(".status.conditions[?(@.type == 'Synced')].status"),
            Some(json!("True"))
        );
        assert_eq!(
            eval(".status.conditions[?(@.type!=\"Ready\")].type"),
            Some(json!("Synced"))
        );
        assert_eq!(
            eval(".status.conditions[?(@.reason)].type"),
            Some(json!("Ready"))
        );
        assert_eq!(
            eval(".spec.ports[?(@.port > 100)].name"),
            Some(json!("https"))
        );
        assert_eq!(eval(".spec.ports[?(@.port<=80)].name"), Some(json!("http")));
        assert_eq!(eval(".spec.ports[1].port"), Some(json!(443)));
        assert_eq!(eval(".spec.ports[-1].name"), Some(json!("https")));
        assert_eq!(eval(".spec.ports[1:].name"), Some(json!("https")));
        assert_eq!(eval(".spec.ports[*].port"), Some(json!(80)));
        assert_eq!(
            eval(".metadata.labels['app.kubernetes.io/name']"),
            Some(json!("web"))
        );
        assert_eq!(eval("..port"), Some(json!(80)));
        assert_eq!(eval(".spec.ports[5]"), None);
        assert_eq!(eval(".spec.missing"), None);
        assert_eq!(eval(".status.conditions[?(@.type==\"Gone\")].status"), None);
        for bad in [
            "spec.replicas",
            ".spec[",
            ".spec.ports[x]",
            ".spec..",
            "[?(@.a ~ 1)]",
            ".a[?(x)]",
        ] {
            assert_eq!(eval(bad), None, "{bad}");
        }
    }

    #[test]
    fn nothing_panics_on_odd_input() {
        let odd = [
            Value::Null,
            json!(1),
            json!("crd"),
            json!([]),
            json!({"metadata": 1, "spec": [], "status": "x"}),
            json!({"spec": {"names": 7, "versions": [1, null, "v1", {"name": 3, "schema": 4, "subresources": {"scale": 1, "status": []}, "additionalPrinterColumns": [1, {"jsonPath": 2}], "selectableFields": [7, {"jsonPath": ".a"}]}], "conversion": 1}}),
            json!({"spec": {"group": "é.ü", "names": {"plural": "ééé", "kind": "Ü", "shortNames": [1, null]}, "versions": [{"name": "v1", "storage": true, "deprecated": true, "deprecationWarning": 5, "schema": {"openAPIV3Schema": {"type": 1, "properties": [], "items": [1, {"default": 1}]}}, "selectableFields": [{"jsonPath": ".ü.[é"}]}]}, "status": {"conditions": [1, {"type": 2}], "storedVersions": "v1", "acceptedNames": []}}),
        ];
        let registry = Registry::builtin();
        for v in &odd {
            let mut d = v.clone();
            default_crd(&mut d);
            let mut p = d.clone();
            prepare_for_create(&mut p);
            prepare_for_update(&mut p, v);
            let _ = validate_crd(v);
            let _ = validate_crd(&p);
            let _ = validate_crd_update(&p, v);
            let _ = validate_crd_status_update(v, &p);
            let names = names_accepted(v, &[v, &p], &registry);
            let _ = status_conditions(v, names, "now");
            let _ = served_versions(v);
            let _ = storage_version(v);
            let _ = resource_type(&p, "v1");
            let columns = printer_columns(v, "v1");
            let _ = printer_cells(&columns, v, 0);
            for path in [
                "",
                ".",
                "..",
                "[",
                "]",
                "[?(",
                "[?(@.a==)]",
                "[-99999999999999999999]",
                "[1:-1:2]",
                ".ü[é]",
                "{",
                "$",
                "[?(@)]",
            ] {
                let _ = evaluate_json_path(v, path);
            }
        }
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(-0.00001), "-1e-05");
        assert_eq!(go_float(0.5), "0.5");
    }
}
