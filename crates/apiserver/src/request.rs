//! What a request asks for: upstream's `RequestInfo` (verb, group, version, resource, namespace,
//! name, subresource) parsed from the method, path and query, as `k8s.io/apiserver/pkg/endpoints/
//! request.RequestInfoFactory` does.

use std::collections::HashMap;

/// The API verb, derived from the HTTP method, whether a name is present, and `?watch=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

/// A request for a resource path (`/api/v1/namespaces/default/pods/web/status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRequest {
    pub verb: Verb,
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// For the `proxy` subresource, the path after it (`/healthz` of `nodes/n1/proxy/healthz`).
    pub proxy_path: Option<String>,
}

/// Parses the path segments of a resource request; `None` when the path is not a resource path
/// (discovery, health, OpenAPI…).
pub fn parse_resource_path(
    method: &http::Method,
    path: &str,
    query: &Query,
) -> Option<ResourceRequest> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", version, rest @ ..] => (String::new(), version.to_string(), rest),
        ["apis", group, version, rest @ ..] => (group.to_string(), version.to_string(), rest),
        _ => return None,
    };
    let mut rest: Vec<String> = rest.iter().map(|s| percent_decode(s)).collect();
    let mut legacy_watch = false;
    if rest.first().map(String::as_str) == Some("watch") {
        legacy_watch = true;
        rest.remove(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut namespace = None;
    // `namespaces/<ns>/<resource>...` scopes a namespaced resource; `namespaces/<name>` alone (or
    // with a subresource of the namespace such as `status`/`finalize`) is the Namespace itself.
    if rest[0] == "namespaces"
        && rest.len() >= 3
        && !matches!(rest[2].as_str(), "status" | "finalize")
    {
        namespace = Some(rest[1].clone());
        rest.drain(0..2);
    } else if rest[0] == "namespaces" && rest.len() >= 2 && !legacy_watch {
        // The namespace object itself: its name is its own namespace in upstream's RequestInfo,
        // but for routing it is a cluster-scoped object.
    }
    let resource = rest.first()?.clone();
    let name = rest.get(1).cloned();
    let subresource = rest.get(2).cloned();
    let proxy_path = if subresource.as_deref() == Some("proxy") {
        let tail = rest.get(3..).unwrap_or_default().join("/");
        // A trailing slash is part of the proxied path (`…/proxy/` asks for `/`).
        let slash = if path.ends_with('/') && !tail.is_empty() {
            "/"
        } else {
            ""
        };
        Some(if tail.is_empty() && path.ends_with('/') {
            "/".to_string()
        } else if tail.is_empty() {
            String::new()
        } else {
            format!("/{tail}{slash}")
        })
    } else {
        if rest.len() > 3 {
            return None;
        }
        None
    };
    let watch = legacy_watch || query.bool("watch");
    let verb = match (method.as_str(), name.is_some()) {
        ("GET" | "HEAD", _) if watch => Verb::Watch,
        ("GET" | "HEAD", true) => Verb::Get,
        ("GET" | "HEAD", false) => Verb::List,
        ("POST", _) => Verb::Create,
        ("PUT", _) => Verb::Update,
        ("PATCH", _) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => return None,
    };
    Some(ResourceRequest {
        verb,
        group,
        version,
        namespace,
        resource,
        name,
        subresource,
        proxy_path,
    })
}

/// Decoded query parameters. Repeated keys keep the last value, as Go's `url.Values.Get` keeps the
/// first; none of the parameters Kubernetes reads are meaningfully repeated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        let mut map = HashMap::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            map.entry(percent_decode(&k.replace('+', " ")))
                .or_insert_with(|| percent_decode(&v.replace('+', " ")));
        }
        Query(map)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// A boolean parameter: `true`/`1` are true, as Go's strconv.ParseBool.
    pub fn bool(&self, key: &str) -> bool {
        matches!(
            self.get(key),
            Some("true" | "1" | "t" | "T" | "TRUE" | "True")
        )
    }

    /// An integer parameter; malformed values are an error message naming the parameter.
    pub fn int(&self, key: &str) -> Result<Option<i64>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                format!("invalid value {v:?} for query parameter {key:?}: must be an integer")
            }),
        }
    }
}

/// Decodes `%XX` escapes; malformed escapes are kept literally.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: &str, path_and_query: &str) -> Option<ResourceRequest> {
        let (path, q) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        let m = http::Method::from_bytes(method.as_bytes()).expect("method");
        parse_resource_path(&m, path, &Query::parse(Some(q)))
    }

    #[test]
    fn namespaced_subresource_paths_parse_like_upstream() {
        let r = parse("PUT", "/api/v1/namespaces/default/pods/web/status").expect("parsed");
        assert_eq!(r.verb, Verb::Update);
        assert_eq!(
            (
                r.namespace.as_deref(),
                r.resource.as_str(),
                r.name.as_deref(),
                r.subresource.as_deref()
            ),
            (Some("default"), "pods", Some("web"), Some("status"))
        );
        let r = parse("GET", "/apis/apps/v1/deployments?watch=true").expect("parsed");
        assert_eq!(
            (r.verb, r.group.as_str(), r.namespace.clone()),
            (Verb::Watch, "apps", None)
        );
    }

    #[test]
    fn namespace_objects_are_cluster_scoped_paths() {
        let r = parse("GET", "/api/v1/namespaces/kube-system").expect("parsed");
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.namespace.clone()),
            ("namespaces", Some("kube-system"), None)
        );
        let r = parse("PUT", "/api/v1/namespaces/x/finalize").expect("parsed");
        assert_eq!(
            (
                r.resource.as_str(),
                r.name.as_deref(),
                r.subresource.as_deref()
            ),
            ("namespaces", Some("x"), Some("finalize"))
        );
        let r = parse("DELETE", "/api/v1/namespaces/default/pods").expect("parsed");
        assert_eq!(r.verb, Verb::DeleteCollection);
    }

    #[test]
    fn query_values_are_percent_decoded() {
        let q = Query::parse(Some(
            "labelSelector=app%3Dweb%2Ctier+in+%28a%29&limit=5&bad=%zz",
        ));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a)"));
        assert_eq!(q.int("limit"), Ok(Some(5)));
        assert_eq!(q.get("bad"), Some("%zz"));
        assert!(q.int("bad").is_err());
    }
}
