//! The REST operations of each served resource, described once and rendered into both OpenAPI v3
//! (`v3.rs`) and Swagger 2.0 (`v2.rs`). Mirrors the paths, operation ids, actions and parameters
//! the upstream API server's installer (`apiserver/pkg/endpoints/installer.go`) publishes.

use crate::registry::{Registry, ResourceType};

use super::schemas::{DELETE_OPTIONS, PATCH, STATUS, WATCH_EVENT, root_definition};

/// A path and its operations.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// `/api/v1/namespaces/{namespace}/pods/{name}`.
    pub path: String,
    /// Parameters shared by every operation of the path (`name`, `namespace`, `pretty`).
    pub parameters: Vec<Param>,
    pub operations: Vec<Operation>,
}

/// One HTTP operation.
#[derive(Debug, Clone)]
pub(crate) struct Operation {
    /// Lower-case HTTP method: `get`, `post`, `put`, `patch`, `delete`.
    pub method: &'static str,
    /// `x-kubernetes-action`: `get`, `list`, `watch`, `watchlist`, `post`, `put`, `patch`,
    /// `delete`, `deletecollection`.
    pub action: &'static str,
    pub operation_id: String,
    pub description: String,
    pub tag: String,
    /// `x-kubernetes-group-version-kind` as (group, version, kind).
    pub gvk: (String, String, String),
    /// Query parameters of this operation only.
    pub parameters: Vec<Param>,
    pub body: Option<Body>,
    pub response: Response,
    /// Status codes answered with `response` (`200`, `201`, `202`).
    pub codes: &'static [&'static str],
}

/// A request body.
#[derive(Debug, Clone)]
pub(crate) struct Body {
    /// The definition the body must match.
    pub definition: String,
    /// Accepted media types.
    pub media_types: &'static [&'static str],
}

/// What a successful response carries.
#[derive(Debug, Clone)]
pub(crate) enum Response {
    /// An object of this definition.
    Definition(String),
    /// Plain text (logs).
    Text,
}

impl Response {
    pub fn media_types(&self, streaming: bool) -> &'static [&'static str] {
        match (self, streaming) {
            (Response::Text, _) => &["text/plain", "application/json", "application/yaml"],
            (Response::Definition(_), false) => &["application/json", "application/yaml"],
            (Response::Definition(_), true) => &[
                "application/json",
                "application/yaml",
                "application/json;stream=watch",
            ],
        }
    }
}

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

const PATCH_MEDIA_BUILTIN: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];
/// Custom resources (here: GMSACredentialSpec) do not accept strategic merge patch; kubectl's
/// `apply` checks this media type (`Patcher.gvkSupportsPatchOpenAPIV3`) to pick the patch type.
const PATCH_MEDIA_CUSTOM: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
];
const ANY_MEDIA: &[&str] = &["*/*"];

/// Groups served as custom resources upstream: no strategic merge patch.
fn is_custom_group(group: &str) -> bool {
    group == "windows.k8s.io"
}

