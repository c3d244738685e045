//! The cluster's certificates and credentials, generated on first start and kept in the data dir.
//!
//! Layout of `<data-dir>/pki/`: `ca.crt`/`ca.key` (the cluster CA), `apiserver.crt`/`apiserver.key`
//! (serving certificate for localhost, 127.0.0.1, ::1, the host name and `kubernetes.default.svc`),
//! `admin.crt`/`admin.key` (client certificate `CN=admin, O=system:masters`), and `tokens.csv`, a
//! static token file in upstream's `--token-auth-file` format (`token,user,uid,"group1,group2"`),
//! and `front-proxy-ca.crt`/`front-proxy-ca.key`, the CA of the client certificate the API server
//! presents to aggregated API servers (kubeadm's `front-proxy-ca`; created on the first start that
//! lacks it, so data dirs from before aggregation get one). Mirrors what `kubeadm init phase
//! certs` lays out, with fewer files.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// The common name of the front proxy's client certificate, and the one name in
/// `requestheader-allowed-names` (kubeadm's `front-proxy-client`).
pub const FRONT_PROXY_CLIENT_CN: &str = "front-proxy-client";

/// Errors creating or loading credentials.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("cannot read or write {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot generate certificate")]
    Generate(#[from] rcgen::Error),
    #[error("{path} holds no usable {what}")]
    Invalid { path: PathBuf, what: &'static str },
    #[error(
        "a certificate carries at most one group here ({0} asked): rcgen writes one organization per subject"
    )]
    TooManyGroups(usize),
}

/// The credentials the server needs, loaded from or created in `<data-dir>/pki`.
#[derive(Debug, Clone)]
pub struct Pki {
    pub dir: PathBuf,
    pub ca_pem: String,
    /// The CA's private key: it signs the certificates of components, nodes and users.
    pub ca_key_pem: String,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
    /// The front proxy's CA (upstream's `--requestheader-client-ca-file`) and its key.
    pub front_proxy_ca_pem: String,
    pub front_proxy_ca_key_pem: String,
    /// Static bearer tokens: (token, user name, groups).
    pub tokens: Vec<StaticToken>,
}

/// One line of the token file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticToken {
    pub token: String,
    pub user: String,
    pub groups: Vec<String>,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PkiError + '_ {
    move |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn write_private(path: &Path, contents: &str) -> Result<(), PkiError> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, contents).map_err(io_err(&tmp))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600)).map_err(io_err(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io_err(path))
}

fn random_token() -> Result<String, PkiError> {
    // A fresh key pair is a convenient source of OS randomness without another dependency.
    let kp = KeyPair::generate()?;
    let digest = fnv_hex(&kp.serialize_der());
    let kp2 = KeyPair::generate()?;
    Ok(format!("{digest}{}", fnv_hex(&kp2.serialize_der())))
}

