//! Service, Endpoints and EndpointSlice validation.
//!
//! Mirrors upstream `pkg/apis/core/validation/validation.go` (`ValidateService`,
//! `validateServicePort`, `ValidateServiceClusterIPsRelatedFields`,
//! `validateServiceExternalTrafficPolicy`, `validateUpgradeDowngradeClusterIPs`,
//! `ValidateEndpoints`), `pkg/apis/discovery/validation` (`ValidateEndpointSlice`) and the
//! node-port range check of the service REST storage (`portallocator.ErrNotInRange`).

use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::{Value, json};

use super::json::{arr_at, i64_at, obj_at, str_at};
use super::meta::{immutable, validate_labels};
use super::names;
use super::pod::port_num_or_name;
use crate::field::{ErrorKind, FieldError, Path};

/// The default service node-port range (`--service-node-port-range`).
pub const NODE_PORT_RANGE: (i64, i64) = (30000, 32767);

const IP_ERROR: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

fn protocol(v: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    match str_at(v, "protocol").unwrap_or_default() {
        "TCP" | "UDP" | "SCTP" => {}
        "" => errs.push(FieldError::required(path.child("protocol"), "")),
        other => errs.push(FieldError::not_supported(
            path.child("protocol"),
            &json!(other),
            &["SCTP", "TCP", "UDP"],
        )),
    }
}

fn cluster_ips(spec: &Value) -> Vec<&str> {
    let ips: Vec<&str> = arr_at(spec, "clusterIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if ips.is_empty() {
        str_at(spec, "clusterIP")
            .filter(|s| !s.is_empty())
            .into_iter()
            .collect()
    } else {
        ips
    }
}

fn is_headless(spec: &Value) -> bool {
    cluster_ips(spec).first() == Some(&"None")
}

