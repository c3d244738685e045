//! End-to-end: CustomResourceDefinitions (issue 17). The CRDs of widely used projects applied
//! with kubectl and exercised with their valid and invalid objects, a kube-rs
//! `#[derive(CustomResource)]` controller reconciling its own kind, and a deleted CRD taking its
//! objects with it.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::Server;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/crds")
}

/// `kubectl wait` until the CRD is established.
fn established(s: &Server, name: &str) {
    let out = s.kubectl(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{name}"),
        "--timeout=30s",
    ]);
    assert!(out.success(), "{name} established: {}", out.combined());
}

#[test]
fn real_crds_validate_their_objects_as_kube_apiserver_does() {
    let s = Server::start();
    let dir = fixtures();
    s.kubectl(&["create", "namespace", "monitoring"]).ok();
    for (crd, name) in [
        (
            "cert-manager.io_certificates",
            "certificates.cert-manager.io",
        ),
        ("cert-manager.io_issuers", "issuers.cert-manager.io"),
        (
            "monitoring.coreos.com_servicemonitors",
            "servicemonitors.monitoring.coreos.com",
        ),
        (
            "monitoring.coreos.com_prometheusrules",
            "prometheusrules.monitoring.coreos.com",
        ),
    ] {
        let file = dir.join(format!("{crd}.yaml"));
        let out = s.kubectl(&["apply", "-f", file.to_str().unwrap()]);
        assert!(out.success(), "{crd}: {}", out.combined());
        established(&s, name);
        let valid = dir.join(format!("examples/{crd}-valid.yaml"));
        let out = s.kubectl(&["apply", "-f", valid.to_str().unwrap()]);
        assert!(out.success(), "{crd} valid object: {}", out.combined());
        // The invalid example's first line names the field path of the one error expected.
        let invalid = dir.join(format!("examples/{crd}-invalid.yaml"));
        let text = std::fs::read_to_string(&invalid).unwrap();
        let first = text.lines().next().unwrap();
        let path = first
            .split("error field path: ")
            .nth(1)
            .and_then(|r| r.split([' ', '(']).next())
            .unwrap();
        let out = s.kubectl(&["apply", "-f", invalid.to_str().unwrap()]);
        assert!(!out.success(), "{crd} invalid object was accepted");
        assert!(
            out.stderr.contains(&format!("{path}:")) && out.stderr.contains("is invalid"),
            "{crd}: expected an error at {path}: {}",
            out.stderr
        );
    }
    // Printer columns and short names of the CRD.
    let out = s.kubectl(&["get", "cert", "-o", "wide"]);
    assert!(out.success(), "{}", out.combined());
    let header = out.stdout.lines().next().unwrap_or_default().to_string();
    for col in ["READY", "SECRET", "ISSUER", "AGE"] {
        assert!(header.contains(col), "columns: {header}");
    }
    // `kubectl explain` reads the custom kind from OpenAPI v3.
    let out = s.kubectl(&["explain", "certificate.spec.secretName"]);
    assert!(out.success(), "{}", out.combined());
    assert!(
        out.stdout.contains("secretName") && out.stdout.contains("<string>"),
        "{}",
        out.stdout
    );
    // Unknown fields are pruned, with upstream's warning; strict validation refuses them.
    let extra = r#"{"apiVersion":"monitoring.coreos.com/v1","kind":"ServiceMonitor","metadata":{"name":"extra","namespace":"monitoring"},"spec":{"selector":{},"endpoints":[{"port":"web","surprise":1}]}}"#;
    let out = s.kubectl_stdin(&["create", "--validate=warn", "-f", "-"], extra);
    assert!(out.success(), "{}", out.combined());
    assert!(
        out.stderr
            .contains("unknown field \"spec.endpoints[0].surprise\""),
        "{}",
        out.stderr
    );
    let stored = s
        .get_json(&["servicemonitor", "extra", "-n", "monitoring"])
        .unwrap();
    assert!(stored["spec"]["endpoints"][0].get("surprise").is_none());
    let out = s.kubectl_stdin(
        &["create", "--validate=strict", "-f", "-"],
        &extra.replace("\"extra\"", "\"strict\""),
    );
    assert!(!out.success(), "strict validation refuses unknown fields");

    // The upstream gMSA CRD names a kind tandem serves built in: it is refused with
    // upstream's NamesAccepted reason, and the built-in kind keeps working.
    let gmsa = dir.join("windows.k8s.io_gmsacredentialspecs.yaml");
    let out = s.kubectl(&["apply", "-f", gmsa.to_str().unwrap()]);
    assert!(out.success(), "{}", out.combined());
    let cond = s.eventually("the gMSA CRD's NamesAccepted condition", WAIT, || {
        let crd = s.get_json(&["crd", "gmsacredentialspecs.windows.k8s.io"])?;
        crd["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "NamesAccepted")
            .cloned()
    });
    assert_eq!(cond["status"], "False", "{cond}");
    assert!(
        cond["reason"].as_str().unwrap().ends_with("Conflict"),
        "{cond}"
    );
    let valid = dir.join("examples/windows.k8s.io_gmsacredentialspecs-valid.yaml");
    let out = s.kubectl(&["apply", "-f", valid.to_str().unwrap()]);
    assert!(out.success(), "{}", out.combined());
}

#[test]
fn deleting_a_crd_removes_its_objects() {
    let s = Server::start();
    let crd = fixtures().join("cert-manager.io_issuers.yaml");
    let crd = crd.to_str().unwrap();
    assert!(s.kubectl(&["apply", "-f", crd]).success());
    established(&s, "issuers.cert-manager.io");
    let issuer = r#"{"apiVersion":"cert-manager.io/v1","kind":"Issuer","metadata":{"name":"self","namespace":"default"},"spec":{"selfSigned":{}}}"#;
    s.create(issuer);
    // Its group-version got a local APIService, as upstream's crdregistration controller
    // registers one.
    let service = s.eventually("APIService v1.cert-manager.io", WAIT, || {
        s.get_json(&["apiservice", "v1.cert-manager.io"])
    });
    assert_eq!(service["spec"]["groupPriorityMinimum"], 1000, "{service}");
    assert_eq!(service["spec"]["versionPriority"], 100, "{service}");
    assert_eq!(
        service["status"]["conditions"][0]["reason"], "Local",
        "{service}"
    );
    let out = s.kubectl(&["delete", "crd", "issuers.cert-manager.io", "--timeout=30s"]);
    assert!(out.success(), "{}", out.combined());
    s.eventually(
        "the APIService goes with the last CRD of its group",
        WAIT,
        || {
            s.get_json(&["apiservice", "v1.cert-manager.io"])
                .is_none()
                .then_some(())
        },
    );
    // The built-in groups' APIServices stay.
    assert!(s.get_json(&["apiservice", "v1.apps"]).is_some());
    assert!(s.kubectl(&["apply", "-f", crd]).success());
    established(&s, "issuers.cert-manager.io");
    let out = s.kubectl(&["get", "issuers", "-A", "-o", "name"]);
    assert!(out.success(), "{}", out.combined());
    assert_eq!(
        out.stdout.trim(),
        "",
        "the old issuer was removed with its CRD"
    );
}

/// A kind of the test's own, as an operator author writes it with kube-rs.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "tandem.test",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    shortname = "wd",
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#
)]
pub struct WidgetSpec {
    size: i32,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetStatus {
    observed_size: i32,
}

#[derive(Debug)]
struct ReconcileError(kube::Error);

impl std::fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for ReconcileError {}

/// Copies `spec.size` into `status.observed_size` through the status subresource.
async fn reconcile(
    w: std::sync::Arc<Widget>,
    api: std::sync::Arc<Api<Widget>>,
) -> Result<Action, ReconcileError> {
    let status = json!({"status": {"observed_size": w.spec.size}});
    api.patch_status(
        &w.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .map_err(ReconcileError)?;
    Ok(Action::await_change())
}

#[test]
fn a_kube_rs_custom_resource_controller_runs_against_tandem() {
    let s = Server::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(s.kubeconfig()).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &Widget::crd())
            .await
            .unwrap();
        let established = kube::runtime::wait::await_condition(
            crds.clone(),
            "widgets.tandem.test",
            kube::runtime::wait::conditions::is_crd_established(),
        );
        tokio::time::timeout(WAIT, established)
            .await
            .expect("established within 30 s")
            .unwrap();

        let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
        let api = std::sync::Arc::new(widgets.clone());
        let controller = Controller::new(widgets.clone(), Default::default())
            .run(
                reconcile,
                |_, _, _| Action::requeue(Duration::from_secs(1)),
                api,
            )
            .for_each(|_| async {});
        let controller = tokio::spawn(controller);

        widgets
            .create(
                &PostParams::default(),
                &Widget::new("w1", WidgetSpec { size: 3 }),
            )
            .await
            .unwrap();
        let mut observed = None;
        for _ in 0..60 {
            let w = widgets.get("w1").await.unwrap();
            if let Some(st) = w.status.as_ref().filter(|st| st.observed_size == 3) {
                observed = Some(st.observed_size);
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(observed, Some(3), "the controller reconciled w1");

        // A change of spec reaches the controller through its watch.
        widgets
            .patch(
                "w1",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"size": 5}})),
            )
            .await
            .unwrap();
        let mut observed = None;
        for _ in 0..60 {
            let w = widgets.get("w1").await.unwrap();
            if let Some(st) = w.status.as_ref().filter(|st| st.observed_size == 5) {
                observed = Some(st.observed_size);
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(observed, Some(5), "the controller saw the change");
        controller.abort();
    });
    // And kubectl sees the kind with its short name and printer column.
    let out = s.kubectl(&["get", "wd"]);
    assert!(out.success(), "{}", out.combined());
    assert!(
        out.stdout.contains("SIZE") && out.stdout.contains("w1"),
        "{}",
        out.stdout
    );
}

