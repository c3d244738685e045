//! Pure rules: a [`RegistriesConfig`] → the files containerd 1.6 reads (as k3s renders them):
//!
//! - per registry with mirrors, `<certs.d>/<registry>/hosts.toml`: `server` is the registry
//!   itself (`https://registry-1.docker.io` for `docker.io`), tried last; each mirror endpoint is
//!   a `[host."<url>"]` with `pull` and `resolve` capabilities, tried in order; an endpoint with a
//!   path is the registry API root (`override_path`, as k3s does). `*` is `_default`.
//! - per host that only has `configs`, a `hosts.toml` whose `server` is the host, also listed
//!   as its one `[host]` (containerd 1.6 ignores a file without a `[host]` table);
//! - the TLS settings of a host (`ca`, `client`, `skip_verify`) go wherever that host appears;
//! - credentials go in containerd's CRI config (`registry.configs."<host>".auth`), used for the
//!   host they name when a pull brings no credentials of its own.

use std::collections::BTreeMap;

use super::model::{HostConfig, RegistriesConfig, endpoint_url};

/// What [`render`] produces.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RegistryFiles {
    /// Directory name under `certs.d` → the `hosts.toml` text.
    pub hosts: BTreeMap<String, String>,
    /// TOML tables for containerd's config, below `[plugins."io.containerd.grpc.v1.cri"]`
    /// (starting with `registry.config_path` = `certs_dir`).
    pub cri_registry: String,
}

const HEADER: &str =
    "# Written by tandem from the registry configuration at every start; edits are lost.\n";

/// Renders the configuration for a containerd whose `certs.d` directory is `certs_dir`.
pub fn render(config: &RegistriesConfig, certs_dir: &str) -> RegistryFiles {
    let mut hosts = BTreeMap::new();
    for (registry, mirror) in &config.mirrors {
        let mut text = String::from(HEADER);
        let dir = if registry == "*" {
            "_default".to_string()
        } else {
            text.push_str(&format!("server = {}\n", quote(&default_server(registry))));
            text.push_str(&tls_lines(config.configs.get(registry), ""));
            registry.clone()
        };
        for endpoint in &mirror.endpoint {
            let Some((scheme, host, path)) = endpoint_url(endpoint) else {
                continue;
            };
            text.push_str(&format!(
                "\n[host.{}]\n  capabilities = [\"pull\", \"resolve\"]\n",
                quote(&format!("{scheme}://{host}{path}"))
            ));
            if !path.is_empty() {
                text.push_str("  override_path = true\n");
            }
            text.push_str(&tls_lines(config.configs.get(&host), "  "));
        }
        if mirror.endpoint.is_empty() && registry != "*" {
            text.push_str(&server_host(registry, config.configs.get(registry)));
        }
        hosts.insert(dir, text);
    }
    for (host, settings) in &config.configs {
        if hosts.contains_key(host) || settings.tls.is_none() {
            continue;
        }
        let mut text = String::from(HEADER);
        text.push_str(&format!("server = {}\n", quote(&default_server(host))));
        text.push_str(&tls_lines(Some(settings), ""));
        text.push_str(&server_host(host, Some(settings)));
        hosts.insert(host.clone(), text);
    }
    let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
    let mut cri_registry = format!("[{cri}.registry]\n  config_path = {}\n", quote(certs_dir));
    for (host, settings) in &config.configs {
        let Some(auth) = &settings.auth else {
            continue;
        };
        cri_registry.push_str(&format!("[{cri}.registry.configs.{}.auth]\n", quote(host)));
        for (key, value) in [
            ("username", &auth.username),
            ("password", &auth.password),
            ("auth", &auth.auth),
            ("identitytoken", &auth.identity_token),
        ] {
            if !value.is_empty() {
                cri_registry.push_str(&format!("  {key} = {}\n", quote(value)));
            }
        }
    }
    RegistryFiles {
        hosts,
        cri_registry,
    }
}

/// The registry itself as a `[host]` entry: containerd 1.6 refuses a `hosts.toml` without one
/// ("invalid `host` tree") and then ignores the file.
fn server_host(registry: &str, config: Option<&HostConfig>) -> String {
    format!(
        "\n[host.{}]\n  capabilities = [\"pull\", \"resolve\"]\n{}",
        quote(&default_server(registry)),
        tls_lines(config, "  ")
    )
}

/// Where a registry is reached when no mirror answers: Docker Hub's API host for `docker.io`.
fn default_server(registry: &str) -> String {
    if registry == "docker.io" {
        "https://registry-1.docker.io".to_string()
    } else {
        format!("https://{registry}")
    }
}

