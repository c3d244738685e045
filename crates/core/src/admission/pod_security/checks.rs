//! The Pod Security Standards' controls, one function each, as upstream's
//! `k8s.io/pod-security-admission/policy/check_*.go` define them for the versions up to the
//! server's (1.33): each looks at a pod's metadata and spec (JSON, as admission holds them) and
//! returns the reason and detail of a violation, or `None`. Containers are visited as upstream's
//! `visitContainers` does: init containers, containers, ephemeral containers.

use std::collections::BTreeSet;

use serde_json::Value;

use super::Version;

/// One violated control: upstream's `ForbiddenReason` and `ForbiddenDetail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation {
        reason: reason.into(),
        detail: detail.into(),
    })
}

/// A check of one control at one version.
pub type CheckFn = fn(&Value, &Value, Version) -> Option<Violation>;

fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |k| spec.get(k).and_then(Value::as_array).into_iter().flatten())
}

fn name(c: &Value) -> String {
    c.get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn sc<'a>(c: &'a Value, field: &str) -> Option<&'a Value> {
    c.get("securityContext")?
        .get(field)
        .filter(|v| !v.is_null())
}

fn pod_sc<'a>(spec: &'a Value, field: &str) -> Option<&'a Value> {
    spec.get("securityContext")?
        .get(field)
        .filter(|v| !v.is_null())
}

fn is_windows(spec: &Value) -> bool {
    spec.pointer("/os/name").and_then(Value::as_str) == Some("windows")
}

fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let inner: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("\"{}\"", inner.join("\", \""))
}

fn pluralize<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 { singular } else { plural }
}

/// "container "a"" or "containers "a", "b"".
fn containers_phrase(names: &[String]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

/// The containers for which `bad` holds.
fn bad_containers(spec: &Value, mut bad: impl FnMut(&Value) -> bool) -> Vec<String> {
    containers(spec).filter(|c| bad(c)).map(name).collect()
}

pub fn host_namespaces(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let set: Vec<&str> = [
        ("hostNetwork", "hostNetwork=true"),
        ("hostPID", "hostPID=true"),
        ("hostIPC", "hostIPC=true"),
    ]
    .into_iter()
    .filter(|(k, _)| spec.get(*k).and_then(Value::as_bool) == Some(true))
    .map(|(_, s)| s)
    .collect();
    if set.is_empty() {
        return None;
    }
    violation("host namespaces", set.join(", "))
}

pub fn privileged(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let bad = bad_containers(spec, |c| {
        sc(c, "privileged").and_then(Value::as_bool) == Some(true)
    });
    if bad.is_empty() {
        return None;
    }
    violation(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    )
}

const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn added_capabilities(c: &Value) -> Vec<&str> {
    sc(c, "capabilities")
        .and_then(|caps| caps.get("add"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

pub fn capabilities_baseline(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let mut extra = BTreeSet::new();
    let bad = bad_containers(spec, |c| {
        let mut bad = false;
        for cap in added_capabilities(c) {
            if !BASELINE_CAPABILITIES.contains(&cap) {
                extra.insert(cap.to_string());
                bad = true;
            }
        }
        bad
    });
    if bad.is_empty() {
        return None;
    }
    let extra: Vec<String> = extra.into_iter().collect();
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(&extra)
        ),
    )
}

pub fn capabilities_restricted(_: &Value, spec: &Value, v: Version) -> Option<Violation> {
    if v.at_least(25) && is_windows(spec) {
        return None;
    }
    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut forbidden = BTreeSet::new();
    for c in containers(spec) {
        let Some(caps) = sc(c, "capabilities") else {
            missing_drop.push(name(c));
            continue;
        };
        let dropped_all = caps
            .get("drop")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|x| x.as_str() == Some("ALL")));
        if !dropped_all {
            missing_drop.push(name(c));
        }
        let mut bad = false;
        for cap in added_capabilities(c) {
            if cap != "NET_BIND_SERVICE" {
                forbidden.insert(cap.to_string());
                bad = true;
            }
        }
        if bad {
            adding.push(name(c));
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        let forbidden: Vec<String> = forbidden.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&forbidden)
        ));
    }
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

fn volumes(spec: &Value) -> impl Iterator<Item = &Value> {
    spec.get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

pub fn host_path_volumes(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let bad: Vec<String> = volumes(spec)
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad)
        ),
    )
}

pub fn host_ports(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let mut ports = BTreeSet::new();
    let bad = bad_containers(spec, |c| {
        let mut bad = false;
        for p in c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(hp) = p
                .get("hostPort")
                .and_then(Value::as_i64)
                .filter(|p| *p != 0)
            {
                ports.insert(hp.to_string());
                bad = true;
            }
        }
        bad
    });
    if bad.is_empty() {
        return None;
    }
    // Upstream sorts the ports as strings.
    let ports: Vec<String> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

