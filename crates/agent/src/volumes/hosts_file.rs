//! The pod's managed `/etc/hosts`, as the kubelet writes it (`pkg/kubelet/kubelet_pods.go`
//! `ensureHostsFile`) and mounts it into each container (`makeMounts`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, HostAlias, Pod};
use tandem_core::field::go_quote;
use tandem_core::validation::names;

use super::atomic_writer::platform;
use super::mounts::HostMount;
use crate::env;

/// The cluster DNS domain of pod FQDNs in `/etc/hosts` (the kubelet's `--cluster-domain`).
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The file name of the pod's managed hosts file inside its pod directory (upstream's).
pub const HOSTS_FILE_NAME: &str = "etc-hosts";
/// Where containers see the hosts file.
pub const ETC_HOSTS: &str = "/etc/hosts";

/// The mount of the pod's managed hosts file at `/etc/hosts`, unless the container mounts
/// something there itself (upstream `makeMounts`). Whether a pod gets the file at all
/// (upstream: once it has an IP or uses the host network) is the caller's decision.
pub fn etc_hosts_mount(container: &Container, hosts_file: &Path) -> Option<HostMount> {
    let taken = container
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == ETC_HOSTS);
    (!taken).then(|| HostMount {
        container_path: ETC_HOSTS.to_owned(),
        host_path: hosts_file.to_path_buf(),
        read_only: false,
    })
}

/// Writes the pod's hosts file to `<pod_dir>/etc-hosts` (mode 0644) and returns its path
/// (upstream `ensureHostsFile`). A pod on the pod network gets the kubelet's managed file:
/// localhost entries, `pod_ip` with the pod's hostname (and its FQDN
/// `<hostname>.<subdomain>.<namespace>.svc.cluster.local` when `subdomain` is set), then
/// `hostAliases`. A `hostNetwork` pod gets the node's `/etc/hosts` plus its `hostAliases`.
///
/// The file is rewritten in place, not replaced, so containers that already bind-mount it see
/// the new content. Without `pod_ip` the managed file has no pod entry (upstream does not
/// mount it at all until the pod has an IP).
pub fn write_hosts_file(pod: &Pod, pod_ip: Option<&str>, pod_dir: &Path) -> io::Result<PathBuf> {
    let spec = pod.spec.as_ref();
    let aliases = spec.and_then(|s| s.host_aliases.as_deref()).unwrap_or(&[]);
    let content = if spec.and_then(|s| s.host_network).unwrap_or(false) {
        let node = fs::read_to_string(ETC_HOSTS)?;
        node_hosts_file_content(&node, aliases)
    } else {
        let (hostname, domain) = pod_hostname_and_domain(pod)
            .map_err(|msg| io::Error::new(io::ErrorKind::InvalidInput, msg))?;
        let ips: Vec<&str> = pod_ip.into_iter().collect();
        managed_hosts_file_content(&ips, &hostname, &domain, aliases)
    };
    fs::create_dir_all(pod_dir)?;
    let path = pod_dir.join(HOSTS_FILE_NAME);
    fs::write(&path, content)?;
    platform::set_mode(&path, 0o644)?;
    Ok(path)
}

/// Upstream `GeneratePodHostNameAndDomain`: the hostname is `spec.hostname` or the pod name,
/// cut to 63 characters without a trailing `-`/`.`; the domain is
/// `<subdomain>.<namespace>.svc.<cluster domain>` when `spec.subdomain` is set, else empty.
pub fn pod_hostname_and_domain(pod: &Pod) -> Result<(String, String), String> {
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let mut hostname = pod_name.clone();
    if let Some(h) = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
    {
        let errs = names::dns1123_label(h);
        if !errs.is_empty() {
            return Err(format!(
                "pod Hostname {} is not a valid DNS label: {}",
                go_quote(h),
                errs.join(";")
            ));
        }
        hostname = h.to_owned();
    }
    if hostname.len() > 63 {
        let cut: String = hostname.chars().take(63).collect();
        let trimmed = cut.trim_end_matches(['-', '.']).to_owned();
        if trimmed.is_empty() {
            return Err(format!(
                "hostname for pod {} was invalid: {}",
                go_quote(&pod_name),
                go_quote(&hostname)
            ));
        }
        hostname = trimmed;
    }
    let mut domain = String::new();
    if let Some(sub) = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
    {
        let errs = names::dns1123_label(sub);
        if !errs.is_empty() {
            return Err(format!(
                "pod Subdomain {} is not a valid DNS label: {}",
                go_quote(sub),
                errs.join(";")
            ));
        }
        domain = format!("{sub}.{}.svc.{CLUSTER_DOMAIN}", env::pod_namespace(pod));
    }
    Ok((hostname, domain))
}

