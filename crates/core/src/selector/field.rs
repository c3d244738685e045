//! Field selectors: a port of `k8s.io/apimachinery/pkg/fields` (`ParseSelector`,
//! `UnescapeValue`, `EscapeValue`) plus the per-resource tables upstream spreads over two
//! layers:
//!
//! 1. which field labels a kind accepts and the error text for the others — the funcs
//!    registered with `AddFieldLabelConversionFunc` (`pkg/apis/core/v1/conversion.go`,
//!    `pkg/apis/batch/v1/conversion.go`, `pkg/apis/events/v1/conversion.go`), with
//!    `runtime.DefaultMetaV1FieldSelectorConversion` for every kind that registers none
//!    (all of `apps/v1`, ConfigMaps, custom resources, …);
//! 2. the value of each accepted field — the registry strategies' `ToSelectableFields`
//!    (`pkg/registry/core/pod/strategy.go` `ToSelectableFields`, node, namespace, secret,
//!    service, replicationcontroller, event, job).
//!
//! The two layers differ on purpose: pods accept `status.podIPs` but never set it, so it only
//! matches the empty value, exactly as upstream.

use std::fmt;

use serde_json::Value;

use super::SelectorError;
use crate::field::go_quote;
use crate::registry::ResourceType;

/// A field requirement's operator. `==` parses as [`FieldOp::Equals`], as upstream's `hasTerm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOp {
    /// `field=value` or `field==value`.
    Equals,
    /// `field!=value`.
    NotEquals,
}

/// One `field op value` term, with the value unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field label as the client wrote it (`spec.nodeName`).
    pub field: String,
    /// The comparison.
    pub op: FieldOp,
    /// The unescaped value; empty selects objects where the field is unset.
    pub value: String,
}

/// A parsed field selector: the AND of its terms. The default selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldRequirement>,
}

// ---------------------------------------------------------------------------------------------
// Syntax.

/// `splitTerms`: comma-separated terms; a backslash-escaped comma stays inside its term.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// `splitTerm`: the first `!=`, `==` or `=` splits field from (still escaped) value.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, kind) in [
            ("!=", FieldOp::NotEquals),
            ("==", FieldOp::Equals),
            ("=", FieldOp::Equals),
        ] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], kind, value));
            }
        }
    }
    None
}

/// `fields.UnescapeValue`: `\\`, `\,` and `\=` are the only escapes, and a bare `,` or `=` is
/// refused.
fn unescape_value(s: &str) -> Result<String, SelectorError> {
    let invalid = |m: String| SelectorError::InvalidFieldSelector(m);
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                other => {
                    return Err(invalid(format!(
                        "invalid field selector: invalid escape sequence: \\{other}"
                    )));
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Upstream formats the rune with %v: its code point, not the character.
            ',' | '=' => {
                return Err(invalid(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )));
            }
            other => out.push(other),
        }
    }
    if in_slash {
        return Err(invalid(
            "invalid field selector: invalid escape sequence: \\".to_string(),
        ));
    }
    Ok(out)
}