const TWO_VERSIONS: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "gadgets.tandem.test"},
  "spec": {
    "group": "tandem.test", "scope": "Namespaced",
    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "categories": ["all"]},
    "versions": [
      {"name": "v1alpha1", "served": true, "storage": false,
       "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
         "properties": {"color": {"type": "string", "default": "blue"}}}}}}},
      {"name": "v1", "served": true, "storage": true,
       "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
         "properties": {"color": {"type": "string", "default": "red"}}}}}}}
    ]
  }
}"#;

#[test]
fn a_crd_serves_each_version_with_conversion_none() {
    let s = Server::start();
    s.create(TWO_VERSIONS);
    established(&s, "gadgets.tandem.test");
    s.create(r#"{"apiVersion":"tandem.test/v1","kind":"Gadget","metadata":{"name":"g","namespace":"default"},"spec":{}}"#);
    let v1 = s.get_json(&["gadgets.v1.tandem.test", "g"]).unwrap();
    assert_eq!(v1["apiVersion"], "tandem.test/v1");
    assert_eq!(v1["spec"]["color"], "red", "the v1 schema's default");
    let alpha = s.get_json(&["gadgets.v1alpha1.tandem.test", "g"]).unwrap();
    assert_eq!(alpha["apiVersion"], "tandem.test/v1alpha1");
    let list = s.get_json(&["gadgets.v1alpha1.tandem.test"]).unwrap();
    assert_eq!(list["items"][0]["apiVersion"], "tandem.test/v1alpha1");
    // Categories: `kubectl get all` includes the custom kind.
    let out = s.kubectl(&["get", "all", "-o", "name"]);
    assert!(
        out.stdout.contains("gadget.tandem.test/g"),
        "{}",
        out.combined()
    );
    // The CRD records the storage version.
    let crd = s.get_json(&["crd", "gadgets.tandem.test"]).unwrap();
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
}

#[test]
fn deleting_a_namespace_deletes_its_custom_resources() {
    let s = Server::start_up(None);
    s.create(TWO_VERSIONS);
    established(&s, "gadgets.tandem.test");
    assert!(s.kubectl(&["create", "namespace", "shop"]).success());
    s.create(r#"{"apiVersion":"tandem.test/v1","kind":"Gadget","metadata":{"name":"g","namespace":"shop"},"spec":{}}"#);
    let out = s.kubectl(&["delete", "namespace", "shop", "--timeout=60s"]);
    assert!(out.success(), "{}", out.combined());
    let out = s.kubectl(&["get", "gadgets", "-A", "-o", "name"]);
    assert_eq!(out.stdout.trim(), "", "{}", out.combined());
}

const SCALED: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: pools.tandem.test}
spec:
  group: tandem.test
  scope: Namespaced
  names: {plural: pools, singular: pool, kind: Pool}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.count, labelSelectorPath: .status.selector}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status: {type: object, properties: {count: {type: integer}, selector: {type: string}}}
