//! The transcoder against the `k8s-pb` bindings themselves: what prost encodes we decode to
//! upstream's JSON, and what we encode prost decodes to the same fields.

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::authorization::v1 as authz;
use k8s_pb::api::certificates::v1 as certs;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::rbac::v1 as rbac;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::json;

use super::*;

fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// The message inside an envelope we wrote.
fn unwrap_envelope(bytes: &[u8]) -> (TypeMeta, Vec<u8>) {
    let rest = bytes.strip_prefix(MAGIC).expect("magic");
    let u = Unknown::decode(rest).expect("envelope");
    (u.type_meta.expect("typeMeta"), u.raw.expect("raw"))
}

fn name(n: &str) -> Option<meta::ObjectMeta> {
    Some(meta::ObjectMeta {
        name: Some(n.into()),
        ..Default::default()
    })
}

#[test]
fn a_deployment_as_kubectl_create_sends_it() {
    // gogo writes every non-pointer field: empty strings and the zero time arrive.
    let d = apps::Deployment {
        metadata: Some(meta::ObjectMeta {
            name: Some("web".into()),
            generate_name: Some(String::new()),
            namespace: Some(String::new()),
            labels: [("app".to_string(), "web".to_string())].into(),
            creation_timestamp: Some(meta::Time::default()),
            ..Default::default()
        }),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            selector: Some(meta::LabelSelector {
                match_labels: [("app".to_string(), "web".to_string())].into(),
                ..Default::default()
            }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(meta::ObjectMeta::default()),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: Some("busybox".into()),
                        image: Some("tandem.local/busybox:1".into()),
                        image_pull_policy: Some(String::new()),
                        ports: vec![core::ContainerPort {
                            container_port: Some(8080),
                            ..Default::default()
                        }],
                        resources: Some(core::ResourceRequirements {
                            limits: [(
                                "cpu".to_string(),
                                Quantity {
                                    string: Some("100m".into()),
                                },
                            )]
                            .into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }),
            strategy: Some(apps::DeploymentStrategy::default()),
            ..Default::default()
        }),
        status: Some(apps::DeploymentStatus::default()),
    };
    let v = decode(&envelope("apps/v1", "Deployment", d.encode_to_vec())).expect("decodes");
    assert_eq!(v["apiVersion"], "apps/v1");
    assert_eq!(v["kind"], "Deployment");
    assert_eq!(
        v["metadata"],
        json!({"name": "web", "labels": {"app": "web"}})
    );
    assert_eq!(v["spec"]["replicas"], 0, "a pointer's zero is kept");
    let c = &v["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "tandem.local/busybox:1");
    assert!(c.get("imagePullPolicy").is_none(), "{c}");
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    assert_eq!(c["resources"]["limits"]["cpu"], "100m");
    assert_eq!(v["spec"]["strategy"], json!({}));
}

#[test]
fn objects_encode_to_what_the_bindings_decode() {
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "uid": "u-1",
                     "creationTimestamp": "2026-11-25T08:00:00Z", "resourceVersion": "12"},
        "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                 "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"},
                           {"name": "alt", "port": 81, "targetPort": 8081}],
                 "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}}},
        "status": {"loadBalancer": {}},
    });
    let bytes = encode(&svc)
        .expect("Service has a message")
        .expect("encodes");
    let (tm, raw) = unwrap_envelope(&bytes);
    assert_eq!(tm.kind.as_deref(), Some("Service"));
    let s = core::Service::decode(raw.as_slice()).expect("prost decodes");
    let m = s.metadata.expect("metadata");
    assert_eq!(m.name.as_deref(), Some("web"));
    assert_eq!(
        m.creation_timestamp.and_then(|t| t.seconds),
        Some(1_795_593_600)
    );
    let spec = s.spec.expect("spec");
    assert_eq!(spec.cluster_ips, ["10.96.0.10"]);
    assert_eq!(
        spec.ports[0].target_port,
        Some(IntOrString {
            r#type: Some(1),
            int_val: None,
            str_val: Some("http".into())
        })
    );
    assert_eq!(
        spec.ports[1].target_port.as_ref().and_then(|t| t.int_val),
        Some(8081)
    );
    // And back: the same JSON, key for key.
    let back = decode(&bytes).expect("decodes");
    assert_eq!(back, svc);
}

