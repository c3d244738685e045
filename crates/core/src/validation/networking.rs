//! networking.k8s.io/v1 validation: Ingress (spec and status), IngressClass and NetworkPolicy.
//!
//! Mirrors upstream `pkg/apis/networking/validation/validation.go`: `ValidateIngressCreate`,
//! `ValidateIngressUpdate` (with the old object's allowances for invalid TLS secret names and
//! invalid rules under wildcard hosts), `ValidateIngressSpec`, `validateIngressBackend`,
//! `validateHTTPIngressPath`, `ValidateIngressStatusUpdate`, `ValidateIngressClass`,
//! `ValidateIngressClassUpdate`, `validateIngressClassParametersReference`,
//! `ValidateNetworkPolicy`, `ValidateNetworkPolicyPort`, `ValidateNetworkPolicyPeer` and
//! `ValidateIPBlock`, plus apimachinery's `IsWildcardDNS1123Subdomain` and
//! `IsDomainPrefixedPath`.
//!
//! Where upstream renders a Go value with `%#v`, the nil rule list of an Ingress reads
//! `[]networking.IngressRule(nil)` as it does upstream.

use serde_json::{Value, json};

use super::apps::validate_label_selector;
use super::json::{arr_at, i64_at, path as jpath, str_at};
use super::meta::{immutable, too_long};
use super::names;
use crate::field::{FieldError, Path};

/// The deprecated annotation naming an Ingress's class.
const ANNOTATION_INGRESS_CLASS: &str = "kubernetes.io/ingress.class";
/// Upstream `maxLenIngressClassController`.
const MAX_LEN_INGRESS_CLASS_CONTROLLER: usize = 250;
const INVALID_PATH_SEQUENCES: &[&str] = &["//", "/./", "/../", "%2f", "%2F"];
const INVALID_PATH_SUFFIXES: &[&str] = &["/..", "/."];
const PATH_TYPES: &[&str] = &["Exact", "ImplementationSpecific", "Prefix"];
const WILDCARD_DNS1123_SUBDOMAIN_FMT: &str =
    "\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const WILDCARD_DNS1123_SUBDOMAIN_MSG: &str = "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character";
const HTTP_PATH_FMT: &str = "[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+";
const CIDR_ERROR: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";
const IP_ERROR: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

fn invalid_each(msgs: Vec<String>, path: &Path, value: &str, errs: &mut Vec<FieldError>) {
    for msg in msgs {
        errs.push(FieldError::invalid(path, &json!(value), msg));
    }
}

/// Upstream `IsWildcardDNS1123Subdomain`.
pub fn wildcard_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(names::max_len_error(253));
    }
    let ok = s
        .strip_prefix("*.")
        .is_some_and(|rest| names::dns1123_subdomain(rest).is_empty());
    if !ok {
        errs.push(names::regex_error(
            WILDCARD_DNS1123_SUBDOMAIN_MSG,
            WILDCARD_DNS1123_SUBDOMAIN_FMT,
            &["*.example.com"],
        ));
    }
    errs
}

/// A host (or TLS host): wildcard hosts follow the wildcard format, others are subdomains.
fn validate_host(host: &str, path: &Path, errs: &mut Vec<FieldError>) -> bool {
    if host.contains('*') {
        invalid_each(wildcard_dns1123_subdomain(host), path, host, errs);
        true
    } else {
        invalid_each(names::dns1123_subdomain(host), path, host, errs);
        false
    }
}

/// `netutils.ParseIPSloppy`: IPv4 octets may carry leading zeros.
fn parse_ip_sloppy(s: &str) -> Option<std::net::IpAddr> {
    if s.contains(':') {
        return s.parse::<std::net::Ipv6Addr>().ok().map(Into::into);
    }
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (o, p) in octets.iter_mut().zip(&parts) {
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        *o = p.parse().ok()?;
    }
    Some(std::net::Ipv4Addr::from(octets).into())
}

/// A parsed CIDR: the masked network address (as a 128-bit number in its family), the prefix
/// length and whether it is IPv6 (`netutils.ParseCIDRSloppy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cidr {
    v6: bool,
    network: u128,
    prefix: u32,
}

