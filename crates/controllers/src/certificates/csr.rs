//! The pure half of certificate signing: decoding a CertificateSigningRequest's `spec.request`,
//! the checks upstream applies per signer (`pkg/apis/certificates/helpers.go` and the
//! `isRequestForSignerFunc`s of `pkg/controller/certificates/signer/signer.go`), and issuing a
//! certificate with the cluster CA as upstream's `authority.PermissiveSigningPolicy` does.
//!
//! The certificate is built with rcgen, which keeps one value per subject attribute type: a
//! subject that repeats one (a user in two groups, `O=a, O=b`) is refused with
//! [`CsrError::RepeatedAttribute`] rather than issued with a group missing. Upstream issues it.
//!
//! Nothing here talks to the API server; [`super::signer`] and [`super::approver`] do.

use std::net::IpAddr;
use std::time::Duration;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, DnValue, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, SanType, SerialNumber, SubjectPublicKeyInfo,
};
use time::OffsetDateTime;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::error::X509Error;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

/// Client certificates for kubelets (`system:node:<name>` in `system:nodes`); auto-approved by
/// [`super::approver`].
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Client certificates for any user of the API server; approved by hand.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// Serving certificates for kubelets; approved by hand.
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

/// The longest certificate the signer issues unless told otherwise: upstream's
/// `--cluster-signing-duration` default (one year).
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
/// The shortest certificate the signer issues, whatever `spec.expirationSeconds` asks: twice the
/// backdate, as upstream's signer (`signer.duration`).
pub const MIN_DURATION: Duration = Duration::from_secs(600);
/// How far `notBefore` is set in the past, to tolerate clock skew between nodes.
const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// Certificates shorter than this keep their whole lifetime after now (their `notAfter` is not
/// backdated too), as upstream's policy: five minutes would be a large share of them.
const SHORT: Duration = Duration::from_secs(8 * 3600);

/// A request the signer refuses: a CertificateSigningRequest with one of these gets the `Failed`
/// condition (reason `SignerValidationFailure`). The messages are upstream's where it has one.
#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    /// `spec.request` is not a PEM `CERTIFICATE REQUEST` block.
    #[error("PEM block type must be CERTIFICATE REQUEST")]
    NotPem,
    /// The DER inside the PEM block is not a PKCS#10 request.
    #[error("the certificate request cannot be parsed")]
    Malformed(#[source] X509Error),
    /// The request is not signed by the key it carries.
    #[error("unable to verify certificate request signature")]
    BadSignature(#[source] X509Error),
    /// The request's public key is of a kind the signer cannot put in a certificate.
    #[error("the certificate request's public key algorithm is not supported")]
    UnsupportedKey(#[source] rcgen::Error),
    /// A subject attribute holds something other than a string.
    #[error("subject attribute {attribute} is not a string")]
    SubjectNotString { attribute: String },
    /// The subject has a relative distinguished name with several attributes.
    #[error(
        "subject has a multi-valued relative distinguished name, which the signer cannot issue"
    )]
    MultiValuedName,
    /// The subject repeats an attribute (two `O`, say), which the signer cannot reproduce.
    #[error("subject has more than one {attribute} attribute, which the signer cannot issue")]
    RepeatedAttribute { attribute: String },
    /// A SAN of a kind the certificate cannot carry.
    #[error("subjectAltName {0} cannot be issued")]
    UnsupportedSan(String),
    #[error("subject organization is not system:nodes")]
    OrganizationNotSystemNodes,
    #[error("subject common name does not begin with system:node:")]
    CommonNameNotSystemNode,
    #[error("DNS or IP subjectAltName is required")]
    DnsOrIpSanRequired,
    #[error("DNS subjectAltNames are not allowed")]
    DnsSanNotAllowed,
    #[error("Email subjectAltNames are not allowed")]
    EmailSanNotAllowed,
    #[error("IP subjectAltNames are not allowed")]
    IpSanNotAllowed,
    #[error("URI subjectAltNames are not allowed")]
    UriSanNotAllowed,
    /// The usages are not one of the sets the signer allows; `expected` lists the full set.
    #[error("usages did not match {expected}")]
    UsagesDidNotMatch { expected: &'static str },
    #[error("invalid usage for client certificate: {usage}")]
    InvalidClientUsage { usage: String },
    #[error("missing required usage for client certificate: client auth")]
    MissingClientAuth,
    #[error("unrecognized usage values: {usages:?}")]
    UnrecognizedUsages { usages: Vec<String> },
    /// The signer name is not one of the three this signer serves.
    #[error("signer {name:?} is not served by this signer")]
    UnknownSigner { name: String },
}

/// Why a certificate could not be issued for a request that may itself be fine: the CA is
/// unreadable or expired. The signer retries these.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The request is refused (see [`CsrError`]).
    #[error(transparent)]
    Request(#[from] CsrError),
    #[error("cannot read the CA certificate")]
    CaCertificate(#[source] rcgen::Error),
    #[error("cannot read the CA key")]
    CaKey(#[source] rcgen::Error),
    /// Even the backdated start of the certificate is past the CA's end.
    #[error("the signer has expired: NotAfter={not_after}")]
    SignerExpired { not_after: OffsetDateTime },
    #[error("refusing to sign a certificate that expired in the past: NotAfter={not_after}")]
    ExpiredInThePast { not_after: OffsetDateTime },
    #[error("unable to generate a serial number")]
    SerialNumber,
    #[error("failed to sign certificate")]
    Sign(#[source] rcgen::Error),
}

/// The signers this controller serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signer {
    /// [`KUBE_APISERVER_CLIENT_KUBELET`].
    KubeApiserverClientKubelet,
    /// [`KUBE_APISERVER_CLIENT`].
    KubeApiserverClient,
    /// [`KUBELET_SERVING`].
    KubeletServing,
}

impl Signer {
    /// The signer of `spec.signerName`, if it is one this controller serves. Other signers'
    /// requests are left alone, for a signer outside the cluster, as upstream does.
    pub fn from_name(name: &str) -> Option<Signer> {
        match name {
            KUBE_APISERVER_CLIENT_KUBELET => Some(Signer::KubeApiserverClientKubelet),
            KUBE_APISERVER_CLIENT => Some(Signer::KubeApiserverClient),
            KUBELET_SERVING => Some(Signer::KubeletServing),
            _ => None,
        }
    }

    /// The signer's name as `spec.signerName` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Signer::KubeApiserverClientKubelet => KUBE_APISERVER_CLIENT_KUBELET,
            Signer::KubeApiserverClient => KUBE_APISERVER_CLIENT,
            Signer::KubeletServing => KUBELET_SERVING,
        }
    }

    /// Whether this signer may issue `req` with `usages` (upstream's `isKubeletClient`,
    /// `isKubeAPIServerClient` and `isKubeletServing`).
    pub fn validate(self, req: &CertificateRequest, usages: &[String]) -> Result<(), CsrError> {
        match self {
            Signer::KubeApiserverClientKubelet => validate_kubelet_client(req, usages),
            Signer::KubeApiserverClient => validate_apiserver_client(usages),
            Signer::KubeletServing => validate_kubelet_serving(req, usages),
        }
    }
}

/// Decodes `request_pem` and checks it against the signer `signer_name`: what the signer does
/// before it issues an approved request.
pub fn check(
    signer_name: &str,
    request_pem: &[u8],
    usages: &[String],
) -> Result<CertificateRequest, CsrError> {
    let signer = Signer::from_name(signer_name).ok_or_else(|| CsrError::UnknownSigner {
        name: signer_name.to_string(),
    })?;
    let req = CertificateRequest::from_pem(request_pem)?;
    signer.validate(&req, usages)?;
    Ok(req)
}

/// One attribute of the request's subject, in the order the request has them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SubjectAttribute {
    oid: Vec<u64>,
    value: String,
    printable: bool,
}