"#;

#[test]
fn the_scale_subresource_of_a_custom_resource_uses_its_crds_paths() {
    let s = Server::start();
    s.create(SCALED);
    established(&s, "pools.tandem.test");
    // CRDs print as apiextensions-apiserver prints them: the default table.
    let crds = s.kubectl(&["get", "crd", "pools.tandem.test"]);
    assert_eq!(
        common::header(crds.ok()),
        "NAME CREATED AT",
        "{}",
        crds.stdout
    );
    s.create(r#"{"apiVersion":"tandem.test/v1","kind":"Pool","metadata":{"name":"p","namespace":"default"},"spec":{"size":2}}"#);
    let status = r#"{"status":{"count":2,"selector":"app=pool"}}"#;
    let out = s.kubectl(&[
        "patch",
        "pool",
        "p",
        "--subresource=status",
        "--type=merge",
        "-p",
        status,
    ]);
    assert!(out.success(), "{}", out.combined());
    let scale = s
        .kubectl(&[
            "get",
            "--raw",
            "/apis/tandem.test/v1/namespaces/default/pools/p/scale",
        ])
        .json();
    assert_eq!(scale["spec"]["replicas"], 2, "{scale}");
    assert_eq!(scale["status"]["replicas"], 2, "{scale}");
    assert_eq!(scale["status"]["selector"], "app=pool", "{scale}");

    let out = s.kubectl(&["scale", "pool", "p", "--replicas=5"]);
    assert!(out.success(), "{}", out.combined());
    let pool = s.get_json(&["pool", "p"]).unwrap();
    assert_eq!(pool["spec"]["size"], 5, "{pool}");
    assert!(pool["spec"].get("replicas").is_none(), "{pool}");
}

#[test]
fn the_garbage_collector_follows_owner_references_to_and_from_custom_resources() {
    let s = Server::start_up(None);
    s.create(TWO_VERSIONS);
    established(&s, "gadgets.tandem.test");
    s.create(r#"{"apiVersion":"tandem.test/v1","kind":"Gadget","metadata":{"name":"owner","namespace":"default"},"spec":{}}"#);
    let uid = s.get_json(&["gadget", "owner"]).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    // A ConfigMap owned by the Gadget, and a Gadget owned by a ConfigMap.
    s.create(&format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"owned","namespace":"default","ownerReferences":[{{"apiVersion":"tandem.test/v1","kind":"Gadget","name":"owner","uid":"{uid}"}}]}}}}"#
    ));
    s.create(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"parent","namespace":"default"}}"#);
    let parent = s.get_json(&["configmap", "parent"]).unwrap();
    let parent_uid = parent["metadata"]["uid"].as_str().unwrap();
    s.create(&format!(
        r#"{{"apiVersion":"tandem.test/v1","kind":"Gadget","metadata":{{"name":"child","namespace":"default","ownerReferences":[{{"apiVersion":"v1","kind":"ConfigMap","name":"parent","uid":"{parent_uid}"}}]}},"spec":{{}}}}"#
    ));

    assert!(s.kubectl(&["delete", "gadget", "owner"]).success());
    let long = std::time::Duration::from_secs(60);
    s.eventually("the Gadget's ConfigMap collected", long, || {
        s.get_json(&["configmap", "owned"]).is_none().then_some(())
    });
    assert!(s.kubectl(&["delete", "configmap", "parent"]).success());
    s.eventually("the ConfigMap's Gadget collected", long, || {
        s.get_json(&["gadget", "child"]).is_none().then_some(())
    });
}

