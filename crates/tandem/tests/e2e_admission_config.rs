//! End-to-end: the admissionregistration.k8s.io/v1 kinds through the stock kubectl — webhook
//! configurations, ValidatingAdmissionPolicies and their bindings are served as built-in
//! resources: applied with upstream's defaults (pkg/apis/admissionregistration/v1/defaults.go),
//! printed with upstream's columns (pkg/printers/internalversion/printers.go), refused with
//! upstream's field paths and messages (pkg/apis/admissionregistration/validation), and listed
//! by discovery.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use common::{Server, header};

const GROUP: &str = "admissionregistration.k8s.io";

/// Applies `manifest`, expecting a 422, and returns kubectl's stderr.
#[track_caller]
fn rejected(s: &Server, manifest: &str) -> String {
    let (out, codes) = s.kubectl_codes(&["apply", "-f", "-"], Some(manifest));
    assert!(!out.success(), "{}", out.combined());
    assert!(codes.contains(&422), "codes {codes:?}: {}", out.combined());
    out.stderr
}

/// The data rows of a table, each split on runs of two or more spaces.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .skip(1)
        .map(|line| {
            line.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

const WEBHOOKS: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: pod-policy}
webhooks:
- name: pods.policy.example.com
  sideEffects: None
  admissionReviewVersions: [v1]
  clientConfig:
    service: {namespace: policy, name: webhook, path: /validate}
  rules:
  - {operations: [CREATE, UPDATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}
- name: deployments.policy.example.com
  sideEffects: NoneOnDryRun
  admissionReviewVersions: [v1, v1beta1]
  failurePolicy: Ignore
  clientConfig:
    url: https://policy.example.com/deployments
  rules:
  - {operations: ["*"], apiGroups: [apps], apiVersions: ["*"], resources: [deployments, deployments/scale], scope: Namespaced}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: sidecar-injector}
webhooks:
- name: inject.sidecar.example.com
  sideEffects: None
  admissionReviewVersions: [v1]
  clientConfig:
    url: https://sidecar.example.com/mutate
    caBundle: "aGVsbG8g\nd29ybGQ="
  matchConditions:
  - {name: not-system, expression: "!object.metadata.namespace.startsWith('kube-')"}
  rules:
  - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}
"#;

#[test]
fn webhook_configurations_are_applied_with_upstream_defaults_and_printed() {
    let s = Server::start();
    s.kubectl_stdin(&["apply", "-f", "-"], WEBHOOKS).ok();

    let vwc = s
        .get_json(&["validatingwebhookconfigurations", "pod-policy"])
        .unwrap();
    assert_eq!(vwc["metadata"]["generation"], 1, "{vwc}");
    let pods = &vwc["webhooks"][0];
    assert_eq!(pods["failurePolicy"], "Fail", "{pods}");
    assert_eq!(pods["matchPolicy"], "Equivalent");
    assert_eq!(pods["namespaceSelector"], serde_json::json!({}));
    assert_eq!(pods["objectSelector"], serde_json::json!({}));
    assert_eq!(pods["timeoutSeconds"], 10);
    assert_eq!(pods["clientConfig"]["service"]["port"], 443);
    assert_eq!(pods["rules"][0]["scope"], "*");
    assert!(pods.get("reinvocationPolicy").is_none(), "{pods}");
    let deployments = &vwc["webhooks"][1];
    assert_eq!(deployments["failurePolicy"], "Ignore");
    assert_eq!(deployments["rules"][0]["scope"], "Namespaced");

    let mwc = s
        .get_json(&["mutatingwebhookconfigurations", "sidecar-injector"])
        .unwrap();
    let inject = &mwc["webhooks"][0];
    assert_eq!(inject["reinvocationPolicy"], "Never", "{inject}");
    assert_eq!(inject["timeoutSeconds"], 10);
    // Line breaks in the CA bundle are skipped, as Go's base64 decoder skips them.
    assert_eq!(inject["clientConfig"]["caBundle"], "aGVsbG8gd29ybGQ=");

    let table = s
        .kubectl(&["get", "validatingwebhookconfigurations"])
        .ok()
        .to_string();
    assert_eq!(header(&table), "NAME WEBHOOKS AGE");
    assert_eq!(rows(&table)[0][..2], ["pod-policy", "2"]);
    let table = s
        .kubectl(&["get", "mutatingwebhookconfigurations", "sidecar-injector"])
        .ok()
        .to_string();
    assert_eq!(header(&table), "NAME WEBHOOKS AGE");
    assert_eq!(rows(&table)[0][..2], ["sidecar-injector", "1"]);
    let yaml = s
        .kubectl(&["get", "validatingwebhookconfigurations", "-o", "yaml"])
        .ok()
        .to_string();
    assert!(yaml.contains("name: pods.policy.example.com"), "{yaml}");
    assert!(yaml.contains("failurePolicy: Fail"), "{yaml}");

    // A second apply merges the webhooks by name: the one changed gets its new timeout, the
    // other keeps everything, and the generation moves on.
    let changed = WEBHOOKS.replacen(
        "  failurePolicy: Ignore\n",
        "  failurePolicy: Ignore\n  timeoutSeconds: 5\n",
        1,
    );
    s.kubectl_stdin(&["apply", "-f", "-"], &changed).ok();
    let vwc = s
        .get_json(&["validatingwebhookconfigurations", "pod-policy"])
        .unwrap();
    assert_eq!(vwc["metadata"]["generation"], 2, "{vwc}");
    assert_eq!(vwc["webhooks"][1]["timeoutSeconds"], 5, "{vwc}");
    assert_eq!(
        vwc["webhooks"][0]["clientConfig"]["service"]["path"],
        "/validate"
    );
    assert_eq!(vwc["webhooks"][1]["admissionReviewVersions"][1], "v1beta1");
}