#[test]
fn secrets_lists_and_status_round_trip() {
    let list = json!({
        "apiVersion": "v1", "kind": "SecretList",
        "metadata": {"resourceVersion": "40", "continue": "abc"},
        "items": [{"metadata": {"name": "s"}, "type": "Opaque",
                   "data": {"k": "aGVsbG8="}, "immutable": false}],
    });
    let bytes = encode(&list).expect("message").expect("encodes");
    let (_, raw) = unwrap_envelope(&bytes);
    let typed = core::SecretList::decode(raw.as_slice()).expect("prost decodes");
    assert_eq!(
        typed.items[0].data.get("k").map(Vec::as_slice),
        Some(&b"hello"[..])
    );
    assert_eq!(decode(&bytes).expect("decodes"), list);

    let status = json!({
        "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "message": "pods \"x\" not found", "reason": "NotFound",
        "details": {"name": "x", "kind": "pods"}, "code": 404,
    });
    let bytes = encode(&status).expect("message").expect("encodes");
    let (_, raw) = unwrap_envelope(&bytes);
    let typed = meta::Status::decode(raw.as_slice()).expect("prost decodes");
    assert_eq!(typed.code, Some(404));
    assert_eq!(typed.reason.as_deref(), Some("NotFound"));
}

#[test]
fn admission_configurations_round_trip_with_their_defaults() {
    use k8s_pb::api::admissionregistration::v1 as admissionregistration;
    let hooks = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "hooks", "generation": 1},
        "webhooks": [{"name": "pods.hooks.example.com", "admissionReviewVersions": ["v1"],
                      "sideEffects": "None", "failurePolicy": "Fail", "matchPolicy": "Equivalent",
                      "namespaceSelector": {}, "objectSelector": {}, "timeoutSeconds": 10,
                      "clientConfig": {"caBundle": "aGVsbG8=",
                                       "service": {"namespace": "hooks", "name": "svc", "port": 443}},
                      "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                 "resources": ["pods"], "scope": "*"}]}],
    });
    let bytes = encode(&hooks).expect("message").expect("encodes");
    let (tm, raw) = unwrap_envelope(&bytes);
    assert_eq!(tm.kind.as_deref(), Some("ValidatingWebhookConfiguration"));
    let typed = admissionregistration::ValidatingWebhookConfiguration::decode(raw.as_slice())
        .expect("prost decodes");
    let hook = &typed.webhooks[0];
    assert_eq!(hook.timeout_seconds, Some(10));
    assert_eq!(
        hook.client_config
            .as_ref()
            .and_then(|c| c.ca_bundle.as_deref()),
        Some(&b"hello"[..])
    );
    assert!(hook.namespace_selector.is_some(), "{hook:?}");
    assert_eq!(decode(&bytes).expect("decodes"), hooks);

    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "p"},
        "spec": {"failurePolicy": "Fail",
                 "paramKind": {"apiVersion": "example.com/v1", "kind": "Limits"},
                 "matchConstraints": {"matchPolicy": "Equivalent", "namespaceSelector": {},
                                      "objectSelector": {},
                                      "resourceRules": [{"operations": ["CREATE"], "apiGroups": ["apps"],
                                                         "apiVersions": ["v1"], "resources": ["deployments"],
                                                         "scope": "*"}]},
                 "validations": [{"expression": "object.spec.replicas < 5", "reason": "Invalid"}]},
        "status": {},
    });
    let bytes = encode(&policy).expect("message").expect("encodes");
    assert_eq!(decode(&bytes).expect("decodes"), policy);
}