/// Upstream `ValidateService` (after metadata), plus the node-port range check.
pub fn validate_service(obj: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let path = Path::new("spec");
    let mut errs = Vec::new();
    let ty = str_at(spec, "type").unwrap_or_default();
    let ports = arr_at(spec, "ports");
    let headless = is_headless(spec);
    if ports.is_empty() && !headless && ty != "ExternalName" {
        errs.push(FieldError::required(path.child("ports"), ""));
    }
    let ips = cluster_ips(spec);
    match ty {
        "LoadBalancer" | "NodePort" => {
            if ty == "LoadBalancer" {
                for (i, p) in ports.iter().enumerate() {
                    if i64_at(p, "port") == Some(10250) {
                        errs.push(FieldError::invalid(
                            path.child("ports").index(i),
                            &json!(10250),
                            "may not expose port 10250 externally since it is used by kubelet",
                        ));
                    }
                }
            }
            if headless {
                errs.push(FieldError::invalid(
                    path.child("clusterIPs").index(0),
                    &json!("None"),
                    format!("may not be set to 'None' for {ty} services"),
                ));
            }
        }
        "ExternalName" => {
            if !ips.is_empty() {
                errs.push(FieldError::forbidden(
                    path.child("clusterIPs"),
                    "may not be set for ExternalName services",
                ));
            }
            if !arr_at(spec, "ipFamilies").is_empty() {
                errs.push(FieldError::forbidden(
                    path.child("ipFamilies"),
                    "may not be set for ExternalName services",
                ));
            }
            if spec.get("ipFamilyPolicy").is_some_and(|v| !v.is_null()) {
                errs.push(FieldError::forbidden(
                    path.child("ipFamilyPolicy"),
                    "may not be set for ExternalName services",
                ));
            }
            let cname = str_at(spec, "externalName")
                .unwrap_or_default()
                .trim_end_matches('.');
            if cname.is_empty() {
                errs.push(FieldError::required(path.child("externalName"), ""));
            } else {
                for msg in names::dns1123_subdomain(cname) {
                    errs.push(FieldError::invalid(
                        path.child("externalName"),
                        &json!(cname),
                        msg,
                    ));
                }
            }
        }
        _ => {}
    }
    let mut port_names = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let pp = path.child("ports").index(i);
        let name = str_at(p, "name").unwrap_or_default();
        if ports.len() > 1 && name.is_empty() {
            errs.push(FieldError::required(pp.child("name"), ""));
        } else if !name.is_empty() {
            for msg in names::dns1123_label(name) {
                errs.push(FieldError::invalid(pp.child("name"), &json!(name), msg));
            }
            if !port_names.insert(name) {
                errs.push(FieldError::duplicate(pp.child("name"), &json!(name)));
            }
        }
        let port = i64_at(p, "port").unwrap_or(0);
        for msg in names::port_num(port) {
            errs.push(FieldError::invalid(pp.child("port"), &json!(port), msg));
        }
        protocol(p, &pp, &mut errs);
        port_num_or_name(p.get("targetPort"), &pp.child("targetPort"), &mut errs);
    }
    errs.extend(validate_labels(
        obj_at(spec, "selector"),
        &path.child("selector"),
    ));
    match str_at(spec, "sessionAffinity").unwrap_or_default() {
        "" => errs.push(FieldError::required(path.child("sessionAffinity"), "")),
        "ClientIP" => {
            if let Some(t) = spec
                .get("sessionAffinityConfig")
                .and_then(|c| c.get("clientIP"))
                .and_then(|c| i64_at(c, "timeoutSeconds"))
                && !(1..=86400).contains(&t)
            {
                errs.push(FieldError::invalid(
                    path.child("sessionAffinityConfig")
                        .child("clientIP")
                        .child("timeoutSeconds"),
                    &json!(t),
                    "must be greater than 0 and less than 86400",
                ));
            }
        }
        "None" => {
            if spec
                .get("sessionAffinityConfig")
                .is_some_and(|v| !v.is_null())
            {
                errs.push(FieldError::forbidden(
                    path.child("sessionAffinityConfig"),
                    "must not be set when session affinity is None",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            path.child("sessionAffinity"),
            &json!(other),
            &["ClientIP", "None"],
        )),
    }
    // Cluster IPs, families and policy.
    if ty != "ExternalName" {
        match str_at(spec, "ipFamilyPolicy") {
            None => errs.push(FieldError::required(path.child("ipFamilyPolicy"), "")),
            Some("SingleStack" | "PreferDualStack" | "RequireDualStack") => {}
            Some(other) => errs.push(FieldError::not_supported(
                path.child("ipFamilyPolicy"),
                &json!(other),
                &["PreferDualStack", "RequireDualStack", "SingleStack"],
            )),
        }
        if let (Some(ip), Some(first)) = (
            str_at(spec, "clusterIP").filter(|s| !s.is_empty()),
            ips.first(),
        ) && ip != *first
        {
            errs.push(FieldError::invalid(
                path.child("clusterIPs"),
                spec.get("clusterIPs").unwrap_or(&null),
                "first value must match `clusterIP`",
            ));
        }
        for (i, ip) in ips.iter().enumerate() {
            if !(i == 0 && *ip == "None") && ip.parse::<IpAddr>().is_err() {
                errs.push(FieldError::invalid(
                    path.child("clusterIPs").index(i),
                    &json!(ip),
                    IP_ERROR,
                ));
            }
        }
        let families = arr_at(spec, "ipFamilies");
        for (i, f) in families.iter().enumerate() {
            let f = f.as_str().unwrap_or_default();
            if f != "IPv4" && f != "IPv6" {
                errs.push(FieldError::not_supported(
                    path.child("ipFamilies").index(i),
                    &json!(f),
                    &["IPv4", "IPv6"],
                ));
            }
        }
        if str_at(spec, "ipFamilyPolicy") == Some("SingleStack") {
            if families.len() > 1 {
                errs.push(FieldError::invalid(path.child("ipFamilies"), &json!(families), "when multiple IP families are specified, `ipFamilyPolicy` must be 'RequireDualStack' or 'PreferDualStack'"));
            }
            if ips.len() > 1 {
                errs.push(FieldError::invalid(path.child("clusterIPs"), &json!(ips), "when multiple IPs are specified, `ipFamilyPolicy` must be 'RequireDualStack' or 'PreferDualStack'"));
            }
        }
    }
    for (i, ip) in arr_at(spec, "externalIPs").iter().enumerate() {
        let ip = ip.as_str().unwrap_or_default();
        if ip.parse::<IpAddr>().is_err() {
            errs.push(FieldError::invalid(
                path.child("externalIPs").index(i),
                &json!(ip),
                IP_ERROR,
            ));
        }
    }
    const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if ty.is_empty() {
        errs.push(FieldError::required(path.child("type"), ""));
    } else if !TYPES.contains(&ty) {
        errs.push(FieldError::not_supported(
            path.child("type"),
            &json!(ty),
            TYPES,
        ));
    }
    let mut node_ports = HashSet::new();
    let mut port_keys = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let pp = path.child("ports").index(i);
        let proto = str_at(p, "protocol").unwrap_or_default();
        let np = i64_at(p, "nodePort").unwrap_or(0);
        if np != 0 {
            if ty == "ClusterIP" {
                errs.push(FieldError::forbidden(
                    pp.child("nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            } else if !(NODE_PORT_RANGE.0..=NODE_PORT_RANGE.1).contains(&np) {
                errs.push(FieldError::invalid(
                    pp.child("nodePort"),
                    &json!(np),
                    format!("provided port is not in the valid range. The range of valid ports is {}-{}", NODE_PORT_RANGE.0, NODE_PORT_RANGE.1),
                ));
            }
            if !node_ports.insert((proto, np)) {
                errs.push(FieldError::duplicate(pp.child("nodePort"), &json!(np)));
            }
        }
        let port = i64_at(p, "port").unwrap_or(0);
        if !port_keys.insert((proto, port)) {
            errs.push(FieldError::new(
                ErrorKind::Duplicate,
                &pp,
                Some(format!(
                    "core.ServicePort{{Name:\"\", Protocol:\"{proto}\", Port:{port}}}"
                )),
                "",
            ));
        }
    }
    let external = matches!(ty, "NodePort" | "LoadBalancer")
        || (ty == "ClusterIP" && !arr_at(spec, "externalIPs").is_empty());
    let etp = str_at(spec, "externalTrafficPolicy").unwrap_or_default();
    if !external {
        if !etp.is_empty() {
            errs.push(FieldError::invalid(
                path.child("externalTrafficPolicy"),
                &json!(etp),
                "may only be set for externally-accessible services",
            ));
        }
    } else if etp.is_empty() {
        errs.push(FieldError::required(
            path.child("externalTrafficPolicy"),
            "",
        ));
    } else if etp != "Cluster" && etp != "Local" {
        errs.push(FieldError::not_supported(
            path.child("externalTrafficPolicy"),
            &json!(etp),
            &["Cluster", "Local"],
        ));
    }
    if let Some(h) = i64_at(spec, "healthCheckNodePort").filter(|h| *h != 0)
        && !(ty == "LoadBalancer" && etp == "Local")
    {
        errs.push(FieldError::invalid(
            path.child("healthCheckNodePort"),
            &json!(h),
            "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
        ));
    }
    match str_at(spec, "internalTrafficPolicy") {
        None if ty != "ExternalName" => errs.push(FieldError::required(
            path.child("internalTrafficPolicy"),
            "",
        )),
        Some(p) if p != "Cluster" && p != "Local" => {
            errs.push(FieldError::not_supported(
                path.child("internalTrafficPolicy"),
                &json!(p),
                &["Cluster", "Local"],
            ));
        }
        _ => {}
    }
    errs
}

/// Upstream `ValidateServiceUpdate`: cluster IPs may not change once set (except to, from or
/// on ExternalName services); then the new object is validated as on create.
pub fn validate_service_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    let ns = new.get("spec").unwrap_or(&null);
    let os = old.get("spec").unwrap_or(&null);
    let mut errs = Vec::new();
    let ext = |s: &Value| str_at(s, "type") == Some("ExternalName");
    let both_headless = is_headless(ns) && is_headless(os);
    if !ext(ns) && !ext(os) && !both_headless {
        let (n, o) = (cluster_ips(ns), cluster_ips(os));
        let p0 = Path::new("spec").child("clusterIPs").index(0);
        if n.len() == o.len() {
            for (i, ip) in o.iter().enumerate() {
                if n.get(i) != Some(ip) {
                    errs.push(FieldError::invalid(
                        Path::new("spec").child("clusterIPs").index(i),
                        &json!(n),
                        "may not change once set",
                    ));
                }
            }
        } else if o.len() > n.len() {
            if n.is_empty() {
                errs.push(FieldError::invalid(
                    &p0,
                    &json!(n),
                    "primary clusterIP can not be unset",
                ));
            } else if n[0] != o[0] {
                errs.push(FieldError::invalid(
                    &p0,
                    &json!(n),
                    "may not change once set",
                ));
            }
            if n.len() == 1 && str_at(ns, "ipFamilyPolicy") != Some("SingleStack") {
                errs.push(FieldError::invalid(&p0, &json!(n), "`ipFamilyPolicy` must be set to 'SingleStack' when releasing the secondary clusterIP"));
            }
        } else if !o.is_empty() && n[0] != o[0] {
            errs.push(FieldError::invalid(
                &p0,
                &json!(n),
                "may not change once set",
            ));
        }
    }
    errs.extend(validate_service(new));
    errs
}

fn valid_ip(s: &str) -> bool {
    s.parse::<IpAddr>().is_ok()
}

/// Upstream `ValidateEndpoints` (after metadata).
pub fn validate_endpoints(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, ss) in arr_at(obj, "subsets").iter().enumerate() {
        let sp = Path::new("subsets").index(i);
        if arr_at(ss, "addresses").is_empty() && arr_at(ss, "notReadyAddresses").is_empty() {
            errs.push(FieldError::required(
                &sp,
                "must specify `addresses` or `notReadyAddresses`",
            ));
        }
        for key in ["addresses", "notReadyAddresses"] {
            for (j, a) in arr_at(ss, key).iter().enumerate() {
                let ap = sp.child(key).index(j);
                let ip = str_at(a, "ip").unwrap_or_default();
                if !valid_ip(ip) {
                    errs.push(FieldError::invalid(ap.child("ip"), &json!(ip), IP_ERROR));
                }
                if let Some(h) = str_at(a, "hostname").filter(|h| !h.is_empty()) {
                    for msg in names::dns1123_label(h) {
                        errs.push(FieldError::invalid(ap.child("hostname"), &json!(h), msg));
                    }
                }
            }
        }
        let ports = arr_at(ss, "ports");
        for (j, p) in ports.iter().enumerate() {
            let pp = sp.child("ports").index(j);
            let name = str_at(p, "name").unwrap_or_default();
            if ports.len() > 1 && name.is_empty() {
                errs.push(FieldError::required(pp.child("name"), ""));
            } else if !name.is_empty() {
                for msg in names::dns1123_label(name) {
                    errs.push(FieldError::invalid(pp.child("name"), &json!(name), msg));
                }
            }
            let port = i64_at(p, "port").unwrap_or(0);
            for msg in names::port_num(port) {
                errs.push(FieldError::invalid(pp.child("port"), &json!(port), msg));
            }
            protocol(p, &pp, &mut errs);
        }
    }
    errs
}

/// Upstream `ValidateEndpointSlice` (after metadata).
pub fn validate_endpoint_slice(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let address_type = str_at(obj, "addressType").unwrap_or_default();
    for (i, ep) in arr_at(obj, "endpoints").iter().enumerate() {
        let ep_path = Path::new("endpoints").index(i);
        let addrs = arr_at(ep, "addresses");
        if addrs.is_empty() {
            errs.push(FieldError::required(
                ep_path.child("addresses"),
                "must contain at least 1 address",
            ));
        } else if addrs.len() > 100 {
            errs.push(FieldError::new(
                ErrorKind::TooMany,
                ep_path.child("addresses"),
                None,
                "must have at most 100 items",
            ));
        }
        for (j, a) in addrs.iter().enumerate() {
            let a = a.as_str().unwrap_or_default();
            let ap = ep_path.child("addresses").index(j);
            let ok = match address_type {
                "IPv4" => a.parse::<std::net::Ipv4Addr>().is_ok(),
                "IPv6" => a.parse::<std::net::Ipv6Addr>().is_ok(),
                "FQDN" => names::dns1123_subdomain(a.trim_end_matches('.')).is_empty(),
                _ => true,
            };
            if !ok {
                let detail = match address_type {
                    "IPv4" => "must be a valid IPv4 address",
                    "IPv6" => "must be a valid IPv6 address",
                    _ => "must be a valid fully-qualified domain name",
                };
                errs.push(FieldError::invalid(ap, &json!(a), detail));
            }
        }
        if let Some(h) = str_at(ep, "hostname").filter(|h| !h.is_empty()) {
            for msg in names::dns1123_label(h) {
                errs.push(FieldError::invalid(
                    ep_path.child("hostname"),
                    &json!(h),
                    msg,
                ));
            }
        }
    }
    let mut port_names = HashSet::new();
    for (i, p) in arr_at(obj, "ports").iter().enumerate() {
        let pp = Path::new("ports").index(i);
        let name = str_at(p, "name").unwrap_or_default();
        if !name.is_empty() {
            for msg in names::dns1123_label(name) {
                errs.push(FieldError::invalid(pp.child("name"), &json!(name), msg));
            }
        }
        if !port_names.insert(name) {
            errs.push(FieldError::duplicate(pp.child("name"), &json!(name)));
        }
        protocol(p, &pp, &mut errs);
        if let Some(port) = i64_at(p, "port") {
            for msg in names::port_num(port) {
                errs.push(FieldError::invalid(pp.child("port"), &json!(port), msg));
            }
        }
    }
    match address_type {
        "" => errs.push(FieldError::required("addressType", "")),
        "IPv4" | "IPv6" | "FQDN" => {}
        other => errs.push(FieldError::not_supported(
            "addressType",
            &json!(other),
            &["FQDN", "IPv4", "IPv6"],
        )),
    }
    errs
}

/// Upstream `ValidateEndpointSliceUpdate`: `addressType` is immutable.
pub fn validate_endpoint_slice_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_endpoint_slice(new);
    errs.extend(immutable(
        new.get("addressType"),
        old.get("addressType"),
        &Path::new("addressType"),
    ));
    errs
}