#[test]
fn invalid_webhook_configurations_are_refused_with_upstream_messages() {
    let s = Server::start();
    let err = rejected(
        &s,
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: bad-hooks}
webhooks:
- name: pods.policy.example.com
  admissionReviewVersions: [v1]
  clientConfig: {url: "http://policy.example.com/validate"}
"#,
    );
    assert!(
        err.contains(r#"The ValidatingWebhookConfiguration "bad-hooks" is invalid"#),
        "{err}"
    );
    assert!(
        err.contains(
            "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"
        ),
        "{err}"
    );
    assert!(
        err.contains(r#"webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]"#),
        "{err}"
    );

    let err = rejected(
        &s,
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: bad-mutator}
webhooks:
- name: mutator
  sideEffects: Some
  admissionReviewVersions: [v2]
  timeoutSeconds: 45
  clientConfig:
    service: {namespace: policy, name: webhook, path: mutate}
  rules:
  - {operations: ["*", CREATE], apiGroups: [""], apiVersions: [v1], resources: ["*/*", pods]}
"#,
    );
    for want in [
        r#"webhooks[0].name: Invalid value: "mutator": should be a domain with at least three segments separated by dots"#,
        r#"webhooks[0].rules[0].operations: Invalid value: []admissionregistration.OperationType{"*", "CREATE"}: if '*' is present, must not specify other operations"#,
        r#"webhooks[0].rules[0].resources: Invalid value: []string{"*/*", "pods"}: if '*/*' is present, must not specify other resources"#,
        r#"webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun""#,
        "webhooks[0].timeoutSeconds: Invalid value: 45: the timeout value must be between 1 and 30 seconds",
        r#"webhooks[0].clientConfig.service.path: Invalid value: "mutate": must start with a '/'"#,
        r#"webhooks[0].admissionReviewVersions: Invalid value: []string{"v2"}: must include at least one of v1, v1beta1"#,
    ] {
        assert!(err.contains(want), "missing {want}\nin {err}");
    }
    assert!(
        s.get_json(&["mutatingwebhookconfigurations", "bad-mutator"])
            .is_none()
    );

    // A match condition whose CEL does not compile is refused.
    let err = rejected(
        &s,
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: bad-condition}
webhooks:
- name: pods.policy.example.com
  sideEffects: None
  admissionReviewVersions: [v1]
  clientConfig: {url: "https://policy.example.com/validate"}
  matchConditions:
  - {name: broken, expression: "object.metadata.name =="}
"#,
    );
    assert!(
        err.contains(r#"webhooks[0].matchConditions[0].expression: Invalid value: "object.metadata.name ==": compilation failed: "#),
        "{err}"
    );
}