fn query(name: &'static str) -> Param {
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

fn queries(names: &[&'static str]) -> Vec<Param> {
    names.iter().map(|n| query(n)).collect()
}

const LIST_QUERY: &[&str] = &[
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
const WRITE_QUERY: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];
const PATCH_QUERY: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "force"];
const DELETE_QUERY: &[&str] = &[
    "dryRun",
    "gracePeriodSeconds",
    "orphanDependents",
    "propagationPolicy",
];
const LOG_QUERY: &[&str] = &[
    "container",
    "follow",
    "insecureSkipTLSVerifyBackend",
    "limitBytes",
    "previous",
    "sinceSeconds",
    "tailLines",
    "timestamps",
];

fn path_param(name: &'static str, description: String) -> Param {
    Param {
        name,
        location: "path",
        ty: "string",
        required: true,
        description,
    }
}

fn namespace_param() -> Param {
    path_param(
        "namespace",
        "object name and auth scope, such as for teams and projects".to_string(),
    )
}

/// `Core`, `Apps`, `Node` (for `node.k8s.io`), `Coordination`, …: the group as upstream's
/// operation ids spell it.
fn group_camel(group: &str) -> String {
    if group.is_empty() {
        return "Core".to_string();
    }
    let trimmed = group.strip_suffix(".k8s.io").unwrap_or(group);
    trimmed.split(['.', '-']).map(capitalize).collect()
}

/// `core_v1`, `apps_v1`, `node_v1`: upstream's operation tags.
fn tag(group: &str, version: &str) -> String {
    let g = if group.is_empty() {
        "core"
    } else {
        group.strip_suffix(".k8s.io").unwrap_or(group)
    };
    format!("{}_{version}", g.replace('.', "_"))
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

/// `/api/v1` or `/apis/<group>/<version>`.
pub(crate) fn prefix(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// The routes of one group-version, in a stable order.
pub(crate) fn group_version_routes(registry: &Registry, group: &str, version: &str) -> Vec<Route> {
    let mut routes = Vec::new();
    for resource in registry.in_group_version(group, version) {
        resource_routes(resource, &mut routes);
    }
    routes
}

/// Operation-building context for one resource.
struct Ctx<'a> {
    rt: &'a ResourceType,
    definition: String,
    list_definition: String,
    id_stem: String,
    tag: String,
    gvk: (String, String, String),
    patch_media: &'static [&'static str],
}

impl Ctx<'_> {
    fn op(
        &self,
        method: &'static str,
        action: &'static str,
        verb: &str,
        scope: &str,
        suffix: &str,
    ) -> Operation {
        Operation {
            method,
            action,
            operation_id: format!("{verb}{}{scope}{}{suffix}", self.id_stem, self.rt.kind),
            description: String::new(),
            tag: self.tag.clone(),
            gvk: self.gvk.clone(),
            parameters: Vec::new(),
            body: None,
            response: Response::Definition(self.definition.clone()),
            codes: &["200"],
        }
    }
}

