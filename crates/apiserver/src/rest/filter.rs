//! The label and field selectors of a LIST, WATCH or deletecollection, as upstream's
//! `storage.SelectionPredicate`: built-in types' selectable fields from `tandem_core::selector`,
//! a custom resource's from its CRD's `selectableFields`.

use serde_json::Value;
use tandem_core::registry::ResourceType;
use tandem_core::selector::{FieldSelector, LabelSelector};

use crate::cache::Object;
use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::request::Query;
use crate::state::State;

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
        let fields = Filter::field_selector(q)?;
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

    fn field_selector(q: &Query) -> ApiResult<Option<FieldSelector>> {
        q.get("fieldSelector")
            .map(FieldSelector::parse)
            .transpose()
            .map_err(|e| ApiError::bad_request(e.to_string()))
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
        let fields = Filter::field_selector(q)?;
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