/// A decoded PKCS#10 request whose signature has been checked: the parts of Go's
/// `x509.CertificateRequest` the checks and the signer read.
#[derive(Clone, Debug)]
pub struct CertificateRequest {
    /// The subject's common name (empty when it has none).
    pub common_name: String,
    /// The subject's organizations, in order.
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub email_addresses: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub uris: Vec<String>,
    subject: Vec<SubjectAttribute>,
    multi_valued_name: bool,
    public_key: SubjectPublicKeyInfo,
}

const OID_COMMON_NAME: &[u64] = &[2, 5, 4, 3];
const OID_ORGANIZATION: &[u64] = &[2, 5, 4, 10];

impl CertificateRequest {
    /// Decodes the first PEM block of `pem`, which must be a `CERTIFICATE REQUEST`, as upstream's
    /// `ParseCSR`.
    pub fn from_pem(pem: &[u8]) -> Result<Self, CsrError> {
        let (_, block) = x509_parser::pem::parse_x509_pem(pem).map_err(|_| CsrError::NotPem)?;
        if block.label != "CERTIFICATE REQUEST" {
            return Err(CsrError::NotPem);
        }
        Self::from_der(&block.contents)
    }

    /// Decodes a DER PKCS#10 request and checks its signature.
    pub fn from_der(der: &[u8]) -> Result<Self, CsrError> {
        let (rest, csr) = X509CertificationRequest::from_der(der).map_err(|e| match e {
            x509_parser::nom::Err::Error(e) | x509_parser::nom::Err::Failure(e) => {
                CsrError::Malformed(e)
            }
            x509_parser::nom::Err::Incomplete(_) => {
                CsrError::Malformed(X509Error::InvalidAttributes)
            }
        })?;
        if !rest.is_empty() {
            return Err(CsrError::Malformed(X509Error::InvalidAttributes));
        }
        csr.verify_signature().map_err(CsrError::BadSignature)?;
        let info = &csr.certification_request_info;

        let mut subject = Vec::new();
        let mut multi_valued_name = false;
        for rdn in info.subject.iter() {
            multi_valued_name |= rdn.iter().count() > 1;
            for attr in rdn.iter() {
                let oid: Vec<u64> = attr
                    .attr_type()
                    .iter()
                    .map(Iterator::collect)
                    .unwrap_or_default();
                let value = attr.as_str().map_err(|_| CsrError::SubjectNotString {
                    attribute: attribute_label(&oid),
                })?;
                subject.push(SubjectAttribute {
                    printable: attr.attr_value().tag()
                        == x509_parser::asn1_rs::Tag::PrintableString,
                    oid,
                    value: value.to_string(),
                });
            }
        }
        let values_of = |oid: &[u64]| {
            subject
                .iter()
                .filter(|a| a.oid == oid)
                .map(|a| a.value.clone())
                .collect::<Vec<_>>()
        };
        let common_name = values_of(OID_COMMON_NAME)
            .into_iter()
            .next()
            .unwrap_or_default();
        let organizations = values_of(OID_ORGANIZATION);

        let mut req = CertificateRequest {
            common_name,
            organizations,
            dns_names: Vec::new(),
            email_addresses: Vec::new(),
            ip_addresses: Vec::new(),
            uris: Vec::new(),
            subject,
            multi_valued_name,
            public_key: SubjectPublicKeyInfo::from_der(info.subject_pki.raw)
                .map_err(CsrError::UnsupportedKey)?,
        };
        // Only the SAN extension is read: upstream takes usages from `spec.usages`, not from the
        // key usage extensions a request may ask for, and drops every other extension.
        for ext in csr.requested_extensions().into_iter().flatten() {
            match ext {
                ParsedExtension::SubjectAlternativeName(san) => {
                    for name in &san.general_names {
                        req.add_san(name)?;
                    }
                }
                ParsedExtension::ParseError { .. } => {
                    return Err(CsrError::Malformed(X509Error::InvalidExtensions));
                }
                _ => {}
            }
        }
        Ok(req)
    }