/// `fields.EscapeValue`.
fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl FieldSelector {
    /// The selector that selects everything (`fields.Everything`).
    pub fn everything() -> Self {
        FieldSelector::default()
    }

    /// Parses `f=v`, `f==v`, `f!=v`, comma-separated (`fields.ParseSelector`). Values may
    /// escape `\,`, `\=` and `\\`; field names are taken literally up to the first operator.
    /// Terms are kept sorted, as upstream sorts them. Whether the fields exist for a resource
    /// is checked separately by [`validate`](Self::validate).
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        let mut parts = split_terms(s);
        parts.sort_unstable();
        let mut terms = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((field, op, raw)) = split_term(part) else {
                return Err(SelectorError::InvalidFieldSelector(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            terms.push(FieldRequirement {
                field: field.to_string(),
                op,
                value: unescape_value(raw)?,
            });
        }
        Ok(FieldSelector { terms })
    }

    /// Whether the selector places no restriction.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The terms, sorted as parsed.
    pub fn terms(&self) -> &[FieldRequirement] {
        &self.terms
    }

    /// The name a `metadata.name=<x>` (or `==`) term demands (`RequiresExactMatch`), which
    /// lets GET-by-name serve `kubectl wait`/`delete --field-selector`.
    pub fn single_name(&self) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == "metadata.name" && t.op == FieldOp::Equals)
            .map(|t| t.value.as_str())
    }

    /// Refuses any field the resource does not support, with upstream's message, so the server
    /// can answer 400 before touching storage (the `Transform` through
    /// `Scheme.ConvertFieldLabel` in the apiserver's list handler).
    pub fn validate(&self, rt: &ResourceType) -> Result<(), SelectorError> {
        let kind = Kind::of(rt);
        self.terms
            .iter()
            .try_for_each(|t| kind.canonical(&t.field).map(|_| ()))
    }

    /// Whether `obj` satisfies every term. A field the object does not carry compares as the
    /// empty string (so `spec.nodeName=` selects unscheduled pods); an unsupported field is an
    /// error, as in [`validate`](Self::validate).
    pub fn matches(&self, rt: &ResourceType, obj: &Value) -> Result<bool, SelectorError> {
        for t in &self.terms {
            let actual = field_value(rt, obj, &t.field)?.unwrap_or_default();
            let ok = match t.op {
                FieldOp::Equals => actual == t.value,
                FieldOp::NotEquals => actual != t.value,
            };
            if !ok {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// [`matches`](Self::matches) against fields computed beforehand by [`selectable_fields`],
    /// for an object kept as bytes that should not be parsed again for every selector.
    pub fn matches_fields(
        &self,
        rt: &ResourceType,
        fields: &SelectableFields,
    ) -> Result<bool, SelectorError> {
        let kind = Kind::of(rt);
        for t in &self.terms {
            let canonical = kind.canonical(&t.field)?;
            let actual = fields.get(canonical).unwrap_or_default();
            let ok = match t.op {
                FieldOp::Equals => actual == t.value,
                FieldOp::NotEquals => actual != t.value,
            };
            if !ok {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The values of every selectable field of one object (upstream's cacher keeps these beside
/// each cached object, so selectors never look at the object itself).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelectableFields(Vec<(&'static str, Option<String>)>);

impl SelectableFields {
    /// The value of a canonical field label; `None` when unset or not selectable.
    pub fn get(&self, label: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(l, _)| *l == label)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// Every selectable field of `obj` for its resource type, with the values [`field_value`] gives.
pub fn selectable_fields(rt: &ResourceType, obj: &Value) -> SelectableFields {
    let kind = Kind::of(rt);
    SelectableFields(
        kind.labels()
            .iter()
            .map(|label| (*label, kind.value(obj, label)))
            .collect(),
    )
}

/// `Selector.String()`: `f=v,f!=v` with values re-escaped.
impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = if t.op == FieldOp::Equals { "=" } else { "!=" };
            write!(f, "{}{op}{}", t.field, escape_value(&t.value))?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Per-resource field labels.

/// The field-label contract a resource type follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pod,
    Node,
    Namespace,
    Secret,
    Service,
    ReplicationController,
    /// `v1` Events.
    Event,
    /// `events.k8s.io/v1` Events: other spellings for the same selectable fields.
    EventsV1,
    Job,
    /// `runtime.DefaultMetaV1FieldSelectorConversion`: kinds that register no conversion func.
    Default {
        namespaced: bool,
    },
}

const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
    "metadata.namespace",
    "metadata.name",
];
const NODE_FIELDS: &[&str] = &["metadata.name", "spec.unschedulable"];
const NAMESPACE_FIELDS: &[&str] = &["status.phase", "metadata.name"];
const SECRET_FIELDS: &[&str] = &["type", "metadata.namespace", "metadata.name"];
const SERVICE_FIELDS: &[&str] = &[
    "metadata.namespace",
    "metadata.name",
    "spec.clusterIP",
    "spec.type",
];
const REPLICATION_CONTROLLER_FIELDS: &[&str] =
    &["metadata.name", "metadata.namespace", "status.replicas"];
const JOB_FIELDS: &[&str] = &["metadata.name", "metadata.namespace", "status.successful"];
const DEFAULT_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];
/// The core labels `events.k8s.io/v1` spellings are stored under (the right-hand side of
/// [`EVENTS_V1_FIELDS`]).
const EVENTS_V1_CANONICAL: &[&str] = &[
    "reason",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reportingComponent",
    "type",
    "metadata.namespace",
    "metadata.name",
];
/// `pkg/apis/events/v1/conversion.go`: client spelling → the core label it is stored under.
const EVENTS_V1_FIELDS: &[(&str, &str)] = &[
    ("reason", "reason"),
    ("regarding.kind", "involvedObject.kind"),
    ("regarding.namespace", "involvedObject.namespace"),
    ("regarding.name", "involvedObject.name"),
    ("regarding.uid", "involvedObject.uid"),
    ("regarding.apiVersion", "involvedObject.apiVersion"),
    (
        "regarding.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("regarding.fieldPath", "involvedObject.fieldPath"),
    ("reportingController", "reportingComponent"),
    ("type", "type"),
    ("metadata.namespace", "metadata.namespace"),
    ("metadata.name", "metadata.name"),
];

impl Kind {
    fn of(rt: &ResourceType) -> Kind {
        match (rt.group.as_str(), rt.plural.as_str()) {
            ("", "pods") => Kind::Pod,
            ("", "nodes") => Kind::Node,
            ("", "namespaces") => Kind::Namespace,
            ("", "secrets") => Kind::Secret,
            ("", "services") => Kind::Service,
            ("", "replicationcontrollers") => Kind::ReplicationController,
            ("", "events") => Kind::Event,
            ("events.k8s.io", "events") => Kind::EventsV1,
            ("batch", "jobs") => Kind::Job,
            _ => Kind::Default {
                namespaced: rt.namespaced,
            },
        }
    }

    /// The canonical labels this kind can select on.
    fn labels(self) -> &'static [&'static str] {
        match self {
            Kind::Pod => POD_FIELDS,
            Kind::Node => NODE_FIELDS,
            Kind::Namespace => NAMESPACE_FIELDS,
            Kind::Secret => SECRET_FIELDS,
            Kind::Service => SERVICE_FIELDS,
            Kind::ReplicationController => REPLICATION_CONTROLLER_FIELDS,
            Kind::Event => EVENT_FIELDS,
            Kind::EventsV1 => EVENTS_V1_CANONICAL,
            Kind::Job => JOB_FIELDS,
            Kind::Default { .. } => DEFAULT_FIELDS,
        }
    }

    /// The label under which `label` is selected, or upstream's refusal for this kind.
    fn canonical<'a>(self, label: &'a str) -> Result<&'a str, SelectorError> {
        let accepted: Option<&'a str> = match self {
            Kind::Pod if label == "spec.host" => Some("spec.nodeName"),
            Kind::EventsV1 => EVENTS_V1_FIELDS
                .iter()
                .find(|(from, _)| *from == label)
                .map(|(_, to)| *to),
            _ => self.labels().contains(&label).then_some(label),
        };
        accepted.ok_or_else(|| SelectorError::UnsupportedField {
            field: label.to_string(),
            message: self.refusal(label),
        })
    }

    /// Upstream's text for an unsupported label, which differs by kind.
    fn refusal(self, label: &str) -> String {
        match self {
            Kind::Job => format!("field label {} not supported for Job", go_quote(label)),
            Kind::Default { .. } => {
                format!(
                    "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                    go_quote(label)
                )
            }
            _ => format!("field label not supported: {label}"),
        }
    }

    /// The value `ToSelectableFields` gives a canonical label; `None` when it is unset
    /// (which selectors read as "").
    fn value(self, obj: &Value, label: &str) -> Option<String> {
        let text = |path: &[&str]| -> Option<String> {
            path.iter()
                .try_fold(obj, |cur, k| cur.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let int = |path: &[&str]| -> String {
            path.iter()
                .try_fold(obj, |cur, k| cur.get(k))
                .and_then(Value::as_i64)
                .unwrap_or(0)
                .to_string()
        };
        let boolean = |path: &[&str]| -> String {
            path.iter()
                .try_fold(obj, |cur, k| cur.get(k))
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string()
        };
        match (self, label) {
            (_, "metadata.name") => text(&["metadata", "name"]),
            (
                Kind::Node | Kind::Namespace | Kind::Default { namespaced: false },
                "metadata.namespace",
            ) => None,
            (_, "metadata.namespace") => text(&["metadata", "namespace"]),
            (Kind::Pod, "spec.hostNetwork") => Some(boolean(&["spec", "hostNetwork"])),
            (Kind::Pod, "status.podIP") => {
                let first = obj
                    .get("status")
                    .and_then(|s| s.get("podIPs"))
                    .and_then(Value::as_array)
                    .and_then(|ips| ips.first())
                    .and_then(|ip| ip.get("ip"))
                    .and_then(Value::as_str);
                first
                    .map(str::to_string)
                    .or_else(|| text(&["status", "podIP"]))
            }
            // Accepted by the conversion func but never set by ToSelectableFields.
            (Kind::Pod, "status.podIPs") => None,
            (Kind::Node, "spec.unschedulable") => Some(boolean(&["spec", "unschedulable"])),
            (Kind::ReplicationController, "status.replicas") => Some(int(&["status", "replicas"])),
            (Kind::Job, "status.successful") => Some(int(&["status", "succeeded"])),
            (Kind::Event, "source") => text(&["source", "component"])
                .filter(|c| !c.is_empty())
                .or_else(|| text(&["reportingComponent"])),
            (Kind::EventsV1, "reportingComponent") => text(&["reportingController"]),
            (Kind::EventsV1, l) if l.starts_with("involvedObject.") => {
                text(&["regarding", l.trim_start_matches("involvedObject.")])
            }
            (_, l) => text(&l.split('.').collect::<Vec<_>>()),
        }
    }
}

/// The value of a selectable field of `obj` for its resource type, as upstream's
/// `ToSelectableFields` computes it: `Ok(None)` when unset (compares as ""), booleans and
/// counts always present (`spec.hostNetwork` → `"false"`, `status.replicas` → `"0"`), and
/// `Err` with upstream's message when the resource does not support the field.
pub fn field_value(
    rt: &ResourceType,
    obj: &Value,
    field: &str,
) -> Result<Option<String>, SelectorError> {
    let kind = Kind::of(rt);
    let canonical = kind.canonical(field)?;
    Ok(kind.value(obj, canonical))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::registry::Registry;

    fn rt(group: &str, plural: &str) -> ResourceType {
        Registry::builtin()
            .all()
            .iter()
            .find(|t| t.group == group && t.plural == plural)
            .map(|t| (**t).clone())
            .expect("registered type")
    }

    #[test]
    fn field_selector_on_spec_node_name_selects_unscheduled_pods() {
        let pods = rt("", "pods");
        let sel = FieldSelector::parse("spec.nodeName=").expect("parses");
        let pending = json!({"metadata": {"name": "a", "namespace": "d"}, "spec": {}});
        let bound =
            json!({"metadata": {"name": "b", "namespace": "d"}, "spec": {"nodeName": "n1"}});
        assert_eq!(sel.matches(&pods, &pending), Ok(true));
        assert_eq!(sel.matches(&pods, &bound), Ok(false));

        let on_n1 = FieldSelector::parse("spec.host=n1,status.phase!=Succeeded").expect("parses");
        assert_eq!(on_n1.matches(&pods, &bound), Ok(true));
        assert_eq!(
            field_value(&pods, &bound, "spec.hostNetwork"),
            Ok(Some("false".into()))
        );
        assert_eq!(field_value(&pods, &bound, "status.podIPs"), Ok(None));
        let with_ip = json!({"status": {"podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.1"}]}});
        assert_eq!(
            field_value(&pods, &with_ip, "status.podIP"),
            Ok(Some("10.0.0.1".into()))
        );

        let nodes = rt("", "nodes");
        let cordoned = json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}});
        assert_eq!(
            FieldSelector::parse("spec.unschedulable=true")
                .expect("parses")
                .matches(&nodes, &cordoned),
            Ok(true)
        );
        assert_eq!(
            FieldSelector::parse("spec.unschedulable=false")
                .expect("parses")
                .matches(&nodes, &json!({})),
            Ok(true)
        );

        let events = rt("", "events");
        let ev = json!({"involvedObject": {"kind": "Pod", "name": "web"}, "reportingComponent": "kubelet", "source": {}});
        let sel =
            FieldSelector::parse("involvedObject.kind=Pod,involvedObject.name=web,source=kubelet")
                .expect("parses");
        assert_eq!(sel.matches(&events, &ev), Ok(true));
        let ev_v1 = rt("events.k8s.io", "events");
        let ev2 = json!({"regarding": {"kind": "Pod"}, "reportingController": "kubelet"});
        let sel =
            FieldSelector::parse("regarding.kind=Pod,reportingController=kubelet").expect("parses");
        assert_eq!(sel.matches(&ev_v1, &ev2), Ok(true));

        let jobs = rt("batch", "jobs");
        assert_eq!(
            field_value(
                &jobs,
                &json!({"status": {"succeeded": 2}}),
                "status.successful"
            ),
            Ok(Some("2".into()))
        );
        let pvs = rt("", "persistentvolumes");
        assert_eq!(
            field_value(
                &pvs,
                &json!({"metadata": {"name": "pv"}}),
                "metadata.namespace"
            ),
            Ok(None)
        );
    }

    #[test]
    fn unsupported_field_label_is_refused() {
        let msg = |group: &str, plural: &str, sel: &str| {
            let s = FieldSelector::parse(sel).expect("parses");
            let t = rt(group, plural);
            let err = s.validate(&t).expect_err("refused");
            assert_eq!(s.matches(&t, &json!({})).expect_err("refused"), err);
            err.to_string()
        };
        assert_eq!(
            msg("", "pods", "spec.foo=bar"),
            "field label not supported: spec.foo"
        );
        assert_eq!(
            msg("", "nodes", "metadata.namespace=x"),
            "field label not supported: metadata.namespace"
        );
        assert_eq!(
            msg("batch", "jobs", "status.active=1"),
            "field label \"status.active\" not supported for Job"
        );
        assert_eq!(
            msg("apps", "replicasets", "status.replicas=1"),
            "\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert_eq!(
            msg("events.k8s.io", "events", "involvedObject.kind=Pod"),
            "field label not supported: involvedObject.kind"
        );
        let err = FieldSelector::parse("spec.foo=bar")
            .expect("parses")
            .validate(&rt("", "pods"));
        assert!(
            matches!(err, Err(SelectorError::UnsupportedField { field, .. }) if field == "spec.foo")
        );
        assert_eq!(
            FieldSelector::parse("metadata.name=x")
                .expect("parses")
                .validate(&rt("", "configmaps")),
            Ok(())
        );
        assert_eq!(
            FieldSelector::parse("nonsense")
                .expect_err("no operator")
                .to_string(),
            "invalid selector: 'nonsense'; can't understand 'nonsense'"
        );
    }

    #[test]
    fn escaped_field_selector_values() {
        let sel = FieldSelector::parse(r"metadata.name=a\,b\=c\\d").expect("parses");
        assert_eq!(sel.terms()[0].value, r"a,b=c\d");
        assert_eq!(sel.single_name(), Some(r"a,b=c\d"));
        assert_eq!(sel.to_string(), r"metadata.name=a\,b\=c\\d");
        let cms = rt("", "configmaps");
        assert_eq!(
            sel.matches(&cms, &json!({"metadata": {"name": "a,b=c\\d"}})),
            Ok(true)
        );

        let two = FieldSelector::parse("metadata.namespace==ns,metadata.name!=x").expect("parses");
        assert_eq!(
            two.to_string(),
            "metadata.name!=x,metadata.namespace=ns",
            "terms sort and == prints as ="
        );
        assert_eq!(two.single_name(), None);
        assert!(FieldSelector::parse("").expect("empty").is_empty());
        assert!(FieldSelector::parse(",,").expect("only commas").is_empty());

        let err = |s: &str| FieldSelector::parse(s).expect_err(s).to_string();
        assert_eq!(
            err(r"a=b\x"),
            r"invalid field selector: invalid escape sequence: \x"
        );
        assert_eq!(
            err(r"a=b\"),
            r"invalid field selector: invalid escape sequence: \"
        );
        assert_eq!(
            err("a=b=c"),
            "invalid field selector: unescaped character in value: 61"
        );
    }
    /// Precomputed fields select exactly what selecting on the object does, for every
    /// selectable label of each kind, set or unset, with `=` and `!=`.
    #[test]
    fn precomputed_fields_select_like_the_object() {
        let cases = [
            (
                rt("", "pods"),
                json!({"metadata": {"name": "p", "namespace": "d"},
                       "spec": {"nodeName": "n1", "restartPolicy": "Always", "hostNetwork": true},
                       "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}]}}),
            ),
            (rt("", "pods"), json!({"metadata": {"name": "q"}})),
            (
                rt("", "nodes"),
                json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}}),
            ),
            (
                rt("", "events"),
                json!({"metadata": {"name": "e", "namespace": "d"},
                       "involvedObject": {"kind": "Pod", "name": "web"},
                       "source": {"component": "kubelet"}, "type": "Normal"}),
            ),
            (
                rt("events.k8s.io", "events"),
                json!({"metadata": {"name": "e"}, "regarding": {"kind": "Pod", "uid": "u"},
                       "reportingController": "kubelet", "reason": "Started"}),
            ),
            (
                rt("apps", "deployments"),
                json!({"metadata": {"name": "web", "namespace": "d"}}),
            ),
            (
                rt("batch", "jobs"),
                json!({"metadata": {"name": "j"}, "status": {"succeeded": 2}}),
            ),
        ];
        for (rt, obj) in &cases {
            let fields = selectable_fields(rt, obj);
            let kind = Kind::of(rt);
            let spellings: Vec<&str> = match kind {
                Kind::EventsV1 => EVENTS_V1_FIELDS.iter().map(|(from, _)| *from).collect(),
                _ => kind.labels().to_vec(),
            };
            for label in spellings {
                let actual = field_value(rt, obj, label).expect("selectable");
                let mut values = vec![String::new(), "other".to_string()];
                values.extend(actual);
                for value in values {
                    for op in ["=", "!="] {
                        let sel =
                            FieldSelector::parse(&format!("{label}{op}{value}")).expect("parses");
                        assert_eq!(
                            sel.matches_fields(rt, &fields),
                            sel.matches(rt, obj),
                            "{} {label}{op}{value}",
                            rt.plural
                        );
                    }
                }
            }
            let refused = FieldSelector::parse("spec.nope=x").expect("parses");
            assert!(refused.matches_fields(rt, &fields).is_err());
        }
    }
}
