//! Certificate signing for `certificates.k8s.io/v1` CertificateSigningRequests — upstream's
//! `pkg/controller/certificates`: the approver that lets kubelets join with a bootstrap token and
//! renew their own client certificates ([`approver`], csrapproving), and the signer that issues
//! approved requests with the cluster CA ([`signer`], csrsigning). The checks and the signing
//! itself are pure and live in [`csr`].
//!
//! A joining node's path: it authenticates with a bootstrap token (`system:bootstrap:<id>`, group
//! `system:bootstrappers`) and creates a request for `system:node:<name>` in `system:nodes` with
//! signer `kubernetes.io/kube-apiserver-client-kubelet`; the approver asks the API server with a
//! SubjectAccessReview whether the requester may `create` `certificatesigningrequests/nodeclient`
//! and approves; the signer fills `status.certificate`. Renewals by the node itself are approved
//! on `certificatesigningrequests/selfnodeclient`. Any other request waits for
//! `kubectl certificate approve`.

pub mod approver;
pub mod csr;
pub mod signer;
#[cfg(test)]
mod testing;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use crate::informer::Informer;

/// The condition an approver (or `kubectl certificate approve`) adds.
pub const APPROVED: &str = "Approved";
/// The condition `kubectl certificate deny` adds.
pub const DENIED: &str = "Denied";
/// The condition a signer adds when it will not issue a request.
pub const FAILED: &str = "Failed";

/// What a sync of either loop can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed.
    #[error("api request failed")]
    Kube(#[from] kube::Error),
    /// The CA could not issue an otherwise valid request (unreadable or expired CA).
    #[error("cannot issue the certificate")]
    Sign(#[from] csr::SignError),
    /// The approver recognised the request but the requester may not have it approved; it is
    /// looked at again later, as RBAC may change (upstream's `IgnorableError`).
    #[error("recognized csr {name:?} as {tried:?} but subject access review was not approved")]
    NotApproved {
        name: String,
        tried: Vec<&'static str>,
    },
}

/// Starts the approver and the signer on one shared CertificateSigningRequest informer; they run
/// until the runtime stops. The signer issues with the CA `ca_cert_pem`/`ca_key_pem` (PEM, the
/// key PKCS#8) certificates of at most `max_duration` (upstream's `--cluster-signing-duration`,
/// [`csr::DEFAULT_MAX_DURATION`] by default). A CA that cannot be read is logged and leaves the
/// signer off; the approver runs regardless.
pub fn start(
    client: kube::Client,
    ca_cert_pem: String,
    ca_key_pem: String,
    max_duration: Duration,
) {
    let csrs = Informer::<CertificateSigningRequest>::start(client.clone());
    crate::scope::spawn(approver::run(client.clone(), csrs.clone()));
    match csr::Authority::from_pem(&ca_cert_pem, &ca_key_pem) {
        Ok(authority) => {
            crate::scope::spawn(signer::run(client, csrs, Arc::new(authority), max_duration));
        }
        Err(e) => {
            tracing::error!(error = %e, cause = ?std::error::Error::source(&e), "the cluster CA cannot be read; CertificateSigningRequests will not be signed");
        }
    }
}

/// Whether a write failed because the request changed meanwhile (409) or is gone (404): the
/// informer brings the newer version, or nothing is left to do.
fn is_stale_or_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 || s.code == 404)
}

/// Whether the request carries an `Approved` and a `Denied` condition (upstream's
/// `GetCertApprovalCondition`, which looks at the types only).
pub fn approval(csr: &CertificateSigningRequest) -> (bool, bool) {
    let mut approved = false;
    let mut denied = false;
    for c in conditions(csr) {
        approved |= c.type_ == APPROVED;
        denied |= c.type_ == DENIED;
    }
    (approved, denied)
}

/// Approved and not denied (upstream's `IsCertificateRequestApproved`).
pub fn is_approved(csr: &CertificateSigningRequest) -> bool {
    approval(csr) == (true, false)
}

/// Whether a condition of `type_` has status `True` (upstream's `HasTrueCondition`).
pub fn has_true_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    conditions(csr).any(|c| c.type_ == type_ && c.status == "True")
}

/// Whether `status.certificate` is filled.
/// `csr` with a `True` condition of `type_` appended, stamped `now` (what the approver and the
/// signer write back).
pub fn with_true_condition(
    csr: &CertificateSigningRequest,
    type_: &str,
    reason: &str,
    message: &str,
    now: k8s_openapi::jiff::Timestamp,
) -> CertificateSigningRequest {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let mut out = csr.clone();
    out.status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default()
        .push(CertificateSigningRequestCondition {
            type_: type_.to_string(),
            status: "True".to_string(),
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            last_update_time: Some(Time(now)),
            last_transition_time: Some(Time(now)),
        });
    out
}

pub fn is_issued(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

fn conditions(
    csr: &CertificateSigningRequest,
) -> impl Iterator<Item = &k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition> {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
}