impl Cidr {
    fn parse(s: &str) -> Option<Cidr> {
        let (ip, bits) = s.split_once('/')?;
        if bits.is_empty() || !bits.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let prefix: u32 = bits.parse().ok()?;
        let (v6, addr, width) = match parse_ip_sloppy(ip)? {
            std::net::IpAddr::V4(a) => (false, u128::from(u32::from(a)), 32),
            std::net::IpAddr::V6(a) => (true, u128::from(a), 128),
        };
        if prefix > width {
            return None;
        }
        Some(Cidr {
            v6,
            network: addr & Self::mask(prefix, width),
            prefix,
        })
    }

    fn width(self) -> u32 {
        if self.v6 { 128 } else { 32 }
    }

    fn mask(prefix: u32, width: u32) -> u128 {
        if prefix == 0 {
            return 0;
        }
        let all = if width == 128 {
            u128::MAX
        } else {
            (1u128 << width) - 1
        };
        all & !((1u128 << (width - prefix)) - 1)
    }

    /// `IPNet.Contains` for another network's address.
    fn contains(self, other: Cidr) -> bool {
        self.v6 == other.v6 && other.network & Self::mask(self.prefix, self.width()) == self.network
    }
}

// ---------------------------------------------------------------------------------------------
// Ingress

/// The allowances an update gets from the stored object (upstream `IngressValidationOptions`).
#[derive(Debug, Clone, Copy, Default)]
struct IngressOptions {
    allow_invalid_secret_name: bool,
    allow_invalid_wildcard_host_rule: bool,
}

fn validate_typed_local_object_reference(r: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    if let Some(group) = str_at(r, "apiGroup") {
        invalid_each(
            names::dns1123_subdomain(group),
            &path.child("apiGroup"),
            group,
            errs,
        );
    }
    for key in ["kind", "name"] {
        let v = str_at(r, key).unwrap_or_default();
        if v.is_empty() {
            errs.push(FieldError::required(path.child(key), ""));
        } else {
            invalid_each(names::path_segment_name(v), &path.child(key), v, errs);
        }
    }
}

/// Upstream `validateIngressBackend`: exactly one of a resource or a service backend; a service
/// backend names a DNS-1035 service and exactly one of a port name or number.
fn validate_backend(backend: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let resource = backend.get("resource").filter(|v| !v.is_null());
    let service = backend.get("service").filter(|v| !v.is_null());
    match (resource, service) {
        (Some(_), Some(_)) => errs.push(FieldError::invalid(
            path,
            &json!(""),
            "cannot set both resource and service backends",
        )),
        (Some(r), None) => validate_typed_local_object_reference(r, &path.child("resource"), errs),
        (None, Some(svc)) => {
            let sp = path.child("service");
            let name = str_at(svc, "name").unwrap_or_default();
            if name.is_empty() {
                errs.push(FieldError::required(sp.child("name"), ""));
            } else {
                invalid_each(names::dns1035_label(name), &sp.child("name"), name, errs);
            }
            let null = Value::Null;
            let port = svc.get("port").unwrap_or(&null);
            let port_name = str_at(port, "name").unwrap_or_default();
            let port_number = i64_at(port, "number").unwrap_or(0);
            match (!port_name.is_empty(), port_number != 0) {
                (true, true) => errs.push(FieldError::invalid(
                    path,
                    &json!(""),
                    "cannot set both port name & port number",
                )),
                (true, false) => invalid_each(
                    names::port_name(port_name),
                    &sp.child("port").child("name"),
                    port_name,
                    errs,
                ),
                (false, true) => {
                    for msg in names::port_num(port_number) {
                        errs.push(FieldError::invalid(
                            sp.child("port").child("number"),
                            &json!(port_number),
                            msg,
                        ));
                    }
                }
                (false, false) => errs.push(FieldError::required(
                    path,
                    "port name or number is required",
                )),
            }
        }
        (None, None) => errs.push(FieldError::invalid(
            path,
            &json!(""),
            "resource or service backend is required",
        )),
    }
}

