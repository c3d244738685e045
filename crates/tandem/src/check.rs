//! `tandem check -f FILE|DIR|- [-R]`: the API server's own checks and the hybrid-cluster
//! pitfalls, run over manifests with no cluster, as a CI step.
//!
//! Each object of each document (multi-document YAML or JSON; `List`s are opened) goes through
//! what `kubectl create` would meet on tandem: typed decoding (a wrong type, or an unknown field
//! as `kubectl`'s default strict field validation refuses it — the usual trace of a key that a
//! mis-indentation moved to the wrong level), defaulting, the type's validation and the Windows
//! admission plugins (RuntimeClass, gMSA, the pod OS rules), with upstream's messages and field
//! paths. Then the pitfalls upstream accepts silently, each with a stable rule ID and the
//! reference documents' rule it enforces (`tandem_core::admission::warnings::Rule`). RuntimeClasses
//! and GMSACredentialSpecs are looked up among the checked manifests; one that is missing there
//! is reported as a pitfall rather than an error, since the cluster may hold it.
//!
//! Output: `FILE:LINE: severity[RULE]: Kind namespace/name: message` for people (colour on a
//! terminal), or `-o json`. Exit status 1 when a finding at or above `--fail-on` (default
//! `error`) was reported, 2 when an input cannot be read. A rule is turned off with
//! `--disable TDM101,…` or, for one object, the annotation `check.tandem.io/disable: "TDM101,…"`.

use std::collections::BTreeSet;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use tandem_core::admission::{
    self, AdmissionError, AdmissionOptions, Lookups, MapLookups, Operation,
};
use tandem_core::registry::{Registry, ResourceType};

/// The annotation that turns rules off for one object.
pub const DISABLE_ANNOTATION: &str = "check.tandem.io/disable";

/// Flags of `tandem check`.
#[derive(Args, Clone, Debug)]
pub struct CheckArgs {
    /// Manifests to check: files, directories (their .yaml, .yml and .json files) or `-` for
    /// standard input (e.g. `helm template … | tandem check -f -`).
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<String>,
    /// Descend into subdirectories.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// `text` for people, `json` for tools, `sarif` for code-scanning CI.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// The lowest severity that makes the command fail.
    #[arg(long, value_enum, default_value_t = FailOn::Error)]
    pub fail_on: FailOn,
    /// Rule IDs to skip, `TDM101,TDM140`.
    #[arg(long, value_delimiter = ',')]
    pub disable: Vec<String>,
    /// The cluster to schedule pods and templates against, as `tandem up --nodes` describes one
    /// (`linux=3,windows-2019=2,windows-2022=1`); default: `tandem up`'s node pools.
    #[arg(long, conflicts_with = "cluster")]
    pub nodes: Option<String>,
    /// A kubeconfig: use that live cluster's Nodes, RuntimeClasses and GMSACredentialSpecs
    /// (read only: list calls, nothing is written).
    #[arg(long, value_name = "KUBECONFIG")]
    pub cluster: Option<PathBuf>,
}

/// What a run checks against.
pub struct CheckOptions {
    /// Rule IDs turned off.
    pub disabled: BTreeSet<String>,
    /// The described cluster's nodes, as the scheduler sees them.
    pub cluster: tandem_scheduler::Snapshot,
    /// How the report names the cluster (`linux=1,windows-2019=1,…`).
    pub cluster_name: String,
    /// RuntimeClasses and GMSACredentialSpecs of a live cluster (`--cluster`), beside those of
    /// the manifests.
    pub cluster_objects: Vec<Value>,
}

impl CheckOptions {
    /// Options for the cluster `nodes` describes (`tandem up --nodes` syntax; `None` for
    /// `tandem up`'s default pools).
    pub fn new(disabled: BTreeSet<String>, nodes: Option<&str>) -> anyhow::Result<CheckOptions> {
        let (configs, cluster_name) = match nodes {
            Some(spec) => (
                tandem_agent::parse_nodes_spec(spec).context("invalid --nodes")?,
                spec.to_string(),
            ),
            None => (
                tandem_agent::default_nodes(),
                "linux=1,windows-2019=1,windows-2022=1".to_string(),
            ),
        };
        let mut cluster = tandem_scheduler::Snapshot::new();
        for config in &configs {
            let node = tandem_agent::node_status::node(
                config,
                "emulated://tandem-check",
                &[],
                std::time::SystemTime::now(),
            );
            cluster.upsert_node(&node);
        }
        Ok(CheckOptions {
            disabled,
            cluster,
            cluster_name,
            cluster_objects: Vec::new(),
        })
    }

