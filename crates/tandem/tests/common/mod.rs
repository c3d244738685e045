//! Harness for the end-to-end tests: runs the built `tandem server` on a fresh data dir and drives
//! it with the machine's stock `kubectl`.
//!
//! Every wait is bounded in both iterations and wall-clock time, and nothing asserts on speed: a
//! slow machine makes the tests slower, never flaky.

#![allow(dead_code)] // each test binary uses a different subset of the helpers

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long the server may take to write its kubeconfig and report ready.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long any single kubectl invocation may run before the harness kills it.
const KUBECTL_TIMEOUT: Duration = Duration::from_secs(90);

/// The output of one finished command.
#[derive(Debug)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    pub status: ExitStatus,
    /// The command line, for assertion messages.
    pub command: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Panics with the full output unless the command succeeded; returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert!(
            self.success(),
            "`{}` failed ({}):\nstdout:\n{}\nstderr:\n{}",
            self.command,
            self.status,
            self.stdout,
            self.stderr
        );
        &self.stdout
    }

    /// Panics with the full output unless the command failed; returns stderr.
    #[track_caller]
    pub fn err(&self) -> &str {
        assert!(
            !self.success(),
            "`{}` unexpectedly succeeded:\nstdout:\n{}\nstderr:\n{}",
            self.command,
            self.stdout,
            self.stderr
        );
        &self.stderr
    }

    /// stdout and stderr together, for "the output mentions X" checks.
    pub fn combined(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }

    /// stdout parsed as JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.ok()).unwrap_or_else(|e| {
            panic!(
                "`{}` did not print JSON ({e}):\n{}",
                self.command, self.stdout
            )
        })
    }
}

/// A running (or stopped) `tandem server` with its own temporary directory.
///
/// Dropping it kills the server and removes the directory.
pub struct Server {
    dir: TempDir,
    child: Option<Child>,
    starts: u32,
    /// The subcommand and its extra flags: `server`, or `up` with `--nodes …`.
    command: Vec<String>,
    /// Stop with SIGTERM rather than SIGKILL when dropped (a cluster with real containers).
    graceful: bool,
}

impl Server {
    /// Runs `tandem ARGS` (plus the data dir, port and kubeconfig) in a fresh temporary
    /// directory and waits until the API is ready. `graceful` servers are stopped with SIGTERM
    /// when dropped, so that tandem can remove real containers.
    fn launch(prefix: &str, args: &[&str], graceful: bool) -> Server {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .expect("create temp dir");
        let mut server = Server {
            dir,
            child: None,
            starts: 0,
            command: args.iter().map(|a| a.to_string()).collect(),
            graceful,
        };
        server.spawn();
        server
    }

    /// Starts a server on a fresh data dir and waits until it is ready.
    pub fn start() -> Server {
        Server::launch("tandem-e2e-", &["server"], false)
    }

    /// Starts the whole cluster with `tandem up` (control plane and emulated nodes; the default
    /// nodes when `nodes` is `None`) and waits until the API is ready.
    pub fn start_up(nodes: Option<&str>) -> Server {
        // Pods of these clusters need no network of their own: parallel clusters on the default
        // pod range would otherwise share bridges.
        let mut args = vec![
            "up",
            "--linux-runtime",
            "emulated",
            "--emulated-pod-network",
            "off",
        ];
        if let Some(n) = nodes {
            args.extend(["--nodes", n]);
        }
        Server::launch("tandem-e2e-up-", &args, false)
    }

    /// `tandem up` whose first Linux node runs real containers on its private containerd
    /// (`--linux-runtime cri`), with pod network `cluster_cidr` so that clusters of parallel
    /// tests do not share addresses. Dropping it stops tandem with SIGTERM, which removes the
    /// pods and stops containerd.
    pub fn start_up_cri(nodes: &str, cluster_cidr: &str) -> Server {
        let args = [
            "up",
            "--linux-runtime",
            "cri",
            "--nodes",
            nodes,
            "--cluster-cidr",
            cluster_cidr,
        ];
        Server::launch("tandem-e2e-cri-", &args, true)
    }

    /// `tandem ARGS` (a subcommand and its flags, e.g. `server --etcd-servers URL`) on a fresh
    /// data dir, stopped with SIGTERM when dropped.
    pub fn start_with(args: &[&str]) -> Server {
        Server::launch("tandem-e2e-", args, true)
    }

