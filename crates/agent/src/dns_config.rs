//! The resolver configuration (`/etc/resolv.conf`) a pod gets from its `dnsPolicy` and
//! `dnsConfig`, formed as the kubelet forms it (`pkg/kubelet/network/dns/dns.go`:
//! `Configurer.GetPodDNS`, `getPodDNSType`, `appendDNSConfig`, `mergeDNSOptions` and the
//! `formDNS*FitsLimits` trimming).
//!
//! No I/O: the node's resolv.conf comes in as text, and the warnings the kubelet records as pod
//! events come back for the caller to record.
//!
//! | `dnsPolicy` | nameservers | search | options |
//! |---|---|---|---|
//! | `ClusterFirst` (the default) | the node's cluster DNS IPs | `<ns>.svc.<domain>`, `svc.<domain>`, `<domain>`, then the node's | `ndots:5` |
//! | `ClusterFirst` with `hostNetwork` | as `Default` | | |
//! | `ClusterFirstWithHostNet` | as `ClusterFirst`, also with `hostNetwork` | | |
//! | `Default` | the node's resolv.conf | the node's | the node's |
//! | `None` | nothing | nothing | nothing |
//!
//! A `ClusterFirst` pod on a node without cluster DNS falls back to `Default` with a
//! `MissingClusterDNS` warning. `dnsConfig` is then merged in (nameservers and searches appended
//! without duplicates, options replaced by name), and the result is trimmed to what resolvers
//! accept, with a `DNSConfigForming` warning when something had to go.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Pod, PodDNSConfig, PodDNSConfigOption, PodSpec};

/// At most this many nameservers are kept (upstream `MaxDNSNameservers`; glibc reads no more).
pub const MAX_NAMESERVERS: usize = 3;
/// At most this many search domains are kept (upstream `MaxDNSSearchPaths`).
pub const MAX_SEARCH_PATHS: usize = 32;
/// The longest search line kept, domains joined by single spaces (`MaxDNSSearchListChars`).
pub const MAX_SEARCH_LINE_CHARS: usize = 2048;
/// Longer search domains are dropped: a DNS-1123 subdomain's limit, past which some resolvers
/// (glibc 2.28) abort.
pub const MAX_SEARCH_DOMAIN_CHARS: usize = 253;
/// The kubelet reads at most this much of the node's resolv.conf (`maxResolveConfLength`).
pub const MAX_RESOLV_CONF_BYTES: u64 = 10 << 20;
/// The kubelet's default `--cluster-domain` in tandem (upstream has none; every installer sets
/// this one).
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
/// The kubelet's default `--resolv-conf`.
pub const DEFAULT_RESOLV_CONF: &str = "/etc/resolv.conf";
/// The options of a pod using cluster DNS (upstream `defaultDNSOptions`).
const CLUSTER_FIRST_OPTIONS: [&str; 1] = ["ndots:5"];

/// The event reason for lists trimmed to the limits.
pub const REASON_DNS_CONFIG_FORMING: &str = "DNSConfigForming";
/// The event reason for a `ClusterFirst` pod on a node without cluster DNS.
pub const REASON_MISSING_CLUSTER_DNS: &str = "MissingClusterDNS";

/// Why a pod's DNS settings cannot be formed. Like the kubelet, this fails the pod's sandbox
/// whatever its policy.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DnsConfigError {
    /// A `nameserver` line without an address in the node's resolv.conf.
    #[error("nameserver list is empty")]
    EmptyNameserver,
}

/// The node's DNS settings: the kubelet's `--cluster-dns` and `--cluster-domain`, and its IPs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeDns {
    /// The cluster DNS servers; empty when the cluster has none, and then `ClusterFirst` pods
    /// fall back to `Default`.
    pub cluster_dns: Vec<IpAddr>,
    /// The cluster's DNS domain (`cluster.local`); empty adds no cluster search domains.
    pub cluster_domain: String,
    /// The node's addresses. Used only without a node resolv.conf (the kubelet's
    /// `--resolv-conf=""`): `Default` pods then ask the loopback resolver of each address family.
    pub node_ips: Vec<IpAddr>,
}