    /// Options for the live cluster `kubeconfig` names: its Nodes to schedule against, its
    /// RuntimeClasses and GMSACredentialSpecs to look up. Only lists are sent.
    pub async fn from_cluster(
        disabled: BTreeSet<String>,
        kubeconfig: &Path,
    ) -> anyhow::Result<CheckOptions> {
        use k8s_openapi::api::core::v1::Node;
        use k8s_openapi::api::node::v1::RuntimeClass;
        use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
        let client = crate::cluster::client_from(kubeconfig)
            .await
            .with_context(|| format!("cannot use --cluster {}", kubeconfig.display()))?;
        let list = ListParams::default();
        let nodes = Api::<Node>::all(client.clone())
            .list(&list)
            .await
            .context("cannot list the cluster's Nodes")?;
        let mut cluster = tandem_scheduler::Snapshot::new();
        for node in &nodes.items {
            cluster.upsert_node(node);
        }
        let mut cluster_objects = Vec::new();
        let classes = Api::<RuntimeClass>::all(client.clone())
            .list(&list)
            .await
            .context("cannot list the cluster's RuntimeClasses")?;
        for rc in classes.items {
            let mut v = serde_json::to_value(rc).context("a RuntimeClass")?;
            v["kind"] = json!("RuntimeClass");
            cluster_objects.push(v);
        }
        let gvk = GroupVersionKind::gvk("windows.k8s.io", "v1", "GMSACredentialSpec");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "gmsacredentialspecs");
        // A cluster without the gMSA kind has no specs to find.
        if let Ok(specs) = Api::<DynamicObject>::all_with(client, &resource)
            .list(&list)
            .await
        {
            for spec in specs.items {
                let mut v = serde_json::to_value(spec).context("a GMSACredentialSpec")?;
                v["kind"] = json!("GMSACredentialSpec");
                cluster_objects.push(v);
            }
        }
        let server = kube::config::Kubeconfig::read_from(kubeconfig)
            .ok()
            .and_then(|k| {
                k.clusters
                    .first()
                    .and_then(|c| c.cluster.as_ref()?.server.clone())
            })
            .unwrap_or_else(|| kubeconfig.display().to_string());
        Ok(CheckOptions {
            disabled,
            cluster_name: format!("{} nodes of {server}", nodes.items.len()),
            cluster,
            cluster_objects,
        })
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Text,
    Json,
    Sarif,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailOn {
    Error,
    Warning,
    Never,
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Informational: what could not be checked.
    Note,
    /// Accepted by the API server but will not work as written on a hybrid cluster.
    Warning,
    /// The API server would refuse the object.
    Error,
}

impl Severity {
    fn name(self) -> &'static str {
        match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One thing found about one object (or one document that is not an object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub file: String,
    pub line: usize,
    /// `Kind namespace/name`, or empty for a document that could not be read.
    pub object: String,
    pub severity: Severity,
    pub rule: Option<&'static str>,
    pub field: Option<String>,
    pub message: String,
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Report {
    pub objects: usize,
    pub files: usize,
    pub findings: Vec<Finding>,
}

/// One document of one input: where it starts and its text.
struct Document {
    file: String,
    /// The first line that is neither blank nor a comment.
    line: usize,
    /// The line `text` starts at.
    text_line: usize,
    text: String,
}

/// One object to check, with where it came from.
struct Located {
    file: String,
    line: usize,
    object: Value,
}

/// `tandem check`: returns the process exit status.
pub async fn run(args: &CheckArgs) -> anyhow::Result<i32> {
    let mut inputs = Vec::new();
    for f in &args.files {
        if f == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read standard input")?;
            inputs.push(("-".to_string(), text));
            continue;
        }
        for path in files_of(Path::new(f), args.recursive)? {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            inputs.push((path.display().to_string(), text));
        }
    }
    let disabled: BTreeSet<String> = args.disable.iter().map(|d| d.trim().to_string()).collect();
    let options = match &args.cluster {
        Some(kubeconfig) => CheckOptions::from_cluster(disabled, kubeconfig).await?,
        None => CheckOptions::new(disabled, args.nodes.as_deref())?,
    };
    let report = check_texts(&inputs, &options);
    match args.output {
        OutputFormat::Text => print_text(&report, std::io::stdout().is_terminal()),
        OutputFormat::Json => println!("{}", to_json(&report)),
        OutputFormat::Sarif => println!("{}", to_sarif(&report)),
    }
    let threshold = match args.fail_on {
        FailOn::Error => Some(Severity::Error),
        FailOn::Warning => Some(Severity::Warning),
        FailOn::Never => None,
    };
    let failed = threshold.is_some_and(|t| report.findings.iter().any(|f| f.severity >= t));
    Ok(i32::from(failed))
}

/// The manifest files `path` names: itself, or a directory's `.yaml`, `.yml` and `.json` files
/// (with `recursive`, those of its subdirectories too), in name order.
fn files_of(path: &Path, recursive: bool) -> anyhow::Result<Vec<PathBuf>> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("cannot list {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let mut out = Vec::new();
    for e in entries {
        if e.is_dir() {
            if recursive {
                out.extend(files_of(&e, true)?);
            }
        } else if e
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"))
        {
            out.push(e);
        }
    }
    Ok(out)
}

/// Checks the named texts (file name, contents) together: RuntimeClasses and
/// GMSACredentialSpecs of one are visible to the pods of all.
pub fn check_texts(inputs: &[(String, String)], options: &CheckOptions) -> Report {
    let mut report = Report {
        files: inputs.len(),
        ..Report::default()
    };
    let mut objects = Vec::new();
    for (file, text) in inputs {
        for doc in split_documents(file, text) {
            read_document(doc, &mut objects, &mut report.findings);
        }
    }
    let mut lookups = MapLookups::default();
    for o in options
        .cluster_objects
        .iter()
        .chain(objects.iter().map(|o| &o.object))
    {
        lookups.insert(o.clone());
    }
    let registry = Registry::builtin();
    let mut checked = Vec::new();
    for o in objects {
        report.objects += 1;
        checked.extend(check_object(
            &registry,
            &lookups,
            o,
            options,
            &mut report.findings,
        ));
    }
    service_rules(&checked, &lookups, options, &mut report.findings);
    // In input order, then by line (a document that does not parse is found before the others
    // are checked); findings of one object keep their order.
    let order = |file: &str| {
        inputs
            .iter()
            .position(|(f, _)| f == file)
            .unwrap_or(usize::MAX)
    };
    report.findings.sort_by_key(|f| (order(&f.file), f.line));
    report
}

/// Splits a multi-document YAML text at its `---` lines, keeping where each document starts.
fn split_documents(file: &str, text: &str) -> Vec<Document> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    let mut text_line = 1;
    // A document is reported at its first line that is neither blank nor a comment.
    let mut significant = false;
    for (i, line) in text.lines().enumerate() {
        let bare = line.trim_end();
        if bare == "---" || bare.starts_with("--- ") || bare == "..." {
            docs.push(Document {
                file: file.to_string(),
                line: start,
                text_line,
                text: std::mem::take(&mut current),
            });
            start = i + 2;
            text_line = i + 2;
            significant = false;
            continue;
        }
        let trimmed = line.trim_start();
        if !significant {
            if trimmed.is_empty() || trimmed.starts_with('#') {
                start = i + 2;
            } else {
                significant = true;
            }
        }
        current.push_str(line);
        current.push('\n');
    }
    docs.push(Document {
        file: file.to_string(),
        line: start,
        text_line,
        text: current,
    });
    docs
}

/// Parses one document into the objects it holds (a `List`'s items), or a finding.
fn read_document(doc: Document, objects: &mut Vec<Located>, findings: &mut Vec<Finding>) {
    let value: Value = match serde_yaml::from_str(&doc.text) {
        Ok(v) => v,
        Err(e) => {
            let line = e
                .location()
                .map_or(doc.line, |l| doc.text_line + l.line().saturating_sub(1));
            let reason = e.to_string();
            let reason = reason.split(" at line ").next().unwrap_or(&reason);
            findings.push(Finding {
                file: doc.file,
                line,
                object: String::new(),
                severity: Severity::Error,
                rule: None,
                field: None,
                message: format!(
                    "error converting YAML to JSON: yaml: line {line}: {reason} (is this line indented as its neighbours?)"
                ),
            });
            return;
        }
    };
    if value.is_null() {
        return;
    }
    let items = match value.get("items").and_then(Value::as_array) {
        Some(items)
            if value
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List")) =>
        {
            items.clone()
        }
        _ => vec![value],
    };
    for object in items {
        objects.push(Located {
            file: doc.file.clone(),
            line: doc.line,
            object,
        });
    }
}

/// `Kind namespace/name` of an object, for the report.
fn describe(obj: &Value, namespaced: bool) -> String {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("?");
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<no name>");
    match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) if namespaced => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    }
}

