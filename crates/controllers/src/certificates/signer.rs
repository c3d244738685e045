//! The CSR signer — upstream's `pkg/controller/certificates/signer` (csrsigning) for the
//! `kubernetes.io/kube-apiserver-client-kubelet`, `kubernetes.io/kube-apiserver-client` and
//! `kubernetes.io/kubelet-serving` signers, with the cluster CA.
//!
//! A request that is approved, not denied, not failed and not yet issued is checked against its
//! signer; one that passes gets `status.certificate`, one that does not gets the condition
//! `Failed` (reason `SignerValidationFailure`, the check's message), both through the `status`
//! subresource. Requests for other signers are left for a signer outside the cluster.
//!
//! Differences from upstream: a `spec.request` that does not decode, or whose signature does not
//! verify, fails the request here (upstream's API server refuses such a request when it is
//! created, and its signer would retry one for ever); a subject that repeats an attribute fails
//! too (see [`csr`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use time::OffsetDateTime;

use super::csr::{self, Authority, CertificateRequest, SignError, Signer};
use super::{Error, FAILED, has_true_condition, is_approved, is_issued, with_true_condition};
use crate::controller_utils as cu;
use crate::informer::Informer;
use crate::workqueue::WorkQueue;

/// What the signer does with one request.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Not for this signer, not approved, or already done.
    Ignore,
    /// Refused: add the `Failed` condition with this message.
    Fail(String),
    /// Issued: this PEM certificate goes in `status.certificate`.
    Issue(String),
}

/// Decides what to do with `csr` at `now` (upstream's `signer.handle`): certificates last
/// [`csr::certificate_duration`] of `spec.expirationSeconds` capped by `max_duration`. An error
/// is the CA's, not the request's, and is retried.
pub fn decide(
    csr: &CertificateSigningRequest,
    authority: &Authority,
    max_duration: Duration,
    now: OffsetDateTime,
) -> Result<Decision, SignError> {
    if !is_approved(csr) || has_true_condition(csr, FAILED) || is_issued(csr) {
        return Ok(Decision::Ignore);
    }
    let Some(signer) = Signer::from_name(&csr.spec.signer_name) else {
        return Ok(Decision::Ignore);
    };
    let usages = csr.spec.usages.as_deref().unwrap_or_default();
    let req = match CertificateRequest::from_pem(&csr.spec.request.0) {
        Ok(req) => req,
        Err(e) => return Ok(Decision::Fail(e.to_string())),
    };
    if let Err(e) = signer.validate(&req, usages) {
        return Ok(Decision::Fail(e.to_string()));
    }
    let ttl = csr::certificate_duration(csr.spec.expiration_seconds, max_duration);
    match authority.sign_at(&req, usages, ttl, now) {
        Ok(pem) => Ok(Decision::Issue(pem)),
        Err(SignError::Request(e)) => Ok(Decision::Fail(e.to_string())),
        Err(e) => Err(e),
    }
}

/// `csr` with the `Failed` condition (reason `SignerValidationFailure`) appended, stamped `now`.
pub fn failed(
    csr: &CertificateSigningRequest,
    message: &str,
    now: Timestamp,
) -> CertificateSigningRequest {
    with_true_condition(csr, FAILED, "SignerValidationFailure", message, now)
}

/// `csr` with `status.certificate` set to `pem`.
pub fn issued(csr: &CertificateSigningRequest, pem: &str) -> CertificateSigningRequest {
    let mut out = csr.clone();
    out.status.get_or_insert_default().certificate = Some(ByteString(pem.as_bytes().to_vec()));
    out
}

struct Ctx {
    client: kube::Client,
    csrs: Informer<CertificateSigningRequest>,
    authority: Arc<Authority>,
    max_duration: Duration,
    queue: WorkQueue,
}

/// Runs the signer on the shared informer `csrs` with `authority` until the runtime stops.
pub async fn run(
    client: kube::Client,
    csrs: Informer<CertificateSigningRequest>,
    authority: Arc<Authority>,
    max_duration: Duration,
) {
    let mut events = csrs.subscribe();
    csrs.wait_ready().await;
    let ctx = Arc::new(Ctx {
        client,
        csrs,
        authority,
        max_duration,
        queue: WorkQueue::named("certificate"),
    });
    ctx.queue.add_keys(&ctx.csrs.list());
    ctx.queue
        .run_workers_for(2, "csrsigning", &ctx, |ctx, name| async move {
            sync(&ctx, &name).await
        });
    while let Some(change) = events.recv().await {
        if let Some(csr) = change.new {
            ctx.queue.add(csr.name_any());
        }
    }
}