fn resource_routes(rt: &ResourceType, routes: &mut Vec<Route>) {
    let api_version = rt.api_version();
    let (Some(definition), Some(list_definition)) = (
        root_definition(&api_version, &rt.kind),
        root_definition(&api_version, &rt.list_kind()),
    ) else {
        return;
    };
    let ctx = Ctx {
        rt,
        definition: definition.to_string(),
        list_definition: list_definition.to_string(),
        id_stem: format!("{}{}", group_camel(&rt.group), capitalize(&rt.version)),
        tag: tag(&rt.group, &rt.version),
        gvk: (rt.group.clone(), rt.version.clone(), rt.kind.clone()),
        patch_media: if is_custom_group(&rt.group) {
            PATCH_MEDIA_CUSTOM
        } else {
            PATCH_MEDIA_BUILTIN
        },
    };
    let kind = &rt.kind;
    let base = prefix(&rt.group, &rt.version);
    let scope = if rt.namespaced { "Namespaced" } else { "" };
    let collection = if rt.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", rt.plural)
    } else {
        format!("{base}/{}", rt.plural)
    };
    let watch_collection = if rt.namespaced {
        format!("{base}/watch/namespaces/{{namespace}}/{}", rt.plural)
    } else {
        format!("{base}/watch/{}", rt.plural)
    };
    let pretty = query("pretty");
    let scope_params = |mut params: Vec<Param>| {
        if rt.namespaced {
            params.push(namespace_param());
        }
        params
    };
    let name_param = path_param("name", format!("name of the {kind}"));

    // Collection: list, create, deletecollection.
    let mut list = ctx.op("get", "list", "list", scope, "");
    list.description = format!("list or watch objects of kind {kind}");
    list.parameters = queries(LIST_QUERY);
    list.response = Response::Definition(ctx.list_definition.clone());
    let mut create = ctx.op("post", "post", "create", scope, "");
    create.description = format!("create a {kind}");
    create.parameters = queries(WRITE_QUERY);
    create.body = Some(Body {
        definition: ctx.definition.clone(),
        media_types: ANY_MEDIA,
    });
    create.codes = &["200", "201", "202"];
    let mut delete_collection = ctx.op("delete", "deletecollection", "deletecollection", scope, "");
    delete_collection.description = format!("delete collection of {kind}");
    delete_collection.parameters = queries(DELETE_QUERY);
    delete_collection.parameters.extend(
        queries(LIST_QUERY)
            .into_iter()
            .filter(|p| p.name != "watch" && p.name != "allowWatchBookmarks"),
    );
    delete_collection.body = Some(Body {
        definition: DELETE_OPTIONS.to_string(),
        media_types: ANY_MEDIA,
    });
    delete_collection.response = Response::Definition(STATUS.to_string());
    routes.push(Route {
        path: collection.clone(),
        parameters: scope_params(vec![pretty.clone()]),
        operations: vec![list, create, delete_collection],
    });

    // Item: read, replace, patch, delete.
    let item = format!("{collection}/{{name}}");
    let mut read = ctx.op("get", "get", "read", scope, "");
    read.description = format!("read the specified {kind}");
    let mut replace = ctx.op("put", "put", "replace", scope, "");
    replace.description = format!("replace the specified {kind}");
    replace.parameters = queries(WRITE_QUERY);
    replace.body = Some(Body {
        definition: ctx.definition.clone(),
        media_types: ANY_MEDIA,
    });
    replace.codes = &["200", "201"];
    let mut patch = ctx.op("patch", "patch", "patch", scope, "");
    patch.description = format!("partially update the specified {kind}");
    patch.parameters = queries(PATCH_QUERY);
    patch.body = Some(Body {
        definition: PATCH.to_string(),
        media_types: ctx.patch_media,
    });
    patch.codes = &["200", "201"];
    let mut delete = ctx.op("delete", "delete", "delete", scope, "");
    delete.description = format!("delete a {kind}");
    delete.parameters = queries(DELETE_QUERY);
    delete.body = Some(Body {
        definition: DELETE_OPTIONS.to_string(),
        media_types: ANY_MEDIA,
    });
    delete.response = Response::Definition(STATUS.to_string());
    delete.codes = &["200", "202"];
    routes.push(Route {
        path: item.clone(),
        parameters: scope_params(vec![name_param.clone(), pretty.clone()]),
        operations: vec![read, replace, patch, delete],
    });

    // Namespaced resources are also listed across namespaces.
    if rt.namespaced {
        let mut list_all = ctx.op("get", "list", "list", "", "ForAllNamespaces");
        list_all.description = format!("list or watch objects of kind {kind}");
        list_all.response = Response::Definition(ctx.list_definition.clone());
        routes.push(Route {
            path: format!("{base}/{}", rt.plural),
            parameters: [vec![pretty.clone()], queries(LIST_QUERY)].concat(),
            operations: vec![list_all],
        });
    }

    // Deprecated watch paths, still published upstream.
    let mut watch_list = ctx.op("get", "watchlist", "watch", scope, "List");
    watch_list.description = watch_list_description(kind);
    watch_list.response = Response::Definition(WATCH_EVENT.to_string());
    routes.push(Route {
        path: watch_collection.clone(),
        parameters: scope_params([vec![pretty.clone()], queries(LIST_QUERY)].concat()),
        operations: vec![watch_list],
    });
    let mut watch = ctx.op("get", "watch", "watch", scope, "");
    watch.description = format!(
        "watch changes to an object of kind {kind}. deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter."
    );
    watch.response = Response::Definition(WATCH_EVENT.to_string());
    routes.push(Route {
        path: format!("{watch_collection}/{{name}}"),
        parameters: scope_params(
            [
                vec![name_param.clone(), pretty.clone()],
                queries(LIST_QUERY),
            ]
            .concat(),
        ),
        operations: vec![watch],
    });
    if rt.namespaced {
        let mut watch_all = ctx.op("get", "watchlist", "watch", "", "ListForAllNamespaces");
        watch_all.description = watch_list_description(kind);
        watch_all.response = Response::Definition(WATCH_EVENT.to_string());
        routes.push(Route {
            path: format!("{base}/watch/{}", rt.plural),
            parameters: [vec![pretty.clone()], queries(LIST_QUERY)].concat(),
            operations: vec![watch_all],
        });
    }

    // Subresources.
    for sub in &rt.subresources {
        let sub_path = format!("{item}/{sub}");
        let params = scope_params(vec![name_param.clone(), pretty.clone()]);
        let operations = match sub.as_str() {
            "status" | "ephemeralcontainers" => {
                let suffix = capitalize(sub);
                let what = if sub == "status" {
                    "status"
                } else {
                    "ephemeralcontainers"
                };
                get_put_patch(
                    &ctx,
                    scope,
                    &suffix,
                    what,
                    &ctx.definition,
                    ctx.gvk.clone(),
                    ctx.patch_media,
                )
            }
            "scale" => get_put_patch(
                &ctx,
                scope,
                "Scale",
                "scale",
                "io.k8s.api.autoscaling.v1.Scale",
                (
                    "autoscaling".to_string(),
                    "v1".to_string(),
                    "Scale".to_string(),
                ),
                PATCH_MEDIA_BUILTIN,
            ),
            "binding" | "eviction" => {
                let (definition, gvk) = if sub == "binding" {
                    (
                        "io.k8s.api.core.v1.Binding",
                        (String::new(), "v1".to_string(), "Binding".to_string()),
                    )
                } else {
                    (
                        "io.k8s.api.policy.v1.Eviction",
                        (
                            "policy".to_string(),
                            "v1".to_string(),
                            "Eviction".to_string(),
                        ),
                    )
                };
                let mut post = ctx.op("post", "post", "create", scope, &capitalize(sub));
                post.description = format!("create {sub} of a {kind}");
                post.parameters = queries(WRITE_QUERY);
                post.body = Some(Body {
                    definition: definition.to_string(),
                    media_types: ANY_MEDIA,
                });
                post.response = Response::Definition(definition.to_string());
                post.codes = &["200", "201", "202"];
                post.gvk = gvk;
                vec![post]
            }
            "finalize" => {
                let mut put = ctx.op("put", "put", "replace", scope, "Finalize");
                put.description = format!("replace finalize of the specified {kind}");
                put.parameters = queries(WRITE_QUERY);
                put.body = Some(Body {
                    definition: ctx.definition.clone(),
                    media_types: ANY_MEDIA,
                });
                put.codes = &["200", "201"];
                vec![put]
            }
            "log" => {
                let mut get = ctx.op("get", "get", "read", scope, "Log");
                get.description = format!("read log of the specified {kind}");
                get.parameters = queries(LOG_QUERY);
                get.response = Response::Text;
                vec![get]
            }
            // exec/attach/portforward are connect (upgrade) endpoints kubectl finds by URL, not
            // through OpenAPI.
            _ => continue,
        };
        routes.push(Route {
            path: sub_path,
            parameters: params,
            operations,
        });
    }
}

