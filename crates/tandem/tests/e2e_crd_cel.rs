//! End-to-end: CRD validation rules using Kubernetes' CEL libraries (issue 17) and CEL's
//! timestamps and durations (over `format: date-time` and `duration` fields), as kube-apiserver
//! evaluates them (`k8s.io/apiserver/pkg/cel/library`, `pkg/cel/common/values.go`), and
//! upstream's static cost limit refusing a rule over an unbounded list at CRD creation.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use common::Server;

const CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "volumes.cel.example.com"},
  "spec": {
    "group": "cel.example.com",
    "scope": "Namespaced",
    "names": {"plural": "volumes", "singular": "volume", "kind": "Volume"},
    "versions": [{
      "name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
          "size": {"type": "string", "maxLength": 32,
            "x-kubernetes-validations": [{"rule": "isQuantity(self) && quantity(self).isLessThan(quantity('1Gi'))",
              "message": "size must be a quantity below 1Gi"}]},
          "mirrors": {"type": "array", "maxItems": 8,
            "items": {"type": "string", "maxLength": 256},
            "x-kubernetes-validations": [{"rule": "self.all(x, isURL(x) && url(x).getScheme() == 'https')",
              "message": "mirrors must be https URLs"}]},
          "subnet": {"type": "string", "maxLength": 64,
            "x-kubernetes-validations": [{"rule": "isCIDR(self) && cidr('10.0.0.0/8').containsCIDR(self)",
              "message": "subnet must be inside 10.0.0.0/8"}]}
        }}
      }}}
    }]
  }
}"#;

fn object(name: &str, size: &str, mirror: &str, subnet: &str) -> String {
    format!(
        r#"{{"apiVersion":"cel.example.com/v1","kind":"Volume","metadata":{{"name":"{name}","namespace":"default"}},"spec":{{"size":"{size}","mirrors":["{mirror}"],"subnet":"{subnet}"}}}}"#
    )
}

#[test]
fn crd_rules_use_the_kubernetes_cel_libraries() {
    let s = Server::start();
    let out = s.kubectl_stdin(&["apply", "-f", "-"], CRD);
    assert!(out.success(), "{}", out.combined());
    let out = s.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/volumes.cel.example.com",
        "--timeout=30s",
    ]);
    assert!(out.success(), "{}", out.combined());

    let good = object(
        "good",
        "512Mi",
        "https://mirror.example.com/data",
        "10.1.0.0/16",
    );
    let out = s.kubectl_stdin(&["create", "-f", "-"], &good);
    assert!(out.success(), "a valid object: {}", out.combined());

    for (bad, path, message) in [
        (
            object("big", "2Gi", "https://m.example.com/", "10.1.0.0/16"),
            "spec.size",
            "size must be a quantity below 1Gi",
        ),
        (
            object("plain", "1Mi", "http://m.example.com/", "10.1.0.0/16"),
            "spec.mirrors",
            "mirrors must be https URLs",
        ),
        (
            object("outside", "1Mi", "https://m.example.com/", "192.168.0.0/24"),
            "spec.subnet",
            "subnet must be inside 10.0.0.0/8",
        ),
    ] {
        let out = s.kubectl_stdin(&["create", "-f", "-"], &bad);
        assert!(!out.success(), "{path}: an invalid object was accepted");
        assert!(
            out.stderr.contains(&format!("{path}: Invalid value")) && out.stderr.contains(message),
            "{path}: {}",
            out.stderr
        );
    }
}

#[test]
fn a_rule_over_an_unbounded_list_is_refused_until_bounded() {
    let s = Server::start();
    let crd = |bounds: &str| {
        format!(
            r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
            "metadata":{{"name":"tags.cel.example.com"}},
            "spec":{{"group":"cel.example.com","scope":"Namespaced",
              "names":{{"plural":"tags","singular":"tag","kind":"Tag"}},
              "versions":[{{"name":"v1","served":true,"storage":true,
                "schema":{{"openAPIV3Schema":{{"type":"object","properties":{{
                  "spec":{{"type":"object","properties":{{
                    "tags":{{"type":"array",{bounds}
                      "x-kubernetes-validations":[{{"rule":"self.all(x, self.exists_one(y, x == y))"}}]}}}}}}}}}}}}}}]}}}}"#
        )
    };
    // A single-version CRD reports under `spec.validation`, as upstream converts it.
    let unbounded = crd(r#""items":{"type":"string"},"#);
    let out = s.kubectl_stdin(&["create", "-f", "-"], &unbounded);
    assert!(!out.success(), "an unbounded rule was accepted");
    assert!(
        out.stderr.contains(
            "spec.validation.openAPIV3Schema.properties[spec].properties[tags].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
        ),
        "{}",
        out.stderr
    );
    let bounded = crd(r#""maxItems":16,"items":{"type":"string","maxLength":64},"#);
    let out = s.kubectl_stdin(&["create", "-f", "-"], &bounded);
    assert!(out.success(), "a bounded rule: {}", out.combined());
}

#[test]
fn a_timestamp_rule_refuses_a_bad_object_with_its_message() {
    let s = Server::start();
    let crd = r#"{
      "apiVersion": "apiextensions.k8s.io/v1",
      "kind": "CustomResourceDefinition",
      "metadata": {"name": "leases.cel.example.com"},
      "spec": {
        "group": "cel.example.com",
        "scope": "Namespaced",
        "names": {"plural": "leases", "singular": "lease", "kind": "Lease"},
        "versions": [{
          "name": "v1", "served": true, "storage": true,
          "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
              "expiry": {"type": "string", "format": "date-time",
                "x-kubernetes-validations": [{"rule": "self > timestamp('2020-01-01T00:00:00Z')",
                  "message": "expiry must be after 2020"}]},
              "ttl": {"type": "string", "format": "duration",
                "x-kubernetes-validations": [{"rule": "self <= duration('24h')",
                  "message": "ttl must be at most a day"}]}
            }}
          }}}
        }]
      }
    }"#;
    let out = s.kubectl_stdin(&["apply", "-f", "-"], crd);
    assert!(out.success(), "{}", out.combined());
    let out = s.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/leases.cel.example.com",
        "--timeout=30s",
    ]);
    assert!(out.success(), "{}", out.combined());
    let lease = |name: &str, expiry: &str, ttl: &str| {
        format!(
            r#"{{"apiVersion":"cel.example.com/v1","kind":"Lease","metadata":{{"name":"{name}","namespace":"default"}},"spec":{{"expiry":"{expiry}","ttl":"{ttl}"}}}}"#
        )
    };

    let out = s.kubectl_stdin(
        &["create", "-f", "-"],
        &lease("good", "2030-06-01T12:00:00+02:00", "90m"),
    );
    assert!(out.success(), "a valid object: {}", out.combined());
    for (bad, path, message) in [
        (
            lease("stale", "2019-12-31T23:00:00-00:30", "1h"),
            "spec.expiry",
            "expiry must be after 2020",
        ),
        (
            lease("long", "2030-01-01T00:00:00Z", "2 days"),
            "spec.ttl",
            "ttl must be at most a day",
        ),
    ] {
        let out = s.kubectl_stdin(&["create", "-f", "-"], &bad);
        assert!(!out.success(), "{path}: an invalid object was accepted");
        assert!(
            out.stderr.contains(&format!("{path}: Invalid value")) && out.stderr.contains(message),
            "{path}: {}",
            out.stderr
        );
    }
}
