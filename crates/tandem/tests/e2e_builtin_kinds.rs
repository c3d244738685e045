//! End-to-end: the networking, policy, scheduling, storage and apiregistration kinds through the
//! stock kubectl — a valid object is applied and listed with upstream's table columns
//! (pkg/printers/internalversion/printers.go, kube-aggregator's APIService table), defaults
//! are filled as upstream's `SetDefaults_*` fill them, and an invalid object is answered 422
//! with upstream's field path and message (pkg/apis/*/validation).
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use common::{Server, header};

/// Applies `manifest`, expecting a 422, and returns kubectl's stderr.
#[track_caller]
fn rejected(s: &Server, manifest: &str) -> String {
    let (out, codes) = s.kubectl_codes(&["apply", "-f", "-"], Some(manifest));
    assert!(!out.success(), "{}", out.combined());
    assert!(codes.contains(&422), "codes {codes:?}: {}", out.combined());
    out.stderr
}

/// The data row of a one-object table, split on runs of two or more spaces.
fn cells(table: &str) -> Vec<String> {
    table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn networking_kinds_are_validated_defaulted_and_printed() {
    let s = Server::start();
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        r#"apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: nginx}
spec:
  controller: k8s.io/ingress-nginx
  parameters: {apiGroup: k8s.example.com, kind: IngressParameters, name: external-lb}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: default}
spec:
  ingressClassName: nginx
  tls: [{hosts: [a.example.com], secretName: web-tls}]
  rules:
  - host: a.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db, namespace: default}
spec:
  podSelector: {matchLabels: {app: db}}
  egress: [{ports: [{port: 5432}]}]
"#,
    )
    .ok();

    let table = s.kubectl(&["get", "ingress", "web"]).ok().to_string();
    assert_eq!(header(&table), "NAME CLASS HOSTS ADDRESS PORTS AGE");
    assert_eq!(
        cells(&table)[..4],
        ["web", "nginx", "a.example.com", "80, 443"]
    );
    let ingress = s.get_json(&["ingress", "web"]).unwrap();
    assert_eq!(ingress["metadata"]["generation"], 1, "{ingress}");
    assert!(ingress["status"]["loadBalancer"].is_object(), "{ingress}");

    let table = s
        .kubectl(&["get", "ingressclass", "nginx"])
        .ok()
        .to_string();
    assert_eq!(header(&table), "NAME CONTROLLER PARAMETERS AGE");
    assert_eq!(
        cells(&table)[..3],
        [
            "nginx",
            "k8s.io/ingress-nginx",
            "IngressParameters.k8s.example.com/external-lb"
        ]
    );
    let class = s.get_json(&["ingressclass", "nginx"]).unwrap();
    assert_eq!(class["spec"]["parameters"]["scope"], "Cluster", "{class}");

    let table = s.kubectl(&["get", "networkpolicy", "db"]).ok().to_string();
    assert_eq!(header(&table), "NAME POD-SELECTOR AGE");
    assert_eq!(cells(&table)[..2], ["db", "app=db"]);
    let np = s.get_json(&["networkpolicy", "db"]).unwrap();
    assert_eq!(
        np["spec"]["policyTypes"],
        serde_json::json!(["Ingress", "Egress"])
    );
    assert_eq!(np["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");

    let err = rejected(
        &s,
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: bad, namespace: default}
spec:
  rules:
  - http:
      paths:
      - {path: /, backend: {service: {name: web, port: {number: 80}}}}
"#,
    );
    assert!(
        err.contains(
            "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"
        ),
        "{err}"
    );
    let err = rejected(
        &s,
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: bad}\nspec: {controller: nginx}\n",
    );
    assert!(
        err.contains("spec.controller: Invalid value: \"nginx\": must be a domain-prefixed path (such as \"acme.io/foo\")"),
        "{err}"
    );
    let err = rejected(
        &s,
        r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: bad, namespace: default}
spec:
  podSelector: {}
  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [11.0.0.0/16]}}]}]
"#,
    );
    assert!(
        err.contains("spec.ingress[0].from[0].ipBlock.except[0]: Invalid value: \"11.0.0.0/16\": must be a strict subset of `cidr`"),
        "{err}"
    );
}

#[test]
fn pod_disruption_budgets_and_priority_classes_follow_upstream() {
    let s = Server::start();
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        r#"apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: db, namespace: default}
spec:
  minAvailable: 50%
  selector: {matchLabels: {app: db}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000000
"#,
    )
    .ok();

    let table = s.kubectl(&["get", "pdb", "db"]).ok().to_string();
    assert_eq!(
        header(&table),
        "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE"
    );
    assert_eq!(cells(&table)[..3], ["db", "50%", "N/A"]);
    let pdb = s.get_json(&["pdb", "db"]).unwrap();
    assert_eq!(pdb["metadata"]["generation"], 1, "{pdb}");

    let table = s
        .kubectl(&["get", "priorityclass", "high"])
        .ok()
        .to_string();
    assert_eq!(
        header(&table),
        "NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY"
    );
    let row = cells(&table);
    assert_eq!(row[..3], ["high", "1000000", "false"]);
    assert_eq!(row.last().map(String::as_str), Some("PreemptLowerPriority"));

    let err = rejected(
        &s,
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: bad, namespace: default}\nspec: {maxUnavailable: 150%}\n",
    );
    assert!(
        err.contains("spec.maxUnavailable: Invalid value: \"150%\": must not be greater than 100%"),
        "{err}"
    );
    let err = rejected(
        &s,
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: system-mine}\nvalue: 10\n",
    );
    assert!(
        err.contains("metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"),
        "{err}"
    );
    let err = rejected(
        &s,
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: too-high}\nvalue: 1000000001\n",
    );
    assert!(
        err.contains(
            "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
        ),
        "{err}"
    );
    let err = rejected(
        &s,
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 5\n",
    );
    assert!(
        err.contains("value: Forbidden: may not be changed in an update."),
        "{err}"
    );
}

