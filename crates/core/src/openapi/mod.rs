//! OpenAPI v2 and v3 documents for discovery, `kubectl explain`, client-side apply and
//! server-side field validation, built once (lazily) from the `k8s-openapi` schemas of the served
//! kinds.
//!
//! - [`definitions`] / [`root_definition`]: the schema of every published definition.
//! - [`v3_index`] / [`v3_group_version`]: `/openapi/v3` and `/openapi/v3/<api|apis/group>/<version>`.
//! - [`v2`]: `/openapi/v2` as Swagger 2.0 JSON.
//! - [`v3_document`] / [`v3_index_with_crds`] / [`v2_with_crds`]: the same for custom resources
//!   (module `crd`), built on demand from the established CRDs.
//!
//! What stock `kubectl` reads from these documents, and so what they must keep:
//! - `kubectl explain` (`k8s.io/kubectl/pkg/explain/v2`, `templates/plaintext.tmpl`) finds the
//!   GVK on an operation of the resource's collection or item path, then the schema in
//!   `components.schemas` whose `x-kubernetes-group-version-kind` list contains it, and walks
//!   `properties`, `$ref` (`#/components/schemas/…`), `allOf`, `items` and `additionalProperties`.
//! - Server-side field validation (`cli-runtime` `QueryParamVerifierV3`) is assumed only when the
//!   PATCH operations carrying the kind's GVK list a `fieldValidation` parameter inline.
//! - Client-side `apply` (`kubectl/pkg/cmd/apply/patcher.go`) uses strategic merge patch when the
//!   kind's PATCH request body accepts `application/strategic-merge-patch+json`, reading
//!   `x-kubernetes-patch-strategy`/`-merge-key` from the properties.

mod crd;
mod params;
mod routes;
mod schemas;
mod v2;
mod v3;

pub use crd::{
    crd_definition_name, v2_with_crds, v3_document, v3_document_for_path, v3_index_entries,
    v3_index_with_crds,
};
pub use schemas::{V3_REF_PREFIX, definitions, root_definition};
pub use v2::{V2_REF_PREFIX, v2};
pub use v3::{v3_group_version, v3_index};

/// `info.title` of every document, as upstream.
const INFO_TITLE: &str = "Kubernetes";
/// `info.version` of every document: the upstream release whose API tandem serves.
const INFO_VERSION: &str = "v1.33.0";