/// Runs every check on one object.
fn check_object(
    registry: &Registry,
    lookups: &MapLookups,
    located: Located,
    check: &CheckOptions,
    findings: &mut Vec<Finding>,
) -> Option<Checked> {
    let Located { file, line, object } = located;
    let mut off: BTreeSet<String> = check.disabled.clone();
    if let Some(list) = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(DISABLE_ANNOTATION))
        .and_then(Value::as_str)
    {
        off.extend(list.split(',').map(|r| r.trim().to_string()));
    }
    let mut push = |severity: Severity,
                    object: &str,
                    rule: Option<&'static str>,
                    field: Option<String>,
                    message: String| {
        if rule.is_some_and(|r| off.contains(r)) {
            return;
        }
        findings.push(Finding {
            file: file.clone(),
            line,
            object: object.to_string(),
            severity,
            rule,
            field,
            message,
        });
    };
    let (Some(api_version), Some(kind)) = (
        object.get("apiVersion").and_then(Value::as_str),
        object.get("kind").and_then(Value::as_str),
    ) else {
        let missing = if object.get("apiVersion").and_then(Value::as_str).is_none() {
            "apiVersion"
        } else {
            "kind"
        };
        push(
            Severity::Error,
            "",
            None,
            None,
            format!("error validating data: {missing} not set"),
        );
        return None;
    };
    let Some(rt) = registry.by_kind(api_version, kind) else {
        push(
            Severity::Note,
            &describe(&object, true),
            Some("TDM001"),
            None,
            format!(
                "no built-in kind {kind} in {api_version}: not checked (a custom resource's schema is known only to a cluster that has its CRD)"
            ),
        );
        return None;
    };
    let label = describe(&object, rt.namespaced);
    let decoded = match tandem_core::typed::roundtrip(&rt, object) {
        Ok(d) => d,
        Err(e) => {
            push(Severity::Error, &label, None, None, e.to_string());
            return None;
        }
    };
    for field in &decoded.unknown_fields {
        push(
            Severity::Error,
            &label,
            Some("TDM002"),
            Some(field.clone()),
            format!(
                "strict decoding error: unknown field \"{field}\" (kubectl refuses it by default; a key moved to the wrong level by its indentation reads this way)"
            ),
        );
    }
    let mut obj = decoded.object;
    if rt.namespaced
        && let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
        && meta.get("namespace").and_then(Value::as_str).is_none()
    {
        meta.insert("namespace".into(), json!("default"));
    }
    tandem_core::defaults::apply_defaults(&rt, &mut obj);
    tandem_core::strategy::prepare_for_create(
        &rt,
        &mut obj,
        "00000000-0000-0000-0000-000000000000",
    );
    let options = AdmissionOptions {
        privileged_allowed: true,
        warnings: false,
        ..Default::default()
    };
    missing_references(&rt, &obj, lookups, &mut |rule, field, message| {
        push(Severity::Warning, &label, Some(rule), Some(field), message)
    });
    let lenient = LenientLookups(lookups);
    match admission::admit(Operation::Create, &rt, &mut obj, None, &lenient, &options) {
        Ok(_) => {}
        Err(AdmissionError::Invalid(errs)) => {
            for e in errs {
                push(
                    Severity::Error,
                    &label,
                    None,
                    Some(e.field.clone()),
                    e.to_string(),
                );
            }
        }
        // The gMSA webhook's "not found": the credential spec may be in the cluster.
        Err(AdmissionError::Denied { code: 404, message }) => push(
            Severity::Warning,
            &label,
            Some("TDM161"),
            None,
            format!(
                "{message}: the GMSACredentialSpec is not among the checked manifests, so the gMSA webhook refuses the pod unless the cluster has it"
            ),
        ),
        Err(e) => push(
            Severity::Error,
            &label,
            None,
            None,
            e.status_message(&rt.plural, name_of(&obj)),
        ),
    }
    for e in tandem_core::validation::validate_create(&rt, &obj) {
        push(
            Severity::Error,
            &label,
            None,
            Some(e.field.clone()),
            e.to_string(),
        );
    }
    if let Some((severity, message)) = placement(&rt, &obj, lookups, check) {
        let rule = if severity == Severity::Warning {
            "TDM170"
        } else {
            "TDM171"
        };
        let rule = Some(rule);
        push(severity, &label, rule, None, message);
    }
    for w in admission::findings(&rt, &obj, lookups) {
        push(
            Severity::Warning,
            &label,
            Some(w.rule.id()),
            w.text.split(": ").next().map(str::to_string),
            format!("{} (rule: {})", w.text, w.rule.source()),
        );
    }
    Some(Checked {
        file,
        line,
        label,
        off,
        rt,
        object: obj,
    })
}

fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Lookups that answer every RuntimeClass and GMSACredentialSpec: one missing from the checked
/// manifests is reported by [`missing_references`] as a pitfall, and admission goes on with a
/// stand-in that adds nothing (no scheduling, no overhead, an empty credential spec).
struct LenientLookups<'a>(&'a MapLookups);

impl Lookups for LenientLookups<'_> {
    fn runtime_class(&self, name: &str) -> Option<Value> {
        self.0.runtime_class(name).or_else(|| {
            Some(json!({
                "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": {"name": name}, "handler": "runc",
            }))
        })
    }
    fn gmsa_credential_spec(&self, name: &str) -> Option<Value> {
        self.0.gmsa_credential_spec(name)
    }
}

/// TDM160/TDM161: a RuntimeClass or GMSACredentialSpec the pod names that the checked manifests
/// do not define.
fn missing_references(
    rt: &ResourceType,
    obj: &Value,
    lookups: &MapLookups,
    report: &mut dyn FnMut(&'static str, String, String),
) {
    let Some((spec, _)) = pod_spec_and_metadata(rt, obj) else {
        return;
    };
    let dotted = admission::pod_spec_location(rt)
        .unwrap_or_default()
        .join(".");
    if let Some(name) = spec
        .get("runtimeClassName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        && lookups.runtime_class(name).is_none()
    {
        report(
            "TDM160",
            format!("{dotted}.runtimeClassName"),
            format!(
                "RuntimeClass {name:?} is not among the checked manifests: the API server refuses the pod (pod rejected: RuntimeClass \"{name}\" not found) unless the cluster has it"
            ),
        );
    }
}

/// The text report: one line per finding, then a summary.
fn print_text(report: &Report, colour: bool) {
    let paint = |severity: Severity, text: &str| -> String {
        if !colour {
            return text.to_string();
        }
        let code = match severity {
            Severity::Error => "31",
            Severity::Warning => "33",
            Severity::Note => "36",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    };
    for f in &report.findings {
        let tag = match f.rule {
            Some(rule) => format!("{}[{rule}]", f.severity.name()),
            None => f.severity.name().to_string(),
        };
        let object = if f.object.is_empty() {
            String::new()
        } else {
            format!("{}: ", f.object)
        };
        println!(
            "{}:{}: {}: {object}{}",
            f.file,
            f.line,
            paint(f.severity, &tag),
            f.message
        );
    }
    let count = |s: Severity| report.findings.iter().filter(|f| f.severity == s).count();
    println!(
        "{} objects in {} files: {} errors, {} warnings, {} notes",
        report.objects,
        report.files,
        count(Severity::Error),
        count(Severity::Warning),
        count(Severity::Note)
    );
}

/// The JSON report.
fn to_json(report: &Report) -> Value {
    let findings: Vec<Value> = report
        .findings
        .iter()
        .map(|f| {
            json!({
                "file": f.file, "line": f.line, "object": f.object,
                "severity": f.severity.name(), "rule": f.rule, "field": f.field,
                "message": f.message,
            })
        })
        .collect();
    let count = |s: Severity| report.findings.iter().filter(|f| f.severity == s).count();
    json!({
        "objects": report.objects,
        "files": report.files,
        "errors": count(Severity::Error),
        "warnings": count(Severity::Warning),
        "notes": count(Severity::Note),
        "findings": findings,
    })
}

/// `tandem bench check`: checks `objects` manifests made from the seed manifests' kinds (a
/// Windows Deployment pinned to a build, a Linux one, a Service, a RuntimeClass-using
/// Deployment, a gMSA pod), in documents of one file each, and prints objects/s and peak memory.
pub fn bench(objects: usize) -> anyhow::Result<()> {
    anyhow::ensure!(objects > 0, "--objects must be at least 1");
    let templates = [
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: win-N, namespace: web}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: win-N}}\n  template:\n    metadata: {labels: {app: win-N}}\n    spec:\n      nodeSelector: {kubernetes.io/os: windows, node.kubernetes.io/windows-build: '10.0.20348'}\n      containers:\n      - name: iis\n        image: mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022\n        resources: {requests: {cpu: 500m, memory: 1Gi}, limits: {cpu: '2', memory: 4Gi}}\n        ports: [{containerPort: 80}]\n",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: linux-N}\nspec:\n  selector: {matchLabels: {app: linux-N}}\n  template:\n    metadata: {labels: {app: linux-N}}\n    spec:\n      containers:\n      - {name: web, image: nginx:1.27, ports: [{containerPort: 8080}], readinessProbe: {httpGet: {path: /, port: 8080}}}\n",
        "apiVersion: v1\nkind: Service\nmetadata: {name: svc-N}\nspec:\n  type: NodePort\n  selector: {app: win-N}\n  ports: [{port: 80, targetPort: 80}]\n",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: rc-N}\nspec:\n  selector: {matchLabels: {app: rc-N}}\n  template:\n    metadata: {labels: {app: rc-N}}\n    spec:\n      runtimeClassName: windows-2019\n      containers:\n      - {name: c, image: 'mcr.microsoft.com/windows/servercore:ltsc2019'}\n",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: gmsa-N}\nspec:\n  securityContext: {windowsOptions: {gmsaCredentialSpecName: billing-gmsa}}\n  nodeSelector: {kubernetes.io/os: windows}\n  containers:\n  - {name: c, image: 'mcr.microsoft.com/dotnet/framework/aspnet:4.8-windowsservercore-ltsc2022'}\n",
    ];
    let mut text = String::from(
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: windows-2019}\nhandler: runhcs-wcow-process\nscheduling:\n  nodeSelector: {kubernetes.io/os: windows, node.kubernetes.io/windows-build: '10.0.17763'}\n---\napiVersion: windows.k8s.io/v1\nkind: GMSACredentialSpec\nmetadata: {name: billing-gmsa}\ncredspec: {ActiveDirectoryConfig: {GroupManagedServiceAccounts: [{Name: billing, Scope: CONTOSO}]}, CmsPlugins: [ActiveDirectory], DomainJoinConfig: {DnsName: contoso.com, NetBiosName: CONTOSO}}\n",
    );
    for i in 0..objects.saturating_sub(2) {
        text.push_str("---\n");
        text.push_str(&templates[i % templates.len()].replace("-N", &format!("-{i}")));
    }
    let inputs = vec![("generated.yaml".to_string(), text)];
    println!(
        "tandem bench check: {objects} objects in one generated file (Windows and Linux Deployments, Services, a RuntimeClass user, gMSA pods)"
    );
    let started = std::time::Instant::now();
    let options = CheckOptions::new(BTreeSet::new(), None)?;
    let report = check_texts(&inputs, &options);
    let elapsed = started.elapsed();
    println!(
        "checked {} objects in {:.1} ms = {:.0} objects/s; {} findings",
        report.objects,
        elapsed.as_secs_f64() * 1000.0,
        report.objects as f64 / elapsed.as_secs_f64(),
        report.findings.len()
    );
    match crate::bench::rss::peak_rss_kib() {
        Some(k) => println!("peak RSS (VmHWM): {:.1} MiB", k as f64 / 1024.0),
        None => println!("peak RSS (VmHWM): unavailable"),
    }
    Ok(())
}