/// The TLS keys of a host, indented.
fn tls_lines(config: Option<&HostConfig>, indent: &str) -> String {
    let Some(tls) = config.and_then(|c| c.tls.as_ref()) else {
        return String::new();
    };
    let path = |p: &std::path::Path| quote(&p.to_string_lossy());
    let mut out = String::new();
    if let Some(ca) = &tls.ca_file {
        out.push_str(&format!("{indent}ca = {}\n", path(ca)));
    }
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        out.push_str(&format!(
            "{indent}client = [[{}, {}]]\n",
            path(cert),
            path(key)
        ));
    }
    if tls.insecure_skip_verify {
        out.push_str(&format!("{indent}skip_verify = true\n"));
    }
    out
}

/// A TOML basic string.
fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> RegistriesConfig {
        let config = RegistriesConfig::parse(yaml).expect("yaml");
        config.validate().expect("valid");
        config
    }

    #[test]
    fn a_mirror_with_tls_and_auth_renders_hosts_toml_and_cri_auth() {
        let config = parse(
            r#"
mirrors:
  docker.io:
    endpoint: ["https://mirror.local:5443", "http://plain.local:5000/v2/hub"]
configs:
  "mirror.local:5443":
    auth: {username: alice, password: "pa\"ss"}
    tls: {ca_file: /etc/ca.crt, cert_file: /etc/c.crt, key_file: /etc/c.key}
"#,
        );
        let files = render(&config, "/d/certs.d");
        assert_eq!(
            files.hosts.keys().collect::<Vec<_>>(),
            ["docker.io", "mirror.local:5443"]
        );
        assert_eq!(
            files.hosts["docker.io"],
            format!(
                "{HEADER}server = \"https://registry-1.docker.io\"\n\
                 \n[host.\"https://mirror.local:5443\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = \"/etc/ca.crt\"\n  client = [[\"/etc/c.crt\", \"/etc/c.key\"]]\n\
                 \n[host.\"http://plain.local:5000/v2/hub\"]\n  capabilities = [\"pull\", \"resolve\"]\n  override_path = true\n"
            )
        );
        assert_eq!(
            files.hosts["mirror.local:5443"],
            format!(
                "{HEADER}server = \"https://mirror.local:5443\"\nca = \"/etc/ca.crt\"\nclient = [[\"/etc/c.crt\", \"/etc/c.key\"]]\n\
                 \n[host.\"https://mirror.local:5443\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = \"/etc/ca.crt\"\n  client = [[\"/etc/c.crt\", \"/etc/c.key\"]]\n"
            )
        );
        assert_eq!(
            files.cri_registry,
            "[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/d/certs.d\"\n\
             [plugins.\"io.containerd.grpc.v1.cri\".registry.configs.\"mirror.local:5443\".auth]\n  username = \"alice\"\n  password = \"pa\\\"ss\"\n"
        );
    }

    #[test]
    fn an_empty_configuration_only_sets_the_config_path() {
        let files = render(&RegistriesConfig::default(), "/c");
        assert!(files.hosts.is_empty());
        assert_eq!(
            files.cri_registry,
            "[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/c\"\n"
        );
        assert_eq!(parse(""), RegistriesConfig::default());
    }

    #[test]
    fn the_wildcard_registry_is_the_default_directory_and_insecure_hosts_skip_verify() {
        let config = parse(
            "mirrors:\n  \"*\":\n    endpoint: [\"reg.local:5000\"]\nconfigs:\n  reg.local:5000:\n    tls: {insecure_skip_verify: true}\n",
        );
        let files = render(&config, "/c");
        assert_eq!(
            files.hosts["_default"],
            format!(
                "{HEADER}\n[host.\"https://reg.local:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n"
            )
        );
    }

    #[test]
    fn bad_names_endpoints_and_files_are_refused() {
        for yaml in [
            "mirrors:\n  \"../etc\":\n    endpoint: [\"https://m\"]\n",
            "mirrors:\n  docker.io:\n    endpoint: [\"ftp://m\"]\n",
            "mirrors:\n  docker.io:\n    endpoint: [\"https://m/\\\"x\"]\n",
            "configs:\n  \"a/b\": {}\n",
            "configs:\n  reg.local:\n    tls: {ca_file: relative.crt}\n",
            "configs:\n  reg.local:\n    tls: {cert_file: /c.crt}\n",
        ] {
            let config = RegistriesConfig::parse(yaml).expect("yaml");
            assert!(config.validate().is_err(), "{yaml}");
        }
        assert!(RegistriesConfig::parse("mirrors: [").is_err());
        assert!(RegistriesConfig::parse("unknown: 1").is_err());
    }

    #[test]
    fn rewrites_are_read_and_reported_as_not_applied() {
        let config = parse(
            "mirrors:\n  docker.io:\n    endpoint: [\"https://m.local\"]\n    rewrite:\n      \"^library/(.*)\": \"mirrored/$1\"\n",
        );
        assert_eq!(config.warnings().len(), 1);
    }
}