/// 64-bit FNV-1a: a stable, dependency-free digest for the documents' cache-busting hashes.
fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::{Value, json};

    use super::schemas::collect_refs;
    use super::v3::index_key;
    use super::*;
    use crate::registry::Registry;

    fn documents() -> Vec<(String, &'static Value)> {
        Registry::builtin()
            .group_versions()
            .into_iter()
            .map(|(g, v)| {
                let key = index_key(&g, &v);
                let doc = v3_group_version(&key).unwrap_or_else(|| panic!("{key} missing"));
                (key, doc)
            })
            .collect()
    }

    /// Resolves a `#/a/b/c` ref inside `doc` like explain's `resolveRef`.
    fn resolve<'a>(doc: &'a Value, reference: &str) -> Option<&'a Value> {
        let fragment = reference.strip_prefix('#')?;
        fragment
            .split('/')
            .filter(|s| !s.is_empty())
            .try_fold(doc, |cur, k| cur.get(k))
    }

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
    }

    #[test]
    fn index_lists_every_group_version() {
        let index = v3_index();
        let paths = index["paths"].as_object().expect("test invariant");
        let registry = Registry::builtin();
        assert_eq!(paths.len(), registry.group_versions().len());
        for (g, v) in registry.group_versions() {
            let key = index_key(&g, &v);
            let url = paths[&key]["serverRelativeURL"]
                .as_str()
                .expect("test invariant");
            let (path, hash) = url.split_once("?hash=").expect("test invariant");
            assert_eq!(path, format!("/openapi/v3/{key}"));
            assert!(
                hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()),
                "{url}"
            );
            assert!(v3_group_version(url).is_some(), "{url} must resolve");
        }
        assert!(paths.contains_key("api/v1"));
        assert!(paths.contains_key("apis/apps/v1"));
        assert!(paths.contains_key("apis/windows.k8s.io/v1"));
        assert!(v3_group_version("apis/nope/v1").is_none());
    }

    #[test]
    fn every_ref_resolves_to_a_definition() {
        for (key, doc) in documents() {
            let mut refs = Vec::new();
            collect_refs(doc, &mut refs);
            assert!(!refs.is_empty());
            for r in refs {
                assert!(r.starts_with(V3_REF_PREFIX), "{key}: {r}");
                assert!(resolve(doc, r).is_some(), "{key}: dangling {r}");
            }
            assert_eq!(doc["openapi"], "3.0.0");
        }
        let doc = v2();
        let mut refs = Vec::new();
        collect_refs(doc, &mut refs);
        for r in refs {
            assert!(r.starts_with(V2_REF_PREFIX), "v2: {r}");
            assert!(resolve(doc, r).is_some(), "v2: dangling {r}");
        }
        assert_eq!(doc["swagger"], "2.0");
        assert_eq!(
            doc["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"]["$ref"],
            "#/definitions/io.k8s.api.core.v1.PodSpec"
        );
    }

    /// Mirrors `supportsQueryParamV3` and `Patcher.gvkSupportsPatchOpenAPIV3`: every PATCH
    /// operation whose GVK is a served kind lists `fieldValidation` (and `dryRun`) inline, and
    /// built-in kinds accept strategic merge patch while the custom GMSACredentialSpec does not.
    #[test]
    fn patch_operations_advertise_field_validation() {
        let registry = Registry::builtin();
        // The create-only reviews have no PATCH at all; their POST is checked below.
        for t in registry.all().iter().filter(|t| t.supports("patch")) {
            let doc = v3_group_version(&index_key(&t.group, &t.version)).expect("test invariant");
            let gvk = json!({ "group": t.group, "kind": t.kind, "version": t.version });
            let patches: Vec<&Value> = doc["paths"]
                .as_object()
                .expect("test invariant")
                .values()
                .filter_map(|p| p.get("patch"))
                .filter(|op| op["x-kubernetes-group-version-kind"] == gvk)
                .collect();
            assert!(!patches.is_empty(), "{} has no PATCH", t.kind);
            for op in patches {
                let names: Vec<&str> = op["parameters"]
                    .as_array()
                    .expect("test invariant")
                    .iter()
                    .filter_map(|p| p["name"].as_str())
                    .collect();
                assert!(
                    names.contains(&"fieldValidation") && names.contains(&"dryRun"),
                    "{}: {names:?}",
                    t.kind
                );
                let smp = op["requestBody"]["content"]
                    .get("application/strategic-merge-patch+json")
                    .is_some();
                assert_eq!(
                    smp,
                    t.group != "windows.k8s.io",
                    "{} strategic merge patch",
                    t.kind
                );
            }
            for method in ["post", "put"] {
                for op in doc["paths"]
                    .as_object()
                    .expect("test invariant")
                    .values()
                    .filter_map(|p| p.get(method))
                {
                    let names: Vec<&str> = op["parameters"]
                        .as_array()
                        .expect("test invariant")
                        .iter()
                        .filter_map(|p| p["name"].as_str())
                        .collect();
                    assert!(
                        names.contains(&"fieldValidation") && names.contains(&"dryRun"),
                        "{method} {names:?}"
                    );
                }
            }
        }
    }

    /// What `plaintext.tmpl` does: GVK from the resource's paths, the schema carrying that GVK,
    /// then `properties` / `$ref` / `allOf` / `items` / `additionalProperties` per path segment.
    fn explain<'a>(
        doc: &'a Value,
        prefix: &str,
        plural: &str,
        field_path: &[&str],
    ) -> Option<&'a Value> {
        let candidates = [
            format!("{prefix}/{plural}"),
            format!("{prefix}/{plural}/{{name}}"),
            format!("{prefix}/namespaces/{{namespace}}/{plural}"),
            format!("{prefix}/namespaces/{{namespace}}/{plural}/{{name}}"),
        ];
        let mut gvk = None;
        for path in &candidates {
            let Some(item) = doc["paths"].get(path) else {
                continue;
            };
            for method in ["get", "post", "put", "patch", "delete"] {
                let Some(op) = item.get(method) else { continue };
                gvk = op.get("x-kubernetes-group-version-kind");
                if gvk.is_some() {
                    break;
                }
            }
        }
        let gvk = gvk?;
        let root = doc["components"]["schemas"]
            .as_object()?
            .values()
            .find(|s| {
                s.get("x-kubernetes-group-version-kind")
                    .and_then(Value::as_array)
                    .is_some_and(|l| l.contains(gvk))
            })?;
        let mut schema = root;
        for field in field_path {
            schema = descend(doc, schema, field)?;
        }
        Some(schema)
    }

    fn deref<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
        schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| resolve(doc, r))
            .unwrap_or(schema)
    }

    fn descend<'a>(doc: &'a Value, schema: &'a Value, field: &str) -> Option<&'a Value> {
        let resolved = deref(doc, schema);
        if let Some(sub) = resolved.get("properties").and_then(|p| p.get(field)) {
            return Some(sub);
        }
        if let Some(items) = resolved.get("items") {
            return descend(doc, items, field);
        }
        if let Some(additional) = resolved
            .get("additionalProperties")
            .filter(|a| a.is_object())
        {
            return descend(doc, additional, field);
        }
        resolved
            .get("allOf")?
            .as_array()?
            .iter()
            .find_map(|s| descend(doc, s, field))
    }

    /// Field names under `schema`, recursively (explain `--recursive`'s "fieldList"), stopping
    /// at refs already on the path.
    fn field_list(
        doc: &Value,
        schema: &Value,
        history: &mut Vec<String>,
        out: &mut BTreeSet<String>,
        depth: usize,
    ) {
        let reference = schema
            .get("$ref")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !reference.is_empty() && history.contains(&reference) {
            return;
        }
        history.push(reference.clone());
        let resolved = deref(doc, schema);
        if !reference.is_empty() {
            assert!(resolved.get("$ref").is_none(), "unresolved {reference}");
        }
        if let Some(properties) = resolved.get("properties").and_then(Value::as_object) {
            for (name, sub) in properties {
                out.insert(format!("{}{name}", "  ".repeat(depth)));
                field_list(doc, sub, history, out, depth + 1);
            }
        }
        for sub in resolved
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            field_list(doc, sub, history, out, depth);
        }
        if let Some(items) = resolved.get("items") {
            field_list(doc, items, history, out, depth);
        }
        if let Some(additional) = resolved
            .get("additionalProperties")
            .filter(|a| a.is_object())
        {
            field_list(doc, additional, history, out, depth);
        }
        history.pop();
    }

    #[test]
    fn explain_path_pod_spec_os_resolves() {
        let doc = v3_group_version("api/v1").expect("test invariant");
        let os = explain(doc, "/api/v1", "pods", &["spec", "os"]).expect("pod.spec.os");
        assert_eq!(
            os["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodOS"
        );
        let name =
            explain(doc, "/api/v1", "pods", &["spec", "os", "name"]).expect("pod.spec.os.name");
        assert_eq!(name["type"], "string");
        // Arrays are walked through `items`.
        let image = explain(doc, "/api/v1", "pods", &["spec", "containers", "image"])
            .expect("containers.image");
        assert_eq!(image["type"], "string");
        // Cluster-scoped kinds are found through their cluster paths.
        assert!(explain(doc, "/api/v1", "nodes", &["spec", "taints", "effect"]).is_some());
        let gmsa = v3_group_version("apis/windows.k8s.io/v1").expect("test invariant");
        assert!(
            explain(
                gmsa,
                "/apis/windows.k8s.io/v1",
                "gmsacredentialspecs",
                &["credspec"]
            )
            .is_some()
        );
    }

    #[test]
    fn explain_deployment_spec_recursive_walks_the_whole_tree() {
        let doc = v3_group_version("apis/apps/v1").expect("test invariant");
        let spec =
            explain(doc, "/apis/apps/v1", "deployments", &["spec"]).expect("deployment.spec");
        let mut fields = BTreeSet::new();
        field_list(doc, spec, &mut Vec::new(), &mut fields, 0);
        for expected in [
            "replicas",
            "selector",
            "strategy",
            "template",
            "  spec",
            "    containers",
            "      image",
            "    os",
            "      name",
        ] {
            assert!(fields.contains(expected), "missing {expected:?}");
        }
        assert!(fields.len() > 300, "{} fields", fields.len());
    }

    #[test]
    fn every_served_kind_is_explainable_and_its_paths_carry_actions() {
        let registry = Registry::builtin();
        for t in registry.all() {
            let doc = v3_group_version(&index_key(&t.group, &t.version)).expect("test invariant");
            let prefix = if t.group.is_empty() {
                format!("/api/{}", t.version)
            } else {
                format!("/apis/{}/{}", t.group, t.version)
            };
            let root = explain(doc, &prefix, &t.plural, &[])
                .unwrap_or_else(|| panic!("{} not explainable", t.kind));
            assert!(root["properties"].get("metadata").is_some(), "{}", t.kind);
            for item in doc["paths"].as_object().expect("test invariant").values() {
                for (method, op) in item.as_object().expect("test invariant") {
                    if method != "parameters" {
                        assert!(
                            op["x-kubernetes-action"].is_string() && op["operationId"].is_string()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn building_every_document_takes_reasonable_time() {
        // Tests run in parallel processes under nextest, so this usually measures a cold build;
        // the figures are reported, never asserted.
        let start = std::time::Instant::now();
        let count = definitions().len();
        let definitions_took = start.elapsed();
        let index = v3_index();
        let v3_took = start.elapsed() - definitions_took;
        let v2_start = std::time::Instant::now();
        let v2_paths = v2()["paths"].as_object().map_or(0, |p| p.len());
        let v2_took = v2_start.elapsed();
        let serialize_start = std::time::Instant::now();
        let v3_bytes: usize = documents()
            .iter()
            .map(|(_, d)| serde_json::to_vec(d).expect("test invariant").len())
            .sum();
        let v2_bytes = serde_json::to_vec(v2()).expect("test invariant").len();
        println!(
            "openapi: {count} definitions in {definitions_took:?}; {} v3 documents in {v3_took:?} \
             ({v3_bytes} bytes); v2 ({v2_paths} paths, {v2_bytes} bytes) in {v2_took:?}; \
             serializing everything once took {:?}",
            index["paths"].as_object().map_or(0, |p| p.len()),
            serialize_start.elapsed(),
        );
    }
}