/// Where the pod (or a pod of the template) could run in the described cluster, with the
/// scheduler's own filters: a note naming the nodes, or TDM170 with the scheduler's
/// `0/N nodes are available: …` when none fits. A template's pod first gets what pod admission
/// adds (its RuntimeClass's node selector and tolerations, the default tolerations).
fn placement(
    rt: &ResourceType,
    obj: &Value,
    lookups: &MapLookups,
    check: &CheckOptions,
) -> Option<(Severity, String)> {
    let location = admission::pod_spec_location(rt)?;
    let (spec, own_metadata) = pod_spec_and_metadata(rt, obj)?;
    let spec = spec.clone();
    let mut metadata = own_metadata.cloned().unwrap_or_else(|| json!({}));
    metadata["name"] = json!(name_of(obj));
    metadata["namespace"] = obj
        .pointer("/metadata/namespace")
        .cloned()
        .unwrap_or_else(|| json!("default"));
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec});
    let registry = Registry::builtin();
    let pod_rt = registry.by_kind("v1", "Pod")?;
    if location.len() > 1 {
        let options = AdmissionOptions {
            privileged_allowed: true,
            warnings: false,
            ..Default::default()
        };
        // Errors were reported for the object itself.
        let _ = admission::admit(
            Operation::Create,
            &pod_rt,
            &mut pod,
            None,
            &LenientLookups(lookups),
            &options,
        );
    }
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod).ok()?;
    let mut framework =
        tandem_scheduler::Framework::new(tandem_scheduler::FrameworkOptions::default());
    let fits: Vec<&str> = check
        .cluster
        .nodes()
        .iter()
        .map(|n| n.name.as_str())
        .filter(|n| framework.fits_node(&check.cluster, &pod, n))
        .collect();
    if !fits.is_empty() {
        return Some((
            Severity::Note,
            format!(
                "schedulable on {} of {} nodes of the described cluster ({}): {}",
                fits.len(),
                check.cluster.nodes().len(),
                check.cluster_name,
                fits.join(", ")
            ),
        ));
    }
    let why = match framework.schedule(&check.cluster, &pod) {
        Ok(p) => format!("the scheduler chose {}", p.node),
        Err(e) => e.to_string(),
    };
    Some((
        Severity::Warning,
        format!(
            "would stay Pending on the described cluster ({}): {why}",
            check.cluster_name
        ),
    ))
}