#[test]
fn watch_frames_are_length_prefixed_events_with_embedded_objects() {
    let event = json!({"type": "ADDED", "object": {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}});
    let frame = watch_frame(&event).expect("message").expect("encodes");
    let (len, body) = frame.split_at(4);
    assert_eq!(
        u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize,
        body.len()
    );
    let ev = meta::WatchEvent::decode(body).expect("a WatchEvent");
    assert_eq!(ev.r#type.as_deref(), Some("ADDED"));
    let raw = ev.object.and_then(|o| o.raw).expect("object");
    let obj = decode(&raw).expect("the embedded object decodes");
    assert_eq!(obj["data"]["a"], "b");
    let custom =
        json!({"type": "ADDED", "object": {"apiVersion": "example.com/v1", "kind": "Widget"}});
    assert!(watch_frame(&custom).is_none());
}

#[test]
fn a_self_subject_access_review_decodes_as_kubectl_sends_it() {
    let review = authz::SelfSubjectAccessReview {
        spec: Some(authz::SelfSubjectAccessReviewSpec {
            resource_attributes: Some(authz::ResourceAttributes {
                namespace: Some("default".into()),
                verb: Some("list".into()),
                resource: Some("pods".into()),
                ..Default::default()
            }),
            non_resource_attributes: None,
        }),
        ..Default::default()
    };
    let body = envelope(
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
        review.encode_to_vec(),
    );
    let v = decode(&body).expect("decodes");
    assert_eq!(v["kind"], "SelfSubjectAccessReview");
    assert_eq!(v["spec"]["resourceAttributes"]["verb"], "list");
    assert_eq!(v["spec"]["resourceAttributes"]["namespace"], "default");
}

#[test]
fn extra_values_are_plain_lists_in_json() {
    let sar = authz::SubjectAccessReview {
        spec: Some(authz::SubjectAccessReviewSpec {
            user: Some("jane".into()),
            extra: [(
                "scopes".to_string(),
                authz::ExtraValue {
                    items: vec!["a".into(), "b".into()],
                },
            )]
            .into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let body = envelope(
        "authorization.k8s.io/v1",
        "SubjectAccessReview",
        sar.encode_to_vec(),
    );
    let v = decode(&body).expect("decodes");
    assert_eq!(v["spec"]["extra"], json!({"scopes": ["a", "b"]}));
}

#[test]
fn bindings_keep_their_subjects_and_role() {
    let b = rbac::ClusterRoleBinding {
        metadata: name("x"),
        subjects: vec![rbac::Subject {
            kind: Some("Group".into()),
            name: Some("auditors".into()),
            api_group: Some("rbac.authorization.k8s.io".into()),
            namespace: None,
        }],
        role_ref: Some(rbac::RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: Some("ClusterRole".into()),
            name: Some("view".into()),
        }),
    };
    let body = envelope(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        b.encode_to_vec(),
    );
    let v = decode(&body).expect("decodes");
    assert_eq!(v["metadata"]["name"], "x");
    assert_eq!(v["subjects"][0]["name"], "auditors");
    assert_eq!(v["roleRef"]["name"], "view");
}

#[test]
fn an_approved_csr_keeps_its_request_and_condition() {
    let r = certs::CertificateSigningRequest {
        metadata: Some(meta::ObjectMeta {
            name: Some("node-csr-1".into()),
            resource_version: Some("7".into()),
            ..Default::default()
        }),
        spec: Some(certs::CertificateSigningRequestSpec {
            request: Some(b"PEM".to_vec()),
            signer_name: Some("kubernetes.io/kube-apiserver-client".into()),
            usages: vec!["client auth".into()],
            ..Default::default()
        }),
        status: Some(certs::CertificateSigningRequestStatus {
            conditions: vec![certs::CertificateSigningRequestCondition {
                r#type: Some("Approved".into()),
                status: Some("True".into()),
                reason: Some("KubectlApprove".into()),
                last_update_time: Some(meta::Time {
                    seconds: Some(1_795_593_600),
                    nanos: Some(0),
                }),
                ..Default::default()
            }],
            certificate: None,
        }),
    };
    let body = envelope(
        "certificates.k8s.io/v1",
        "CertificateSigningRequest",
        r.encode_to_vec(),
    );
    let v = decode(&body).expect("decodes");
    assert_eq!(v["metadata"]["resourceVersion"], "7");
    assert_eq!(v["spec"]["request"], "UEVN");
    let condition = &v["status"]["conditions"][0];
    assert_eq!(condition["reason"], "KubectlApprove");
    assert_eq!(condition["lastUpdateTime"], "2026-11-25T08:00:00Z");
}

#[test]
fn garbage_and_custom_kinds_are_refused_cleanly() {
    assert_eq!(decode(b"nope").map_err(|e| e.code), Err(400));
    assert_eq!(decode(b"k8s\0\xff\xff").map_err(|e| e.code), Err(400));
    let widget = envelope("example.com/v1", "Widget", Vec::new());
    assert_eq!(decode(&widget).map_err(|e| e.code), Err(415));
    // A field of the wrong wire type, a truncated length, and deep nesting: 400, no panic.
    let bad_wire = envelope("v1", "ConfigMap", vec![0x0a, 0x05, 0x01]);
    assert_eq!(decode(&bad_wire).map_err(|e| e.code), Err(400));
    let s = schema();
    let props = s
        .message_for("apiextensions.k8s.io/v1", "JSONSchemaProps")
        .expect("JSONSchemaProps");
    let not_tag = s.messages[props]
        .fields
        .iter()
        .find(|f| f.json == "not")
        .map(|f| f.def.tag)
        .expect("not");
    let mut nested = Vec::new();
    for _ in 0..200 {
        let mut outer = Vec::new();
        prost::encoding::encode_varint(u64::from(not_tag << 3 | 2), &mut outer);
        prost::encoding::encode_varint(nested.len() as u64, &mut outer);
        outer.extend(nested);
        nested = outer;
    }
    let deep = envelope("apiextensions.k8s.io/v1", "JSONSchemaProps", nested);
    assert!(decode(&deep).is_err());
}

#[test]
fn non_pointer_zeros_are_dropped_and_required_ones_kept() {
    let svc = core::Service {
        metadata: name("web"),
        spec: Some(core::ServiceSpec {
            ports: vec![core::ServicePort {
                port: Some(80),
                node_port: Some(0),
                target_port: Some(IntOrString {
                    r#type: Some(0),
                    int_val: Some(8080),
                    str_val: Some(String::new()),
                }),
                ..Default::default()
            }],
            publish_not_ready_addresses: Some(false),
            health_check_node_port: Some(0),
            ..Default::default()
        }),
        status: None,
    };
    let v = decode(&envelope("v1", "Service", svc.encode_to_vec())).expect("decodes");
    assert_eq!(
        v["spec"],
        json!({"ports": [{"port": 80, "targetPort": 8080}]})
    );
    let status = core::ContainerStatus {
        name: Some("c".into()),
        ready: Some(false),
        restart_count: Some(0),
        ..Default::default()
    };
    let pod = core::Pod {
        metadata: name("p"),
        spec: None,
        status: Some(core::PodStatus {
            container_statuses: vec![status],
            ..Default::default()
        }),
    };
    let v = decode(&envelope("v1", "Pod", pod.encode_to_vec())).expect("decodes");
    assert_eq!(
        v["status"]["containerStatuses"][0],
        json!({"name": "c", "ready": false, "restartCount": 0})
    );
}

#[test]
fn inlined_structs_sit_in_their_parents_json() {
    // `Volume.volumeSource`, `Probe.handler` and `IngressRule.ingressRuleValue` are fields on
    // the wire but Go inlines them in JSON.
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i",
                                 "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080},
                                                   "periodSeconds": 5}}],
                 "volumes": [{"name": "data", "emptyDir": {}},
                             {"name": "cfg", "configMap": {"name": "web"}}]},
    });
    let bytes = encode(&pod).expect("Pod has a message").expect("encodes");
    let (_, raw) = unwrap_envelope(&bytes);
    let p = core::Pod::decode(raw.as_slice()).expect("prost decodes");
    let spec = p.spec.expect("spec");
    let cfg = spec.volumes[1]
        .volume_source
        .as_ref()
        .and_then(|s| s.config_map.as_ref())
        .expect("configMap source");
    assert_eq!(
        cfg.local_object_reference
            .as_ref()
            .and_then(|r| r.name.as_deref()),
        Some("web")
    );
    let probe = spec.containers[0].liveness_probe.as_ref().expect("probe");
    assert_eq!(
        probe
            .handler
            .as_ref()
            .and_then(|h| h.http_get.as_ref())
            .and_then(|g| g.path.as_deref()),
        Some("/healthz")
    );
    assert_eq!(decode(&bytes).expect("decodes"), pod);

    let ingress = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "web"},
        "spec": {"rules": [{"host": "web.example.com",
                            "http": {"paths": [{"path": "/", "pathType": "Prefix",
                                                "backend": {"service": {"name": "web",
                                                                        "port": {"number": 80}}}}]}}]},
    });
    let bytes = encode(&ingress)
        .expect("Ingress has a message")
        .expect("encodes");
    assert_eq!(decode(&bytes).expect("decodes"), ingress);
}

