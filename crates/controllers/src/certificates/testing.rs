//! Fixtures the certificate tests share: a throw-away CA and PEM certificate requests, made
//! with rcgen as `openssl req` would make them.

use rcgen::{CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// The raw OID of `O` (organizationName), for a second organization rcgen keeps apart.
const OID_ORGANIZATION: &[u64] = &[2, 5, 4, 10];

/// A self-signed CA `test-ca`, valid 2024–2124, as (certificate PEM, private key PEM).
pub(crate) fn ca_pems() -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "test-ca");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(2124, 1, 1);
    let cert = params.self_signed(&key).expect("ca");
    (cert.pem(), key.serialize_pem())
}

/// A request for `cn` in `orgs` with `sans` (DNS names or IP addresses), as PEM.
pub(crate) fn request_pem(cn: &str, orgs: &[&str], sans: &[&str]) -> String {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .expect("params");
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    // rcgen keeps one value per type; a second organization goes under its raw OID.
    for (i, org) in orgs.iter().enumerate() {
        let ty = if i == 0 {
            DnType::OrganizationName
        } else {
            DnType::CustomDnType(OID_ORGANIZATION.to_vec())
        };
        dn.push(ty, *org);
    }
    params.distinguished_name = dn;
    params
        .serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem")
}