/// Upstream `validateHTTPIngressPath`.
fn validate_http_path(p: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    // The typed decoding (k8s-openapi) turns a missing pathType into "": both read as unset.
    let Some(path_type) = str_at(p, "pathType").filter(|t| !t.is_empty()) else {
        errs.push(FieldError::required(
            path.child("pathType"),
            "pathType must be specified",
        ));
        return;
    };
    let value = str_at(p, "path").unwrap_or_default();
    let pp = path.child("path");
    match path_type {
        "Exact" | "Prefix" => {
            if !value.starts_with('/') {
                errs.push(FieldError::invalid(
                    &pp,
                    &json!(value),
                    "must be an absolute path",
                ));
            }
            if !value.is_empty() {
                for seq in INVALID_PATH_SEQUENCES {
                    if value.contains(seq) {
                        errs.push(FieldError::invalid(
                            &pp,
                            &json!(value),
                            format!("must not contain '{seq}'"),
                        ));
                    }
                }
                for suffix in INVALID_PATH_SUFFIXES {
                    if value.ends_with(suffix) {
                        errs.push(FieldError::invalid(
                            &pp,
                            &json!(value),
                            format!("cannot end with '{suffix}'"),
                        ));
                    }
                }
            }
        }
        "ImplementationSpecific" => {
            if !value.is_empty() && !value.starts_with('/') {
                errs.push(FieldError::invalid(
                    &pp,
                    &json!(value),
                    "must be an absolute path",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            path.child("pathType"),
            &json!(other),
            PATH_TYPES,
        )),
    }
    let null = Value::Null;
    validate_backend(
        p.get("backend").unwrap_or(&null),
        &path.child("backend"),
        errs,
    );
}

/// Upstream `validateIngressRuleValue`: an `http` rule needs at least one valid path.
fn validate_rule_value(rule: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let Some(http) = rule.get("http").filter(|v| !v.is_null()) else {
        return;
    };
    let hp = path.child("http");
    let paths = arr_at(http, "paths");
    if paths.is_empty() {
        errs.push(FieldError::required(hp.child("paths"), ""));
    }
    for (i, p) in paths.iter().enumerate() {
        validate_http_path(p, &hp.child("paths").index(i), errs);
    }
}

fn rule_value_errors(rule: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_rule_value(rule, &Path::default(), &mut errs);
    errs
}

/// Upstream `ValidateIngressSpec`.
fn validate_ingress_spec(spec: &Value, opts: IngressOptions) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let path = Path::new("spec");
    let rules = arr_at(spec, "rules");
    let default_backend = spec.get("defaultBackend").filter(|v| !v.is_null());
    if rules.is_empty() && default_backend.is_none() {
        let rendered = if spec.get("rules").is_some_and(Value::is_array) {
            "[]networking.IngressRule{}"
        } else {
            "[]networking.IngressRule(nil)"
        };
        errs.push(FieldError::new(
            crate::field::ErrorKind::Invalid,
            &path,
            Some(rendered.to_string()),
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(b) = default_backend {
        validate_backend(b, &path.child("defaultBackend"), &mut errs);
    }
    for (i, rule) in rules.iter().enumerate() {
        let rp = path.child("rules").index(i);
        let host = str_at(rule, "host").unwrap_or_default();
        let mut wildcard = false;
        if !host.is_empty() {
            if parse_ip_sloppy(host).is_some() {
                errs.push(FieldError::invalid(
                    rp.child("host"),
                    &json!(host),
                    "must be a DNS name, not an IP address",
                ));
            }
            wildcard = validate_host(host, &rp.child("host"), &mut errs);
        }
        if !wildcard || !opts.allow_invalid_wildcard_host_rule {
            validate_rule_value(rule, &rp, &mut errs);
        }
    }
    for (t, tls) in arr_at(spec, "tls").iter().enumerate() {
        let tp = path.child("tls").index(t);
        for (i, host) in arr_at(tls, "hosts").iter().enumerate() {
            let host = host.as_str().unwrap_or_default();
            validate_host(host, &tp.child("hosts").index(i), &mut errs);
        }
        let secret = str_at(tls, "secretName").unwrap_or_default();
        if !opts.allow_invalid_secret_name && !secret.is_empty() {
            invalid_each(
                names::dns1123_subdomain(secret),
                &tp.child("secretName"),
                secret,
                &mut errs,
            );
        }
    }
    if let Some(class) = str_at(spec, "ingressClassName") {
        invalid_each(
            names::dns1123_subdomain(class),
            &path.child("ingressClassName"),
            class,
            &mut errs,
        );
    }
    errs
}

/// Upstream `ValidateIngressCreate` (after metadata): the spec, and the class annotation must
/// agree with `ingressClassName` when both are set.
pub fn validate_ingress(obj: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let mut errs = validate_ingress_spec(spec, IngressOptions::default());
    let annotation =
        jpath(obj, &["metadata", "annotations", ANNOTATION_INGRESS_CLASS]).and_then(Value::as_str);
    if let (Some(a), Some(class)) = (annotation, str_at(spec, "ingressClassName"))
        && a != class
    {
        errs.push(FieldError::invalid(
            Path::new("annotations").child(ANNOTATION_INGRESS_CLASS),
            &json!(a),
            "must match `ingressClassName` when both are specified",
        ));
    }
    errs
}

/// Upstream `ValidateIngressUpdate`: the spec again, tolerating what the stored object already
/// had (invalid TLS secret names, invalid rules under wildcard hosts).
pub fn validate_ingress_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    let old_spec = old.get("spec").unwrap_or(&null);
    let opts = IngressOptions {
        allow_invalid_secret_name: arr_at(old_spec, "tls").iter().any(|t| {
            let s = str_at(t, "secretName").unwrap_or_default();
            !s.is_empty() && !names::dns1123_subdomain(s).is_empty()
        }),
        allow_invalid_wildcard_host_rule: arr_at(old_spec, "rules").iter().any(|r| {
            str_at(r, "host").unwrap_or_default().contains('*') && !rule_value_errors(r).is_empty()
        }),
    };
    validate_ingress_spec(new.get("spec").unwrap_or(&null), opts)
}

/// Upstream `ValidateIngressStatusUpdate`: load-balancer ingress points carry valid IPs and
/// DNS (not IP) hostnames.
pub fn validate_ingress_status(new: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let lb = jpath(new, &["status", "loadBalancer"]).unwrap_or(&Value::Null);
    let path = Path::new("status").child("loadBalancer").child("ingress");
    for (i, ing) in arr_at(lb, "ingress").iter().enumerate() {
        let p = path.index(i);
        let ip = str_at(ing, "ip").unwrap_or_default();
        if !ip.is_empty() && parse_ip_sloppy(ip).is_none() {
            errs.push(FieldError::invalid(p.child("ip"), &json!(ip), IP_ERROR));
        }
        let host = str_at(ing, "hostname").unwrap_or_default();
        if !host.is_empty() {
            invalid_each(
                names::dns1123_subdomain(host),
                &p.child("hostname"),
                host,
                &mut errs,
            );
            if parse_ip_sloppy(host).is_some() {
                errs.push(FieldError::invalid(
                    p.child("hostname"),
                    &json!(host),
                    "must be a DNS name, not an IP address",
                ));
            }
        }
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// IngressClass

/// Upstream `IsDomainPrefixedPath`: `<dns-subdomain>/<http path>`.
fn domain_prefixed_path(value: &str, path: &Path, errs: &mut Vec<FieldError>) {
    let Some((host, rest)) = value
        .split_once('/')
        .filter(|(h, r)| !h.is_empty() && !r.is_empty())
    else {
        errs.push(FieldError::invalid(
            path,
            &json!(value),
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        ));
        return;
    };
    invalid_each(names::dns1123_subdomain(host), path, host, errs);
    let path_ok = rest
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"/-._~%!$&'()*+,;=:".contains(&c));
    if !path_ok {
        errs.push(FieldError::invalid(
            path,
            &json!(rest),
            names::regex_error("must be a valid path", HTTP_PATH_FMT, &[]),
        ));
    }
}

/// Upstream `validateIngressClassParametersReference`.
fn validate_parameters_reference(params: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    if let Some(group) = str_at(params, "apiGroup") {
        invalid_each(
            names::dns1123_subdomain(group),
            &path.child("apiGroup"),
            group,
            errs,
        );
    }
    for key in ["kind", "name"] {
        let v = str_at(params, key).unwrap_or_default();
        if v.is_empty() {
            errs.push(FieldError::required(path.child(key), ""));
        } else {
            invalid_each(names::path_segment_name(v), &path.child(key), v, errs);
        }
    }
    let Some(scope) = str_at(params, "scope") else {
        errs.push(FieldError::required(path.child("scope"), ""));
        return;
    };
    let namespace = str_at(params, "namespace");
    match scope {
        "Namespace" => match namespace {
            None => errs.push(FieldError::required(
                path.child("namespace"),
                "`parameters.scope` is set to 'Namespace'",
            )),
            Some(ns) => invalid_each(names::dns1123_label(ns), &path.child("namespace"), ns, errs),
        },
        "Cluster" => {
            if namespace.is_some() {
                errs.push(FieldError::forbidden(
                    path.child("namespace"),
                    "`parameters.scope` is set to 'Cluster'",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            path.child("scope"),
            &json!(other),
            &["Cluster", "Namespace"],
        )),
    }
}

/// Upstream `ValidateIngressClass` (after metadata): a domain-prefixed controller of at most
/// 250 bytes and a valid parameters reference.
pub fn validate_ingress_class(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let path = Path::new("spec");
    let controller = str_at(spec, "controller").unwrap_or_default();
    let cp = path.child("controller");
    if controller.is_empty() {
        errs.push(FieldError::required(&cp, ""));
    } else {
        if controller.len() > MAX_LEN_INGRESS_CLASS_CONTROLLER {
            errs.push(too_long(&cp, MAX_LEN_INGRESS_CLASS_CONTROLLER));
        }
        domain_prefixed_path(controller, &cp, &mut errs);
    }
    if let Some(params) = spec.get("parameters").filter(|p| !p.is_null()) {
        validate_parameters_reference(params, &path.child("parameters"), &mut errs);
    }
    errs
}

/// Upstream `ValidateIngressClassUpdate`: the controller is immutable.
pub fn validate_ingress_class_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let get = |o: &Value| jpath(o, &["spec", "controller"]).cloned();
    let mut errs: Vec<FieldError> = immutable(
        get(new).as_ref(),
        get(old).as_ref(),
        &Path::new("spec").child("controller"),
    )
    .into_iter()
    .collect();
    errs.extend(validate_ingress_class(new));
    errs
}

// ---------------------------------------------------------------------------------------------
// NetworkPolicy

/// Upstream `ValidateNetworkPolicyPort`.
fn validate_np_port(port: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    if let Some(proto) = str_at(port, "protocol")
        && !matches!(proto, "TCP" | "UDP" | "SCTP")
    {
        errs.push(FieldError::not_supported(
            path.child("protocol"),
            &json!(proto),
            &["TCP", "UDP", "SCTP"],
        ));
    }
    let end_port = i64_at(port, "endPort");
    match port.get("port").filter(|v| !v.is_null()) {
        Some(Value::Number(n)) => {
            let p = n.as_i64().unwrap_or(-1);
            for msg in names::port_num(p) {
                errs.push(FieldError::invalid(path.child("port"), &json!(p), msg));
            }
            if let Some(end) = end_port {
                if end < p {
                    errs.push(FieldError::invalid(
                        path.child("endPort"),
                        &json!(end),
                        "must be greater than or equal to `port`",
                    ));
                }
                for msg in names::port_num(end) {
                    errs.push(FieldError::invalid(path.child("endPort"), &json!(end), msg));
                }
            }
        }
        Some(other) => {
            if let Some(end) = end_port {
                errs.push(FieldError::invalid(
                    path.child("endPort"),
                    &json!(end),
                    "may not be specified when `port` is non-numeric",
                ));
            }
            let name = other.as_str().unwrap_or_default();
            invalid_each(names::port_name(name), &path.child("port"), name, errs);
        }
        None => {
            if let Some(end) = end_port {
                errs.push(FieldError::invalid(
                    path.child("endPort"),
                    &json!(end),
                    "may not be specified when `port` is not specified",
                ));
            }
        }
    }
}

/// Upstream `ValidateIPBlock`: a valid CIDR, and each `except` a strict subset of it.
fn validate_ip_block(block: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let cidr = str_at(block, "cidr").unwrap_or_default();
    if cidr.is_empty() {
        errs.push(FieldError::required(path.child("cidr"), ""));
        return;
    }
    let Some(net) = Cidr::parse(cidr) else {
        errs.push(FieldError::invalid(
            path.child("cidr"),
            &json!(cidr),
            CIDR_ERROR,
        ));
        return;
    };
    for (i, except) in arr_at(block, "except").iter().enumerate() {
        let ep = path.child("except").index(i);
        let except = except.as_str().unwrap_or_default();
        let Some(inner) = Cidr::parse(except) else {
            errs.push(FieldError::invalid(&ep, &json!(except), CIDR_ERROR));
            continue;
        };
        if !net.contains(inner) || net.prefix >= inner.prefix {
            errs.push(FieldError::invalid(
                &ep,
                &json!(except),
                "must be a strict subset of `cidr`",
            ));
        }
    }
}

/// Upstream `ValidateNetworkPolicyPeer`: at least one selector or an ipBlock, and an ipBlock
/// alone.
fn validate_peer(peer: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let mut count = 0;
    for key in ["podSelector", "namespaceSelector"] {
        if let Some(sel) = peer.get(key).filter(|v| !v.is_null()) {
            count += 1;
            errs.extend(validate_label_selector(sel, &path.child(key)));
        }
    }
    let ip_block = peer.get("ipBlock").filter(|v| !v.is_null());
    if let Some(block) = ip_block {
        count += 1;
        validate_ip_block(block, &path.child("ipBlock"), errs);
    }
    if count == 0 {
        errs.push(FieldError::required(path, "must specify a peer"));
    } else if count > 1 && ip_block.is_some() {
        errs.push(FieldError::forbidden(
            path,
            "may not specify both ipBlock and another peer",
        ));
    }
}

/// Upstream `ValidateNetworkPolicySpec`: the pod selector, every rule's ports and peers, and at
/// most the two known policy types.
pub fn validate_network_policy(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let path = Path::new("spec");
    errs.extend(validate_label_selector(
        spec.get("podSelector").unwrap_or(&null),
        &path.child("podSelector"),
    ));
    for (rules_key, peers_key) in [("ingress", "from"), ("egress", "to")] {
        for (i, rule) in arr_at(spec, rules_key).iter().enumerate() {
            let rp = path.child(rules_key).index(i);
            for (j, port) in arr_at(rule, "ports").iter().enumerate() {
                validate_np_port(port, &rp.child("ports").index(j), &mut errs);
            }
            for (j, peer) in arr_at(rule, peers_key).iter().enumerate() {
                validate_peer(peer, &rp.child(peers_key).index(j), &mut errs);
            }
        }
    }
    let types = arr_at(spec, "policyTypes");
    if types.len() > 2 {
        let list: Vec<String> = types
            .iter()
            .map(|t| format!("{:?}", t.as_str().unwrap_or_default()))
            .collect();
        errs.push(FieldError::new(
            crate::field::ErrorKind::Invalid,
            path.child("policyTypes"),
            Some(format!("[{}]", list.join(","))),
            "may not specify more than two policyTypes",
        ));
        return errs;
    }
    for (i, t) in types.iter().enumerate() {
        let t = t.as_str().unwrap_or_default();
        if t != "Ingress" && t != "Egress" {
            errs.push(FieldError::not_supported(
                path.child("policyTypes").index(i),
                &json!(t),
                &["Ingress", "Egress"],
            ));
        }
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// Defaulting

/// Upstream `SetDefaults_NetworkPolicy` and `SetDefaults_NetworkPolicyPort` (networking/v1):
/// ports default to TCP; `policyTypes` defaults to `[Ingress]`, plus `Egress` when egress
/// rules are present.
pub fn default_network_policy(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    for rules_key in ["ingress", "egress"] {
        super::json::each_mut(spec, rules_key, |rule| {
            super::json::each_mut(rule, "ports", |p| {
                super::json::set_default(p, "protocol", json!("TCP"))
            })
        });
    }
    if arr_at(spec, "policyTypes").is_empty() {
        let mut types = vec![json!("Ingress")];
        if !arr_at(spec, "egress").is_empty() {
            types.push(json!("Egress"));
        }
        if let Some(m) = spec.as_object_mut() {
            m.insert("policyTypes".into(), Value::Array(types));
        }
    }
}

/// Upstream `SetDefaults_IngressClass`: a parameters reference without a scope is
/// cluster-scoped.
pub fn default_ingress_class(obj: &mut Value) {
    if let Some(params) = obj
        .get_mut("spec")
        .and_then(|s| s.get_mut("parameters"))
        .filter(|p| p.is_object())
    {
        super::json::set_default(params, "scope", json!("Cluster"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ingress(spec: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn svc_backend(name: &str, port: Value) -> Value {
        json!({"service": {"name": name, "port": port}})
    }

    #[test]
    fn ingress_without_rules_or_default_backend_is_rejected_like_upstream() {
        let errs = validate_ingress(&ingress(json!({})));
        assert_eq!(
            messages(&errs),
            [
                "spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified"
            ]
        );
    }

    #[test]
    fn valid_ingress_with_prefix_path_and_tls_passes() {
        let spec = json!({
            "ingressClassName": "nginx",
            "rules": [{"host": "*.example.com", "http": {"paths": [
                {"path": "/api", "pathType": "Prefix", "backend": svc_backend("api", json!({"number": 80}))},
                {"pathType": "ImplementationSpecific", "backend": svc_backend("web", json!({"name": "http"}))},
            ]}}],
            "tls": [{"hosts": ["*.example.com"], "secretName": "tls-cert"}],
        });
        assert_eq!(
            messages(&validate_ingress(&ingress(spec))),
            Vec::<String>::new()
        );
    }

    #[test]
    fn ingress_paths_and_backends_report_upstream_field_paths() {
        let spec = json!({"rules": [{"host": "10.0.0.1", "http": {"paths": [
            {"path": "api", "pathType": "Exact", "backend": svc_backend("api", json!({}))},
            {"path": "/a//b/..", "pathType": "Prefix", "backend": svc_backend("Api", json!({"name": "http", "number": 80}))},
            {"path": "/", "pathType": "Regex", "backend": {}},
            {"path": "/", "backend": svc_backend("x", json!({"number": 70000}))},
        ]}}]});
        let got = messages(&validate_ingress(&ingress(spec)));
        assert_eq!(
            got[0],
            "spec.rules[0].host: Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address"
        );
        assert!(got.contains(&"spec.rules[0].http.paths[0].path: Invalid value: \"api\": must be an absolute path".to_string()));
        assert!(got.contains(&"spec.rules[0].http.paths[0].backend: Required value: port name or number is required".to_string()));
        assert!(got.contains(&"spec.rules[0].http.paths[1].path: Invalid value: \"/a//b/..\": must not contain '//'".to_string()));
        assert!(got.contains(&"spec.rules[0].http.paths[1].path: Invalid value: \"/a//b/..\": cannot end with '/..'".to_string()));
        assert!(got.contains(&"spec.rules[0].http.paths[1].backend: Invalid value: \"\": cannot set both port name & port number".to_string()));
        assert!(got.iter().any(|m| m.starts_with("spec.rules[0].http.paths[1].backend.service.name: Invalid value: \"Api\": a DNS-1035 label")));
        assert!(got.contains(&"spec.rules[0].http.paths[2].pathType: Unsupported value: \"Regex\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\"".to_string()));
        assert!(got.contains(&"spec.rules[0].http.paths[2].backend: Invalid value: \"\": resource or service backend is required".to_string()));
        assert!(
            got.contains(
                &"spec.rules[0].http.paths[3].pathType: Required value: pathType must be specified"
                    .to_string()
            )
        );
        // A missing pathType stops the path's checks, as upstream returns early.
        assert!(!got.iter().any(|m| m.contains("paths[3].backend")));
    }

    #[test]
    fn ingress_class_annotation_must_match_class_name() {
        let mut obj = ingress(
            json!({"ingressClassName": "a", "defaultBackend": svc_backend("x", json!({"number": 80}))}),
        );
        obj["metadata"]["annotations"] = json!({"kubernetes.io/ingress.class": "b"});
        assert_eq!(
            messages(&validate_ingress(&obj)),
            [
                "annotations.kubernetes.io/ingress.class: Invalid value: \"b\": must match `ingressClassName` when both are specified"
            ]
        );
    }

    #[test]
    fn ingress_update_tolerates_an_invalid_secret_name_already_stored() {
        let spec = json!({"defaultBackend": svc_backend("x", json!({"number": 80})), "tls": [{"secretName": "Bad_Name"}]});
        let obj = ingress(spec);
        assert_eq!(validate_ingress(&obj).len(), 1);
        assert!(validate_ingress_update(&obj, &obj).is_empty());
    }

    #[test]
    fn ingress_status_rejects_ip_hostnames_and_bad_ips() {
        let obj = json!({"status": {"loadBalancer": {"ingress": [{"ip": "1.2.3"}, {"hostname": "1.2.3.4"}]}}});
        assert_eq!(
            messages(&validate_ingress_status(&obj)),
            [
                "status.loadBalancer.ingress[0].ip: Invalid value: \"1.2.3\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                "status.loadBalancer.ingress[1].hostname: Invalid value: \"1.2.3.4\": must be a DNS name, not an IP address",
            ]
        );
    }

    #[test]
    fn ingress_class_controller_is_required_domain_prefixed_and_immutable() {
        let ic = |c: &str| json!({"metadata": {"name": "nginx"}, "spec": {"controller": c}});
        assert_eq!(
            messages(&validate_ingress_class(&ic(""))),
            ["spec.controller: Required value"]
        );
        assert_eq!(
            messages(&validate_ingress_class(&ic("nginx"))),
            [
                "spec.controller: Invalid value: \"nginx\": must be a domain-prefixed path (such as \"acme.io/foo\")"
            ]
        );
        assert!(validate_ingress_class(&ic("k8s.io/ingress-nginx")).is_empty());
        assert_eq!(
            messages(&validate_ingress_class_update(
                &ic("k8s.io/b"),
                &ic("k8s.io/a")
            )),
            ["spec.controller: Invalid value: \"k8s.io/b\": field is immutable"]
        );
    }

    #[test]
    fn ingress_class_parameters_scope_rules() {
        let with = |p: Value| json!({"spec": {"controller": "k8s.io/x", "parameters": p}});
        let mut obj = with(json!({"kind": "Cfg", "name": "c"}));
        default_ingress_class(&mut obj);
        assert_eq!(obj["spec"]["parameters"]["scope"], "Cluster");
        assert!(validate_ingress_class(&obj).is_empty());
        assert_eq!(
            messages(&validate_ingress_class(&with(
                json!({"kind": "Cfg", "name": "c", "scope": "Namespace"})
            ))),
            ["spec.parameters.namespace: Required value: `parameters.scope` is set to 'Namespace'"]
        );
        assert_eq!(
            messages(&validate_ingress_class(&with(
                json!({"kind": "Cfg", "name": "c", "scope": "Cluster", "namespace": "x"})
            ))),
            ["spec.parameters.namespace: Forbidden: `parameters.scope` is set to 'Cluster'"]
        );
    }

    #[test]
    fn network_policy_defaults_policy_types_and_protocols() {
        let mut np = json!({"spec": {"podSelector": {}, "egress": [{"ports": [{"port": 53}]}]}});
        default_network_policy(&mut np);
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(np["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
        let mut only_ingress = json!({"spec": {"podSelector": {}}});
        default_network_policy(&mut only_ingress);
        assert_eq!(only_ingress["spec"]["policyTypes"], json!(["Ingress"]));
    }

    #[test]
    fn network_policy_ports_peers_and_ip_blocks_follow_upstream() {
        let np = json!({"spec": {"podSelector": {}, "ingress": [{
            "ports": [{"port": 80, "endPort": 70}, {"port": "http", "endPort": 90}, {"protocol": "ICMP"}],
            "from": [
                {},
                {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}},
                {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "11.0.0.0/16", "10.0.0.0/8", "bad"]}},
                {"ipBlock": {"cidr": "10.0.0.0/33"}},
            ],
        }]}});
        assert_eq!(
            messages(&validate_network_policy(&np)),
            [
                "spec.ingress[0].ports[0].endPort: Invalid value: 70: must be greater than or equal to `port`",
                "spec.ingress[0].ports[1].endPort: Invalid value: 90: may not be specified when `port` is non-numeric",
                "spec.ingress[0].ports[2].protocol: Unsupported value: \"ICMP\": supported values: \"TCP\", \"UDP\", \"SCTP\"",
                "spec.ingress[0].from[0]: Required value: must specify a peer",
                "spec.ingress[0].from[1]: Forbidden: may not specify both ipBlock and another peer",
                "spec.ingress[0].from[2].ipBlock.except[1]: Invalid value: \"11.0.0.0/16\": must be a strict subset of `cidr`",
                "spec.ingress[0].from[2].ipBlock.except[2]: Invalid value: \"10.0.0.0/8\": must be a strict subset of `cidr`",
                "spec.ingress[0].from[2].ipBlock.except[3]: Invalid value: \"bad\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                "spec.ingress[0].from[3].ipBlock.cidr: Invalid value: \"10.0.0.0/33\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ]
        );
    }

    #[test]
    fn network_policy_types_are_limited_to_ingress_and_egress() {
        let np = json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress", "Sideways"]}});
        assert_eq!(
            messages(&validate_network_policy(&np)),
            [
                "spec.policyTypes[1]: Unsupported value: \"Sideways\": supported values: \"Ingress\", \"Egress\""
            ]
        );
    }

    #[test]
    fn ipv6_cidr_containment() {
        let outer = Cidr::parse("2001:db8::/32").expect("cidr");
        let inner = Cidr::parse("2001:db8:1::/48").expect("cidr");
        assert!(outer.contains(inner));
        assert!(!inner.contains(outer));
        assert!(Cidr::parse("010.0.0.0/8").is_some());
    }
}