/// An object that decoded, defaulted, with where it came from.
struct Checked {
    file: String,
    line: usize,
    label: String,
    /// Rules turned off for it.
    off: BTreeSet<String>,
    rt: std::sync::Arc<ResourceType>,
    object: Value,
}

/// How many pods a workload runs, and whether they run Windows.
struct Backends {
    namespace: String,
    labels: serde_json::Map<String, Value>,
    count: usize,
    windows: bool,
}

/// The pods each checked object runs (templates with their replicas).
fn backends(checked: &[Checked], lookups: &MapLookups, check: &CheckOptions) -> Vec<Backends> {
    let windows_nodes = check
        .cluster
        .nodes()
        .iter()
        .filter(|n| n.os == tandem_scheduler::os::Os::Windows)
        .count();
    let mut out = Vec::new();
    for c in checked {
        let Some(location) = admission::pod_spec_location(&c.rt) else {
            continue;
        };
        let Some((spec, metadata)) = pod_spec_and_metadata(&c.rt, &c.object) else {
            continue;
        };
        let labels = metadata
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let rc = spec
            .get("runtimeClassName")
            .and_then(Value::as_str)
            .and_then(|n| lookups.runtime_class(n));
        let path = location
            .iter()
            .fold(tandem_core::field::Path::default(), |p, k| p.child(k));
        let windows = tandem_core::windows::pod_os_at(spec, rc.as_ref(), &path).os
            == tandem_core::windows::PodOs::Windows;
        let replicas = |ptr: &str| {
            c.object
                .pointer(ptr)
                .and_then(Value::as_u64)
                .map_or(1, |n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        let count = match c.rt.kind.as_str() {
            "Pod" => 1,
            "DaemonSet" if windows => windows_nodes,
            "DaemonSet" => check.cluster.nodes().len() - windows_nodes,
            "Job" => replicas("/spec/parallelism"),
            "CronJob" => replicas("/spec/jobTemplate/spec/parallelism"),
            "PodTemplate" => 0,
            _ => replicas("/spec/replicas"),
        };
        out.push(Backends {
            namespace: c
                .object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string(),
            labels,
            count,
            windows,
        });
    }
    out
}

/// The Service rules of the Windows data plane, from the reference documents' list of what
/// Windows nodes do not support: TDM150 more than 64 backends for one Service, TDM151
/// `externalTrafficPolicy: Local` (non-DSR), TDM152 a session affinity timeout (Windows keeps
/// its own).
fn service_rules(
    checked: &[Checked],
    lookups: &MapLookups,
    check: &CheckOptions,
    findings: &mut Vec<Finding>,
) {
    const SOURCE: &str = "Networking limitations: not supported on Windows nodes";
    let pods = backends(checked, lookups, check);
    for c in checked
        .iter()
        .filter(|c| c.rt.group.is_empty() && c.rt.kind == "Service")
    {
        let Some(selector) = c
            .object
            .pointer("/spec/selector")
            .and_then(Value::as_object)
        else {
            continue;
        };
        if selector.is_empty() {
            continue;
        }
        let namespace = c
            .object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        let windows: usize = pods
            .iter()
            .filter(|p| {
                p.windows
                    && p.namespace == namespace
                    && selector.iter().all(|(k, v)| p.labels.get(k) == Some(v))
            })
            .map(|p| p.count)
            .sum();
        if windows == 0 {
            continue;
        }
        let mut push = |rule: &'static str, field: &str, message: String| {
            if c.off.contains(rule) {
                return;
            }
            findings.push(Finding {
                file: c.file.clone(),
                line: c.line,
                object: c.label.clone(),
                severity: Severity::Warning,
                rule: Some(rule),
                field: Some(field.to_string()),
                message: format!("{message} (rule: {SOURCE})"),
            });
        };
        if windows > 64 {
            push(
                "TDM150",
                "spec.selector",
                format!(
                    "spec.selector: selects {windows} Windows pods; Windows nodes load-balance a Service over at most 64 backends, so the rest get no traffic from Windows nodes"
                ),
            );
        }
        if c.object
            .pointer("/spec/externalTrafficPolicy")
            .and_then(Value::as_str)
            == Some("Local")
        {
            push(
                "TDM151",
                "spec.externalTrafficPolicy",
                "spec.externalTrafficPolicy: Local is not supported by Windows nodes in non-DSR mode; their pods get the Service's traffic as Cluster".to_string(),
            );
        }
        if let Some(t) = c
            .object
            .pointer("/spec/sessionAffinityConfig/clientIP/timeoutSeconds")
            .and_then(Value::as_u64)
            && c.object
                .pointer("/spec/sessionAffinity")
                .and_then(Value::as_str)
                == Some("ClientIP")
        {
            push(
                "TDM152",
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                format!(
                    "spec.sessionAffinityConfig.clientIP.timeoutSeconds: {t} is ignored by Windows nodes, which keep client affinity with their own timeout"
                ),
            );
        }
    }
}

/// The SARIF 2.1.0 report, for code-scanning CI (GitHub, GitLab): one run of the tool with the
/// rules it reported, one result per finding. Refusals of the API server itself carry TDM000.
fn to_sarif(report: &Report) -> Value {
    let rule_of = |f: &Finding| f.rule.unwrap_or("TDM000");
    let ids: BTreeSet<&str> = report.findings.iter().map(rule_of).collect();
    let rules: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({
                "id": id,
                "shortDescription": {"text": rule_description(id)},
            })
        })
        .collect();
    let results: Vec<Value> = report
        .findings
        .iter()
        .map(|f| {
            let level = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Note => "note",
            };
            let text = if f.object.is_empty() {
                f.message.clone()
            } else {
                format!("{}: {}", f.object, f.message)
            };
            json!({
                "ruleId": rule_of(f),
                "level": level,
                "message": {"text": text},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": f.file},
                    "region": {"startLine": f.line},
                }}],
            })
        })
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "tandem check",
                "informationUri": "https://github.com/tandem/tandem",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
        }],
    })
}