/// The contents of a resolv.conf: what a pod's sandbox is given as its CRI `DNSConfig`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvConf {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    /// `name` or `name:value`.
    pub options: Vec<String>,
}

impl ResolvConf {
    /// Parses resolv.conf text as the kubelet's `parseResolvConf` does: `nameserver` lines
    /// accumulate, the last `search` and the last `options` line win, `#` lines are comments,
    /// other keywords (`domain`, `sortlist`) are ignored, and search domains lose a trailing dot.
    pub fn parse(text: &str) -> Result<ResolvConf, DnsConfigError> {
        let mut conf = ResolvConf::default();
        let mut error = None;
        for line in text.lines().map(str::trim) {
            if line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            match fields.next() {
                Some("nameserver") => match fields.next() {
                    Some(server) => conf.nameservers.push(server.to_string()),
                    None => error = Some(DnsConfigError::EmptyNameserver),
                },
                Some("search") => {
                    conf.searches = fields
                        .map(|d| d.strip_suffix('.').unwrap_or(d))
                        .filter(|d| !d.is_empty())
                        .map(str::to_string)
                        .collect();
                }
                Some("options") => conf.options = fields.map(str::to_string).collect(),
                _ => {}
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(conf),
        }
    }
}

/// Something the kubelet records as a Warning event on the pod while forming its DNS settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsWarning {
    /// [`REASON_DNS_CONFIG_FORMING`] or [`REASON_MISSING_CLUSTER_DNS`].
    pub reason: &'static str,
    pub message: String,
}

/// A pod's DNS settings and the warnings met forming them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDns {
    pub config: ResolvConf,
    pub warnings: Vec<DnsWarning>,
}

/// Which base a pod's DNS settings start from (upstream `podDNSType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodDnsType {
    /// The cluster DNS (`ClusterFirst`, `ClusterFirstWithHostNet`).
    Cluster,
    /// The node's resolv.conf (`Default`, and `ClusterFirst` on the host network).
    Host,
    /// Nothing but `dnsConfig` (`None`).
    None,
}

/// The pod's DNS type, as `getPodDNSType`: `ClusterFirst` on the host network behaves as
/// `Default`. An absent policy is the API's default, `ClusterFirst`; an unknown one (which the
/// API server rejects) is treated as `ClusterFirst`, as the kubelet does.
pub fn pod_dns_type(spec: &PodSpec) -> PodDnsType {
    match spec.dns_policy.as_deref() {
        Some("None") => PodDnsType::None,
        Some("Default") => PodDnsType::Host,
        Some("ClusterFirstWithHostNet") => PodDnsType::Cluster,
        _ if spec.host_network.unwrap_or(false) => PodDnsType::Host,
        _ => PodDnsType::Cluster,
    }
}

/// The pod's DNS settings on `node` (upstream `GetPodDNS`). `host_resolv_conf` is the text of
/// the node's resolv.conf, or `None` for the kubelet's `--resolv-conf=""`. The node's file is
/// parsed whatever the policy, so a malformed one fails every pod, as it does upstream.
pub fn pod_dns(
    pod: &Pod,
    node: &NodeDns,
    host_resolv_conf: Option<&str>,
) -> Result<PodDns, DnsConfigError> {
    let host = host_resolv_conf
        .map(ResolvConf::parse)
        .transpose()?
        .unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let mut warnings = Vec::new();
    let mut config = match pod_dns_type(&spec) {
        PodDnsType::None => ResolvConf::default(),
        PodDnsType::Cluster if !node.cluster_dns.is_empty() => ResolvConf {
            nameservers: node.cluster_dns.iter().map(IpAddr::to_string).collect(),
            searches: cluster_searches(pod, &node.cluster_domain, host.searches),
            options: CLUSTER_FIRST_OPTIONS
                .iter()
                .map(|o| o.to_string())
                .collect(),
        },
        PodDnsType::Cluster => {
            warnings.push(DnsWarning {
                reason: REASON_MISSING_CLUSTER_DNS,
                message: format!(
                    "pod: {:?}. kubelet does not have ClusterDNS IP configured and cannot create \
                     Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
                    pod_ref(pod)
                ),
            });
            host_config(host, node, host_resolv_conf.is_none())
        }
        PodDnsType::Host => host_config(host, node, host_resolv_conf.is_none()),
    };
    if let Some(extra) = &spec.dns_config {
        append_dns_config(&mut config, extra);
    }
    warnings.extend(fit_limits(&mut config));
    Ok(PodDns { config, warnings })
}