const SELECTABLE: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: shirts.tandem.test}
spec:
  group: tandem.test
  scope: Namespaced
  names: {plural: shirts, singular: shirt, kind: Shirt}
  versions:
  - name: v1
    served: true
    storage: true
    selectableFields: [{jsonPath: .spec.color}, {jsonPath: .spec.size}]
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {color: {type: string}, size: {type: integer}}}
"#;

#[test]
fn field_selectors_use_a_crds_selectable_fields() {
    let s = Server::start();
    s.create(SELECTABLE);
    established(&s, "shirts.tandem.test");
    for (name, color, size) in [("a", "blue", 1), ("b", "red", 2), ("c", "blue", 3)] {
        s.create(&format!(
            r#"{{"apiVersion":"tandem.test/v1","kind":"Shirt","metadata":{{"name":"{name}","namespace":"default"}},"spec":{{"color":"{color}","size":{size}}}}}"#
        ));
    }
    let names = |selector: &str| {
        s.kubectl(&["get", "shirts", "--field-selector", selector, "-o", "name"])
            .ok()
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names("spec.color=blue"),
        ["shirt.tandem.test/a", "shirt.tandem.test/c"]
    );
    assert_eq!(
        names("spec.color!=blue,spec.size=2"),
        ["shirt.tandem.test/b"]
    );
    assert_eq!(
        names("spec.size=3,metadata.name=c"),
        ["shirt.tandem.test/c"]
    );
    let refused = s.kubectl(&["get", "shirts", "--field-selector", "spec.fabric=cotton"]);
    assert!(
        refused
            .err()
            .contains("field label not supported: spec.fabric"),
        "{}",
        refused.stderr
    );
}

