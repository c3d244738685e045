//! The REST operations of each served resource, described once and rendered into both OpenAPI v3
//! (`v3.rs`) and Swagger 2.0 (`v2.rs`). Mirrors the paths, operation ids, actions and parameters
//! the upstream API server's installer (`apiserver/pkg/endpoints/installer.go`) publishes.

use crate::registry::{Registry, ResourceType};

pub(crate) use super::params::Param;
use super::params::{
    DELETE_QUERY, LIST_QUERY, LOG_QUERY, PATCH_QUERY, WRITE_QUERY, namespace_param, path_param,
    queries, query,
};
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
    /// Media types of the response (Swagger 2.0 `produces`, the OpenAPI v3 response `content`).
    pub produces: &'static [&'static str],
    /// Swagger 2.0 `consumes` of an operation without a request body: `*/*` for built-in kinds,
    /// JSON and YAML for custom resources (whose operations declare it even on GET, as
    /// upstream's CRD builder does). With a body, [`Body::media_types`] is used instead.
    pub bodiless_consumes: &'static [&'static str],
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
    /// The media types a built-in kind answers with; list and watch operations also stream.
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

const PATCH_MEDIA_BUILTIN: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];
/// Custom resources (here: GMSACredentialSpec) do not accept strategic merge patch; kubectl's
/// `apply` checks this media type (`Patcher.gvkSupportsPatchOpenAPIV3`) to pick the patch type.
pub(super) const PATCH_MEDIA_CUSTOM: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
];
const ANY_MEDIA: &[&str] = &["*/*"];
/// What custom resources answer with and accept outside PATCH (upstream's CRD builder).
pub(super) const JSON_YAML: &[&str] = &["application/json", "application/yaml"];

/// Groups served as custom resources upstream: no strategic merge patch.
fn is_custom_group(group: &str) -> bool {
    group == "windows.k8s.io"
}

/// Upstream's `ToValidOperationID` (`apiserver/pkg/endpoints/openapi`): drops every character
/// that is not a letter, `_` or a non-leading digit, upper-casing the character after each
/// dropped one (and the first, when `capitalize_first`): `cert-manager.io` → `CertManagerIo`.
fn to_valid_operation_id(s: &str, capitalize_first: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut capitalize = capitalize_first;
    for (i, c) in s.chars().enumerate() {
        if c.is_alphabetic() || c == '_' || (i != 0 && c.is_numeric()) {
            if capitalize {
                out.extend(c.to_uppercase());
                capitalize = false;
            } else {
                out.push(c);
            }
        } else {
            capitalize = true;
        }
    }
    out
}

/// The group as `GetOperationIDAndTags` names it: without `.k8s.io`, `core` for the legacy group.
fn operation_group(group: &str) -> &str {
    if group.is_empty() {
        "core"
    } else {
        group.strip_suffix(".k8s.io").unwrap_or(group)
    }
}

/// `CoreV1`, `AppsV1`, `NodeV1` (for `node.k8s.io`), `CertManagerIoV1`, …: what upstream's
/// operation ids put between the verb and the kind (`GetOperationIDAndTags`).
pub(super) fn id_stem(group: &str, version: &str) -> String {
    format!(
        "{}{}",
        to_valid_operation_id(operation_group(group), true),
        to_valid_operation_id(version, true)
    )
}

/// `core_v1`, `apps_v1`, `node_v1`, `rbacAuthorization_v1`, `certManagerIo_v1`: upstream's
/// operation tags (`GetOperationIDAndTags`: the group without `.k8s.io` through
/// `ToValidOperationID(group, false)`, then `_` and the version).
pub(super) fn tag(group: &str, version: &str) -> String {
    format!(
        "{}_{}",
        to_valid_operation_id(operation_group(group), false),
        to_valid_operation_id(version, false)
    )
}

pub(super) fn capitalize(s: &str) -> String {
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
        let response = Response::Definition(self.definition.clone());
        let produces = response.media_types(matches!(action, "list" | "watch" | "watchlist"));
        Operation {
            method,
            action,
            operation_id: format!("{verb}{}{scope}{}{suffix}", self.id_stem, self.rt.kind),
            description: String::new(),
            tag: self.tag.clone(),
            gvk: self.gvk.clone(),
            parameters: Vec::new(),
            body: None,
            response,
            codes: &["200"],
            produces,
            bodiless_consumes: ANY_MEDIA,
        }
    }
}