fn fnv_hex(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

impl Pki {
    /// Loads the credentials in `<data_dir>/pki`, creating whatever is missing. `extra_sans` adds
    /// host names or IPs to the serving certificate when it is first created.
    pub fn load_or_create(data_dir: &Path, extra_sans: &[String]) -> Result<Pki, PkiError> {
        let dir = data_dir.join("pki");
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let ca_crt = dir.join("ca.crt");
        if !ca_crt.exists() {
            Self::generate(&dir, extra_sans)?;
        }
        let read = |name: &str| -> Result<String, PkiError> {
            let p = dir.join(name);
            fs::read_to_string(&p).map_err(io_err(&p))
        };
        if !dir.join("front-proxy-ca.crt").exists() {
            Self::generate_front_proxy_ca(&dir)?;
        }
        let tokens_path = dir.join("tokens.csv");
        let tokens = parse_token_file(&read("tokens.csv")?);
        if tokens.is_empty() {
            return Err(PkiError::Invalid {
                path: tokens_path,
                what: "token",
            });
        }
        Ok(Pki {
            ca_pem: read("ca.crt")?,
            ca_key_pem: read("ca.key")?,
            serving_cert_pem: read("apiserver.crt")?,
            serving_key_pem: read("apiserver.key")?,
            admin_cert_pem: read("admin.crt")?,
            admin_key_pem: read("admin.key")?,
            front_proxy_ca_pem: read("front-proxy-ca.crt")?,
            front_proxy_ca_key_pem: read("front-proxy-ca.key")?,
            tokens,
            dir,
        })
    }

    /// A self-signed CA for the front proxy's client certificate, kept apart from the cluster CA
    /// as kubeadm keeps it: an aggregated server trusts the identity headers only from a client
    /// this CA signed, so a user's certificate from the cluster CA cannot assert them.
    fn generate_front_proxy_ca(dir: &Path) -> Result<(), PkiError> {
        let key = KeyPair::generate()?;
        let params = ca_params("tandem-front-proxy-ca")?;
        let cert = params.self_signed(&key)?;
        write_private(&dir.join("front-proxy-ca.key"), &key.serialize_pem())?;
        // The certificate last: its presence marks a complete pair.
        write_private(&dir.join("front-proxy-ca.crt"), &cert.pem())?;
        Ok(())
    }

    /// Issues the front proxy's client certificate (`CN=`[`FRONT_PROXY_CLIENT_CN`], signed by the
    /// front-proxy CA), valid from an hour ago for `valid_for`: certificate and key, PEM.
    pub fn issue_front_proxy_client(
        &self,
        valid_for: std::time::Duration,
    ) -> Result<(String, String), PkiError> {
        sign_client_cert(
            (&self.front_proxy_ca_pem, &self.front_proxy_ca_key_pem),
            FRONT_PROXY_CLIENT_CN,
            &[],
            valid_for,
        )
    }

    fn generate(dir: &Path, extra_sans: &[String]) -> Result<(), PkiError> {
        let ca_key = KeyPair::generate()?;
        let ca_params = ca_params("tandem-ca")?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, &ca_key);

        let host = fs::read_to_string("/etc/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let mut names: Vec<String> = vec![
            "localhost".into(),
            "kubernetes".into(),
            "kubernetes.default".into(),
            "kubernetes.default.svc".into(),
            "kubernetes.default.svc.cluster.local".into(),
        ];
        if !host.is_empty() {
            names.push(host);
        }
        names.extend(
            extra_sans
                .iter()
                .filter(|s| s.parse::<std::net::IpAddr>().is_err())
                .cloned(),
        );
        let mut serving = CertificateParams::new(names)?;
        for ip in ["127.0.0.1", "::1", "10.96.0.1"]
            .iter()
            .map(|s| s.to_string())
            .chain(extra_sans.iter().cloned())
        {
            if let Ok(addr) = ip.parse::<std::net::IpAddr>() {
                serving.subject_alt_names.push(SanType::IpAddress(addr));
            }
        }
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "kube-apiserver");
        serving.distinguished_name = dn;
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.not_before = rcgen::date_time_ymd(2024, 1, 1);
        serving.not_after = rcgen::date_time_ymd(2124, 1, 1);
        let serving_key = KeyPair::generate()?;
        let serving_cert = serving.signed_by(&serving_key, &issuer)?;

        let mut admin = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "admin");
        dn.push(DnType::OrganizationName, "system:masters");
        admin.distinguished_name = dn;
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        admin.not_before = rcgen::date_time_ymd(2024, 1, 1);
        admin.not_after = rcgen::date_time_ymd(2124, 1, 1);
        let admin_key = KeyPair::generate()?;
        let admin_cert = admin.signed_by(&admin_key, &issuer)?;

        let tokens = format!(
            "{},admin,admin-uid,\"system:masters\"\n{},system:node-bootstrap,node-uid,\"system:nodes\"\n",
            random_token()?,
            random_token()?
        );

        // The CA certificate is written last: its presence marks a complete set.
        write_private(&dir.join("ca.key"), &ca_key.serialize_pem())?;
        write_private(&dir.join("apiserver.key"), &serving_key.serialize_pem())?;
        write_private(&dir.join("apiserver.crt"), &serving_cert.pem())?;
        write_private(&dir.join("admin.key"), &admin_key.serialize_pem())?;
        write_private(&dir.join("admin.crt"), &admin_cert.pem())?;
        write_private(&dir.join("tokens.csv"), &tokens)?;
        write_private(&dir.join("ca.crt"), &ca_cert.pem())?;
        Ok(())
    }

    /// The admin bearer token (first line of the token file).
    pub fn admin_token(&self) -> &str {
        self.tokens.first().map(|t| t.token.as_str()).unwrap_or("")
    }

    /// A kubeconfig with admin client-certificate credentials for `server` (`https://127.0.0.1:6443`).
    pub fn admin_kubeconfig(&self, server: &str) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: tandem\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: tandem-admin\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: tandem\n  context:\n    cluster: tandem\n    user: tandem-admin\n    namespace: default\ncurrent-context: tandem\npreferences: {{}}\n",
            ca = b64(&self.ca_pem),
            cert = b64(&self.admin_cert_pem),
            key = b64(&self.admin_key_pem),
        )
    }

    /// Issues a client certificate signed by the cluster CA for user `cn` in group `orgs` (at most
    /// one; what upstream's x509 authenticator reads back), valid from an hour ago for
    /// `valid_for`.
    /// Returns the certificate and its private key, both PEM.
    pub fn issue_client_cert(
        &self,
        cn: &str,
        orgs: &[&str],
        valid_for: std::time::Duration,
    ) -> Result<(String, String), PkiError> {
        // rcgen keeps one value per attribute type: a second O would silently replace the first.
        if orgs.len() > 1 {
            return Err(PkiError::TooManyGroups(orgs.len()));
        }
        sign_client_cert((&self.ca_pem, &self.ca_key_pem), cn, orgs, valid_for)
    }

    /// A kubeconfig for `server` whose user authenticates with the given client certificate.
    pub fn client_kubeconfig(
        &self,
        server: &str,
        user: &str,
        cert_pem: &str,
        key_pem: &str,
    ) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: tandem\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {user:?}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: tandem\n  context:\n    cluster: tandem\n    user: {user:?}\n    namespace: default\ncurrent-context: tandem\npreferences: {{}}\n",
            ca = b64(&self.ca_pem),
            cert = b64(cert_pem),
            key = b64(key_pem),
        )
    }

    /// Issues a client certificate for `cn` in `orgs` and returns a kubeconfig using it.
    pub fn mint_kubeconfig(
        &self,
        server: &str,
        cn: &str,
        orgs: &[&str],
        valid_for: std::time::Duration,
    ) -> Result<String, PkiError> {
        let (cert, key) = self.issue_client_cert(cn, orgs, valid_for)?;
        Ok(self.client_kubeconfig(server, cn, &cert, &key))
    }

    /// The SHA-256 of the CA certificate's DER, in hex: what a join token pins
    /// (`K10<hash>::<id>.<secret>`).
    pub fn ca_sha256_hex(&self) -> Option<String> {
        use rustls::pki_types::pem::PemObject;
        let der = rustls::pki_types::CertificateDer::from_pem_slice(self.ca_pem.as_bytes()).ok()?;
        let digest = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
        Some(digest.as_ref().iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Writes the admin kubeconfig atomically with mode 0600.
    pub fn write_admin_kubeconfig(&self, path: &Path, server: &str) -> Result<(), PkiError> {
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        write_private(path, &self.admin_kubeconfig(server))
    }
}

/// The parameters of a self-signed CA named `cn`, valid 2024–2124.
fn ca_params(cn: &str) -> Result<CertificateParams, PkiError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(2124, 1, 1);
    Ok(params)
}