fn watch_list_description(kind: &str) -> String {
    format!(
        "watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."
    )
}

/// read/replace/patch of a subresource (`status`, `scale`, `ephemeralcontainers`).
fn get_put_patch(
    ctx: &Ctx<'_>,
    scope: &str,
    suffix: &str,
    what: &str,
    definition: &str,
    gvk: (String, String, String),
    patch_media: &'static [&'static str],
) -> Vec<Operation> {
    let kind = &ctx.rt.kind;
    let mut read = ctx.op("get", "get", "read", scope, suffix);
    read.description = format!("read {what} of the specified {kind}");
    read.response = Response::Definition(definition.to_string());
    read.gvk = gvk.clone();
    let mut replace = ctx.op("put", "put", "replace", scope, suffix);
    replace.description = format!("replace {what} of the specified {kind}");
    replace.parameters = queries(WRITE_QUERY);
    replace.body = Some(Body {
        definition: definition.to_string(),
        media_types: ANY_MEDIA,
    });
    replace.response = Response::Definition(definition.to_string());
    replace.codes = &["200", "201"];
    replace.gvk = gvk.clone();
    let mut patch = ctx.op("patch", "patch", "patch", scope, suffix);
    patch.description = format!("partially update {what} of the specified {kind}");
    patch.parameters = queries(PATCH_QUERY);
    patch.body = Some(Body {
        definition: PATCH.to_string(),
        media_types: patch_media,
    });
    patch.response = Response::Definition(definition.to_string());
    patch.codes = &["200", "201"];
    patch.gvk = gvk;
    vec![read, replace, patch]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_follow_upstream_naming() {
        assert_eq!(group_camel(""), "Core");
        assert_eq!(group_camel("node.k8s.io"), "Node");
        assert_eq!(group_camel("apps"), "Apps");
        assert_eq!(tag("discovery.k8s.io", "v1"), "discovery_v1");
        let routes = group_version_routes(&Registry::builtin(), "", "v1");
        let ids: Vec<&str> = routes
            .iter()
            .flat_map(|r| r.operations.iter().map(|o| o.operation_id.as_str()))
            .collect();
        for expected in [
            "listCoreV1NamespacedPod",
            "readCoreV1NamespacedPod",
            "patchCoreV1NamespacedPodStatus",
            "listCoreV1PodForAllNamespaces",
            "readCoreV1Node",
            "createCoreV1NamespacedPodBinding",
        ] {
            assert!(ids.contains(&expected), "{expected} missing");
        }
    }
}