/// Upstream `managedHostsFileContent`.
pub fn managed_hosts_file_content(
    ips: &[&str],
    hostname: &str,
    domain: &str,
    aliases: &[HostAlias],
) -> String {
    let mut out = String::from("# Kubernetes-managed hosts file.\n");
    out.push_str("127.0.0.1\tlocalhost\n");
    out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    out.push_str("fe00::0\tip6-localnet\n");
    out.push_str("fe00::0\tip6-mcastprefix\n");
    out.push_str("fe00::1\tip6-allnodes\n");
    out.push_str("fe00::2\tip6-allrouters\n");
    for ip in ips {
        if domain.is_empty() {
            out.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    out.push_str(&host_alias_entries(aliases));
    out
}

/// Upstream `nodeHostsFileContent`: the node's file under a header, then the aliases.
pub fn node_hosts_file_content(node_hosts: &str, aliases: &[HostAlias]) -> String {
    let mut out = String::from("# Kubernetes-managed hosts file (host network).\n");
    out.push_str(node_hosts);
    out.push_str(&host_alias_entries(aliases));
    out
}

/// Upstream `hostsEntriesFromHostAliases`: a blank line, a comment, then one line per alias IP
/// with its hostnames tab-separated.
fn host_alias_entries(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for alias in aliases {
        let names = alias.hostnames.as_deref().unwrap_or(&[]).join("\t");
        out.push_str(&format!("{}\t{names}\n", alias.ip));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::cleanup;
    use super::super::test_fixtures::container;
    use super::*;

    #[test]
    fn hosts_file_has_localhost_pod_entry_fqdn_and_aliases() {
        let aliases = vec![HostAlias {
            ip: "10.1.2.3".into(),
            hostnames: Some(vec!["foo.local".into(), "bar.local".into()]),
        }];
        let content = managed_hosts_file_content(
            &["10.0.0.5"],
            "web-0",
            "web.shop.svc.cluster.local",
            &aliases,
        );
        assert_eq!(
            content,
            "# Kubernetes-managed hosts file.\n\
             127.0.0.1\tlocalhost\n\
             ::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\n\
             fe00::0\tip6-mcastprefix\n\
             fe00::1\tip6-allnodes\n\
             fe00::2\tip6-allrouters\n\
             10.0.0.5\tweb-0.web.shop.svc.cluster.local\tweb-0\n\
             \n\
             # Entries added by HostAliases.\n\
             10.1.2.3\tfoo.local\tbar.local\n"
        );
        let plain = managed_hosts_file_content(&["10.0.0.5"], "web", "", &[]);
        assert!(plain.ends_with("fe00::2\tip6-allrouters\n10.0.0.5\tweb\n"));
        let host = node_hosts_file_content("127.0.0.1 localhost\n", &aliases);
        assert!(host.starts_with(
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\n# Entries"
        ));
    }

    #[test]
    fn hostname_comes_from_spec_or_name_and_is_truncated() {
        let pod = |spec: serde_json::Value, name: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "shop"},
                "spec": spec
            }))
            .expect("pod")
        };
        let p = pod(
            serde_json::json!({"containers": [], "hostname": "web-0", "subdomain": "web"}),
            "x",
        );
        assert_eq!(
            pod_hostname_and_domain(&p),
            Ok(("web-0".into(), "web.shop.svc.cluster.local".into()))
        );
        let long = format!("{}-{}", "a".repeat(62), "b".repeat(5));
        let p = pod(serde_json::json!({"containers": []}), &long);
        assert_eq!(
            pod_hostname_and_domain(&p),
            Ok(("a".repeat(62), String::new()))
        );
        let p = pod(
            serde_json::json!({"containers": [], "hostname": "Bad_Name"}),
            "x",
        );
        assert!(
            pod_hostname_and_domain(&p)
                .expect_err("invalid")
                .starts_with("pod Hostname \"Bad_Name\" is not a valid DNS label: ")
        );
    }

    #[test]
    fn write_hosts_file_puts_it_in_the_pod_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"}, "spec": {"containers": []}
        }))
        .expect("pod");
        let path = write_hosts_file(&p, Some("10.0.0.7"), dir.path()).expect("write");
        assert_eq!(path, dir.path().join("etc-hosts"));
        let text = fs::read_to_string(&path).expect("read");
        assert!(text.ends_with("10.0.0.7\tweb\n"));
        let c = container(serde_json::json!([]));
        assert_eq!(
            etc_hosts_mount(&c, &path),
            Some(HostMount {
                container_path: "/etc/hosts".into(),
                host_path: path.clone(),
                read_only: false
            })
        );
        let own = container(serde_json::json!([{"name": "data", "mountPath": "/etc/hosts"}]));
        assert_eq!(etc_hosts_mount(&own, &path), None);
        fs::create_dir_all(dir.path().join("volumes/cache/sub")).expect("volume dir");
        cleanup(dir.path());
        assert!(!path.exists());
        assert!(!dir.path().join("volumes").exists());
        cleanup(dir.path());
    }
}