#[test]
fn policies_and_bindings_are_applied_listed_and_validated() {
    let s = Server::start();
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replica-limit.example.com}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  validations:
  - expression: "object.spec.replicas <= int(params.data.maxReplicas)"
    messageExpression: "'at most ' + params.data.maxReplicas + ' replicas'"
    reason: Invalid
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replica-limit-binding}
spec:
  policyName: replica-limit.example.com
  validationActions: [Deny, Audit]
  paramRef: {name: replica-limit, namespace: default, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector:
      matchLabels: {environment: test}
"#,
    )
    .ok();

    let policy = s
        .get_json(&["validatingadmissionpolicies", "replica-limit.example.com"])
        .unwrap();
    assert_eq!(policy["metadata"]["generation"], 1, "{policy}");
    assert_eq!(policy["spec"]["failurePolicy"], "Fail", "{policy}");
    let mc = &policy["spec"]["matchConstraints"];
    assert_eq!(mc["matchPolicy"], "Equivalent", "{mc}");
    assert_eq!(mc["objectSelector"], serde_json::json!({}));
    assert_eq!(mc["resourceRules"][0]["scope"], "*");
    let binding = s
        .get_json(&["validatingadmissionpolicybindings", "replica-limit-binding"])
        .unwrap();
    let mr = &binding["spec"]["matchResources"];
    assert_eq!(mr["matchPolicy"], "Equivalent", "{mr}");
    assert_eq!(mr["objectSelector"], serde_json::json!({}));

    let table = s
        .kubectl(&["get", "validatingadmissionpolicies"])
        .ok()
        .to_string();
    assert_eq!(header(&table), "NAME VALIDATIONS PARAMKIND AGE");
    assert_eq!(
        rows(&table)[0][..3],
        ["replica-limit.example.com", "1", "v1/ConfigMap"]
    );
    let table = s
        .kubectl(&["get", "validatingadmissionpolicybindings"])
        .ok()
        .to_string();
    assert_eq!(header(&table), "NAME POLICYNAME PARAMREF AGE");
    assert_eq!(
        rows(&table)[0][..3],
        [
            "replica-limit-binding",
            "replica-limit.example.com",
            "default/replica-limit"
        ]
    );

    let err = rejected(
        &s,
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: broken.example.com}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - {expression: "object.spec.containers.all(c, ", reason: Teapot}
"#,
    );
    assert!(
        err.contains(r#"spec.validations[0].expression: Invalid value: "object.spec.containers.all(c, ": compilation failed: "#),
        "{err}"
    );
    assert!(
        err.contains(r#"spec.validations[0].reason: Unsupported value: "Teapot": supported values: "Forbidden", "Invalid", "RequestEntityTooLarge""#),
        "{err}"
    );
    let err = rejected(
        &s,
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: broken-binding}
spec:
  policyName: replica-limit.example.com
  validationActions: [Deny, Warn]
  paramRef: {name: replica-limit}
"#,
    );
    assert!(
        err.contains("spec.paramRef.parameterNotFoundAction: Required value"),
        "{err}"
    );
    assert!(err.contains("must not contain both Deny and Warn"), "{err}");
}

#[test]
fn discovery_lists_the_four_admissionregistration_kinds() {
    let s = Server::start();
    let out = s.kubectl(&["api-resources", &format!("--api-group={GROUP}")]);
    let table = out.ok().to_string();
    assert_eq!(header(&table), "NAME SHORTNAMES APIVERSION NAMESPACED KIND");
    let listed: Vec<Vec<String>> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(
        listed,
        [
            [
                "mutatingwebhookconfigurations",
                "admissionregistration.k8s.io/v1",
                "false",
                "MutatingWebhookConfiguration"
            ],
            [
                "validatingadmissionpolicies",
                "admissionregistration.k8s.io/v1",
                "false",
                "ValidatingAdmissionPolicy"
            ],
            [
                "validatingadmissionpolicybindings",
                "admissionregistration.k8s.io/v1",
                "false",
                "ValidatingAdmissionPolicyBinding"
            ],
            [
                "validatingwebhookconfigurations",
                "admissionregistration.k8s.io/v1",
                "false",
                "ValidatingWebhookConfiguration"
            ],
        ]
    );
    // All four are in the `api-extensions` category, and the policy has a status subresource.
    let names = s.kubectl(&["api-resources", "--categories=api-extensions", "-o", "name"]);
    let names: Vec<&str> = names.ok().lines().collect();
    for plural in [
        "mutatingwebhookconfigurations",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "validatingwebhookconfigurations",
    ] {
        let name = format!("{plural}.{GROUP}");
        assert!(names.contains(&name.as_str()), "{name} in {names:?}");
    }
    let list = s
        .kubectl(&["get", "--raw", &format!("/apis/{GROUP}/v1")])
        .json();
    let status = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "validatingadmissionpolicies/status")
        .cloned()
        .unwrap_or_else(|| panic!("no status subresource in {list}"));
    assert_eq!(status["kind"], "ValidatingAdmissionPolicy");
}