    fn add_san(&mut self, name: &GeneralName<'_>) -> Result<(), CsrError> {
        match name {
            GeneralName::DNSName(s) => self.dns_names.push(s.to_string()),
            GeneralName::RFC822Name(s) => self.email_addresses.push(s.to_string()),
            GeneralName::URI(s) => self.uris.push(s.to_string()),
            GeneralName::IPAddress(bytes) => {
                let ip = match bytes.len() {
                    4 => IpAddr::from(<[u8; 4]>::try_from(*bytes).unwrap_or_default()),
                    16 => IpAddr::from(<[u8; 16]>::try_from(*bytes).unwrap_or_default()),
                    _ => return Err(CsrError::Malformed(X509Error::InvalidExtensions)),
                };
                self.ip_addresses.push(ip);
            }
            // Go's parser skips the other kinds, and so does its signer.
            _ => {}
        }
        Ok(())
    }

    /// The subject as rcgen writes it: every attribute in the request's order. rcgen keeps one
    /// value per attribute type, so a subject that repeats one is refused rather than issued
    /// with values missing.
    fn distinguished_name(&self) -> Result<DistinguishedName, CsrError> {
        if self.multi_valued_name {
            return Err(CsrError::MultiValuedName);
        }
        let mut dn = DistinguishedName::new();
        for (i, attr) in self.subject.iter().enumerate() {
            if self.subject[..i].iter().any(|a| a.oid == attr.oid) {
                return Err(CsrError::RepeatedAttribute {
                    attribute: attribute_label(&attr.oid),
                });
            }
            let value = match attr.value.as_str().try_into() {
                Ok(p) if attr.printable => DnValue::PrintableString(p),
                _ => DnValue::Utf8String(attr.value.clone()),
            };
            dn.push(DnType::from_oid(&attr.oid), value);
        }
        Ok(dn)
    }

    fn subject_alt_names(&self) -> Result<Vec<SanType>, CsrError> {
        let ia5 = |s: &String| {
            s.as_str()
                .try_into()
                .map_err(|_| CsrError::UnsupportedSan(s.clone()))
        };
        let mut out = Vec::new();
        for s in &self.dns_names {
            out.push(SanType::DnsName(ia5(s)?));
        }
        for s in &self.email_addresses {
            out.push(SanType::Rfc822Name(ia5(s)?));
        }
        for ip in &self.ip_addresses {
            out.push(SanType::IpAddress(*ip));
        }
        for s in &self.uris {
            out.push(SanType::URI(ia5(s)?));
        }
        Ok(out)
    }
}

/// `CN`, `O`… for the attributes people know by name, the dotted OID otherwise.
fn attribute_label(oid: &[u64]) -> String {
    match oid {
        [2, 5, 4, 3] => "CN".to_string(),
        [2, 5, 4, 6] => "C".to_string(),
        [2, 5, 4, 7] => "L".to_string(),
        [2, 5, 4, 8] => "ST".to_string(),
        [2, 5, 4, 10] => "O".to_string(),
        [2, 5, 4, 11] => "OU".to_string(),
        _ => oid.iter().map(u64::to_string).collect::<Vec<_>>().join("."),
    }
}

/// The usages as a set (duplicates collapse, as upstream's `sets.String`).
fn usage_set(usages: &[String]) -> std::collections::BTreeSet<&str> {
    usages.iter().map(String::as_str).collect()
}

