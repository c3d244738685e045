//! Publishes the server as the cluster's DNS Service, `kube-system/kube-dns`, with the name,
//! labels and ports kubeadm gives CoreDNS's Service, and an EndpointSlice of its own pointing at
//! where this server listens. The Service has no selector, so the EndpointSlice controller leaves
//! the slice (labelled `endpointslice.kubernetes.io/managed-by: tandem-dns`) alone.

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::DnsError;

pub const DNS_NAMESPACE: &str = "kube-system";
pub const DNS_SERVICE: &str = "kube-dns";
/// This server's value of `endpointslice.kubernetes.io/managed-by`.
pub const MANAGED_BY: &str = "tandem-dns";

/// Creates or updates `kube-system/kube-dns` (cluster IP `cluster_dns_ip`, ports 53/UDP `dns`
/// and 53/TCP `dns-tcp` forwarded to `endpoint`'s port, labels `k8s-app=kube-dns` and
/// `kubernetes.io/name=CoreDNS`, no selector) and the EndpointSlice `kube-dns-<node_name>`
/// with one ready endpoint at `endpoint`'s address on node `node_name`.
///
/// A `kube-dns` Service holding another cluster IP is deleted and made again, the cluster IP
/// being immutable. `kube-system` is created if missing. Calling it again changes nothing.
pub async fn register_service(
    client: &kube::Client,
    cluster_dns_ip: IpAddr,
    endpoint: SocketAddr,
    node_name: &str,
) -> Result<(), DnsError> {
    ensure_namespace(client).await?;
    let services: Api<Service> = Api::namespaced(client.clone(), DNS_NAMESPACE);
    let desired = service_manifest(cluster_dns_ip, endpoint.port());
    let current = services.get_opt(DNS_SERVICE).await?;
    let wanted_ip = cluster_dns_ip.to_string();
    let service = match current {
        Some(s) if s.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some(&wanted_ip) => {
            let patch = json!({ "metadata": { "labels": desired["metadata"]["labels"] },
                                "spec": { "ports": desired["spec"]["ports"] } });
            services
                .patch(DNS_SERVICE, &PatchParams::default(), &Patch::Merge(&patch))
                .await?
        }
        current => {
            if current.is_some() {
                services
                    .delete(DNS_SERVICE, &DeleteParams::default())
                    .await?;
            }
            services
                .create(&PostParams::default(), &typed(desired, "Service")?)
                .await?
        }
    };
    let uid = service.metadata.uid.unwrap_or_default();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), DNS_NAMESPACE);
    let name = format!("{DNS_SERVICE}-{node_name}");
    let desired = slice_manifest(&name, &uid, endpoint, node_name);
    if slices.get_opt(&name).await?.is_some() {
        slices
            .patch(&name, &PatchParams::default(), &Patch::Merge(&desired))
            .await?;
    } else {
        slices
            .create(&PostParams::default(), &typed(desired, "EndpointSlice")?)
            .await?;
    }
    Ok(())
}

async fn ensure_namespace(client: &kube::Client) -> Result<(), DnsError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(DNS_NAMESPACE).await?.is_some() {
        return Ok(());
    }
    let namespace = typed(
        json!({ "metadata": { "name": DNS_NAMESPACE } }),
        "Namespace",
    )?;
    match namespaces.create(&PostParams::default(), &namespace).await {
        Ok(_) => Ok(()),
        // Made meanwhile by someone else.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn typed<K: DeserializeOwned + Serialize>(value: Value, what: &'static str) -> Result<K, DnsError> {
    serde_json::from_value(value).map_err(|source| DnsError::Manifest { what, source })
}

fn service_manifest(cluster_dns_ip: IpAddr, target_port: u16) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": DNS_SERVICE,
            "namespace": DNS_NAMESPACE,
            "labels": {
                "k8s-app": "kube-dns",
                "kubernetes.io/name": "CoreDNS",
                "kubernetes.io/cluster-service": "true"
            }
        },
        "spec": {
            "type": "ClusterIP",
            "clusterIP": cluster_dns_ip.to_string(),
            "clusterIPs": [cluster_dns_ip.to_string()],
            "ports": [
                { "name": "dns", "port": 53, "protocol": "UDP", "targetPort": target_port },
                { "name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": target_port }
            ]
        }
    })
}

fn slice_manifest(name: &str, service_uid: &str, endpoint: SocketAddr, node_name: &str) -> Value {
    let address_type = if endpoint.is_ipv4() { "IPv4" } else { "IPv6" };
    let mut metadata = json!({
        "name": name,
        "namespace": DNS_NAMESPACE,
        "labels": {
            "kubernetes.io/service-name": DNS_SERVICE,
            "endpointslice.kubernetes.io/managed-by": MANAGED_BY,
            "k8s-app": "kube-dns"
        }
    });
    if !service_uid.is_empty() {
        // Goes with the Service when it is deleted.
        metadata["ownerReferences"] = json!([{
            "apiVersion": "v1",
            "kind": "Service",
            "name": DNS_SERVICE,
            "uid": service_uid
        }]);
    }
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": metadata,
        "addressType": address_type,
        "endpoints": [{
            "addresses": [endpoint.ip().to_string()],
            "conditions": { "ready": true, "serving": true, "terminating": false },
            "nodeName": node_name
        }],
        "ports": [
            { "name": "dns", "port": endpoint.port(), "protocol": "UDP" },
            { "name": "dns-tcp", "port": endpoint.port(), "protocol": "TCP" }
        ]
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

    use super::*;

    #[test]
    fn manifests_decode_into_the_typed_objects() {
        let service: Service = typed(
            service_manifest("10.96.0.10".parse().unwrap(), 5353),
            "Service",
        )
        .unwrap();
        let spec = service.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.10"));
        assert!(spec.selector.is_none());
        let ports = spec.ports.unwrap();
        assert_eq!(ports[0].name.as_deref(), Some("dns"));
        assert_eq!(ports[1].protocol.as_deref(), Some("TCP"));
        let slice: EndpointSlice = typed(
            slice_manifest(
                "kube-dns-n1",
                "uid-1",
                "[fd00::1]:53".parse().unwrap(),
                "n1",
            ),
            "EndpointSlice",
        )
        .unwrap();
        assert_eq!(slice.address_type, "IPv6");
        assert_eq!(slice.endpoints[0].addresses, ["fd00::1"]);
        assert_eq!(slice.endpoints[0].node_name.as_deref(), Some("n1"));
        assert_eq!(slice.metadata.owner_references.unwrap()[0].uid, "uid-1");
    }
}