pub fn proc_mount(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let mut types = BTreeSet::new();
    let bad = bad_containers(spec, |c| match sc(c, "procMount").and_then(Value::as_str) {
        Some(t) if t != "Default" => {
            types.insert(t.to_string());
            true
        }
        _ => false,
    });
    if bad.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    violation(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(&types)
        ),
    )
}

pub fn se_linux_options(_: &Value, spec: &Value, v: Version) -> Option<Violation> {
    let allowed = |t: &str| {
        matches!(
            t,
            "" | "container_t" | "container_init_t" | "container_kvm_t"
        ) || (v.at_least(31) && t == "container_engine_t")
    };
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut check = |opts: &Value| {
        let mut valid = true;
        let t = opts.get("type").and_then(Value::as_str).unwrap_or_default();
        if !allowed(t) {
            valid = false;
            bad_types.insert(t.to_string());
        }
        if !opts
            .get("user")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .is_empty()
        {
            valid = false;
            set_user = true;
        }
        if !opts
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .is_empty()
        {
            valid = false;
            set_role = true;
        }
        valid
    };
    let mut setters = Vec::new();
    if let Some(opts) = pod_sc(spec, "seLinuxOptions")
        && !check(opts)
    {
        setters.push("pod".to_string());
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(opts) = sc(c, "seLinuxOptions")
            && !check(opts)
        {
            bad.push(name(c));
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        let types: Vec<String> = bad_types.into_iter().collect();
        data.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if set_user {
        data.push("user may not be set".to_string());
    }
    if set_role {
        data.push("role may not be set".to_string());
    }
    violation(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            data.join("; ")
        ),
    )
}

const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_ANNOTATION: &str = "container.seccomp.security.alpha.kubernetes.io/";

fn annotations(meta: &Value) -> impl Iterator<Item = (&String, &str)> {
    meta.get("annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k, v.as_str()?)))
}

fn annotation<'a>(meta: &'a Value, key: &str) -> Option<&'a str> {
    meta.get("annotations")?.get(key)?.as_str()
}

fn seccomp_type(v: &Value) -> Option<&str> {
    Some(v.get("type").and_then(Value::as_str).unwrap_or_default())
}

fn valid_seccomp(t: &str) -> bool {
    matches!(t, "Localhost" | "RuntimeDefault")
}

/// Before 1.19 the seccomp annotations; from 1.19 the fields.
pub fn seccomp_baseline(meta: &Value, spec: &Value, v: Version) -> Option<Violation> {
    if !v.at_least(19) {
        let valid = |s: &str| {
            s == "runtime/default" || s == "docker/default" || s.starts_with("localhost/")
        };
        let mut forbidden = BTreeSet::new();
        if let Some(s) = annotation(meta, SECCOMP_POD_ANNOTATION)
            && !valid(s)
        {
            forbidden.insert(format!("{SECCOMP_POD_ANNOTATION}={s:?}"));
        }
        for c in containers(spec) {
            let key = format!("{SECCOMP_CONTAINER_ANNOTATION}{}", name(c));
            if let Some(s) = annotation(meta, &key)
                && !valid(s)
            {
                forbidden.insert(format!("{key}={s:?}"));
            }
        }
        if forbidden.is_empty() {
            return None;
        }
        let list: Vec<String> = forbidden.into_iter().collect();
        return violation(
            "seccompProfile",
            format!(
                "forbidden {} {}",
                pluralize("annotation", "annotations", list.len()),
                list.join(", ")
            ),
        );
    }
    seccomp_fields(spec, false)
}

pub fn seccomp_restricted(meta: &Value, spec: &Value, v: Version) -> Option<Violation> {
    if !v.at_least(19) {
        return seccomp_baseline(meta, spec, v);
    }
    if v.at_least(25) && is_windows(spec) {
        return None;
    }
    seccomp_fields(spec, true)
}

fn seccomp_fields(spec: &Value, required: bool) -> Option<Violation> {
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(t) = pod_sc(spec, "seccompProfile").and_then(seccomp_type) {
        if valid_seccomp(t) {
            pod_set = true;
        } else {
            setters.push("pod".to_string());
            values.insert(t.to_string());
        }
    }
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match sc(c, "seccompProfile").and_then(seccomp_type) {
            Some(t) if !valid_seccomp(t) => {
                explicit.push(name(c));
                values.insert(t.to_string());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(name(c)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        let values: Vec<String> = values.into_iter().collect();
        return violation(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&values)
            ),
        );
    }
    if required && !implicit.is_empty() {
        return violation(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_phrase(&implicit)
            ),
        );
    }
    None
}