/// Whether `usages` is exactly one of `allowed`.
fn usages_are_one_of(usages: &[String], allowed: &[&[&str]]) -> bool {
    let set = usage_set(usages);
    allowed
        .iter()
        .any(|a| a.iter().copied().collect::<std::collections::BTreeSet<_>>() == set)
}

/// Upstream's `ValidateKubeletClientCSR`: `O=system:nodes` only, no SANs, a `system:node:` CN,
/// usages `client auth` + `digital signature` (+ `key encipherment`, for RSA keys).
pub fn validate_kubelet_client(
    req: &CertificateRequest,
    usages: &[String],
) -> Result<(), CsrError> {
    if req.organizations != ["system:nodes"] {
        return Err(CsrError::OrganizationNotSystemNodes);
    }
    if !req.dns_names.is_empty() {
        return Err(CsrError::DnsSanNotAllowed);
    }
    if !req.email_addresses.is_empty() {
        return Err(CsrError::EmailSanNotAllowed);
    }
    if !req.ip_addresses.is_empty() {
        return Err(CsrError::IpSanNotAllowed);
    }
    if !req.uris.is_empty() {
        return Err(CsrError::UriSanNotAllowed);
    }
    if !req.common_name.starts_with("system:node:") {
        return Err(CsrError::CommonNameNotSystemNode);
    }
    if !usages_are_one_of(
        usages,
        &[
            &["digital signature", "key encipherment", "client auth"],
            &["digital signature", "client auth"],
        ],
    ) {
        return Err(CsrError::UsagesDidNotMatch {
            expected: "[client auth digital signature key encipherment]",
        });
    }
    Ok(())
}

/// Upstream's `ValidateKubeletServingCSR`: `O=system:nodes` only, a DNS or IP SAN and no other
/// kind, usages `server auth` + `digital signature` (+ `key encipherment`), a `system:node:` CN.
pub fn validate_kubelet_serving(
    req: &CertificateRequest,
    usages: &[String],
) -> Result<(), CsrError> {
    if req.organizations != ["system:nodes"] {
        return Err(CsrError::OrganizationNotSystemNodes);
    }
    if req.dns_names.is_empty() && req.ip_addresses.is_empty() {
        return Err(CsrError::DnsOrIpSanRequired);
    }
    if !req.email_addresses.is_empty() {
        return Err(CsrError::EmailSanNotAllowed);
    }
    if !req.uris.is_empty() {
        return Err(CsrError::UriSanNotAllowed);
    }
    if !usages_are_one_of(
        usages,
        &[
            &["digital signature", "key encipherment", "server auth"],
            &["digital signature", "server auth"],
        ],
    ) {
        return Err(CsrError::UsagesDidNotMatch {
            expected: "[digital signature key encipherment server auth]",
        });
    }
    if !req.common_name.starts_with("system:node:") {
        return Err(CsrError::CommonNameNotSystemNode);
    }
    Ok(())
}

/// Upstream's `validAPIServerClientUsages`: any subject; `client auth` is required and
/// `digital signature` and `key encipherment` are the only other usages allowed.
pub fn validate_apiserver_client(usages: &[String]) -> Result<(), CsrError> {
    let mut client_auth = false;
    for usage in usages {
        match usage.as_str() {
            "digital signature" | "key encipherment" => {}
            "client auth" => client_auth = true,
            other => {
                return Err(CsrError::InvalidClientUsage {
                    usage: other.to_string(),
                });
            }
        }
    }
    if !client_auth {
        return Err(CsrError::MissingClientAuth);
    }
    Ok(())
}