/// Publishes the operations `rt` serves: each main-resource operation only when the type
/// serves its verb (`ResourceType::verbs`), as upstream's installer registers only the REST
/// interfaces a storage implements. The create-only reviews (`SubjectAccessReview`, …) so get a
/// single `POST` on their collection path, and no `<Kind>List`.
fn resource_routes(rt: &ResourceType, routes: &mut Vec<Route>) {
    let api_version = rt.api_version();
    let Some(definition) = root_definition(&api_version, &rt.kind) else {
        return;
    };
    let lists = ["list", "watch", "deletecollection"]
        .iter()
        .any(|v| rt.supports(v));
    let list_definition = root_definition(&api_version, &rt.list_kind());
    if lists && list_definition.is_none() {
        return;
    }
    let ctx = Ctx {
        rt,
        definition: definition.to_string(),
        list_definition: list_definition.unwrap_or_default().to_string(),
        id_stem: id_stem(&rt.group, &rt.version),
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
    let serves = |verb: &str| rt.supports(verb);

    // Collection: list, create, deletecollection.
    let mut collection_ops = Vec::new();
    if serves("list") {
        let mut list = ctx.op("get", "list", "list", scope, "");
        list.description = format!("list or watch objects of kind {kind}");
        list.parameters = queries(LIST_QUERY);
        list.response = Response::Definition(ctx.list_definition.clone());
        collection_ops.push(list);
    }
    if serves("create") {
        let mut create = ctx.op("post", "post", "create", scope, "");
        create.description = format!("create a {kind}");
        create.parameters = queries(WRITE_QUERY);
        create.body = Some(Body {
            definition: ctx.definition.clone(),
            media_types: ANY_MEDIA,
        });
        create.codes = &["200", "201", "202"];
        collection_ops.push(create);
    }
    if serves("deletecollection") {
        let mut delete_collection =
            ctx.op("delete", "deletecollection", "deletecollection", scope, "");
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
        collection_ops.push(delete_collection);
    }
    if !collection_ops.is_empty() {
        routes.push(Route {
            path: collection.clone(),
            parameters: scope_params(vec![pretty.clone()]),
            operations: collection_ops,
        });
    }

    // Item: read, replace, patch, delete.
    let item = format!("{collection}/{{name}}");
    let mut item_ops = Vec::new();
    if serves("get") {
        let mut read = ctx.op("get", "get", "read", scope, "");
        read.description = format!("read the specified {kind}");
        item_ops.push(read);
    }
    if serves("update") {
        let mut replace = ctx.op("put", "put", "replace", scope, "");
        replace.description = format!("replace the specified {kind}");
        replace.parameters = queries(WRITE_QUERY);
        replace.body = Some(Body {
            definition: ctx.definition.clone(),
            media_types: ANY_MEDIA,
        });
        replace.codes = &["200", "201"];
        item_ops.push(replace);
    }
    if serves("patch") {
        let mut patch = ctx.op("patch", "patch", "patch", scope, "");
        patch.description = format!("partially update the specified {kind}");
        patch.parameters = queries(PATCH_QUERY);
        patch.body = Some(Body {
            definition: PATCH.to_string(),
            media_types: ctx.patch_media,
        });
        patch.codes = &["200", "201"];
        item_ops.push(patch);
    }
    if serves("delete") {
        let mut delete = ctx.op("delete", "delete", "delete", scope, "");
        delete.description = format!("delete a {kind}");
        delete.parameters = queries(DELETE_QUERY);
        delete.body = Some(Body {
            definition: DELETE_OPTIONS.to_string(),
            media_types: ANY_MEDIA,
        });
        delete.response = Response::Definition(STATUS.to_string());
        delete.codes = &["200", "202"];
        item_ops.push(delete);
    }
    if !item_ops.is_empty() {
        routes.push(Route {
            path: item.clone(),
            parameters: scope_params(vec![name_param.clone(), pretty.clone()]),
            operations: item_ops,
        });
    }

    // Namespaced resources are also listed across namespaces.
    if rt.namespaced && serves("list") {
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
    if serves("watch") {
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
    }

    // Subresources.
    for sub in &rt.subresources {
        let sub_path = format!("{item}/{sub}");
        let params = scope_params(vec![name_param.clone(), pretty.clone()]);
        let operations = match sub.as_str() {
            "status" | "ephemeralcontainers" | "approval" => get_put_patch(
                &ctx,
                scope,
                &capitalize(sub),
                sub,
                &ctx.definition,
                ctx.gvk.clone(),
                ctx.patch_media,
            ),
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
            "binding" | "eviction" | "token" => {
                let (definition, group, sub_kind) = match sub.as_str() {
                    "binding" => ("io.k8s.api.core.v1.Binding", "", "Binding"),
                    "eviction" => ("io.k8s.api.policy.v1.Eviction", "policy", "Eviction"),
                    _ => (
                        "io.k8s.api.authentication.v1.TokenRequest",
                        "authentication.k8s.io",
                        "TokenRequest",
                    ),
                };
                let gvk = (group.to_string(), "v1".to_string(), sub_kind.to_string());
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
                get.produces = get.response.media_types(false);
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
        assert_eq!(id_stem("", "v1"), "CoreV1");
        assert_eq!(id_stem("node.k8s.io", "v1"), "NodeV1");
        assert_eq!(id_stem("apps", "v1beta2"), "AppsV1beta2");
        assert_eq!(id_stem("cert-manager.io", "v1"), "CertManagerIoV1");
        assert_eq!(tag("cert-manager.io", "v1alpha1"), "certManagerIo_v1alpha1");
        // Upstream drops a leading digit and capitalizes what follows a dropped character.
        assert_eq!(to_valid_operation_id("1a.b2-c", true), "AB2C");
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
            "createCoreV1NamespacedServiceAccountToken",
        ] {
            assert!(ids.contains(&expected), "{expected} missing");
        }
        assert_eq!(
            tag("rbac.authorization.k8s.io", "v1"),
            "rbacAuthorization_v1"
        );
        assert_eq!(tag("", "v1"), "core_v1");
        assert_eq!(
            id_stem("rbac.authorization.k8s.io", "v1"),
            "RbacAuthorizationV1"
        );
    }

    /// Review kinds are create-only upstream: one `POST` on the collection, nothing else.
    #[test]
    fn review_kinds_publish_only_their_create_operation() {
        let registry = Registry::builtin();
        let routes = group_version_routes(&registry, "authorization.k8s.io", "v1");
        let ops: Vec<(&str, &str, &str)> = routes
            .iter()
            .flat_map(|r| {
                r.operations
                    .iter()
                    .map(move |o| (r.path.as_str(), o.method, o.operation_id.as_str()))
            })
            .collect();
        assert_eq!(
            ops,
            [
                (
                    "/apis/authorization.k8s.io/v1/namespaces/{namespace}/localsubjectaccessreviews",
                    "post",
                    "createAuthorizationV1NamespacedLocalSubjectAccessReview"
                ),
                (
                    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                    "post",
                    "createAuthorizationV1SelfSubjectAccessReview"
                ),
                (
                    "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
                    "post",
                    "createAuthorizationV1SelfSubjectRulesReview"
                ),
                (
                    "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                    "post",
                    "createAuthorizationV1SubjectAccessReview"
                ),
            ]
        );
        let csr = group_version_routes(&registry, "certificates.k8s.io", "v1");
        let ids: Vec<&str> = csr
            .iter()
            .flat_map(|r| r.operations.iter().map(|o| o.operation_id.as_str()))
            .collect();
        for expected in [
            "listCertificatesV1CertificateSigningRequest",
            "patchCertificatesV1CertificateSigningRequestApproval",
            "replaceCertificatesV1CertificateSigningRequestStatus",
            "watchCertificatesV1CertificateSigningRequestList",
        ] {
            assert!(ids.contains(&expected), "{expected} missing");
        }
    }
}