const ROUTES: &str = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"routes.tandem.test"},
 "spec":{"group":"tandem.test","scope":"Namespaced",
  "names":{"plural":"routes","singular":"route","kind":"Route"},
  "versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{
   "type":"object","properties":{"spec":{"type":"object","properties":{
    "backends":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["name"],
     "items":{"type":"object","required":["name"],"properties":{
      "name":{"type":"string"},"weight":{"type":"integer"}}}},
    "hosts":{"type":"array","x-kubernetes-list-type":"set","items":{"type":"string"}},
    "filters":{"type":"array","items":{"type":"string"}}}}}}}}]}}"#;

/// Server-side apply merges a custom resource's lists by the CRD's list types: two managers
/// each own their own backends and hosts, and a plain list stays one atomic value.
#[test]
fn server_side_apply_merges_custom_resource_lists_by_their_list_type() {
    let s = Server::start();
    s.create(ROUTES);
    established(&s, "routes.tandem.test");
    let apply = |manager: &str, spec: &str, force: bool| {
        let manifest = format!(
            "apiVersion: tandem.test/v1\nkind: Route\nmetadata: {{name: r}}\nspec: {spec}\n"
        );
        let mut args = vec![
            "apply",
            "--server-side",
            "--field-manager",
            manager,
            "-f",
            "-",
        ];
        if force {
            args.push("--force-conflicts");
        }
        s.kubectl_stdin(&args, &manifest)
    };
    apply(
        "team-a",
        "{backends: [{name: a, weight: 1}], hosts: [a.example], filters: [gzip]}",
        false,
    )
    .ok();
    apply(
        "team-b",
        "{backends: [{name: b, weight: 2}], hosts: [b.example]}",
        false,
    )
    .ok();
    let r = s.get_json(&["route", "r"]).unwrap();
    assert_eq!(
        r["spec"]["backends"],
        json!([{"name": "a", "weight": 1}, {"name": "b", "weight": 2}]),
        "{r}"
    );
    assert_eq!(r["spec"]["hosts"], json!(["a.example", "b.example"]), "{r}");

    // The atomic list belongs to team-a as a whole: team-b conflicts unless it forces.
    let conflict = apply("team-b", "{filters: [brotli]}", false);
    assert!(
        conflict.stderr.contains("conflict with \"team-a\"")
            && conflict.stderr.contains(".spec.filters"),
        "{}",
        conflict.combined()
    );
    apply(
        "team-b",
        "{backends: [{name: b, weight: 2}], hosts: [b.example], filters: [brotli]}",
        true,
    )
    .ok();
    let r = s.get_json(&["route", "r"]).unwrap();
    assert_eq!(r["spec"]["filters"], json!(["brotli"]), "{r}");

    // team-a drops its backend and host: only its own items go.
    apply("team-a", "{}", false).ok();
    let r = s.get_json(&["route", "r"]).unwrap();
    assert_eq!(
        r["spec"]["backends"],
        json!([{"name": "b", "weight": 2}]),
        "{r}"
    );
    assert_eq!(r["spec"]["hosts"], json!(["b.example"]), "{r}");
}