/// The key usage and extended key usages `usages` name (upstream's `keyUsagesFromStrings`),
/// extended ones in the order of Go's `x509.ExtKeyUsage`.
fn key_usages(
    usages: &[String],
) -> Result<(Vec<KeyUsagePurpose>, Vec<ExtendedKeyUsagePurpose>), CsrError> {
    let mut key = Vec::new();
    let mut extended: Vec<(u8, ExtendedKeyUsagePurpose)> = Vec::new();
    let mut unrecognized = Vec::new();
    for usage in usages {
        let k = match usage.as_str() {
            "signing" | "digital signature" => Some(KeyUsagePurpose::DigitalSignature),
            "content commitment" => Some(KeyUsagePurpose::ContentCommitment),
            "key encipherment" => Some(KeyUsagePurpose::KeyEncipherment),
            "key agreement" => Some(KeyUsagePurpose::KeyAgreement),
            "data encipherment" => Some(KeyUsagePurpose::DataEncipherment),
            "cert sign" => Some(KeyUsagePurpose::KeyCertSign),
            "crl sign" => Some(KeyUsagePurpose::CrlSign),
            "encipher only" => Some(KeyUsagePurpose::EncipherOnly),
            "decipher only" => Some(KeyUsagePurpose::DecipherOnly),
            _ => None,
        };
        if let Some(k) = k {
            if !key.contains(&k) {
                key.push(k);
            }
            continue;
        }
        let e = match usage.as_str() {
            "any" => Some((0, ExtendedKeyUsagePurpose::Any)),
            "server auth" => Some((1, ExtendedKeyUsagePurpose::ServerAuth)),
            "client auth" => Some((2, ExtendedKeyUsagePurpose::ClientAuth)),
            "code signing" => Some((3, ExtendedKeyUsagePurpose::CodeSigning)),
            "email protection" | "s/mime" => Some((4, ExtendedKeyUsagePurpose::EmailProtection)),
            "ipsec end system" => Some((
                5,
                ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 5]),
            )),
            "ipsec tunnel" => Some((
                6,
                ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 6]),
            )),
            "ipsec user" => Some((
                7,
                ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 7]),
            )),
            "timestamping" => Some((8, ExtendedKeyUsagePurpose::TimeStamping)),
            "ocsp signing" => Some((9, ExtendedKeyUsagePurpose::OcspSigning)),
            "microsoft sgc" => Some((
                10,
                ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 4, 1, 311, 10, 3, 3]),
            )),
            "netscape sgc" => Some((
                11,
                ExtendedKeyUsagePurpose::Other(vec![2, 16, 840, 1, 113730, 4, 1]),
            )),
            _ => None,
        };
        match e {
            Some(e) if !extended.contains(&e) => extended.push(e),
            Some(_) => {}
            None => unrecognized.push(usage.clone()),
        }
    }
    if !unrecognized.is_empty() {
        return Err(CsrError::UnrecognizedUsages {
            usages: unrecognized,
        });
    }
    extended.sort_by_key(|(rank, _)| *rank);
    Ok((key, extended.into_iter().map(|(_, e)| e).collect()))
}

/// How long a certificate for a request with `spec.expirationSeconds` lives: the request's
/// wish, at least [`MIN_DURATION`] and at most `max` (upstream's `signer.duration`).
pub fn certificate_duration(expiration_seconds: Option<i32>, max: Duration) -> Duration {
    let Some(seconds) = expiration_seconds else {
        return max;
    };
    let requested = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    if requested > max {
        max
    } else if requested < MIN_DURATION {
        MIN_DURATION
    } else {
        requested
    }
}

/// The cluster CA, loaded once: its certificate, key and expiry.
pub struct Authority {
    cert_pem: String,
    key: KeyPair,
    not_after: OffsetDateTime,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl Authority {
    /// Loads the CA from its PEM certificate and PEM (PKCS#8) key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Authority, SignError> {
        let key = KeyPair::from_pem(key_pem).map_err(SignError::CaKey)?;
        // Parses the certificate as the signer will, so a broken one fails here.
        Issuer::from_ca_cert_pem(cert_pem, &key).map_err(SignError::CaCertificate)?;
        let not_after = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
            .ok()
            .and_then(|(_, block)| {
                let (_, cert) = x509_parser::parse_x509_certificate(&block.contents).ok()?;
                OffsetDateTime::from_unix_timestamp(cert.validity().not_after.timestamp()).ok()
            })
            .ok_or(SignError::CaCertificate(
                rcgen::Error::CouldNotParseCertificate,
            ))?;
        Ok(Authority {
            cert_pem: cert_pem.to_string(),
            key,
            not_after,
        })
    }

    /// When the CA certificate expires; no certificate it issues outlives it.
    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// Issues a certificate for `req` valid for `ttl` from `now`, as upstream's
    /// `PermissiveSigningPolicy`: the request's subject and SANs, the key usages of `usages`,
    /// `CA:FALSE`, a random 127-bit serial, `notBefore` five minutes early, `notAfter` at
    /// `now + ttl` (less the five minutes when `ttl` is 8 h or more) and never past the CA's.
    /// Returns the certificate as PEM.
    pub fn sign_at(
        &self,
        req: &CertificateRequest,
        usages: &[String],
        ttl: Duration,
        now: OffsetDateTime,
    ) -> Result<String, SignError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = req.distinguished_name()?;
        params.subject_alt_names = req.subject_alt_names()?;
        let (key_usages, extended_key_usages) = key_usages(usages)?;
        params.key_usages = key_usages;
        params.extended_key_usages = extended_key_usages;
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial()?);

        let not_before = sub(now, BACKDATE);
        let lifetime = if ttl < SHORT {
            ttl
        } else {
            ttl.saturating_sub(BACKDATE)
        };
        let not_after = add(now, lifetime).min(self.not_after);
        if not_before >= self.not_after {
            return Err(SignError::SignerExpired {
                not_after: self.not_after,
            });
        }
        if now >= self.not_after {
            return Err(SignError::ExpiredInThePast {
                not_after: self.not_after,
            });
        }
        params.not_before = not_before;
        params.not_after = not_after;

        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, &self.key)
            .map_err(SignError::CaCertificate)?;
        let cert = params
            .signed_by(&req.public_key, &issuer)
            .map_err(SignError::Sign)?;
        Ok(cert.pem())
    }
}