/// `name_namespace(uid)`, as the kubelet names a pod in messages (`format.Pod`).
fn pod_ref(pod: &Pod) -> String {
    let meta = &pod.metadata;
    format!(
        "{}_{}({})",
        meta.name.as_deref().unwrap_or_default(),
        meta.namespace.as_deref().unwrap_or("default"),
        meta.uid.as_deref().unwrap_or_default()
    )
}

/// `Default`'s base: the node's resolv.conf, or without one (`--resolv-conf=""`) the loopback
/// resolver of each of the node's address families and the root search domain, which keeps the
/// runtime from copying the node's file (upstream's comment cites BIND's "no nameserver means
/// the local machine").
fn host_config(host: ResolvConf, node: &NodeDns, no_resolv_conf: bool) -> ResolvConf {
    if !no_resolv_conf {
        return host;
    }
    let mut nameservers = host.nameservers;
    for ip in &node.node_ips {
        nameservers.push(if ip.is_ipv6() { "::1" } else { "127.0.0.1" }.to_string());
    }
    if nameservers.is_empty() {
        nameservers.push("127.0.0.1".to_string());
    }
    ResolvConf {
        nameservers: without_duplicates(nameservers),
        searches: vec![".".to_string()],
        options: host.options,
    }
}

/// `<ns>.svc.<domain> svc.<domain> <domain>` followed by the node's search domains, without
/// duplicates (upstream `generateSearchesForDNSClusterFirst`); only the node's without a domain.
fn cluster_searches(pod: &Pod, domain: &str, host_searches: Vec<String>) -> Vec<String> {
    if domain.is_empty() {
        return host_searches;
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut searches = vec![
        format!("{namespace}.svc.{domain}"),
        format!("svc.{domain}"),
        domain.to_string(),
    ];
    searches.extend(host_searches);
    without_duplicates(searches)
}

/// Merges `dnsConfig` into `config` (upstream `appendDNSConfig`).
fn append_dns_config(config: &mut ResolvConf, extra: &PodDNSConfig) {
    config
        .nameservers
        .extend(extra.nameservers.iter().flatten().cloned());
    config.nameservers = without_duplicates(std::mem::take(&mut config.nameservers));
    config
        .searches
        .extend(extra.searches.iter().flatten().cloned());
    config.searches = without_duplicates(std::mem::take(&mut config.searches));
    config.options = merge_options(
        &config.options,
        extra.options.as_deref().unwrap_or_default(),
    );
}

/// Options by name, `dnsConfig`'s replacing the base's (upstream `mergeDNSOptions`). Upstream
/// goes through a Go map, so its order is random; here each name keeps the place where it first
/// appeared, which gives the same set in a stable order. An empty value is written as the name
/// alone, as upstream does.
fn merge_options(base: &[String], extra: &[PodDNSConfigOption]) -> Vec<String> {
    let mut merged: Vec<(String, String)> = Vec::new();
    let mut set = |name: &str, value: &str| match merged.iter_mut().find(|(n, _)| n == name) {
        Some(slot) => slot.1 = value.to_string(),
        None => merged.push((name.to_string(), value.to_string())),
    };
    for option in base {
        let (name, value) = option.split_once(':').unwrap_or((option.as_str(), ""));
        set(name, value);
    }
    for option in extra {
        // The API server requires a name; a nameless option has nothing to set.
        if let Some(name) = option.name.as_deref() {
            set(name, option.value.as_deref().unwrap_or_default());
        }
    }
    merged
        .into_iter()
        .map(|(name, value)| {
            if value.is_empty() {
                name
            } else {
                format!("{name}:{value}")
            }
        })
        .collect()
}

/// The first occurrence of each entry, in order (upstream `omitDuplicates`).
fn without_duplicates(entries: Vec<String>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::with_capacity(entries.len());
    for entry in entries {
        if !kept.contains(&entry) {
            kept.push(entry);
        }
    }
    kept
}

/// Trims `config` to the resolver limits (upstream `formDNSConfigFitsLimits`): the first
/// [`MAX_NAMESERVERS`] nameservers; the first [`MAX_SEARCH_PATHS`] search domains, less those
/// longer than [`MAX_SEARCH_DOMAIN_CHARS`], less as many from the end as make the line fit
/// [`MAX_SEARCH_LINE_CHARS`]. One warning per list that lost entries.
fn fit_limits(config: &mut ResolvConf) -> Vec<DnsWarning> {
    let mut warnings = Vec::new();
    if config.nameservers.len() > MAX_NAMESERVERS {
        config.nameservers.truncate(MAX_NAMESERVERS);
        warnings.push(DnsWarning {
            reason: REASON_DNS_CONFIG_FORMING,
            message: format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the \
                 applied nameserver line is: {}",
                config.nameservers.join(" ")
            ),
        });
    }
    let searches = &mut config.searches;
    let before = searches.len();
    searches.truncate(MAX_SEARCH_PATHS);
    searches.retain(|d| d.len() <= MAX_SEARCH_DOMAIN_CHARS);
    let mut line = line_length(searches);
    while line > MAX_SEARCH_LINE_CHARS {
        let Some(last) = searches.pop() else { break };
        line = line.saturating_sub(last.len() + 1);
    }
    if searches.len() < before {
        warnings.push(DnsWarning {
            reason: REASON_DNS_CONFIG_FORMING,
            message: format!(
                "Search Line limits were exceeded, some search paths have been omitted, the \
                 applied search line is: {}",
                searches.join(" ")
            ),
        });
    }
    warnings
}