#[test]
fn a_pod_with_the_service_account_volume_encodes() {
    // Every pod gets a projected volume whose `downwardAPI` holds `items`: an object with an
    // `items` list, not a named slice such as `ExtraValue`.
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}],
                 "volumes": [{"name": "kube-api-access", "projected": {
                     "defaultMode": 420,
                     "sources": [
                         {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                         {"downwardAPI": {"items": [{"path": "namespace",
                             "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]},
    });
    let bytes = encode(&pod).expect("Pod has a message").expect("encodes");
    let (_, raw) = unwrap_envelope(&bytes);
    let p = core::Pod::decode(raw.as_slice()).expect("prost decodes");
    let projected = p.spec.expect("spec").volumes[0]
        .volume_source
        .as_ref()
        .and_then(|s| s.projected.clone())
        .expect("projected");
    let items = &projected.sources[1]
        .downward_api
        .as_ref()
        .expect("downwardAPI")
        .items;
    assert_eq!(items[0].path.as_deref(), Some("namespace"));
    assert_eq!(decode(&bytes).expect("decodes"), pod);
}

/// The encoder writes fields in tag order and the envelope in prost's field order, so its
/// bytes are exactly what prost writes for the same object decoded into the bindings: a
/// stored-looking pod with defaults, managedFields, an inlined volume source and nested maps.
#[test]
fn encoded_bytes_are_what_prost_writes_for_the_same_object() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "uid": "5f1c6a8e",
            "resourceVersion": "12", "creationTimestamp": "2026-11-28T20:40:01Z",
            "labels": {"app": "web", "tier": "front"},
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                "time": "2026-11-28T20:40:01Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}]},
        "spec": {"containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 10}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 300}],
            "volumes": [{"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 420}},
                {"name": "tmp", "emptyDir": {}}]},
        "status": {"phase": "Pending", "qosClass": "Burstable"}
    });
    let bytes = encode(&pod).expect("a pod has a message").expect("encodes");
    let (_, raw) = unwrap_envelope(&bytes);
    let decoded = core::Pod::decode(raw.as_slice()).expect("prost decodes it");
    assert_eq!(bytes, envelope("v1", "Pod", decoded.encode_to_vec()));
    assert_eq!(decode(&bytes).expect("decodes"), pod);
}