/// Issues a certificate for the DER request `csr_der` with the CA `ca_cert_pem`/`ca_key_pem`,
/// valid for `duration` from now (see [`Authority::sign_at`]; [`certificate_duration`] turns
/// `spec.expirationSeconds` into `duration`). The request's signature is checked; whether its
/// signer may issue it is not (see [`check`]). Returns the certificate as PEM.
pub fn sign(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    csr_der: &[u8],
    usages: &[String],
    duration: Duration,
) -> Result<String, SignError> {
    let authority = Authority::from_pem(ca_cert_pem, ca_key_pem)?;
    let req = CertificateRequest::from_der(csr_der)?;
    authority.sign_at(&req, usages, duration, OffsetDateTime::now_utc())
}

fn add(t: OffsetDateTime, d: Duration) -> OffsetDateTime {
    time::Duration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d))
        .unwrap_or(OffsetDateTime::new_utc(
            time::Date::MAX,
            time::Time::MIDNIGHT,
        ))
}

fn sub(t: OffsetDateTime, d: Duration) -> OffsetDateTime {
    time::Duration::try_from(d)
        .ok()
        .and_then(|d| t.checked_sub(d))
        .unwrap_or(t)
}

/// 16 random bytes with the top bit clear: a positive serial of up to 127 bits, as upstream's
/// `rand.Int(rand.Reader, 2^128)` gives.
fn random_serial() -> Result<SerialNumber, SignError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| SignError::SerialNumber)?;
    bytes[0] &= 0x7f;
    Ok(SerialNumber::from_slice(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    use x509_parser::certificate::X509Certificate;

    struct Ca {
        cert_pem: String,
        key_pem: String,
    }

    fn ca() -> Ca {
        let (cert_pem, key_pem) = super::super::testing::ca_pems();
        Ca { cert_pem, key_pem }
    }

    use super::super::testing::request_pem as request;

    fn usages(u: &[&str]) -> Vec<String> {
        u.iter().map(|s| s.to_string()).collect()
    }

    fn node_usages() -> Vec<String> {
        usages(&["digital signature", "client auth"])
    }

    fn der_of(pem: &str) -> Vec<u8> {
        x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .expect("pem")
            .1
            .contents
    }

    fn refusal(signer: &str, pem: &str, u: &[String]) -> String {
        check(signer, pem.as_bytes(), u)
            .expect_err("refused")
            .to_string()
    }

    fn ca_now() -> OffsetDateTime {
        rcgen::date_time_ymd(2030, 6, 1)
    }

    #[test]
    fn node_client_request_signs_into_a_certificate_that_keeps_the_subject_and_chains_to_the_ca() {
        let ca = ca();
        let pem = request("system:node:n1", &["system:nodes"], &[]);
        let req = check(
            KUBE_APISERVER_CLIENT_KUBELET,
            pem.as_bytes(),
            &node_usages(),
        )
        .expect("valid node client request");
        let authority = Authority::from_pem(&ca.cert_pem, &ca.key_pem).expect("ca");
        let cert_pem = authority
            .sign_at(&req, &node_usages(), Duration::from_secs(3600), ca_now())
            .expect("signed");

        let der = der_of(&cert_pem);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("certificate");
        let cn: Vec<_> = cert
            .subject()
            .iter_common_name()
            .map(|a| a.as_str().expect("cn"))
            .collect();
        let orgs: Vec<_> = cert
            .subject()
            .iter_organization()
            .map(|a| a.as_str().expect("o"))
            .collect();
        assert_eq!(cn, ["system:node:n1"]);
        assert_eq!(orgs, ["system:nodes"]);

        let ca_der = der_of(&ca.cert_pem);
        let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).expect("ca certificate");
        assert_eq!(cert.issuer().as_raw(), ca_cert.subject().as_raw());
        cert.verify_signature(Some(ca_cert.public_key()))
            .expect("signed by the CA");

        let eku = cert
            .extended_key_usage()
            .expect("eku")
            .expect("present")
            .value;
        assert!(eku.client_auth && !eku.server_auth);
        let ku = cert.key_usage().expect("ku").expect("present").value;
        assert!(ku.digital_signature() && !ku.key_cert_sign());
        let bc = cert
            .basic_constraints()
            .expect("bc")
            .expect("present")
            .value;
        assert!(!bc.ca);
        assert!(cert.subject_alternative_name().expect("san").is_none());
        // Backdated five minutes; a short certificate keeps its whole hour after now.
        assert_eq!(
            cert.validity().not_before.timestamp(),
            (ca_now() - time::Duration::minutes(5)).unix_timestamp()
        );
        assert_eq!(
            cert.validity().not_after.timestamp(),
            (ca_now() + time::Duration::hours(1)).unix_timestamp()
        );
    }

    #[test]
    fn sign_takes_der_and_issues_with_the_current_time() {
        let ca = ca();
        let pem = request("system:node:n1", &["system:nodes"], &[]);
        let cert_pem = sign(
            &ca.cert_pem,
            &ca.key_pem,
            &der_of(&pem),
            &node_usages(),
            Duration::from_secs(24 * 3600),
        )
        .expect("signed");
        let der = der_of(&cert_pem);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("certificate");
        let lifetime =
            cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
        // A long certificate: both ends backdated five minutes.
        assert_eq!(lifetime, 24 * 3600);
    }

    #[test]
    fn serials_differ_between_certificates_for_the_same_key() {
        let ca = ca();
        let authority = Authority::from_pem(&ca.cert_pem, &ca.key_pem).expect("ca");
        let pem = request("system:node:n1", &["system:nodes"], &[]);
        let req = CertificateRequest::from_pem(pem.as_bytes()).expect("request");
        let serial = |pem: String| {
            let der = der_of(&pem);
            let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("certificate");
            cert.raw_serial().to_vec()
        };
        let a = serial(
            authority
                .sign_at(&req, &node_usages(), MIN_DURATION, ca_now())
                .expect("a"),
        );
        let b = serial(
            authority
                .sign_at(&req, &node_usages(), MIN_DURATION, ca_now())
                .expect("b"),
        );
        assert_ne!(a, b);
    }

    #[test]
    fn node_client_request_with_another_organization_is_refused() {
        let pem = request("system:node:n1", &["system:masters"], &[]);
        assert_eq!(
            refusal(KUBE_APISERVER_CLIENT_KUBELET, &pem, &node_usages()),
            "subject organization is not system:nodes"
        );
        let pem = request("system:node:n1", &["system:nodes", "system:masters"], &[]);
        assert_eq!(
            refusal(KUBE_APISERVER_CLIENT_KUBELET, &pem, &node_usages()),
            "subject organization is not system:nodes"
        );
        let pem = request("system:node:n1", &[], &[]);
        assert_eq!(
            refusal(KUBE_APISERVER_CLIENT_KUBELET, &pem, &node_usages()),
            "subject organization is not system:nodes"
        );
    }

    #[test]
    fn node_client_request_with_subject_alt_names_is_refused() {
        let pem = request("system:node:n1", &["system:nodes"], &["n1.example"]);
        assert_eq!(
            refusal(KUBE_APISERVER_CLIENT_KUBELET, &pem, &node_usages()),
            "DNS subjectAltNames are not allowed"
        );
        let pem = request("system:node:n1", &["system:nodes"], &["10.0.0.1"]);
        assert_eq!(
            refusal(KUBE_APISERVER_CLIENT_KUBELET, &pem, &node_usages()),
            "IP subjectAltNames are not allowed"
        );
    }

    #[test]
    fn node_client_request_for_another_common_name_is_refused() {
        let pem = request("alice", &["system:nodes"], &[]);
        assert_eq!(
            refusal(KUBE_APISERVER_CLIENT_KUBELET, &pem, &node_usages()),
            "subject common name does not begin with system:node:"
        );
    }

    #[test]
    fn node_client_request_with_other_usages_is_refused() {
        let pem = request("system:node:n1", &["system:nodes"], &[]);
        let expected = "usages did not match [client auth digital signature key encipherment]";
        for u in [
            usages(&["client auth"]),
            usages(&["digital signature", "client auth", "server auth"]),
            usages(&["digital signature", "key encipherment"]),
        ] {
            assert_eq!(refusal(KUBE_APISERVER_CLIENT_KUBELET, &pem, &u), expected);
        }
        // The RSA set, and duplicates, are fine.
        for u in [
            usages(&["digital signature", "key encipherment", "client auth"]),
            usages(&["client auth", "digital signature", "client auth"]),
        ] {
            check(KUBE_APISERVER_CLIENT_KUBELET, pem.as_bytes(), &u).expect("allowed usages");
        }
    }

    #[test]
    fn request_with_a_broken_signature_is_refused() {
        let pem = request("system:node:n1", &["system:nodes"], &[]);
        let mut der = der_of(&pem);
        // The signature is the request's last bytes.
        let last = der.len() - 1;
        der[last] ^= 0x01;
        let err = CertificateRequest::from_der(&der).expect_err("refused");
        assert_eq!(
            err.to_string(),
            "unable to verify certificate request signature"
        );
        let ca = ca();
        let err = sign(
            &ca.cert_pem,
            &ca.key_pem,
            &der,
            &node_usages(),
            MIN_DURATION,
        )
        .expect_err("not signed");
        assert_eq!(
            err.to_string(),
            "unable to verify certificate request signature"
        );
    }

    #[test]
    fn request_that_is_not_a_pem_certificate_request_is_refused() {
        assert_eq!(
            refusal(KUBE_APISERVER_CLIENT_KUBELET, "hello", &node_usages()),
            "PEM block type must be CERTIFICATE REQUEST"
        );
        let ca = ca();
        assert_eq!(
            refusal(KUBE_APISERVER_CLIENT_KUBELET, &ca.cert_pem, &node_usages()),
            "PEM block type must be CERTIFICATE REQUEST"
        );
        let garbage =
            "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n";
        assert_eq!(
            refusal(KUBE_APISERVER_CLIENT_KUBELET, garbage, &node_usages()),
            "the certificate request cannot be parsed"
        );
    }

    #[test]
    fn request_for_a_signer_this_controller_does_not_serve_is_refused() {
        let pem = request("system:node:n1", &["system:nodes"], &[]);
        assert_eq!(
            refusal("example.com/other", &pem, &node_usages()),
            "signer \"example.com/other\" is not served by this signer"
        );
        assert_eq!(Signer::from_name("example.com/other"), None);
        assert_eq!(
            Signer::from_name(KUBELET_SERVING).map(Signer::name),
            Some(KUBELET_SERVING)
        );
    }

    #[test]
    fn serving_request_under_the_kubelet_client_signer_is_refused() {
        let pem = request("system:node:n1", &["system:nodes"], &["n1.example"]);
        let serving = usages(&["digital signature", "server auth"]);
        check(KUBELET_SERVING, pem.as_bytes(), &serving).expect("a valid serving request");
        assert_eq!(
            refusal(KUBE_APISERVER_CLIENT_KUBELET, &pem, &serving),
            "DNS subjectAltNames are not allowed"
        );
        let no_san = request("system:node:n1", &["system:nodes"], &[]);
        assert_eq!(
            refusal(KUBELET_SERVING, &no_san, &serving),
            "DNS or IP subjectAltName is required"
        );
    }

    #[test]
    fn apiserver_client_takes_any_subject_but_needs_client_auth() {
        let pem = request("alice", &["dev"], &[]);
        check(
            KUBE_APISERVER_CLIENT,
            pem.as_bytes(),
            &usages(&["client auth"]),
        )
        .expect("any subject");
        assert_eq!(
            refusal(KUBE_APISERVER_CLIENT, &pem, &usages(&["digital signature"])),
            "missing required usage for client certificate: client auth"
        );
        assert_eq!(
            refusal(
                KUBE_APISERVER_CLIENT,
                &pem,
                &usages(&["client auth", "server auth"])
            ),
            "invalid usage for client certificate: server auth"
        );
    }

    #[test]
    fn subject_with_a_repeated_attribute_is_refused_at_signing() {
        let ca = ca();
        let authority = Authority::from_pem(&ca.cert_pem, &ca.key_pem).expect("ca");
        let pem = request("alice", &["dev", "ops"], &[]);
        let req = check(
            KUBE_APISERVER_CLIENT,
            pem.as_bytes(),
            &usages(&["client auth"]),
        )
        .expect("valid for the signer");
        assert_eq!(req.organizations, ["dev", "ops"]);
        let err = authority
            .sign_at(&req, &usages(&["client auth"]), MIN_DURATION, ca_now())
            .expect_err("cannot be issued");
        assert_eq!(
            err.to_string(),
            "subject has more than one O attribute, which the signer cannot issue"
        );
    }

    #[test]
    fn unrecognized_usages_are_refused_at_signing() {
        let ca = ca();
        let authority = Authority::from_pem(&ca.cert_pem, &ca.key_pem).expect("ca");
        let pem = request("alice", &[], &[]);
        let req = CertificateRequest::from_pem(pem.as_bytes()).expect("request");
        let err = authority
            .sign_at(
                &req,
                &usages(&["client auth", "teleport"]),
                MIN_DURATION,
                ca_now(),
            )
            .expect_err("refused");
        assert_eq!(err.to_string(), "unrecognized usage values: [\"teleport\"]");
    }

    #[test]
    fn duration_honours_expiration_seconds_between_ten_minutes_and_the_cap() {
        let max = DEFAULT_MAX_DURATION;
        assert_eq!(certificate_duration(None, max), max);
        assert_eq!(
            certificate_duration(Some(3600), max),
            Duration::from_secs(3600)
        );
        assert_eq!(certificate_duration(Some(60), max), MIN_DURATION);
        assert_eq!(certificate_duration(Some(-5), max), MIN_DURATION);
        assert_eq!(certificate_duration(Some(i32::MAX), max), max);
        let short_cap = Duration::from_secs(7200);
        assert_eq!(certificate_duration(Some(86_400), short_cap), short_cap);
    }

    #[test]
    fn certificate_never_outlives_the_ca() {
        let ca = ca();
        let authority = Authority::from_pem(&ca.cert_pem, &ca.key_pem).expect("ca");
        let pem = request("system:node:n1", &["system:nodes"], &[]);
        let req = CertificateRequest::from_pem(pem.as_bytes()).expect("request");
        let near_end = authority.not_after() - time::Duration::days(30);
        let cert_pem = authority
            .sign_at(&req, &node_usages(), DEFAULT_MAX_DURATION, near_end)
            .expect("signed");
        let der = der_of(&cert_pem);
        let (_, cert): (_, X509Certificate<'_>) =
            x509_parser::parse_x509_certificate(&der).expect("certificate");
        assert_eq!(
            cert.validity().not_after.timestamp(),
            authority.not_after().unix_timestamp()
        );
        let err = authority
            .sign_at(&req, &node_usages(), MIN_DURATION, authority.not_after())
            .expect_err("expired CA");
        assert!(
            err.to_string()
                .starts_with("refusing to sign a certificate that expired in the past")
        );
        let err = authority
            .sign_at(
                &req,
                &node_usages(),
                MIN_DURATION,
                authority.not_after() + time::Duration::hours(1),
            )
            .expect_err("expired CA");
        assert!(err.to_string().starts_with("the signer has expired"));
    }
}