pub fn sysctls(_: &Value, spec: &Value, v: Version) -> Option<Violation> {
    let allowed = |s: &str| {
        matches!(
            s,
            "kernel.shm_rmid_forced"
                | "net.ipv4.ip_local_port_range"
                | "net.ipv4.tcp_syncookies"
                | "net.ipv4.ping_group_range"
                | "net.ipv4.ip_unprivileged_port_start"
        ) || (v.at_least(27) && s == "net.ipv4.ip_local_reserved_ports")
            || (v.at_least(29)
                && matches!(
                    s,
                    "net.ipv4.tcp_keepalive_time"
                        | "net.ipv4.tcp_fin_timeout"
                        | "net.ipv4.tcp_keepalive_intvl"
                        | "net.ipv4.tcp_keepalive_probes"
                ))
            || (v.at_least(32) && matches!(s, "net.ipv4.tcp_rmem" | "net.ipv4.tcp_wmem"))
    };
    let bad: Vec<&str> = pod_sc(spec, "sysctls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.get("name").and_then(Value::as_str))
        .filter(|s| !allowed(s))
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation("forbidden sysctls", bad.join(", "))
}

pub fn windows_host_process(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let host_process = |v: Option<&Value>| {
        v.and_then(|w| w.get("hostProcess"))
            .and_then(Value::as_bool)
            == Some(true)
    };
    let mut setters = Vec::new();
    if host_process(pod_sc(spec, "windowsOptions")) {
        setters.push("pod".to_string());
    }
    let bad = bad_containers(spec, |c| host_process(sc(c, "windowsOptions")));
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    )
}

pub fn app_armor(meta: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let allowed_type = |p: &Value| {
        matches!(
            p.get("type").and_then(Value::as_str),
            Some("RuntimeDefault" | "Localhost")
        )
    };
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if let Some(p) = pod_sc(spec, "appArmorProfile")
        && !allowed_type(p)
    {
        setters.push("pod".to_string());
        values.insert(
            p.get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        );
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(p) = sc(c, "appArmorProfile")
            && !allowed_type(p)
        {
            bad.push(name(c));
            values.insert(
                p.get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    let mut forbidden: Vec<String> = annotations(meta)
        .filter(|(k, v)| {
            k.starts_with("container.apparmor.security.beta.kubernetes.io/")
                && !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    forbidden.sort();
    let mut list: Vec<String> = values.into_iter().collect();
    if !forbidden.is_empty() {
        setters.push(pluralize("annotation", "annotations", forbidden.len()).to_string());
        list.extend(forbidden);
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            list.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            join_quote(&list)
        ),
    )
}

pub fn allow_privilege_escalation(_: &Value, spec: &Value, v: Version) -> Option<Violation> {
    if !v.at_least(8) || (v.at_least(25) && is_windows(spec)) {
        return None;
    }
    let bad = bad_containers(spec, |c| {
        sc(c, "allowPrivilegeEscalation").and_then(Value::as_bool) != Some(false)
    });
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    )
}

/// The volume sources restricted allows.
const RESTRICTED_VOLUME_SOURCES: [&str; 9] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The other sources, as upstream names them in its message.
const OTHER_VOLUME_SOURCES: [&str; 21] = [
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

pub fn restricted_volumes(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let has = |v: &Value, k: &str| v.get(k).is_some_and(|s| !s.is_null());
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for v in volumes(spec) {
        if RESTRICTED_VOLUME_SOURCES.iter().any(|k| has(v, k)) {
            continue;
        }
        bad.push(name(v));
        let t = OTHER_VOLUME_SOURCES
            .iter()
            .find(|k| has(v, k))
            .copied()
            .unwrap_or("unknown");
        types.insert(t.to_string());
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}

pub fn run_as_non_root(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let mut setters = Vec::new();
    let mut pod_non_root = false;
    match pod_sc(spec, "runAsNonRoot").and_then(Value::as_bool) {
        Some(false) => setters.push("pod".to_string()),
        Some(true) => pod_non_root = true,
        None => {}
    }
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match sc(c, "runAsNonRoot").and_then(Value::as_bool) {
            Some(false) => explicit.push(name(c)),
            Some(true) => {}
            None if !pod_non_root => implicit.push(name(c)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        );
    }
    if !implicit.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_phrase(&implicit)
            ),
        );
    }
    None
}

pub fn run_as_user(_: &Value, spec: &Value, v: Version) -> Option<Violation> {
    if !v.at_least(23) {
        return None;
    }
    let mut setters = Vec::new();
    if pod_sc(spec, "runAsUser").and_then(Value::as_i64) == Some(0) {
        setters.push("pod".to_string());
    }
    let bad = bad_containers(spec, |c| {
        sc(c, "runAsUser").and_then(Value::as_i64) == Some(0)
    });
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters.join(" and ")),
    )
}
