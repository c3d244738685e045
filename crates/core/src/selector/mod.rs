//! Label and field selectors, as the API server evaluates `?labelSelector=` and
//! `?fieldSelector=` and as controllers evaluate `metav1.LabelSelector`s.
//!
//! - [`LabelSelector`] mirrors `k8s.io/apimachinery/pkg/labels` (`labels.Parse`,
//!   `Requirement.Matches`, `Selector.String`) and `metav1.LabelSelectorAsSelector`, matched
//!   against any [`Labels`] set (JSON or typed).
//! - [`FieldSelector`] mirrors `k8s.io/apimachinery/pkg/fields` (`fields.ParseSelector`,
//!   escaping) plus, per resource, the two upstream layers that decide what may be selected:
//!   the field label conversion funcs (which fields are accepted, with which error text) and
//!   the registry strategies' `ToSelectableFields` (what value each field has).
//!
//! Error messages are upstream's, word for word, so the API server can put them in a
//! `Status` unchanged.

mod field;
mod label;
mod outline;

pub use field::{
    FieldOp, FieldRequirement, FieldSelector, SelectableFields, field_value, selectable_fields,
};
pub use label::{LabelSelector, Labels, Operator, Requirement};
pub use outline::selection_outline;

/// Why a selector was refused. The `Display` text is the message upstream's API server
/// returns in the `BadRequest` `Status`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A label selector string or `metav1.LabelSelector` that does not parse or validate
    /// (`labels.Parse`, `labels.NewRequirement`, `metav1.LabelSelectorAsSelector`).
    #[error("{0}")]
    InvalidLabelSelector(String),
    /// A field selector string that does not parse (`fields.ParseSelector`,
    /// `fields.UnescapeValue`).
    #[error("{0}")]
    InvalidFieldSelector(String),
    /// A field the resource does not support selecting on (the resource's field label
    /// conversion func, or `runtime.DefaultMetaV1FieldSelectorConversion`).
    #[error("{message}")]
    UnsupportedField {
        /// The field label as the client sent it.
        field: String,
        /// Upstream's message for this resource, e.g. `field label not supported: spec.foo`.
        message: String,
    },
}
