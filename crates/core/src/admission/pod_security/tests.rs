use super::*;
use serde_json::json;

fn lv(level: Level, version: Version) -> LevelVersion {
    LevelVersion { level, version }
}

const RESTRICTED: LevelVersion = LevelVersion {
    level: Level::Restricted,
    version: Version::Latest,
};
const BASELINE: LevelVersion = LevelVersion {
    level: Level::Baseline,
    version: Version::Latest,
};

fn detail(level: LevelVersion, spec: Value) -> String {
    forbidden_detail(&evaluate(level, &json!({}), &spec))
}

#[test]
fn a_bare_container_fails_restricted_with_upstreams_message() {
    let spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    assert_eq!(detail(BASELINE, spec.clone()), "");
    assert_eq!(
        enforce_message(RESTRICTED, &evaluate(RESTRICTED, &json!({}), &spec)),
        "violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
}

#[test]
fn a_hardened_linux_pod_passes_restricted() {
    let spec = json!({
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "busybox", "securityContext": {
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}],
        "volumes": [{"name": "cfg", "configMap": {"name": "x"}}, {"name": "tmp", "emptyDir": {}}]});
    assert_eq!(detail(RESTRICTED, spec), "");
}

#[test]
fn windows_pods_skip_the_linux_only_restricted_controls_from_1_25() {
    let spec = json!({"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": true},
        "containers": [{"name": "iis", "image": "mcr.microsoft.com/windows/servercore/iis"}]});
    assert_eq!(detail(RESTRICTED, spec.clone()), "");
    // Before 1.25 the same pod is held to every control.
    let old = detail(lv(Level::Restricted, Version::Minor(24)), spec);
    assert!(
        old.starts_with("allowPrivilegeEscalation != false"),
        "{old}"
    );
    // runAsNonRoot still applies to Windows pods.
    let root = json!({"os": {"name": "windows"}, "containers": [{"name": "iis", "image": "x"}]});
    assert_eq!(
        detail(RESTRICTED, root),
        "runAsNonRoot != true (pod or container \"iis\" must set securityContext.runAsNonRoot=true)"
    );
}

#[test]
fn host_process_is_refused_by_baseline() {
    let spec = json!({"os": {"name": "windows"}, "hostNetwork": true,
        "securityContext": {"windowsOptions": {"hostProcess": true, "runAsUserName": "NT AUTHORITY\\SYSTEM"}},
        "containers": [{"name": "agent", "image": "x",
            "securityContext": {"windowsOptions": {"hostProcess": true}}}]});
    assert_eq!(
        detail(BASELINE, spec),
        "host namespaces (hostNetwork=true), hostProcess (pod and container \"agent\" must not set securityContext.windowsOptions.hostProcess=true)"
    );
}

#[test]
fn baseline_controls_name_what_they_refuse() {
    let spec = json!({
        "hostPID": true,
        "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"},
                                        {"name": "net.ipv4.tcp_syncookies", "value": "1"}],
                            "seLinuxOptions": {"type": "spc_t", "user": "root"}},
        "initContainers": [{"name": "init", "image": "x", "securityContext": {"privileged": true}}],
        "containers": [
            {"name": "a", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81, "hostPort": 443}],
             "securityContext": {"capabilities": {"add": ["NET_ADMIN", "CHOWN", "SYS_ADMIN"]}, "procMount": "Unmasked",
                                 "seccompProfile": {"type": "Unconfined"}, "appArmorProfile": {"type": "Unconfined"}}},
            {"name": "b", "image": "x", "securityContext": {"privileged": true}}],
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}]});
    assert_eq!(
        detail(BASELINE, spec),
        [
            "forbidden AppArmor profile (container \"a\" must not set AppArmor profile type to \"Unconfined\")",
            "non-default capabilities (container \"a\" must not include \"NET_ADMIN\", \"SYS_ADMIN\" in securityContext.capabilities.add)",
            "host namespaces (hostPID=true)",
            "hostPath volumes (volume \"root\")",
            "hostPort (container \"a\" uses hostPorts 443, 8080)",
            "privileged (containers \"init\", \"b\" must not set securityContext.privileged=true)",
            "procMount (container \"a\" must not set securityContext.procMount to \"Unmasked\")",
            "seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type \"spc_t\"; user may not be set)",
            "seccompProfile (container \"a\" must not set securityContext.seccompProfile.type to \"Unconfined\")",
            "forbidden sysctls (kernel.msgmax)",
        ]
        .join(", ")
    );
}

#[test]
fn restricted_volumes_and_users() {
    let spec = json!({
        "securityContext": {"runAsNonRoot": false, "runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "x", "securityContext": {
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "runAsUser": 0}}],
        "volumes": [{"name": "data", "nfs": {"server": "s", "path": "/"}},
                    {"name": "repo", "gitRepo": {"repository": "r"}}, {"name": "ok", "secret": {"secretName": "s"}}]});
    assert_eq!(
        detail(RESTRICTED, spec),
        "restricted volume types (volumes \"data\", \"repo\" use restricted volume types \"gitRepo\", \"nfs\"), runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false), runAsUser=0 (pod and container \"c\" must not set runAsUser=0)"
    );
}