/// The length of the domains joined by single spaces.
fn line_length(domains: &[String]) -> usize {
    domains
        .iter()
        .map(|d| d.len() + 1)
        .sum::<usize>()
        .saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use serde_json::json;

    use super::*;

    const NODE_RESOLV_CONF: &str = "# written by the node\n\
        nameserver 10.255.255.53\n\
        nameserver 10.255.255.54\n\
        search corp.example. lab.example\n\
        options timeout:2 rotate\n";

    fn node() -> NodeDns {
        NodeDns {
            cluster_dns: vec![IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10))],
            cluster_domain: DEFAULT_CLUSTER_DOMAIN.to_string(),
            node_ips: vec![IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7))],
        }
    }

    fn node_without_cluster_dns() -> NodeDns {
        NodeDns {
            cluster_dns: Vec::new(),
            ..node()
        }
    }

    /// A pod in `team-a` with the given spec fields (dnsPolicy, hostNetwork, dnsConfig).
    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "app", "image": "busybox"}]);
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "team-a", "uid": "u-1"},
            "spec": spec,
        }))
        .expect("a valid pod")
    }

    fn dns(pod: &Pod, node: &NodeDns) -> PodDns {
        pod_dns(pod, node, Some(NODE_RESOLV_CONF)).expect("DNS settings")
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn cluster_first_pod_gets_cluster_dns_namespace_search_path_and_ndots_5() {
        let got = dns(&pod(json!({"dnsPolicy": "ClusterFirst"})), &node());
        assert_eq!(
            got.config,
            ResolvConf {
                nameservers: strings(&["10.96.0.10"]),
                searches: strings(&[
                    "team-a.svc.cluster.local",
                    "svc.cluster.local",
                    "cluster.local",
                    "corp.example",
                    "lab.example",
                ]),
                options: strings(&["ndots:5"]),
            }
        );
        assert!(got.warnings.is_empty());
    }

    #[test]
    fn a_pod_without_dns_policy_is_cluster_first() {
        let got = dns(&pod(json!({})), &node());
        assert_eq!(got.config.nameservers, strings(&["10.96.0.10"]));
        assert_eq!(pod_dns_type(&PodSpec::default()), PodDnsType::Cluster);
    }

    #[test]
    fn an_unknown_dns_policy_is_treated_as_cluster_first() {
        let got = dns(&pod(json!({"dnsPolicy": "Sometimes"})), &node());
        assert_eq!(got.config.nameservers, strings(&["10.96.0.10"]));
    }

    #[test]
    fn every_cluster_dns_address_is_a_nameserver() {
        let node = NodeDns {
            cluster_dns: vec![
                IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10)),
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 10)),
            ],
            ..node()
        };
        let got = dns(&pod(json!({})), &node);
        assert_eq!(got.config.nameservers, strings(&["10.96.0.10", "fd00::a"]));
    }

    #[test]
    fn node_search_domains_already_in_the_cluster_list_are_not_repeated() {
        let host = "nameserver 10.255.255.53\nsearch cluster.local corp.example\n";
        let got = pod_dns(&pod(json!({})), &node(), Some(host)).expect("DNS settings");
        assert_eq!(
            got.config.searches,
            strings(&[
                "team-a.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example",
            ])
        );
    }

    #[test]
    fn an_empty_cluster_domain_adds_no_cluster_search_domains() {
        let node = NodeDns {
            cluster_domain: String::new(),
            ..node()
        };
        let got = dns(&pod(json!({})), &node);
        assert_eq!(
            got.config.searches,
            strings(&["corp.example", "lab.example"])
        );
        assert_eq!(got.config.nameservers, strings(&["10.96.0.10"]));
    }

    #[test]
    fn cluster_first_on_the_host_network_behaves_as_default() {
        let got = dns(
            &pod(json!({"dnsPolicy": "ClusterFirst", "hostNetwork": true})),
            &node(),
        );
        assert_eq!(
            got.config,
            ResolvConf::parse(NODE_RESOLV_CONF).expect("the node resolv.conf")
        );
        assert!(got.warnings.is_empty());
    }

    #[test]
    fn cluster_first_with_host_net_uses_cluster_dns_on_the_host_network() {
        let got = dns(
            &pod(json!({"dnsPolicy": "ClusterFirstWithHostNet", "hostNetwork": true})),
            &node(),
        );
        assert_eq!(got.config.nameservers, strings(&["10.96.0.10"]));
        assert_eq!(got.config.searches[0], "team-a.svc.cluster.local");
        assert_eq!(got.config.options, strings(&["ndots:5"]));
    }

    #[test]
    fn cluster_first_with_host_net_off_the_host_network_is_cluster_first() {
        let got = dns(
            &pod(json!({"dnsPolicy": "ClusterFirstWithHostNet"})),
            &node(),
        );
        assert_eq!(got.config.nameservers, strings(&["10.96.0.10"]));
    }

    #[test]
    fn default_policy_copies_the_node_nameservers_search_and_options() {
        let got = dns(&pod(json!({"dnsPolicy": "Default"})), &node());
        assert_eq!(
            got.config,
            ResolvConf {
                nameservers: strings(&["10.255.255.53", "10.255.255.54"]),
                searches: strings(&["corp.example", "lab.example"]),
                options: strings(&["timeout:2", "rotate"]),
            }
        );
        assert!(got.warnings.is_empty());
    }

    #[test]
    fn none_policy_uses_only_dns_config() {
        let got = dns(
            &pod(json!({
                "dnsPolicy": "None",
                "dnsConfig": {
                    "nameservers": ["192.0.2.53"],
                    "searches": ["example.test"],
                    "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
                },
            })),
            &node(),
        );
        assert_eq!(
            got.config,
            ResolvConf {
                nameservers: strings(&["192.0.2.53"]),
                searches: strings(&["example.test"]),
                options: strings(&["ndots:2", "edns0"]),
            }
        );
    }

    #[test]
    fn none_policy_without_dns_config_gives_an_empty_resolv_conf() {
        let got = dns(&pod(json!({"dnsPolicy": "None"})), &node());
        assert_eq!(got.config, ResolvConf::default());
        assert!(got.warnings.is_empty());
    }

    #[test]
    fn cluster_first_without_cluster_dns_falls_back_to_default_with_a_warning() {
        let got = dns(
            &pod(json!({"dnsPolicy": "ClusterFirst"})),
            &node_without_cluster_dns(),
        );
        assert_eq!(
            got.config,
            ResolvConf::parse(NODE_RESOLV_CONF).expect("the node resolv.conf")
        );
        assert_eq!(
            got.warnings,
            vec![DnsWarning {
                reason: REASON_MISSING_CLUSTER_DNS,
                message: "pod: \"web_team-a(u-1)\". kubelet does not have ClusterDNS IP \
                          configured and cannot create Pod using \"ClusterFirst\" policy. \
                          Falling back to \"Default\" policy."
                    .to_string(),
            }]
        );
    }

    #[test]
    fn cluster_first_with_host_net_without_cluster_dns_also_falls_back_with_a_warning() {
        let got = dns(
            &pod(json!({"dnsPolicy": "ClusterFirstWithHostNet", "hostNetwork": true})),
            &node_without_cluster_dns(),
        );
        assert_eq!(
            got.config.nameservers,
            strings(&["10.255.255.53", "10.255.255.54"])
        );
        assert_eq!(got.warnings[0].reason, REASON_MISSING_CLUSTER_DNS);
    }

    #[test]
    fn default_and_none_policies_need_no_cluster_dns() {
        for policy in ["Default", "None"] {
            let got = dns(
                &pod(json!({"dnsPolicy": policy})),
                &node_without_cluster_dns(),
            );
            assert!(got.warnings.is_empty(), "{policy}: {:?}", got.warnings);
        }
    }

    #[test]
    fn dns_config_nameservers_and_searches_are_appended_without_duplicates() {
        let got = dns(
            &pod(json!({
                "dnsConfig": {
                    "nameservers": ["192.0.2.53", "10.96.0.10", "192.0.2.53"],
                    "searches": ["svc.cluster.local", "example.test"],
                },
            })),
            &node(),
        );
        assert_eq!(
            got.config.nameservers,
            strings(&["10.96.0.10", "192.0.2.53"])
        );
        assert_eq!(
            got.config.searches,
            strings(&[
                "team-a.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example",
                "lab.example",
                "example.test",
            ])
        );
    }

    #[test]
    fn dns_config_options_replace_options_of_the_same_name_and_keep_their_place() {
        let got = dns(
            &pod(json!({
                "dnsPolicy": "Default",
                "dnsConfig": {"options": [
                    {"name": "edns0"},
                    {"name": "timeout", "value": "5"},
                    {"name": "ndots", "value": "1"},
                ]},
            })),
            &node(),
        );
        assert_eq!(
            got.config.options,
            strings(&["timeout:5", "rotate", "edns0", "ndots:1"])
        );
    }

    #[test]
    fn a_dns_config_option_without_value_clears_the_value_of_the_base_option() {
        let got = dns(
            &pod(
                json!({"dnsConfig": {"options": [{"name": "ndots"}, {"name": "use-vc", "value": ""}]}}),
            ),
            &node(),
        );
        assert_eq!(got.config.options, strings(&["ndots", "use-vc"]));
    }

    #[test]
    fn the_last_dns_config_option_of_a_name_wins() {
        let got = dns(
            &pod(json!({"dnsConfig": {"options": [
                {"name": "ndots", "value": "2"},
                {"name": "ndots", "value": "3"},
            ]}})),
            &node(),
        );
        assert_eq!(got.config.options, strings(&["ndots:3"]));
    }

    #[test]
    fn more_than_three_nameservers_are_cut_to_three_with_a_warning() {
        let got = dns(
            &pod(json!({
                "dnsPolicy": "Default",
                "dnsConfig": {"nameservers": ["192.0.2.1", "192.0.2.2"]},
            })),
            &node(),
        );
        assert_eq!(
            got.config.nameservers,
            strings(&["10.255.255.53", "10.255.255.54", "192.0.2.1"])
        );
        assert_eq!(
            got.warnings,
            vec![DnsWarning {
                reason: REASON_DNS_CONFIG_FORMING,
                message: "Nameserver limits were exceeded, some nameservers have been omitted, \
                          the applied nameserver line is: 10.255.255.53 10.255.255.54 192.0.2.1"
                    .to_string(),
            }]
        );
    }

    #[test]
    fn three_nameservers_are_kept_without_a_warning() {
        let got = dns(
            &pod(json!({"dnsPolicy": "Default", "dnsConfig": {"nameservers": ["192.0.2.1"]}})),
            &node(),
        );
        assert_eq!(got.config.nameservers.len(), MAX_NAMESERVERS);
        assert!(got.warnings.is_empty());
    }

    #[test]
    fn more_than_32_search_domains_are_cut_to_32_with_a_warning() {
        let searches: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
        let got = dns(
            &pod(json!({"dnsPolicy": "None", "dnsConfig": {"searches": searches}})),
            &node(),
        );
        assert_eq!(got.config.searches, searches[..MAX_SEARCH_PATHS].to_vec());
        assert_eq!(got.warnings.len(), 1);
        assert_eq!(got.warnings[0].reason, REASON_DNS_CONFIG_FORMING);
        assert_eq!(
            got.warnings[0].message,
            format!(
                "Search Line limits were exceeded, some search paths have been omitted, the \
                 applied search line is: {}",
                searches[..MAX_SEARCH_PATHS].join(" ")
            )
        );
    }

    #[test]
    fn cluster_search_domains_count_towards_the_32() {
        let host_searches: Vec<String> = (0..31).map(|i| format!("d{i}.example")).collect();
        let host = format!(
            "nameserver 10.255.255.53\nsearch {}\n",
            host_searches.join(" ")
        );
        let got = pod_dns(&pod(json!({})), &node(), Some(&host)).expect("DNS settings");
        assert_eq!(got.config.searches.len(), MAX_SEARCH_PATHS);
        assert_eq!(got.config.searches[3], "d0.example");
        assert_eq!(
            got.config.searches.last().map(String::as_str),
            Some("d28.example")
        );
        assert_eq!(got.warnings.len(), 1);
    }

    #[test]
    fn search_domains_longer_than_253_characters_are_dropped() {
        let long = format!("{}.example", "a".repeat(250));
        let got = dns(
            &pod(
                json!({"dnsPolicy": "None", "dnsConfig": {"searches": ["one.example", long, "two.example"]}}),
            ),
            &node(),
        );
        assert_eq!(
            got.config.searches,
            strings(&["one.example", "two.example"])
        );
        assert_eq!(got.warnings[0].reason, REASON_DNS_CONFIG_FORMING);
    }

    #[test]
    fn a_search_line_over_2048_characters_loses_domains_from_its_end() {
        // 10 domains of 250 characters: 2,509 with the spaces; 8 of them make 2,007.
        let searches: Vec<String> = (0..10).map(|i| format!("{i}{}", "a".repeat(249))).collect();
        let got = dns(
            &pod(json!({"dnsPolicy": "None", "dnsConfig": {"searches": searches}})),
            &node(),
        );
        assert_eq!(got.config.searches, searches[..8].to_vec());
        assert!(line_length(&got.config.searches) <= MAX_SEARCH_LINE_CHARS);
        assert_eq!(got.warnings.len(), 1);
    }

    #[test]
    fn a_search_line_of_exactly_2048_characters_is_kept() {
        // 8 domains of 253 characters and one of 16, with the 8 spaces, make exactly 2,048.
        let mut searches: Vec<String> = (0..8).map(|i| format!("{i}{}", "b".repeat(252))).collect();
        searches.push("c".repeat(16));
        assert_eq!(line_length(&searches), MAX_SEARCH_LINE_CHARS);
        let got = dns(
            &pod(json!({"dnsPolicy": "None", "dnsConfig": {"searches": searches}})),
            &node(),
        );
        assert_eq!(got.config.searches, searches);
        assert!(got.warnings.is_empty());
    }

    #[test]
    fn trimming_both_lists_records_two_warnings() {
        let searches: Vec<String> = (0..33).map(|i| format!("d{i}.example")).collect();
        let got = dns(
            &pod(json!({
                "dnsPolicy": "None",
                "dnsConfig": {
                    "nameservers": ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"],
                    "searches": searches,
                },
            })),
            &node(),
        );
        let reasons: Vec<&str> = got.warnings.iter().map(|w| w.reason).collect();
        assert_eq!(
            reasons,
            [REASON_DNS_CONFIG_FORMING, REASON_DNS_CONFIG_FORMING]
        );
    }

    #[test]
    fn resolv_conf_nameservers_accumulate_and_the_last_search_and_options_lines_win() {
        let text = "nameserver 192.0.2.1\n\
                    search first.example\n\
                    options ndots:2\n\
                    ; not a comment to the kubelet, and no keyword it knows\n\
                    #nameserver 192.0.2.9\n\
                      nameserver   192.0.2.2   \n\
                    domain ignored.example\n\
                    search second.example. third.example\n\
                    options rotate\n";
        assert_eq!(
            ResolvConf::parse(text).expect("parsed"),
            ResolvConf {
                nameservers: strings(&["192.0.2.1", "192.0.2.2"]),
                searches: strings(&["second.example", "third.example"]),
                options: strings(&["rotate"]),
            }
        );
    }

    #[test]
    fn an_empty_resolv_conf_gives_default_pods_an_empty_resolv_conf() {
        let got = pod_dns(&pod(json!({"dnsPolicy": "Default"})), &node(), Some(""))
            .expect("DNS settings");
        assert_eq!(got.config, ResolvConf::default());
    }

    #[test]
    fn a_nameserver_line_without_an_address_fails_every_policy() {
        let broken = "nameserver\nnameserver 192.0.2.1\n";
        assert_eq!(
            ResolvConf::parse(broken),
            Err(DnsConfigError::EmptyNameserver)
        );
        for policy in ["ClusterFirst", "Default", "None"] {
            assert_eq!(
                pod_dns(&pod(json!({"dnsPolicy": policy})), &node(), Some(broken)),
                Err(DnsConfigError::EmptyNameserver),
                "{policy}"
            );
        }
    }

    #[test]
    fn without_a_node_resolv_conf_default_pods_use_the_loopback_resolver_and_the_root_domain() {
        let dual_stack = NodeDns {
            node_ips: vec![
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)),
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7)),
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, 8)),
            ],
            ..node()
        };
        let got = pod_dns(&pod(json!({"dnsPolicy": "Default"})), &dual_stack, None)
            .expect("DNS settings");
        assert_eq!(
            got.config,
            ResolvConf {
                nameservers: strings(&["127.0.0.1", "::1"]),
                searches: strings(&["."]),
                options: Vec::new(),
            }
        );
        let no_ips = NodeDns {
            node_ips: Vec::new(),
            ..node()
        };
        let got =
            pod_dns(&pod(json!({"dnsPolicy": "Default"})), &no_ips, None).expect("DNS settings");
        assert_eq!(got.config.nameservers, strings(&["127.0.0.1"]));
    }

    #[test]
    fn without_a_node_resolv_conf_cluster_first_pods_get_only_the_cluster_search_domains() {
        let got = pod_dns(&pod(json!({})), &node(), None).expect("DNS settings");
        assert_eq!(
            got.config.searches,
            strings(&[
                "team-a.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local"
            ])
        );
    }
}
