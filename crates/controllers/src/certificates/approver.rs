//! The CSR approver — upstream's `pkg/controller/certificates/approver` (csrapproving): a request
//! for a kubelet client certificate is approved when a SubjectAccessReview says its requester may
//! `create` the matching `certificatesigningrequests` subresource in `certificates.k8s.io`:
//!
//! - `selfnodeclient`: the requester renews its own certificate (`spec.username` is the
//!   request's common name, `system:node:<name>`);
//! - `nodeclient`: any requester allowed to get a node its first certificate — the bootstrap
//!   tokens (`system:bootstrappers`) once RBAC binds them.
//!
//! The approval is the condition `Approved`, reason `AutoApproved`, written through the
//! `approval` subresource. Requests it does not recognise, or whose requester is not allowed,
//! wait for `kubectl certificate approve`; a recognised one is looked at again with back-off, as
//! RBAC may change.

use std::sync::Arc;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, PostParams};

use super::csr::{self, CertificateRequest};
use super::{APPROVED, Error, approval, is_issued, with_true_condition};
use crate::controller_utils as cu;
use crate::informer::Informer;
use crate::workqueue::WorkQueue;

/// One kind of request the approver knows, and the permission that approves it.
#[derive(Debug)]
pub struct Recognizer {
    /// The `certificatesigningrequests` subresource the requester must be allowed to `create`.
    pub subresource: &'static str,
    /// The message of the `Approved` condition.
    pub message: &'static str,
    recognize: fn(&CertificateSigningRequest, &CertificateRequest) -> bool,
}

/// Upstream's recognizers, in upstream's order: a renewal is tried first.
pub static RECOGNIZERS: [Recognizer; 2] = [
    Recognizer {
        subresource: "selfnodeclient",
        message: "Auto approving self kubelet client certificate after SubjectAccessReview.",
        recognize: is_self_node_client_cert,
    },
    Recognizer {
        subresource: "nodeclient",
        message: "Auto approving kubelet client certificate after SubjectAccessReview.",
        recognize: is_node_client_cert,
    },
];

/// A request for the kubelet client signer that passes its checks (upstream's
/// `isNodeClientCert`).
fn is_node_client_cert(csr: &CertificateSigningRequest, req: &CertificateRequest) -> bool {
    csr.spec.signer_name == csr::KUBE_APISERVER_CLIENT_KUBELET
        && csr::validate_kubelet_client(req, csr.spec.usages.as_deref().unwrap_or_default()).is_ok()
}

/// A node client request made by the node it names (upstream's `isSelfNodeClientCert`).
fn is_self_node_client_cert(csr: &CertificateSigningRequest, req: &CertificateRequest) -> bool {
    csr.spec.username.as_deref() == Some(req.common_name.as_str()) && is_node_client_cert(csr, req)
}

/// The recognizers that match `csr`, in the order to try them; none for a request that is
/// already issued, approved or denied, or whose `spec.request` does not decode (the signer
/// reports that one).
pub fn recognize(csr: &CertificateSigningRequest) -> Vec<&'static Recognizer> {
    if is_issued(csr) || approval(csr) != (false, false) {
        return Vec::new();
    }
    let Ok(req) = CertificateRequest::from_pem(&csr.spec.request.0) else {
        return Vec::new();
    };
    RECOGNIZERS
        .iter()
        .filter(|r| (r.recognize)(csr, &req))
        .collect()
}