    /// As [`Server::start_with`], on a data dir that starts with a copy of the certificates in
    /// `pki` (another server's: one cluster CA, as kubeadm copies it to each control-plane
    /// machine).
    pub fn start_with_pki(args: &[&str], pki: &Path) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("tandem-e2e-")
            .tempdir()
            .expect("create temp dir");
        let target = dir.path().join("data").join("pki");
        fs::create_dir_all(&target).expect("create pki dir");
        for entry in fs::read_dir(pki).expect("read pki dir") {
            let entry = entry.expect("pki entry");
            fs::copy(entry.path(), target.join(entry.file_name())).expect("copy pki file");
        }
        let mut server = Server {
            dir,
            child: None,
            starts: 0,
            command: args.iter().map(|a| a.to_string()).collect(),
            graceful: true,
        };
        server.spawn();
        server
    }

    /// `tandem up` with exactly these flags after `up`.
    pub fn start_up_with(flags: &[&str]) -> Server {
        let mut args = vec!["up"];
        args.extend_from_slice(flags);
        Server::launch("tandem-e2e-up-", &args, true)
    }

    /// Stops the server with SIGTERM and waits (up to 60 s) for it to exit.
    pub fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The temporary directory holding the data dir, kubeconfig, logs and scratch files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir().join("data")
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir().join("kubeconfig")
    }

    /// The `https://127.0.0.1:PORT` URL the current kubeconfig names.
    pub fn url(&self) -> String {
        let text = fs::read_to_string(self.kubeconfig()).expect("read kubeconfig");
        server_url(&text).expect("kubeconfig names a server")
    }

    fn log_path(&self) -> PathBuf {
        self.dir().join(format!("server-{}.log", self.starts))
    }

    /// The server's log output of the current run (for failure messages).
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "server already running");
        // With `--port 0` every start picks a new port and rewrites the kubeconfig: remove the
        // old one so we never talk to a port from the previous run.
        let _ = fs::remove_file(self.kubeconfig());
        self.starts += 1;
        let log = fs::File::create(self.log_path()).expect("create server log");
        let child = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(&self.command)
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--port")
            .arg("0")
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .spawn()
            .expect("spawn tandem server");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let mut last = String::new();
        for _ in 0..600 {
            if Instant::now() > deadline {
                break;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "tandem server exited during startup ({status}):\n{}",
                    self.log()
                );
            }
            let written = fs::read_to_string(self.kubeconfig())
                .map(|t| server_url(&t).is_some() && t.contains("current-context"))
                .unwrap_or(false);
            if written {
                let out =
                    self.kubectl_timeout(&["get", "--raw", "/readyz"], Duration::from_secs(5));
                if out.success() {
                    return;
                }
                last = out.combined();
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "tandem server not ready within {STARTUP_TIMEOUT:?}; last readyz: {last}\nlog:\n{}",
            self.log()
        );
    }

    /// Stops the server with SIGKILL (`Child::kill`): no clean shutdown, no flush.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same data dir and waits until it is ready.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    fn base_command(&self) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.env("KUBECONFIG", self.kubeconfig())
            // kubectl caches discovery under $HOME/.kube/cache; keep each server's cache apart
            // (ports are reused across tests) and the real home untouched.
            .env("HOME", self.dir())
            .env_remove("KUBE_EDITOR")
            .env_remove("EDITOR")
            .env_remove("KUBECTL_EXTERNAL_DIFF");
        cmd
    }

    /// Runs `kubectl ARGS` against this server.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_full(args, None, &[], KUBECTL_TIMEOUT)
    }

    fn kubectl_timeout(&self, args: &[&str], timeout: Duration) -> Output {
        self.kubectl_full(args, None, &[], timeout)
    }

    /// Runs `kubectl ARGS` with `stdin` fed to it (e.g. `apply -f -`).
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Output {
        self.kubectl_full(args, Some(stdin), &[], KUBECTL_TIMEOUT)
    }

    /// Runs `kubectl ARGS` with extra environment variables (e.g. `KUBE_EDITOR`).
    pub fn kubectl_env(&self, args: &[&str], envs: &[(&str, &str)]) -> Output {
        self.kubectl_full(args, None, envs, KUBECTL_TIMEOUT)
    }

    pub fn kubectl_full(
        &self,
        args: &[&str],
        stdin: Option<&str>,
        envs: &[(&str, &str)],
        timeout: Duration,
    ) -> Output {
        let mut cmd = self.base_command();
        cmd.args(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        run(cmd, format!("kubectl {}", args.join(" ")), stdin, timeout)
    }

    /// Runs `kubectl ARGS` as a long-lived child whose stdout lines can be awaited (`get -w`).
    pub fn kubectl_stream(&self, args: &[&str]) -> Stream {
        let mut cmd = self.base_command();
        cmd.args(args);
        Stream::spawn(cmd, format!("kubectl {}", args.join(" ")))
    }

    /// Runs kubectl at `-v=6` and returns its output with the HTTP status codes of every
    /// response it logged, so a test can assert the exact code (`400`, `413`, `422`, ...).
    pub fn kubectl_codes(&self, args: &[&str], stdin: Option<&str>) -> (Output, Vec<u16>) {
        let mut full = args.to_vec();
        full.push("-v=6");
        let out = self.kubectl_full(&full, stdin, &[], KUBECTL_TIMEOUT);
        let codes = response_codes(&out.stderr);
        (out, codes)
    }

    /// Panics unless the server process is still running and answers `/readyz`.
    #[track_caller]
    pub fn assert_alive(&mut self) {
        if let Some(status) = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            panic!("tandem server died ({status}):\n{}", self.log());
        }
        let out = self.kubectl(&["get", "--raw", "/readyz"]);
        assert!(
            out.success(),
            "server not ready: {}\n{}",
            out.stderr,
            self.log()
        );
    }

    /// A kubeconfig for this server that carries no credentials (and optionally a bearer token).
    pub fn anonymous_kubeconfig(&self, token: Option<&str>) -> PathBuf {
        let text = fs::read_to_string(self.kubeconfig()).expect("read kubeconfig");
        let ca = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("certificate-authority-data:"))
            .expect("kubeconfig has certificate-authority-data")
            .trim()
            .to_string();
        let user = match token {
            Some(t) => format!("{{token: {t}}}"),
            None => "{}".to_string(),
        };
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: anon\n  user: {user}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: anon\n    namespace: default\ncurrent-context: c\n",
            self.url()
        );
        self.write_file(&format!("anon-{}.kubeconfig", token.is_some()), &config)
    }

    /// Writes `contents` to a scratch file in the server's temp dir and returns its path.
    pub fn write_file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir().join(name);
        fs::write(&path, contents).expect("write scratch file");
        path
    }

    /// `kubectl create -f -` with the given manifest; panics on failure.
    #[track_caller]
    pub fn create(&self, manifest: &str) -> String {
        self.kubectl_stdin(&["create", "-f", "-"], manifest)
            .ok()
            .to_string()
    }

    /// `kubectl get KIND NAME -o json` parsed, or `None` when the object is NotFound.
    #[track_caller]
    pub fn get_json(&self, args: &[&str]) -> Option<serde_json::Value> {
        let mut full = vec!["get"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["-o", "json"]);
        let out = self.kubectl(&full);
        if out.success() {
            Some(out.json())
        } else {
            assert!(
                out.stderr.contains("NotFound") || out.stderr.contains("not found"),
                "`{}` failed other than NotFound: {}",
                out.command,
                out.stderr
            );
            None
        }
    }

    /// Polls `check` (at most `timeout`, at most 300 times) until it returns `Some`.
    #[track_caller]
    pub fn eventually<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut() -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        for _ in 0..300 {
            if let Some(v) = check() {
                return v;
            }
            if Instant::now() > deadline {
                break;
            }
            thread::sleep(Duration::from_millis(200));
        }
        panic!("timed out after {timeout:?} waiting for: {what}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.graceful {
            self.terminate();
        } else {
            self.kill9();
        }
    }
}