async fn sync(ctx: &Ctx, name: &str) -> Result<Option<Duration>, Error> {
    let Some(csr) = ctx.csrs.get("", name) else {
        return Ok(None);
    };
    let update = match decide(
        &csr,
        &ctx.authority,
        ctx.max_duration,
        OffsetDateTime::now_utc(),
    )? {
        Decision::Ignore => return Ok(None),
        Decision::Fail(message) => {
            tracing::info!(csr = name, %message, "refusing to sign");
            failed(&csr, &message, cu::now())
        }
        Decision::Issue(pem) => issued(&csr, &pem),
    };
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    match api
        .replace_status(name, &PostParams::default(), &update)
        .await
    {
        Ok(_) => Ok(None),
        // A newer version is on its way through the informer, or the request is gone.
        Err(e) if super::is_stale_or_gone(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec;

    fn authority() -> Authority {
        let (cert_pem, key_pem) = crate::certificates::testing::ca_pems();
        Authority::from_pem(&cert_pem, &key_pem).expect("authority")
    }

    fn request_pem(cn: &str, org: &str) -> Vec<u8> {
        crate::certificates::testing::request_pem(cn, &[org], &[]).into_bytes()
    }

    fn approved_csr(org: &str) -> CertificateSigningRequest {
        let c = CertificateSigningRequest {
            metadata: kube::api::ObjectMeta {
                name: Some("node-csr-abc".to_string()),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(request_pem("system:node:n1", org)),
                signer_name: csr::KUBE_APISERVER_CLIENT_KUBELET.to_string(),
                usages: Some(vec!["digital signature".into(), "client auth".into()]),
                username: Some("system:bootstrap:abcdef".to_string()),
                ..Default::default()
            },
            status: None,
        };
        super::super::approver::approved(&c, "ok", Timestamp::UNIX_EPOCH)
    }

    fn now() -> OffsetDateTime {
        rcgen::date_time_ymd(2030, 1, 1)
    }

    #[test]
    fn approved_node_client_request_is_issued() {
        let a = authority();
        let d = decide(
            &approved_csr("system:nodes"),
            &a,
            csr::DEFAULT_MAX_DURATION,
            now(),
        )
        .expect("decision");
        let Decision::Issue(pem) = d else {
            panic!("expected a certificate, got {d:?}");
        };
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let out = issued(&approved_csr("system:nodes"), &pem);
        assert!(super::super::is_issued(&out));
    }

    #[test]
    fn approved_request_that_fails_its_signers_checks_is_failed_with_the_message() {
        let a = authority();
        let c = approved_csr("system:masters");
        let d = decide(&c, &a, csr::DEFAULT_MAX_DURATION, now()).expect("decision");
        assert_eq!(
            d,
            Decision::Fail("subject organization is not system:nodes".to_string())
        );
        let out = failed(
            &c,
            "subject organization is not system:nodes",
            Timestamp::UNIX_EPOCH,
        );
        assert!(has_true_condition(&out, FAILED));
        let last = out
            .status
            .and_then(|s| s.conditions)
            .and_then(|c| c.last().cloned())
            .expect("condition");
        assert_eq!(last.reason.as_deref(), Some("SignerValidationFailure"));
        // A failed request is not looked at again.
        let again = failed(&c, "x", Timestamp::UNIX_EPOCH);
        assert_eq!(
            decide(&again, &a, csr::DEFAULT_MAX_DURATION, now()).expect("decision"),
            Decision::Ignore
        );
    }

    #[test]
    fn unapproved_denied_issued_and_foreign_requests_are_ignored() {
        let a = authority();
        let ignore = |c: &CertificateSigningRequest| {
            decide(c, &a, csr::DEFAULT_MAX_DURATION, now()).expect("decision") == Decision::Ignore
        };
        let mut pending = approved_csr("system:nodes");
        pending.status = None;
        assert!(ignore(&pending));

        let mut denied = approved_csr("system:nodes");
        if let Some(conditions) = denied.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            conditions.push(
                k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition {
                    type_: super::super::DENIED.to_string(),
                    status: "True".to_string(),
                    ..Default::default()
                },
            );
        }
        assert!(ignore(&denied));

        assert!(ignore(&issued(&approved_csr("system:nodes"), "pem")));

        let mut foreign = approved_csr("system:nodes");
        foreign.spec.signer_name = "example.com/signer".to_string();
        assert!(ignore(&foreign));
    }

    #[test]
    fn undecodable_request_is_failed() {
        let a = authority();
        let mut c = approved_csr("system:nodes");
        c.spec.request = ByteString(b"garbage".to_vec());
        assert_eq!(
            decide(&c, &a, csr::DEFAULT_MAX_DURATION, now()).expect("decision"),
            Decision::Fail("PEM block type must be CERTIFICATE REQUEST".to_string())
        );
    }

    #[test]
    fn expiration_seconds_is_capped_by_the_maximum_duration() {
        let a = authority();
        let lifetime = |c: &CertificateSigningRequest, max: Duration| {
            let Ok(Decision::Issue(pem)) = decide(c, &a, max, now()) else {
                panic!("not issued");
            };
            let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("pem");
            let (_, cert) = x509_parser::parse_x509_certificate(&block.contents).expect("cert");
            cert.validity().not_after.timestamp() - now().unix_timestamp()
        };
        let mut c = approved_csr("system:nodes");
        c.spec.expiration_seconds = Some(3600);
        assert_eq!(lifetime(&c, csr::DEFAULT_MAX_DURATION), 3600);
        c.spec.expiration_seconds = Some(10 * 24 * 3600);
        // Capped at two days; long certificates end five minutes early, as they start.
        assert_eq!(
            lifetime(&c, Duration::from_secs(2 * 24 * 3600)),
            2 * 24 * 3600 - 300
        );
    }
}