/// The SubjectAccessReview asking whether the requester of `csr` may `create`
/// `certificatesigningrequests/<subresource>` (upstream's `sarApprover.authorize`): the
/// requester's user, uid, groups and extra as the API server recorded them in the request.
pub fn access_review(csr: &CertificateSigningRequest, subresource: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: csr.spec.username.clone(),
            uid: csr.spec.uid.clone(),
            groups: csr.spec.groups.clone(),
            extra: csr.spec.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".to_string()),
                resource: Some("certificatesigningrequests".to_string()),
                verb: Some("create".to_string()),
                subresource: Some(subresource.to_string()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

/// `csr` with the `Approved` condition (reason `AutoApproved`) appended, stamped `now`.
pub fn approved(
    csr: &CertificateSigningRequest,
    message: &str,
    now: Timestamp,
) -> CertificateSigningRequest {
    with_true_condition(csr, APPROVED, "AutoApproved", message, now)
}

struct Ctx {
    client: kube::Client,
    csrs: Informer<CertificateSigningRequest>,
    queue: WorkQueue,
}

/// Runs the approver on the shared informer `csrs` until the runtime stops.
pub async fn run(client: kube::Client, csrs: Informer<CertificateSigningRequest>) {
    let mut events = csrs.subscribe();
    csrs.wait_ready().await;
    let ctx = Arc::new(Ctx {
        client,
        csrs,
        queue: WorkQueue::named("certificate"),
    });
    ctx.queue.add_keys(&ctx.csrs.list());
    ctx.queue
        .run_workers_for(2, "csrapproving", &ctx, |ctx, name| async move {
            sync(&ctx, &name).await
        });
    while let Some(change) = events.recv().await {
        if let Some(csr) = change.new {
            ctx.queue.add(csr.name_any());
        }
    }
}

async fn sync(ctx: &Ctx, name: &str) -> Result<Option<std::time::Duration>, Error> {
    let Some(csr) = ctx.csrs.get("", name) else {
        return Ok(None);
    };
    let recognizers = recognize(&csr);
    if recognizers.is_empty() {
        return Ok(None);
    }
    let reviews: Api<SubjectAccessReview> = Api::all(ctx.client.clone());
    for r in &recognizers {
        let review = reviews
            .create(&PostParams::default(), &access_review(&csr, r.subresource))
            .await?;
        if !review.status.is_some_and(|s| s.allowed) {
            continue;
        }
        let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
        let update = approved(&csr, r.message, cu::now());
        return match api
            .replace_subresource("approval", name, &PostParams::default(), &update)
            .await
        {
            Ok(_) => {
                tracing::info!(csr = name, user = ?csr.spec.username, "approved {}", r.subresource);
                Ok(None)
            }
            // A newer version is on its way through the informer, or the request is gone.
            Err(e) if super::is_stale_or_gone(&e) => Ok(None),
            Err(e) => Err(e.into()),
        };
    }
    Err(Error::NotApproved {
        name: name.to_string(),
        tried: recognizers.iter().map(|r| r.subresource).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestSpec, CertificateSigningRequestStatus,
    };

    fn request_pem(cn: &str, org: &str) -> Vec<u8> {
        crate::certificates::testing::request_pem(cn, &[org], &[]).into_bytes()
    }

    fn csr(user: &str, cn: &str, org: &str) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: kube::api::ObjectMeta {
                name: Some("node-csr-abc".to_string()),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(request_pem(cn, org)),
                signer_name: csr::KUBE_APISERVER_CLIENT_KUBELET.to_string(),
                usages: Some(vec!["digital signature".into(), "client auth".into()]),
                username: Some(user.to_string()),
                groups: Some(vec![
                    "system:bootstrappers".into(),
                    "system:authenticated".into(),
                ]),
                ..Default::default()
            },
            status: None,
        }
    }

    fn subresources(csr: &CertificateSigningRequest) -> Vec<&'static str> {
        recognize(csr).iter().map(|r| r.subresource).collect()
    }

    #[test]
    fn bootstrap_request_for_a_node_client_is_recognized_as_nodeclient() {
        let c = csr("system:bootstrap:abcdef", "system:node:n1", "system:nodes");
        assert_eq!(subresources(&c), ["nodeclient"]);
    }

    #[test]
    fn renewal_by_the_node_itself_tries_selfnodeclient_first() {
        let c = csr("system:node:n1", "system:node:n1", "system:nodes");
        assert_eq!(subresources(&c), ["selfnodeclient", "nodeclient"]);
        let other = csr("system:node:n2", "system:node:n1", "system:nodes");
        assert_eq!(subresources(&other), ["nodeclient"]);
    }

    #[test]
    fn requests_that_are_not_node_clients_wait_for_a_person() {
        let wrong_org = csr(
            "system:bootstrap:abcdef",
            "system:node:n1",
            "system:masters",
        );
        assert!(recognize(&wrong_org).is_empty());
        let mut other_signer = csr("system:bootstrap:abcdef", "system:node:n1", "system:nodes");
        other_signer.spec.signer_name = csr::KUBE_APISERVER_CLIENT.to_string();
        assert!(recognize(&other_signer).is_empty());
        let mut broken = csr("system:bootstrap:abcdef", "system:node:n1", "system:nodes");
        broken.spec.request = ByteString(b"not a request".to_vec());
        assert!(recognize(&broken).is_empty());
    }

    #[test]
    fn approved_denied_or_issued_requests_are_left_alone() {
        let base = csr("system:bootstrap:abcdef", "system:node:n1", "system:nodes");
        let now = Timestamp::UNIX_EPOCH;
        assert!(recognize(&approved(&base, "ok", now)).is_empty());
        let mut denied = approved(&base, "no", now);
        if let Some(c) = denied
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .and_then(|c| c.first_mut())
        {
            c.type_ = super::super::DENIED.to_string();
        }
        assert!(recognize(&denied).is_empty());
        let mut issued = base.clone();
        issued.status = Some(CertificateSigningRequestStatus {
            certificate: Some(ByteString(b"pem".to_vec())),
            conditions: None,
        });
        assert!(recognize(&issued).is_empty());
    }

    #[test]
    fn access_review_asks_about_the_requester_and_the_subresource() {
        let mut c = csr("system:bootstrap:abcdef", "system:node:n1", "system:nodes");
        c.spec.uid = Some("u-1".to_string());
        let review = serde_json::to_value(access_review(&c, "nodeclient")).expect("json");
        assert_eq!(
            review["spec"],
            serde_json::json!({
                "user": "system:bootstrap:abcdef",
                "uid": "u-1",
                "groups": ["system:bootstrappers", "system:authenticated"],
                "resourceAttributes": {
                    "group": "certificates.k8s.io",
                    "resource": "certificatesigningrequests",
                    "verb": "create",
                    "subresource": "nodeclient",
                },
            })
        );
    }

    #[test]
    fn approval_appends_an_auto_approved_condition() {
        let c = csr("system:bootstrap:abcdef", "system:node:n1", "system:nodes");
        let out = approved(&c, RECOGNIZERS[1].message, Timestamp::UNIX_EPOCH);
        let conditions = out.status.and_then(|s| s.conditions).expect("conditions");
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].type_, "Approved");
        assert_eq!(conditions[0].status, "True");
        assert_eq!(conditions[0].reason.as_deref(), Some("AutoApproved"));
        assert_eq!(
            conditions[0].message.as_deref(),
            Some("Auto approving kubelet client certificate after SubjectAccessReview.")
        );
    }
}