/// Runs a command to completion (killing it after `timeout`), capturing its output.
pub fn run(mut cmd: Command, label: String, stdin: Option<&str>, timeout: Duration) -> Output {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn `{label}`: {e}"));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        let input = input.to_string();
        // A writer thread so a large body cannot deadlock against a full stdout pipe.
        thread::spawn(move || {
            let _ = pipe.write_all(input.as_bytes());
        });
    }
    let stdout = child.stdout.take().expect("stdout pipe");
    let stderr = child.stderr.take().expect("stderr pipe");
    let out_reader = thread::spawn(move || read_all(stdout));
    let err_reader = thread::spawn(move || read_all(stderr));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let status = child.wait().expect("wait for killed child");
            let out = out_reader.join().unwrap_or_default();
            let err = err_reader.join().unwrap_or_default();
            panic!(
                "`{label}` did not finish within {timeout:?} ({status}):\nstdout:\n{out}\nstderr:\n{err}"
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    Output {
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
        status,
        command: label,
    }
}

fn read_all(mut r: impl std::io::Read) -> String {
    let mut buf = Vec::new();
    let _ = r.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// A long-running child process whose stdout is read line by line on a background thread.
/// Dropping it kills the process.
pub struct Stream {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    label: String,
}

impl Stream {
    fn spawn(mut cmd: Command, label: String) -> Stream {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn `{label}`: {e}"));
        let stdout = child.stdout.take().expect("stdout pipe");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Stream {
            child,
            lines,
            seen: Vec::new(),
            label,
        }
    }

    /// Reads lines until one satisfies `pred` (bounded by `timeout`); returns that line.
    #[track_caller]
    pub fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        match self.try_wait_for(timeout, pred) {
            Ok(Some(line)) => line,
            Ok(None) => panic!(
                "`{}`: no line matching {what} within {timeout:?}; output so far:\n{}",
                self.label,
                self.seen.join("\n")
            ),
            Err(()) => panic!(
                "`{}` ended before {what}; output so far:\n{}",
                self.label,
                self.seen.join("\n")
            ),
        }
    }

    /// Reads lines until one satisfies `pred`: `Ok(None)` when `timeout` passes first, `Err`
    /// when the process closed its stdout.
    pub fn try_wait_for(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Result<Option<String>, ()> {
        let deadline = Instant::now() + timeout;
        for _ in 0..100_000 {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return Ok(Some(line));
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => return Err(()),
            }
        }
        Ok(None)
    }

    /// Waits (bounded) for the process to exit and returns its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        for _ in 0..10_000 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Every line read so far.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The HTTP status codes in kubectl's `-v=6` log (`status="404 Not Found"`), in order.
pub fn response_codes(log: &str) -> Vec<u16> {
    log.match_indices("status=\"")
        .filter_map(|(i, m)| {
            let rest = &log[i + m.len()..];
            rest.get(..3).and_then(|c| c.parse().ok())
        })
        .collect()
}

/// The `server:` URL in a kubeconfig's text.
pub fn server_url(kubeconfig: &str) -> Option<String> {
    kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .map(|s| s.trim().trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
}

/// The directory of seed manifests shared by every repository clone.
pub fn seed_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/seed-manifests");
    assert!(
        dir.is_dir(),
        "seed manifests not found at {}",
        dir.display()
    );
    dir
}

/// The path of one seed manifest, as a string for kubectl's argument list.
pub fn seed(name: &str) -> String {
    let path = seed_dir().join(name);
    assert!(path.is_file(), "seed manifest missing: {}", path.display());
    path.to_string_lossy().into_owned()
}

/// The seed manifests that are valid (every one except the mis-indented as-published copy).
pub fn valid_seeds() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(seed_dir())
        .expect("read seed dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| (n.ends_with(".yaml") || n.ends_with(".yml")) && n != INVALID_SEED)
        .collect();
    names.sort();
    names
}

/// The manifest whose `selector:` is mis-indented, exactly as the reference document printed it.
pub const INVALID_SEED: &str = "iis-2019-as-published.yaml";

/// The whitespace-separated columns of a table's header line.
pub fn header(table: &str) -> String {
    let first = table.lines().next().unwrap_or_default();
    // Column names may contain single spaces ("NOMINATED NODE"); columns are separated by two or
    // more spaces. Normalise both to single spaces for comparison.
    first.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A ConfigMap manifest.
pub fn configmap(name: &str, labels: &[(&str, &str)]) -> String {
    let labels: String = labels
        .iter()
        .map(|(k, v)| format!("    {k}: \"{v}\"\n"))
        .collect();
    let labels = if labels.is_empty() {
        String::new()
    } else {
        format!("  labels:\n{labels}")
    };
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{labels}data:\n  key: value\n"
    )
}

/// A minimal Pod manifest (optionally bound to `node`).
pub fn pod(name: &str, node: Option<&str>) -> String {
    let node = node
        .map(|n| format!("  nodeName: {n}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    app: {name}\nspec:\n{node}  containers:\n  - name: main\n    image: registry.k8s.io/pause:3.9\n"
    )
}

/// A Node object as a node agent would register it (cluster-scoped).
pub fn node(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels:
    kubernetes.io/os: windows
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: {name}
    node.kubernetes.io/windows-build: "10.0.17763"
spec: {{}}
"#
    )
}

/// A Deployment manifest with `replicas`.
pub fn deployment(name: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  labels:
    app: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      containers:
      - name: web
        image: nginx:1.25
"#
    )
}

/// A child process that gets SIGTERM, then SIGKILL after 60 s, if the test fails before it ends,
/// so an agent or scheduler never outlives its test (an agent with containerd still running).
pub struct Stopped(pub Child);

impl Stopped {
    /// Sends SIGTERM and waits up to `within` for the process to exit; kills it otherwise.
    /// Whether it exited on its own.
    pub fn terminate(&mut self, within: Duration) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return true;
            }
            thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        false
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            self.terminate(Duration::from_secs(60));
        }
    }
}