/// One line on what a rule finds.
fn rule_description(id: &str) -> String {
    if let Some(rule) = tandem_core::admission::warnings::Rule::ALL
        .iter()
        .find(|r| r.id() == id)
    {
        return rule.source().to_string();
    }
    match id {
        "TDM000" => "The API server refuses the object (decoding, validation or admission)",
        "TDM001" => "A kind tandem does not know offline (a custom resource): not checked",
        "TDM002" => "A field the type does not have (often a key moved by its indentation)",
        "TDM150" => "More than 64 Windows backends for one Service",
        "TDM151" => "externalTrafficPolicy: Local on Windows nodes (non-DSR)",
        "TDM152" => "A session affinity timeout Windows nodes ignore",
        "TDM160" => "A RuntimeClass the manifests do not define",
        "TDM161" => "A gMSA credential spec the manifests do not define",
        "TDM170" => "A pod or template no node of the described cluster can run",
        "TDM171" => "Where a pod or template can run in the described cluster",
        _ => "tandem check rule",
    }
    .to_string()
}

/// The pod spec of a pod or workload (`spec`, `spec.template.spec`, …), with the metadata of
/// the pod it describes: a template's (`spec.template.metadata`, beside its spec) or, for a Pod,
/// its own. `None` for kinds without a pod spec.
fn pod_spec_and_metadata<'a>(
    rt: &ResourceType,
    obj: &'a Value,
) -> Option<(&'a Value, Option<&'a Value>)> {
    let location = admission::pod_spec_location(rt)?;
    let pointer = |keys: &[&str]| -> String { keys.iter().map(|k| format!("/{k}")).collect() };
    let spec = obj.pointer(&pointer(location))?;
    let metadata_pointer = format!("{}/metadata", pointer(&location[..location.len() - 1]));
    Some((spec, obj.pointer(&metadata_pointer)))
}
