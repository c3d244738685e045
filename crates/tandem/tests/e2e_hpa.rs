//! End-to-end: HorizontalPodAutoscalers with the stock kubectl — `kubectl autoscale` creates
//! one, `kubectl get hpa` prints upstream's columns (`printHorizontalPodAutoscaler`), the
//! autoscaling/v1 view converts as upstream's, `kubectl explain` knows the kind, and an invalid
//! HPA is refused with 422 and upstream's field paths.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use common::Server;

#[test]
fn kubectl_autoscale_creates_an_hpa_that_get_prints_with_upstream_columns() {
    let s = Server::start();
    s.create(&common::deployment("web", 1));
    let out = s.kubectl(&[
        "autoscale",
        "deployment",
        "web",
        "--cpu-percent=50",
        "--min=1",
        "--max=3",
    ]);
    assert!(
        out.ok()
            .contains("horizontalpodautoscaler.autoscaling/web autoscaled"),
        "{}",
        out.combined()
    );

    let table = s.kubectl(&["get", "hpa"]);
    let lines: Vec<&str> = table.ok().lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "REFERENCE",
            "TARGETS",
            "MINPODS",
            "MAXPODS",
            "REPLICAS",
            "AGE"
        ]
    );
    let row = lines[1];
    assert!(row.starts_with("web"), "{row}");
    assert!(row.contains("Deployment/web"), "{row}");
    assert!(row.contains("cpu: <unknown>/50%"), "{row}");

    // The stored v2 object, and its autoscaling/v1 view.
    let v2 = s.get_json(&["hpa", "web"]).unwrap();
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(v2["spec"]["minReplicas"], 1);
    assert_eq!(v2["spec"]["maxReplicas"], 3);
    assert_eq!(
        v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        50
    );
    let v1 = s
        .get_json(&["horizontalpodautoscalers.v1.autoscaling", "web"])
        .unwrap();
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);

    let explain = s.kubectl(&["explain", "hpa.spec.behavior"]);
    assert!(explain.ok().contains("scaleDown"), "{}", explain.combined());
}

#[test]
fn invalid_hpas_get_422_with_field_paths() {
    let s = Server::start();
    let manifest = r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: bad
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: web
  minReplicas: 5
  maxReplicas: 2
  metrics:
  - type: Resource
    resource:
      name: cpu
      target:
        type: Utilization
        averageUtilization: 0
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 4000
      selectPolicy: Sometimes
"#;
    let (out, codes) = s.kubectl_codes(&["create", "-f", "-"], Some(manifest));
    assert!(!out.success(), "{}", out.combined());
    assert!(codes.contains(&422), "{codes:?}");
    let err = out.err();
    for want in [
        "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`",
        "spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0",
        "spec.behavior.scaleDown.stabilizationWindowSeconds: Invalid value: 4000: must be less than or equal to 3600",
        "spec.behavior.scaleDown.selectPolicy: Unsupported value: \"Sometimes\"",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }
}
