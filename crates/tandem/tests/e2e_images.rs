//! End-to-end image pulls from real registries (issue 34): `tandem up --linux-runtime cri
//! --registry-config FILE` against Debian's `docker-registry` on loopback with TLS (a CA this
//! test generates) and htpasswd auth, filled with `skopeo` from the project's own image
//! archives. One cluster serves every check, in sequence:
//! pull by tag and by digest, a Docker Hub name through a mirror, a private image with a pod
//! pull secret, with a ServiceAccount pull secret, with the node's registry credentials, denied
//! without one (ErrImagePull, then
//! ImagePullBackOff with the kubelet's messages and events), `Always` re-resolving a tag
//! that moved, and a compressed archive dropped into the node's images directory becoming
//! usable without a restart (beside a corrupt one that disturbs nothing).
//!
//! Needs root and what `scripts/install-deps.sh` installs (containerd, docker-registry, skopeo,
//! apache2-utils) and `scripts/build-images.sh` builds.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::Server;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(120);
const USER: &str = "puller";
const PASSWORD: &str = "s3cret-pull";

/// A `docker-registry` child, killed when dropped.
struct Registry {
    child: Child,
    addr: String,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port (bound and released; the registry binds it right after).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A CA and a serving certificate for 127.0.0.1 signed by it: `(ca.crt, server.crt,
/// server.key)` written into `dir`.
fn make_certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "tandem e2e registry CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, &ca_key);
    let key = KeyPair::generate().unwrap();
    let mut serving = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    serving
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = serving.signed_by(&key, &issuer).unwrap();
    let paths = (
        dir.join("ca.crt"),
        dir.join("registry.crt"),
        dir.join("registry.key"),
    );
    fs::write(&paths.0, ca_cert.pem()).unwrap();
    fs::write(&paths.1, cert.pem()).unwrap();
    fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// Starts a registry on a free loopback port with TLS, and htpasswd auth when `htpasswd` is
/// given; waits until it answers.
fn start_registry(
    dir: &Path,
    name: &str,
    tls: &(PathBuf, PathBuf, PathBuf),
    htpasswd: Option<&Path>,
) -> Registry {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let storage = dir.join(format!("{name}-storage"));
    fs::create_dir_all(&storage).unwrap();
    let auth = htpasswd
        .map(|p| {
            format!(
                "auth:\n  htpasswd:\n    realm: tandem-e2e\n    path: {}\n",
                p.display()
            )
        })
        .unwrap_or_default();
    let config = format!(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n  tls:\n    certificate: {}\n    key: {}\n{auth}",
        storage.display(),
        tls.1.display(),
        tls.2.display()
    );
    let config_path = dir.join(format!("{name}.yml"));
    fs::write(&config_path, config).unwrap();
    let log = fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&config_path)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("docker-registry (scripts/install-deps.sh installs it)");
    let registry = Registry { child, addr };
    for _ in 0..100 {
        if std::net::TcpStream::connect(&registry.addr).is_ok() {
            return registry;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("registry {name} did not listen on {}", registry.addr);
}

/// `skopeo copy` of an OCI archive to `docker://DEST`, trusting the test CA.
fn push(archive: &Path, dest: &str, certs: &Path, creds: Option<&str>) {
    let mut cmd = Command::new("skopeo");
    cmd.args(["copy", "--quiet", "--dest-cert-dir"])
        .arg(certs)
        .arg(format!("oci-archive:{}", archive.display()))
        .arg(format!("docker://{dest}"));
    if let Some(c) = creds {
        cmd.args(["--dest-creds", c]);
    }
    let out = common::run(cmd, format!("skopeo copy {dest}"), None, LONG);
    assert!(out.success(), "skopeo copy to {dest}: {}", out.combined());
}

/// The manifest digest of `docker://IMAGE`.
fn digest(image: &str, certs: &Path) -> String {
    let mut cmd = Command::new("skopeo");
    cmd.args(["inspect", "--cert-dir"])
        .arg(certs)
        .arg(format!("docker://{image}"));
    let out = common::run(cmd, format!("skopeo inspect {image}"), None, LONG);
    assert!(out.success(), "skopeo inspect {image}: {}", out.combined());
    out.json()["Digest"].as_str().unwrap().to_string()
}

fn images_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_tandem"));
    exe.parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("images"))
        .unwrap()
}

fn pod(name: &str, image: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeSelector: {{kubernetes.io/os: linux}}\n  terminationGracePeriodSeconds: 1\n{extra}  containers:\n  - name: c\n    image: {image}\n    command: [\"/bin/busybox\", \"sleep\", \"3600\"]\n"
    )
}