#[test]
fn storage_kinds_are_defaulted_printed_and_validated() {
    let s = Server::start();
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        r#"apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: fast
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: example.com/disk
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: disk.csi.example.com}
spec: {}
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: node-1}
spec:
  drivers: [{name: disk.csi.example.com, nodeID: node-1}]
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {name: va-1}
spec:
  attacher: disk.csi.example.com
  nodeName: node-1
  source: {persistentVolumeName: pv-1}
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: cap-1, namespace: default}
storageClassName: fast
capacity: 10Gi
nodeTopology:
  matchLabels: {topology.kubernetes.io/zone: a}
"#,
    )
    .ok();

    let table = s.kubectl(&["get", "storageclass", "fast"]).ok().to_string();
    assert_eq!(
        header(&table),
        "NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE ALLOWVOLUMEEXPANSION AGE"
    );
    assert_eq!(
        cells(&table)[..5],
        [
            "fast (default)",
            "example.com/disk",
            "Delete",
            "Immediate",
            "false"
        ]
    );

    let driver = s.get_json(&["csidriver", "disk.csi.example.com"]).unwrap();
    assert_eq!(driver["spec"]["attachRequired"], true, "{driver}");
    assert_eq!(
        driver["spec"]["volumeLifecycleModes"],
        serde_json::json!(["Persistent"])
    );
    let table = s
        .kubectl(&["get", "csidriver", "disk.csi.example.com"])
        .ok()
        .to_string();
    assert_eq!(
        header(&table),
        "NAME ATTACHREQUIRED PODINFOONMOUNT STORAGECAPACITY TOKENREQUESTS REQUIRESREPUBLISH MODES AGE"
    );
    assert_eq!(
        cells(&table)[..7],
        [
            "disk.csi.example.com",
            "true",
            "false",
            "false",
            "<unset>",
            "false",
            "Persistent"
        ]
    );

    let table = s.kubectl(&["get", "csinode", "node-1"]).ok().to_string();
    assert_eq!(header(&table), "NAME DRIVERS AGE");
    assert_eq!(cells(&table)[..2], ["node-1", "1"]);

    let table = s
        .kubectl(&["get", "volumeattachment", "va-1"])
        .ok()
        .to_string();
    assert_eq!(header(&table), "NAME ATTACHER PV NODE ATTACHED AGE");
    assert_eq!(
        cells(&table)[..5],
        ["va-1", "disk.csi.example.com", "pv-1", "node-1", "false"]
    );

    // CSIStorageCapacity (storage.k8s.io/v1 since 1.24): served, printed and validated.
    let table = s
        .kubectl(&["get", "csistoragecapacities", "cap-1"])
        .ok()
        .to_string();
    assert_eq!(header(&table), "NAME STORAGECLASSNAME CAPACITY");
    assert_eq!(cells(&table)[..3], ["cap-1", "fast", "10Gi"]);
    let err = rejected(
        &s,
        "apiVersion: storage.k8s.io/v1\nkind: CSIStorageCapacity\nmetadata: {name: cap-1, namespace: default}\nstorageClassName: slow\ncapacity: 10Gi\nnodeTopology:\n  matchLabels: {topology.kubernetes.io/zone: a}\n",
    );
    assert!(
        err.contains("storageClassName: Invalid value: \"slow\": field is immutable"),
        "{err}"
    );

    let err = rejected(
        &s,
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: bad}\nprovisioner: example.com/disk\nreclaimPolicy: Recycle\n",
    );
    assert!(
        err.contains("reclaimPolicy: Unsupported value: \"Recycle\": supported values: \"Delete\", \"Retain\""),
        "{err}"
    );
    let err = rejected(
        &s,
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: fast\n  annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}\nprovisioner: example.com/other\n",
    );
    assert!(
        err.contains("provisioner: Forbidden: updates to provisioner are forbidden."),
        "{err}"
    );
    let err = rejected(
        &s,
        "apiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata: {name: bad}\nspec: {attacher: disk.csi.example.com, nodeName: node-1, source: {}}\n",
    );
    assert!(
        err.contains("spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"),
        "{err}"
    );
}

#[test]
fn api_services_are_listed_and_validated() {
    let s = Server::start();
    let table = s
        .kubectl(&["get", "apiservice", "v1.apps"])
        .ok()
        .to_string();
    assert_eq!(header(&table), "NAME SERVICE AVAILABLE AGE");
    assert_eq!(cells(&table)[..3], ["v1.apps", "Local", "True"]);

    let err = rejected(
        &s,
        r#"apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: metrics}
spec: {group: metrics.k8s.io, version: v1beta1, groupPriorityMinimum: 100, versionPriority: 100}
"#,
    );
    assert!(
        err.contains(
            "metadata.name: Invalid value: \"metrics\": must be `spec.version+\".\"+spec.group`: \"v1beta1.metrics.k8s.io\""
        ),
        "{err}"
    );
    let err = rejected(
        &s,
        r#"apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
spec: {group: metrics.k8s.io, version: v1beta1, groupPriorityMinimum: 30000, versionPriority: 100, service: {namespace: kube-system, name: metrics-server}}
"#,
    );
    assert!(
        err.contains(
            "spec.groupPriorityMinimum: Invalid value: 30000: must be positive and less than 20000"
        ),
        "{err}"
    );
}
