//! The parameters of the published operations: upstream's query parameters with the
//! descriptions kube-openapi publishes for them, and the `name`/`namespace` path parameters.

/// A parameter; `location` is `path` or `query`.
#[derive(Debug, Clone)]
pub(crate) struct Param {
    pub name: &'static str,
    pub location: &'static str,
    /// JSON type: `string`, `integer` or `boolean`.
    pub ty: &'static str,
    pub required: bool,
    pub description: String,
}

pub(super) fn query(name: &'static str) -> Param {
    let (ty, description) = match name {
        "pretty" => (
            "string",
            "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).",
        ),
        "dryRun" => (
            "string",
            "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
        ),
        "fieldManager" => (
            "string",
            "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
        ),
        "fieldValidation" => (
            "string",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
        ),
        "force" => (
            "boolean",
            "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
        ),
        "gracePeriodSeconds" => (
            "integer",
            "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used. Defaults to a per object value if not specified. zero means delete immediately.",
        ),
        "orphanDependents" => (
            "boolean",
            "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7. Should the dependent objects be orphaned. If true/false, the \"orphan\" finalizer will be added to/removed from the object's finalizers list. Either this field or PropagationPolicy may be set, but not both.",
        ),
        "propagationPolicy" => (
            "string",
            "Whether and how garbage collection will be performed. Either this field or OrphanDependents may be set, but not both. The default policy is decided by the existing finalizer set in the metadata.finalizers and the resource-specific default policy. Acceptable values are: 'Orphan' - orphan the dependents; 'Background' - allow the garbage collector to delete the dependents in the background; 'Foreground' - a cascading policy that deletes all dependents in the foreground.",
        ),
        "allowWatchBookmarks" => (
            "boolean",
            "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. Clients should not assume bookmarks are returned at any specific interval, nor may they assume the server will send any BOOKMARK event during a session. If this is not a watch, this field is ignored.",
        ),
        "continue" => (
            "string",
            "The continue option should be set when retrieving more results from the server. Since this value is server defined, clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue) and the server may reject a continue value it does not recognize.",
        ),
        "fieldSelector" => (
            "string",
            "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
        ),
        "labelSelector" => (
            "string",
            "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
        ),
        "limit" => (
            "integer",
            "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results.",
        ),
        "resourceVersion" => (
            "string",
            "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
        ),
        "resourceVersionMatch" => (
            "string",
            "resourceVersionMatch determines how resourceVersion is applied to list calls. It is highly recommended that resourceVersionMatch be set for list calls where resourceVersion is set See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
        ),
        "sendInitialEvents" => (
            "boolean",
            "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection. Once all such events have been sent, a synthetic \"Bookmark\" event  will be sent.",
        ),
        "timeoutSeconds" => (
            "integer",
            "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
        ),
        "watch" => (
            "boolean",
            "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
        ),
        "container" => (
            "string",
            "The container for which to stream logs. Defaults to only container if there is one container in the pod.",
        ),
        "follow" => (
            "boolean",
            "Follow the log stream of the pod. Defaults to false.",
        ),
        "insecureSkipTLSVerifyBackend" => (
            "boolean",
            "insecureSkipTLSVerifyBackend indicates that the apiserver should not confirm the validity of the serving certificate of the backend it is connecting to.",
        ),
        "limitBytes" => (
            "integer",
            "If set, the number of bytes to read from the server before terminating the log output. This may not display a complete final line of logging, and may return slightly more or slightly less than the specified limit.",
        ),
        "previous" => (
            "boolean",
            "Return previous terminated container logs. Defaults to false.",
        ),
        "sinceSeconds" => (
            "integer",
            "A relative time in seconds before the current time from which to show logs. If this value precedes the time a pod was started, only logs since the pod start will be returned. If this value is in the future, no logs will be returned. Only one of sinceSeconds or sinceTime may be specified.",
        ),
        "tailLines" => (
            "integer",
            "If set, the number of lines from the end of the logs to show. If not specified, logs are shown from the creation of the container or sinceSeconds or sinceTime",
        ),
        "timestamps" => (
            "boolean",
            "If true, add an RFC3339 or RFC3339Nano timestamp at the beginning of every line of log output. Defaults to false.",
        ),
        _ => ("string", ""),
    };
    Param {
        name,
        location: "query",
        ty,
        required: false,
        description: description.to_string(),
    }
}

pub(super) fn queries(names: &[&'static str]) -> Vec<Param> {
    names.iter().map(|n| query(n)).collect()
}

pub(super) const LIST_QUERY: &[&str] = &[
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
];
pub(super) const WRITE_QUERY: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];
pub(super) const PATCH_QUERY: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "force"];
pub(super) const DELETE_QUERY: &[&str] = &[
    "dryRun",
    "gracePeriodSeconds",
    "orphanDependents",
    "propagationPolicy",
];
pub(super) const LOG_QUERY: &[&str] = &[
    "container",
    "follow",
    "insecureSkipTLSVerifyBackend",
    "limitBytes",
    "previous",
    "sinceSeconds",
    "tailLines",
    "timestamps",
];

pub(super) fn path_param(name: &'static str, description: String) -> Param {
    Param {
        name,
        location: "path",
        ty: "string",
        required: true,
        description,
    }
}

pub(super) fn namespace_param() -> Param {
    path_param(
        "namespace",
        "object name and auth scope, such as for teams and projects".to_string(),
    )
}