/// Waits until the pod runs and returns its first container's status; on timeout, fails
/// with what `kubectl describe` and containerd's log say.
fn wait_running(s: &Server, name: &str) -> Value {
    let deadline = std::time::Instant::now() + LONG;
    for _ in 0..600 {
        if let Some(p) = s.get_json(&["pod", name]) {
            let cs = p["status"]["containerStatuses"][0].clone();
            if cs["state"]["running"].is_object() {
                return cs;
            }
        }
        if std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let describe = s.kubectl(&["describe", "pod", name]).combined();
    let log = s
        .data_dir()
        .join("nodes/linux-1/containerd/logs/containerd.log");
    let log = fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(30).collect();
    panic!(
        "{name} not running after {LONG:?}:\n{describe}\ncontainerd log (last lines, newest first):\n{}",
        tail.join("\n")
    );
}

/// The messages of the pod's events with `reason`.
fn events(s: &Server, pod: &str, reason: &str) -> Vec<String> {
    let list = s
        .get_json(&[
            "events",
            "--field-selector",
            &format!("involvedObject.name={pod},reason={reason}"),
        ])
        .unwrap_or_default();
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|e| e["message"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn pulls_from_registries_with_tls_auth_secrets_mirrors_and_back_off() {
    let work = tempfile::Builder::new()
        .prefix("tandem-e2e-registry-")
        .tempdir()
        .unwrap();
    let dir = work.path();
    let tls = make_certificates(dir);
    let certs = dir.join("certs");
    fs::create_dir_all(&certs).unwrap();
    fs::copy(&tls.0, certs.join("ca.crt")).unwrap();
    let mut htpasswd = Command::new("htpasswd");
    htpasswd.args(["-Bbn", USER, PASSWORD]);
    let out = common::run(htpasswd, "htpasswd".into(), None, LONG);
    assert!(out.success(), "htpasswd: {}", out.combined());
    let htpasswd_file = dir.join("htpasswd");
    fs::write(&htpasswd_file, &out.stdout).unwrap();

    let public = start_registry(dir, "public", &tls, None);
    let private = start_registry(dir, "private", &tls, Some(&htpasswd_file));
    // A private registry whose credentials only the registry configuration holds.
    let node_auth = start_registry(dir, "node-auth", &tls, Some(&htpasswd_file));
    let busybox = images_dir().join("busybox.tar");
    let pause = images_dir().join("pause.tar");
    let p = &public.addr;
    let q = &private.addr;
    push(&busybox, &format!("{p}/library/busybox:1.36"), &certs, None);
    push(&busybox, &format!("{p}/library/moving:1"), &certs, None);
    let creds = format!("{USER}:{PASSWORD}");
    let r = &node_auth.addr;
    push(
        &busybox,
        &format!("{r}/private/busybox:node"),
        &certs,
        Some(&creds),
    );
    for tag in ["pod-secret", "sa-secret", "denied"] {
        push(
            &busybox,
            &format!("{q}/private/busybox:{tag}"),
            &certs,
            Some(&creds),
        );
    }
    let pinned = digest(&format!("{p}/library/busybox:1.36"), &certs);

    let registries = dir.join("registries.yaml");
    let ca = tls.0.display();
    fs::write(
        &registries,
        format!(
            "mirrors:\n  docker.io:\n    endpoint: [\"https://{p}\"]\nconfigs:\n  \"{p}\":\n    tls: {{ca_file: {ca}}}\n  \"{q}\":\n    tls: {{ca_file: {ca}}}\n  \"{r}\":\n    tls: {{ca_file: {ca}}}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n"
        ),
    )
    .unwrap();
    let registries_arg = registries.to_string_lossy().to_string();
    let s = Server::start_up_with(&[
        "--linux-runtime",
        "cri",
        "--nodes",
        "linux=1",
        "--cluster-cidr",
        "10.219.0.0/16",
        "--registry-config",
        &registries_arg,
        "--disable",
        "metrics-server,ingress,servicelb,local-storage,smb,network-policy",
    ]);
    s.eventually("the Linux node on containerd", LONG, || {
        let out = s.kubectl(&["get", "nodes", "-o", "wide"]);
        out.stdout.contains("containerd://").then_some(())
    });

    // By tag, from a registry whose CA only the registry configuration names.
    let by_tag = format!("{p}/library/busybox:1.36");
    s.create(&pod("by-tag", &by_tag, ""));
    wait_running(&s, "by-tag");
    let pulled = events(&s, "by-tag", "Pulled");
    assert!(
        pulled.iter().any(|m| m
            .starts_with(&format!("Successfully pulled image \"{by_tag}\" in "))
            && m.contains("including waiting). Image size: ")
            && m.ends_with(" bytes.")),
        "{pulled:?}"
    );
    assert!(events(&s, "by-tag", "Pulling").contains(&format!("Pulling image \"{by_tag}\"")),);

    // By digest; the node lists the image under its digest name.
    let by_digest = format!("{p}/library/busybox@{pinned}");
    s.create(&pod("by-digest", &by_digest, ""));
    wait_running(&s, "by-digest");
    s.eventually("the node lists the pulled image", LONG, || {
        let node = s.get_json(&["nodes"])?;
        let images = node["items"][0]["status"]["images"].as_array()?.clone();
        images
            .iter()
            .any(|i| {
                i["names"]
                    .as_array()
                    .is_some_and(|n| n.iter().any(|n| n == &by_digest))
            })
            .then_some(())
    });

    // A Docker Hub name, served by the mirror (this machine reaches no Docker Hub).
    s.create(&pod("through-mirror", "busybox:1.36", ""));
    let cs = wait_running(&s, "through-mirror");
    assert!(
        cs["imageID"].as_str().unwrap().ends_with(&pinned),
        "the mirror's image: {cs}"
    );

    // A private image: the pod's pull secret, then a ServiceAccount's.
    let secret = |name: &str| {
        s.kubectl(&[
            "create",
            "secret",
            "docker-registry",
            name,
            &format!("--docker-server={q}"),
            &format!("--docker-username={USER}"),
            &format!("--docker-password={PASSWORD}"),
        ])
        .ok();
    };
    secret("regcred");
    s.create(&pod(
        "pod-secret",
        &format!("{q}/private/busybox:pod-secret"),
        "  imagePullSecrets: [{name: regcred}]\n",
    ));
    wait_running(&s, "pod-secret");

    secret("sa-regcred");
    s.create("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: puller}\nimagePullSecrets: [{name: sa-regcred}]\n");
    s.create(&pod(
        "sa-secret",
        &format!("{q}/private/busybox:sa-secret"),
        "  serviceAccountName: puller\n",
    ));
    wait_running(&s, "sa-secret");
    let sa_pod = s.get_json(&["pod", "sa-secret"]).unwrap();
    assert_eq!(sa_pod["spec"]["imagePullSecrets"][0]["name"], "sa-regcred");

    // The node's own credentials for a host (registries.yaml `configs.<host>.auth`): no pull
    // secret needed.
    s.create(&pod("node-auth", &format!("{r}/private/busybox:node"), ""));
    wait_running(&s, "node-auth");

    // Without credentials: ErrImagePull, then ImagePullBackOff, with the kubelet's events;
    // the pods already running are untouched.
    let denied = format!("{q}/private/busybox:denied");
    s.create(&pod("denied", &denied, ""));
    let waiting = s.eventually("denied in ImagePullBackOff", LONG, || {
        let p = s.get_json(&["pod", "denied"])?;
        let w = p["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        (w["reason"] == "ImagePullBackOff").then_some(w)
    });
    let message = waiting["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "Back-off pulling image \"{denied}\": ErrImagePull: "
        )),
        "{message}"
    );
    let failed = events(&s, "denied", "Failed");
    assert!(
        failed
            .iter()
            .any(|m| m.starts_with(&format!("Failed to pull image \"{denied}\": "))),
        "{failed:?}"
    );
    assert!(
        failed.iter().any(|m| m == "Error: ErrImagePull"),
        "{failed:?}"
    );
    assert!(
        events(&s, "denied", "BackOff").contains(&format!("Back-off pulling image \"{denied}\"")),
    );
    for running in ["by-tag", "pod-secret", "sa-secret"] {
        wait_running(&s, running);
    }

    // `Always` resolves the tag again: after the tag moves, a new pod gets the new image.
    let moving = format!("{p}/library/moving:1");
    let always = "    imagePullPolicy: Always\n";
    let with_policy = |name: &str| {
        pod(name, &moving, "").replace("    command:", &format!("{always}    command:"))
    };
    s.create(&with_policy("moving-1"));
    let first = wait_running(&s, "moving-1")["imageID"]
        .as_str()
        .unwrap()
        .to_string();
    push(&pause, &moving, &certs, None);
    let moved = digest(&moving, &certs);
    s.create(&with_policy("moving-2"));
    let second = wait_running(&s, "moving-2")["imageID"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(
        first, second,
        "the moved tag ({moved}) was not pulled again"
    );

    // Air-gapped: a gzipped docker archive dropped into the node's images directory is imported
    // while the node runs; a corrupt archive beside it changes nothing.
    let images = s.data_dir().join("nodes").join("linux-1").join("images");
    fs::write(images.join("corrupt.tar"), b"not an image archive").unwrap();
    let archive = dir.join("airgap.tar");
    let mut cmd = Command::new("skopeo");
    cmd.args(["copy", "--quiet", "--src-cert-dir"])
        .arg(&certs)
        .arg(format!("docker://{p}/library/busybox:1.36"))
        .arg(format!(
            "docker-archive:{}:example.local/airgap:1",
            archive.display()
        ));
    let out = common::run(cmd, "skopeo copy to a docker archive".into(), None, LONG);
    assert!(out.success(), "{}", out.combined());
    let mut gzip = Command::new("gzip");
    gzip.arg(&archive);
    assert!(common::run(gzip, "gzip".into(), None, LONG).success());
    let partial = images.join(".airgap.tar.gz.partial");
    fs::copy(dir.join("airgap.tar.gz"), &partial).unwrap();
    fs::rename(&partial, images.join("airgap.tar.gz")).unwrap();
    let never = pod("airgap", "example.local/airgap:1", "")
        .replace("    command:", "    imagePullPolicy: Never\n    command:");
    s.create(&never);
    wait_running(&s, "airgap");
    for running in ["by-tag", "pod-secret", "sa-secret", "moving-2"] {
        wait_running(&s, running);
    }
}

/// Writes an OCI archive of `source`'s image with an image ID of its own, named `name`
/// (`scripts/distinct-image.py`).
fn distinct_image(source: &Path, out: &Path, name: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/distinct-image.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(source).arg(out).arg(name);
    let run = common::run(cmd, "scripts/distinct-image.py".into(), None, LONG);
    assert!(run.success(), "{}", run.combined());
}

/// The names of the images the node reports.
fn node_image_names(s: &Server) -> Vec<String> {
    let nodes = s.get_json(&["nodes"]).unwrap_or_default();
    nodes["items"][0]["status"]["images"]
        .as_array()
        .map(|images| {
            images
                .iter()
                .flat_map(|i| i["names"].as_array().cloned().unwrap_or_default())
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn image_gc_removes_unused_images_and_keeps_those_in_use() {
    // Thresholds any disk exceeds: every pass frees what it can. The first pass comes 30 s
    // after the start, once the pod below uses its image (an unused one would go too).
    let s = Server::start_up_with(&[
        "--linux-runtime",
        "cri",
        "--nodes",
        "linux=1",
        "--cluster-cidr",
        "10.218.0.0/16",
        "--image-gc-high-threshold",
        "1",
        "--image-gc-low-threshold",
        "0",
        "--image-gc-period",
        "30s",
        "--disable",
        "metrics-server,ingress,servicelb,local-storage,smb,network-policy",
    ]);
    s.eventually("the Linux node on containerd", LONG, || {
        let out = s.kubectl(&["get", "nodes", "-o", "wide"]);
        out.stdout.contains("containerd://").then_some(())
    });
    let tandem = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tandem"));
        cmd.arg("images")
            .arg("--data-dir")
            .arg(s.data_dir())
            .args(args);
        let out = common::run(cmd, format!("tandem images {}", args.join(" ")), None, LONG);
        assert!(out.success(), "{}", out.combined());
        out.stdout
    };
    // Two images with IDs of their own, imported with `tandem images import`: one a pod uses,
    // one nothing uses.
    let work = tempfile::tempdir().unwrap();
    for name in ["in-use", "gc-me"] {
        let archive = work.path().join(format!("{name}.tar"));
        distinct_image(
            &images_dir().join("busybox.tar"),
            &archive,
            &format!("example.local/{name}:1"),
        );
        tandem(&["import", &archive.to_string_lossy()]);
    }
    let used = pod("in-use", "example.local/in-use:1", "")
        .replace("    command:", "    imagePullPolicy: Never\n    command:");
    s.create(&used);
    wait_running(&s, "in-use");
    let listed = tandem(&["ls"]);
    assert!(listed.contains("example.local/gc-me:1"), "{listed}");

    s.eventually("the unused image collected", LONG, || {
        let names = node_image_names(&s);
        (s.log().contains("image gc: removed an unused image")
            && !names.iter().any(|n| n.contains("example.local/gc-me")))
        .then_some(names)
    });
    // The image in use and the pinned project images stay, and the pod keeps running.
    let names = node_image_names(&s);
    for kept in [
        "example.local/in-use:1",
        "tandem.local/busybox:1",
        "tandem.local/pause:1",
    ] {
        assert!(names.iter().any(|n| n == kept), "{kept}: {names:?}");
    }
    wait_running(&s, "in-use");
}
