//! Why a patch could not be applied.

/// A patch that could not be applied. Messages follow upstream's (`k8s.io/apimachinery/pkg/util/
/// mergepatch/errors.go`, evanphx/json-patch), prefixed with the field path where that helps;
/// [`PatchError::status_code`] gives the HTTP status for the `Status` the API server returns.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PatchError {
    /// The body of a JSON patch is not a list of valid operations.
    #[error("invalid JSON patch: {0}")]
    InvalidJsonPatch(String),
    /// The JSON patch has more operations than upstream accepts.
    #[error("the allowed maximum operations in a JSON patch is {limit}, got {count}")]
    TooManyOperations {
        /// Operations in the patch.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// A JSON patch operation did not apply (a failed `test`, a missing path).
    #[error("{message}")]
    JsonPatchFailed {
        /// Index of the failing operation.
        operation: usize,
        /// Upstream-style description.
        message: String,
    },
    /// The patch or the document is not a JSON object where one is required.
    #[error("invalid JSON document: {0}")]
    BadJsonDoc(String),
    /// `$deleteFromPrimitiveList/<field>` is malformed (upstream
    /// `ErrBadPatchFormatForPrimitiveList`).
    #[error("{path}: invalid patch format of primitive list")]
    BadPrimitiveListFormat {
        /// Field path.
        path: String,
    },
    /// `$retainKeys` is malformed or names fewer keys than the patch sets (upstream
    /// `ErrBadPatchFormatForRetainKeys`).
    #[error("{path}: invalid patch format of retainKeys")]
    BadRetainKeysFormat {
        /// Field path.
        path: String,
    },
    /// `$setElementOrder/<field>` is malformed or disagrees with the patch list (upstream
    /// `ErrBadPatchFormatForSetElementOrderList`).
    #[error("{path}: invalid patch format of setElementOrder list{detail}")]
    BadSetElementOrderFormat {
        /// Field path.
        path: String,
        /// Extra explanation, starting with `: ` when present.
        detail: String,
    },
    /// A list holds lists (upstream `ErrNoListOfLists`).
    #[error("{path}: lists of lists are not supported")]
    ListOfLists {
        /// Field path.
        path: String,
    },
    /// A merged list mixes items of different JSON types.
    #[error("{path}: list element types are not identical")]
    MixedListElements {
        /// Field path.
        path: String,
    },
    /// An item of a list merged by key lacks the key (upstream `ErrNoMergeKey`).
    #[error("{path}: map: {item} does not contain declared merge key: {key}")]
    NoMergeKey {
        /// Field path.
        path: String,
        /// The offending item, as JSON.
        item: String,
        /// The merge key.
        key: String,
    },
    /// A list merged by `patchStrategy: merge` holds objects but declares no merge key.
    #[error("{path}: cannot merge lists of objects without a merge key")]
    NoMergeKeyDeclared {
        /// Field path.
        path: String,
    },
    /// `$patch` has a value other than `replace`/`delete` (and `merge` outside lists), upstream
    /// `ErrBadPatchType`.
    #[error("{path}: unknown patch type: {directive} in map: {item}")]
    BadPatchType {
        /// Field path.
        path: String,
        /// The directive's value, as JSON.
        directive: String,
        /// The map holding it, as JSON.
        item: String,
    },
    /// `$patch: merge` in a list item, which upstream does not support.
    #[error("{path}: merging lists cannot yet be specified in the patch")]
    MergeDirectiveInList {
        /// Field path.
        path: String,
    },
    /// A list merged by key holds something that is not an object.
    #[error("{path}: expected a list of objects, but an item is {found}")]
    NotAMap {
        /// Field path.
        path: String,
        /// JSON type of the item.
        found: &'static str,
    },
    /// The patch nests deeper than any Kubernetes object.
    #[error("{path}: the patch is nested too deeply")]
    TooDeep {
        /// Field path.
        path: String,
    },
}

impl PatchError {
    /// The HTTP status upstream answers with: 400 for a malformed patch, 413 for too many JSON
    /// patch operations, 422 for a JSON patch that does not apply or an SMP that cannot be
    /// merged into this object (upstream `interpretStrategicMergePatchError` and
    /// `applyJSPatch`). Upstream returns 500 for a few strategic-merge failures caused by the
    /// request (a missing merge key); tandem answers 400 there, since the fault is the client's.
    pub fn status_code(&self) -> u16 {
        match self {
            PatchError::TooManyOperations { .. } => 413,
            PatchError::JsonPatchFailed { .. }
            | PatchError::ListOfLists { .. }
            | PatchError::MixedListElements { .. } => 422,
            _ => 400,
        }
    }
}