/// A client certificate for `cn` in `orgs`, signed by the CA `(certificate, key)` (PEM), valid
/// from an hour ago for `valid_for`: certificate and key, PEM.
fn sign_client_cert(
    (ca_pem, ca_key_pem): (&str, &str),
    cn: &str,
    orgs: &[&str],
    valid_for: std::time::Duration,
) -> Result<(String, String), PkiError> {
    let ca_key = KeyPair::from_pem(ca_key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(ca_pem, &ca_key)?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    for org in orgs {
        dn.push(DnType::OrganizationName, *org);
    }
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + valid_for;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Parses upstream's static token file format: `token,user,uid[,"group1,group2"]` per line.
pub fn parse_token_file(text: &str) -> Vec<StaticToken> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = Vec::new();
        let mut cur = String::new();
        let mut quoted = false;
        for c in line.chars() {
            match c {
                '"' => quoted = !quoted,
                ',' if !quoted => fields.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        fields.push(cur);
        if fields.len() < 3 || fields[0].is_empty() || fields[1].is_empty() {
            continue;
        }
        let groups = fields
            .get(3)
            .map(|g| {
                g.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        out.push(StaticToken {
            token: fields[0].clone(),
            user: fields[1].clone(),
            groups,
        });
    }
    out
}

/// Extracts the subject common name and organizations from a DER X.509 certificate: what upstream's
/// x509 authenticator maps to the user name and groups. Returns `None` for anything malformed.
pub fn subject_identity(der: &[u8]) -> Option<(String, Vec<String>)> {
    // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version, serial, sigAlg, issuer,
    // validity, subject, ... } ... }
    let (cert, _) = der_element(der, 0x30)?;
    let (tbs, _) = der_element(cert, 0x30)?;
    let mut rest = tbs;
    if rest.first() == Some(&0xa0) {
        rest = der_skip(rest)?;
    }
    for _ in 0..4 {
        rest = der_skip(rest)?; // serial, signature, issuer, validity
    }
    let (subject, _) = der_element(rest, 0x30)?;
    let mut cn = None;
    let mut orgs = Vec::new();
    let mut rdns = subject;
    while !rdns.is_empty() {
        let (set, after) = der_element(rdns, 0x31)?;
        rdns = after;
        let mut attrs = set;
        while !attrs.is_empty() {
            let (attr, after) = der_element(attrs, 0x30)?;
            attrs = after;
            let (oid, value_part) = der_element(attr, 0x06)?;
            let (tag, value, _) = der_any(value_part)?;
            if !matches!(tag, 0x0c | 0x13 | 0x16 | 0x14) {
                continue;
            }
            let text = String::from_utf8_lossy(value).into_owned();
            match oid {
                [0x55, 0x04, 0x03] => cn = Some(text),
                [0x55, 0x04, 0x0a] => orgs.push(text),
                _ => {}
            }
        }
    }
    cn.map(|cn| (cn, orgs))
}

fn der_any(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *input.first()?;
    let first = *input.get(1)? as usize;
    let (len, header) = if first < 0x80 {
        (first, 2)
    } else {
        let n = first & 0x7f;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | *input.get(2 + i)? as usize;
        }
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    let body = input.get(header..end)?;
    Some((tag, body, input.get(end..)?))
}

fn der_element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, body, rest) = der_any(input)?;
    (t == tag).then_some((body, rest))
}

fn der_skip(input: &[u8]) -> Option<&[u8]> {
    der_any(input).map(|(_, _, rest)| rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;

    #[test]
    fn generated_admin_certificate_identifies_admin_in_system_masters() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = Pki::load_or_create(dir.path(), &[]).expect("pki");
        let der = rustls::pki_types::CertificateDer::from_pem_slice(pki.admin_cert_pem.as_bytes())
            .expect("pem");
        let (cn, groups) = subject_identity(&der).expect("identity");
        assert_eq!(cn, "admin");
        assert_eq!(groups, vec!["system:masters".to_string()]);
        // A second load reuses the same files.
        let again = Pki::load_or_create(dir.path(), &[]).expect("reload");
        assert_eq!(again.ca_pem, pki.ca_pem);
        assert_eq!(again.admin_token(), pki.admin_token());
    }

    #[test]
    fn issued_client_certificates_carry_the_user_and_groups() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = Pki::load_or_create(dir.path(), &[]).expect("pki");
        let (cert, key) = pki
            .issue_client_cert(
                "system:node:n1",
                &["system:nodes"],
                std::time::Duration::from_secs(3600),
            )
            .expect("issue");
        assert!(key.contains("PRIVATE KEY"));
        let der = rustls::pki_types::CertificateDer::from_pem_slice(cert.as_bytes()).expect("pem");
        let (cn, groups) = subject_identity(&der).expect("identity");
        assert_eq!(cn, "system:node:n1");
        assert_eq!(groups, vec!["system:nodes".to_string()]);
        let kubeconfig =
            pki.client_kubeconfig("https://127.0.0.1:1", "system:node:n1", &cert, &key);
        assert!(kubeconfig.contains("name: \"system:node:n1\""));
    }

    #[test]
    fn token_file_lines_parse_with_quoted_groups() {
        let t = parse_token_file("abc,alice,u1,\"g1,g2\"\n\n# comment\nbad\n");
        assert_eq!(
            t,
            vec![StaticToken {
                token: "abc".into(),
                user: "alice".into(),
                groups: vec!["g1".into(), "g2".into()]
            }]
        );
    }

    #[test]
    fn malformed_der_yields_no_identity() {
        assert_eq!(subject_identity(&[]), None);
        assert_eq!(
            subject_identity(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]),
            None
        );
        assert_eq!(subject_identity(&[0x30, 0x03, 0x30, 0x01]), None);
    }
}