#[test]
fn versions_change_what_is_checked() {
    let sysctl = json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]},
        "containers": [{"name": "c", "image": "x"}]});
    assert_eq!(
        detail(lv(Level::Baseline, Version::Minor(28)), sysctl.clone()),
        "forbidden sysctls (net.ipv4.tcp_keepalive_time)"
    );
    assert_eq!(detail(lv(Level::Baseline, Version::Minor(29)), sysctl), "");
    // Versions after the server's are the server's.
    assert_eq!(Version::Minor(40).effective_minor(), LATEST_MINOR);
    assert_eq!(Version::parse("v1.29"), Ok(Version::Minor(29)));
    assert!(Version::parse("v1.029").is_err());
    assert!(Version::parse("1.29").is_err());
    assert_eq!(Version::parse("latest"), Ok(Version::Latest));
}

#[test]
fn labels_choose_the_policy_and_bad_labels_are_field_errors() {
    let labels = BTreeMap::from([(ENFORCE_LABEL.to_string(), "baseline".to_string())]);
    let (p, errs) = policy_from_labels(&labels, Policy::default());
    assert!(errs.is_empty());
    assert_eq!(p.enforce, BASELINE);
    // warn follows a stricter enforce when unset.
    assert_eq!(p.warn, BASELINE);
    assert_eq!(p.audit, LevelVersion::PRIVILEGED);

    let labels = BTreeMap::from([
        (ENFORCE_LABEL.to_string(), "strict".to_string()),
        (WARN_VERSION_LABEL.to_string(), "v2.0".to_string()),
    ]);
    let (p, errs) = policy_from_labels(&labels, Policy::default());
    // A bad enforce level fails closed.
    assert_eq!(p.enforce.level, Level::Restricted);
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        text,
        [
            "metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted",
            "metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: \"v2.0\": must be \"latest\" or \"v1.x\"",
        ]
    );
}

#[test]
fn configuration_defaults_and_errors() {
    let c: Configuration = serde_json::from_value(json!({
        "defaults": {"enforce": "baseline", "warn": "restricted"},
        "exemptions": {"namespaces": ["kube-system"], "runtimeClasses": ["kata"], "usernames": ["admin"]}}))
    .unwrap_or_default();
    let p = c.policy().unwrap_or_default();
    assert_eq!(p.enforce, BASELINE);
    assert_eq!(p.warn, RESTRICTED);
    assert_eq!(p.audit, LevelVersion::PRIVILEGED);
    assert_eq!(c.exemptions.runtime_classes, ["kata"]);
    let bad: Configuration =
        serde_json::from_value(json!({"defaults": {"enforce": "max", "audit-version": "x"}}))
            .unwrap_or_default();
    assert_eq!(
        bad.policy(),
        Err("enforce: must be one of privileged, baseline, restricted, audit-version: must be \"latest\" or \"v1.x\"".to_string())
    );
}

#[test]
fn only_image_and_container_changes_are_significant() {
    let old = json!({"containers": [{"name": "c", "image": "a"}]});
    assert!(!is_significant_update(
        &json!({"containers": [{"name": "c", "image": "a", "resources": {}}]}),
        &old
    ));
    assert!(is_significant_update(
        &json!({"containers": [{"name": "c", "image": "b"}]}),
        &old
    ));
    assert!(is_significant_update(
        &json!({"containers": [{"name": "c", "image": "a"}], "ephemeralContainers": [{"name": "debug", "image": "x"}]}),
        &old
    ));
}

#[test]
fn existing_pods_are_grouped_by_their_violations() {
    let bare = json!({"containers": [{"name": "c", "image": "x"}]});
    let host = json!({"hostNetwork": true, "containers": [{"name": "c", "image": "x"}]});
    let pods = vec![
        ("web-2".to_string(), json!({}), bare.clone()),
        ("web-1".to_string(), json!({}), bare.clone()),
        ("web-3".to_string(), json!({}), bare),
        ("agent".to_string(), json!({}), host),
    ];
    let warnings = evaluate_existing_pods("shop", BASELINE, &pods);
    assert_eq!(
        warnings,
        [
            "existing pods in namespace \"shop\" violate the new PodSecurity enforce level \"baseline:latest\"",
            "agent: host namespaces (hostNetwork=true)",
        ]
    );
    let warnings = evaluate_existing_pods("shop", RESTRICTED, &pods);
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(
        warnings[2].starts_with("web-1 (and 2 other pods): allowPrivilegeEscalation != false"),
        "{warnings:?}"
    );
}
