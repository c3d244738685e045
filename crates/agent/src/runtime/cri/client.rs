//! A CRI v1 client: unary gRPC over HTTP/2 on a Unix socket, built on hyper's HTTP/2 client
//! connection and the hand-written messages in [`super::proto`], so it needs neither tonic nor
//! `protoc`.
//!
//! The gRPC framing is the part of "gRPC over HTTP/2" (grpc/grpc `doc/PROTOCOL-HTTP2.md`) that
//! unary calls use: `POST /<package>.<Service>/<Method>` with `content-type: application/grpc`
//! and `te: trailers`; each message is prefixed by a compressed flag byte (always 0 here, no
//! compression is negotiated) and its length as a big-endian `u32`; the outcome is the
//! `grpc-status`/`grpc-message` pair, in the trailers or, for a "trailers-only" error response,
//! in the headers.
//!
//! A [`CriClient`] holds one HTTP/2 connection and multiplexes concurrent calls on it; clones
//! share it. When the connection drops (containerd restarted), the next call dials again.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, TE, USER_AGENT};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::net::UnixStream;
use tokio::sync::Mutex;

use super::proto::*;

/// The largest response the client accepts. containerd's own limit for messages it sends is
/// 16 MiB; a `ListContainers` of a full node is far below that.
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// A gRPC status code (`google.golang.org/grpc/codes`), as carried in `grpc-status`; the
/// variants are the codes 0 to 16 in order. CRI runtimes mostly answer `NotFound` for a missing
/// id and `Unknown` for everything else (failed pulls, failed execs, runc errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GrpcCode {
    Ok,
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl GrpcCode {
    /// The code for a `grpc-status` value; values outside the table are [`GrpcCode::Unknown`], as
    /// gRPC's own clients treat them.
    pub fn from_i32(value: i32) -> GrpcCode {
        use GrpcCode::*;
        match value {
            0 => Ok,
            1 => Cancelled,
            3 => InvalidArgument,
            4 => DeadlineExceeded,
            5 => NotFound,
            6 => AlreadyExists,
            7 => PermissionDenied,
            8 => ResourceExhausted,
            9 => FailedPrecondition,
            10 => Aborted,
            11 => OutOfRange,
            12 => Unimplemented,
            13 => Internal,
            14 => Unavailable,
            15 => DataLoss,
            16 => Unauthenticated,
            _ => Unknown,
        }
    }

    /// The code a non-200 HTTP status without `grpc-status` stands for (the table in grpc/grpc
    /// `doc/http-grpc-status-mapping.md`).
    pub fn from_http_status(status: StatusCode) -> GrpcCode {
        match status.as_u16() {
            400 => GrpcCode::Internal,
            401 => GrpcCode::Unauthenticated,
            403 => GrpcCode::PermissionDenied,
            404 => GrpcCode::Unimplemented,
            429 | 502 | 503 | 504 => GrpcCode::Unavailable,
            _ => GrpcCode::Unknown,
        }
    }
}

/// Spelled as grpc-go's `codes.Code.String()`, so error texts match what the kubelet shows.
impl fmt::Display for GrpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            GrpcCode::Ok => "OK",
            GrpcCode::Cancelled => "Canceled",
            GrpcCode::Unknown => "Unknown",
            GrpcCode::InvalidArgument => "InvalidArgument",
            GrpcCode::DeadlineExceeded => "DeadlineExceeded",
            GrpcCode::NotFound => "NotFound",
            GrpcCode::AlreadyExists => "AlreadyExists",
            GrpcCode::PermissionDenied => "PermissionDenied",
            GrpcCode::ResourceExhausted => "ResourceExhausted",
            GrpcCode::FailedPrecondition => "FailedPrecondition",
            GrpcCode::Aborted => "Aborted",
            GrpcCode::OutOfRange => "OutOfRange",
            GrpcCode::Unimplemented => "Unimplemented",
            GrpcCode::Internal => "Internal",
            GrpcCode::Unavailable => "Unavailable",
            GrpcCode::DataLoss => "DataLoss",
            GrpcCode::Unauthenticated => "Unauthenticated",
        };
        f.write_str(name)
    }
}

/// A failed CRI call.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The runtime answered with a non-OK status. Displayed like grpc-go's status error, which is
    /// the text the kubelet puts into events (`rpc error: code = NotFound desc = …`); `message`
    /// alone is the runtime's own words.
    #[error("rpc error: code = {code} desc = {message}")]
    Status { code: GrpcCode, message: String },
    /// The socket could not be dialled (containerd not running, or no permission).
    #[error("cannot connect to the cri socket {}", path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The socket accepted the connection but HTTP/2 could not be set up on it.
    #[error("http/2 handshake on the cri socket {} failed", path.display())]
    Handshake {
        path: PathBuf,
        #[source]
        source: hyper::Error,
    },
    /// The connection failed while the call was in flight.
    #[error("cri call {method} failed in transport")]
    Transport {
        method: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No answer within the call's deadline; the call was cancelled.
    #[error("cri call {method} timed out after {timeout:?}")]
    Timeout {
        method: &'static str,
        timeout: Duration,
    },
    /// The answer does not follow the gRPC protocol.
    #[error("cri call {method} got a malformed response: {detail}")]
    Protocol {
        method: &'static str,
        detail: String,
    },
    /// The answer's message is not the expected protobuf message.
    #[error("cri call {method} got a response that does not decode")]
    Decode {
        method: &'static str,
        #[source]
        source: prost::DecodeError,
    },
}

impl CriError {
    /// The gRPC code of this failure: the runtime's for [`CriError::Status`]; for local failures
    /// the code a gRPC client library would report (`Unavailable` for connection trouble,
    /// `DeadlineExceeded` for timeouts, `Internal` for malformed answers).
    pub fn code(&self) -> GrpcCode {
        match self {
            CriError::Status { code, .. } => *code,
            CriError::Connect { .. } | CriError::Handshake { .. } | CriError::Transport { .. } => {
                GrpcCode::Unavailable
            }
            CriError::Timeout { .. } => GrpcCode::DeadlineExceeded,
            CriError::Protocol { .. } | CriError::Decode { .. } => GrpcCode::Internal,
        }
    }

    /// Whether the runtime said the sandbox, container or image does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == GrpcCode::NotFound
    }
}

/// The two CRI services.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// `runtime.v1.RuntimeService`: sandboxes, containers, exec, status.
    Runtime,
    /// `runtime.v1.ImageService`: images.
    Image,
}

impl Service {
    fn path(self, method: &str) -> String {
        let service = match self {
            Service::Runtime => "runtime.v1.RuntimeService",
            Service::Image => "runtime.v1.ImageService",
        };
        format!("/{service}/{method}")
    }
}

/// Deadlines for calls. Calls that only touch containerd's metadata use `short`; calls that start
/// or stop processes, set up networks or pull use `long` (the kubelet uses 2 minutes for every
/// call, its `runtimeRequestTimeout`). Calls that wait on the workload by design
/// ([`CriClient::stop_container`], [`CriClient::exec_sync`]) add their own wait to these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Version, Status, List*, *Status, Exec/Attach/PortForward URLs, ImageFsInfo.
    pub short: Duration,
    /// RunPodSandbox, Stop/RemovePodSandbox, Create/Start/Stop/RemoveContainer, Pull/RemoveImage.
    pub long: Duration,
}

impl Default for Timeouts {
    /// 30 s and 2 minutes.
    fn default() -> Self {
        Timeouts {
            short: Duration::from_secs(30),
            long: Duration::from_secs(120),
        }
    }
}

/// A CRI v1 client on a Unix socket (containerd's `containerd.sock`).
///
/// Cheap to clone; clones share one HTTP/2 connection, and calls from any number of tasks run
/// concurrently on it. Every call has a deadline (see [`Timeouts`]), sent to the runtime as
/// `grpc-timeout` too, and is cancelled when it passes or when the returned future is dropped.
#[derive(Clone)]
pub struct CriClient {
    shared: Arc<Shared>,
    timeouts: Timeouts,
}

struct Shared {
    socket_path: PathBuf,
    connection: Mutex<Option<SendRequest<Full<Bytes>>>>,
}

impl fmt::Debug for CriClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CriClient")
            .field("socket_path", &self.shared.socket_path)
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

impl CriClient {
    /// Dials `socket_path` and sets up HTTP/2, failing at once if nothing listens there.
    pub async fn connect(socket_path: impl Into<PathBuf>) -> Result<CriClient, CriError> {
        let client = CriClient::lazy(socket_path);
        let timeout = client.timeouts.short;
        match tokio::time::timeout(timeout, client.sender(false)).await {
            Ok(sender) => sender.map(|_| client),
            Err(_) => Err(CriError::Timeout {
                method: "connect",
                timeout,
            }),
        }
    }

    /// A client that dials on its first call (and again whenever the connection has dropped).
    pub fn lazy(socket_path: impl Into<PathBuf>) -> CriClient {
        CriClient {
            shared: Arc::new(Shared {
                socket_path: socket_path.into(),
                connection: Mutex::new(None),
            }),
            timeouts: Timeouts::default(),
        }
    }

    /// The same client (sharing the connection) with other deadlines.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> CriClient {
        self.timeouts = timeouts;
        self
    }

    /// The deadlines calls use.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// The socket this client dials.
    pub fn socket_path(&self) -> &Path {
        &self.shared.socket_path
    }

    /// Makes one unary call: `request` to `/runtime.v1.<service>/<method>`, answered by a `Resp`.
    /// The typed methods below are wrappers of this; use it for RPCs they do not cover.
    pub async fn call<Req, Resp>(
        &self,
        service: Service,
        method: &'static str,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, CriError>
    where
        Req: Message,
        Resp: Message + Default,
    {
        match tokio::time::timeout(timeout, self.call_once(service, method, request, timeout)).await
        {
            Ok(result) => result,
            Err(_) => Err(CriError::Timeout { method, timeout }),
        }
    }

    async fn call_once<Req, Resp>(
        &self,
        service: Service,
        method: &'static str,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, CriError>
    where
        Req: Message,
        Resp: Message + Default,
    {
        let protocol = |detail: String| CriError::Protocol { method, detail };
        let frame = encode_frame(request).map_err(protocol)?;
        let http_request = Request::post(format!("http://localhost{}", service.path(method)))
            .header(CONTENT_TYPE, "application/grpc")
            .header(TE, "trailers")
            .header(USER_AGENT, "tandem-agent")
            .header("grpc-timeout", grpc_timeout(timeout))
            .body(Full::new(frame))
            .map_err(|e| protocol(format!("cannot build the request: {e}")))?;

        let transport = |source: Box<dyn std::error::Error + Send + Sync>| CriError::Transport {
            method,
            source,
        };
        let mut sender = self.sender(false).await?;
        let response = match sender.try_send_request(http_request).await {
            Ok(response) => response,
            Err(mut error) => match error.take_message() {
                // Not sent: the connection was going away (containerd restarted) before it
                // noticed. Sending again on a new connection is safe.
                Some(http_request) => self
                    .sender(true)
                    .await?
                    .send_request(http_request)
                    .await
                    .map_err(|e| transport(e.into()))?,
                None => return Err(transport(error.into_error().into())),
            },
        };
        let (parts, body) = response.into_parts();

        // A trailers-only response (an error before any message) carries the status in headers.
        if let Some(status) = grpc_status(&parts.headers) {
            return match status {
                Err(status) => Err(status),
                Ok(()) => Err(protocol("the response has no message".into())),
            };
        }
        if parts.status != StatusCode::OK {
            return Err(CriError::Status {
                code: GrpcCode::from_http_status(parts.status),
                message: format!("unexpected http status {}", parts.status),
            });
        }
        let collected = Limited::new(body, MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(transport)?;
        let trailers = collected.trailers().cloned().unwrap_or_default();
        match grpc_status(&trailers) {
            Some(Ok(())) => {}
            Some(Err(status)) => return Err(status),
            None => return Err(protocol("the response has no grpc-status".into())),
        }
        let message = decode_frame(collected.to_bytes()).map_err(protocol)?;
        Resp::decode(message).map_err(|source| CriError::Decode { method, source })
    }

    /// The shared connection, dialled again if it is gone (or if `fresh`).
    async fn sender(&self, fresh: bool) -> Result<SendRequest<Full<Bytes>>, CriError> {
        let mut connection = self.shared.connection.lock().await;
        if !fresh
            && let Some(sender) = connection.as_ref()
            && !sender.is_closed()
        {
            return Ok(sender.clone());
        }
        let sender = dial(&self.shared.socket_path).await?;
        *connection = Some(sender.clone());
        Ok(sender)
    }

    async fn runtime<Req: Message, Resp: Message + Default>(
        &self,
        method: &'static str,
        request: Req,
        timeout: Duration,
    ) -> Result<Resp, CriError> {
        self.call(Service::Runtime, method, &request, timeout).await
    }

    async fn image<Req: Message, Resp: Message + Default>(
        &self,
        method: &'static str,
        request: Req,
        timeout: Duration,
    ) -> Result<Resp, CriError> {
        self.call(Service::Image, method, &request, timeout).await
    }

    // --- RuntimeService -------------------------------------------------------------------

    /// `Version`: the runtime's name and version and the CRI API version it serves (`v1`).
    pub async fn version(&self) -> Result<VersionResponse, CriError> {
        let request = VersionRequest {
            version: "v1".into(),
        };
        self.runtime("Version", request, self.timeouts.short).await
    }

    /// `Status`: the runtime's conditions ([`RUNTIME_READY`], [`NETWORK_READY`]). containerd
    /// reports `NetworkReady=false` until a CNI config is in its conf dir.
    pub async fn status(&self) -> Result<RuntimeStatus, CriError> {
        let response: StatusResponse = self
            .runtime(
                "Status",
                StatusRequest { verbose: false },
                self.timeouts.short,
            )
            .await?;
        Ok(response.status.unwrap_or_default())
    }

    /// `RunPodSandbox`: creates and starts a sandbox (pause process, namespaces, CNI network) and
    /// returns its id. A failure can leave a NOTREADY sandbox that keeps the name reserved; see
    /// [`PodSandboxMetadata`].
    pub async fn run_pod_sandbox(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String, CriError> {
        let request = RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: runtime_handler.to_string(),
        };
        let response: RunPodSandboxResponse = self
            .runtime("RunPodSandbox", request, self.timeouts.long)
            .await?;
        Ok(response.pod_sandbox_id)
    }

    /// `StopPodSandbox`: SIGKILLs every container of the sandbox (no grace: stop containers with
    /// [`CriClient::stop_container`] first for a graceful delete) and tears its network down.
    /// Idempotent.
    pub async fn stop_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        let request = StopPodSandboxRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
        };
        let _: StopPodSandboxResponse = self
            .runtime("StopPodSandbox", request, self.timeouts.long)
            .await?;
        Ok(())
    }

    /// `RemovePodSandbox`: removes a sandbox and its containers. Idempotent.
    pub async fn remove_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        let request = RemovePodSandboxRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
        };
        let _: RemovePodSandboxResponse = self
            .runtime("RemovePodSandbox", request, self.timeouts.long)
            .await?;
        Ok(())
    }

    /// `PodSandboxStatus`: state, IP and metadata of one sandbox; `NotFound` if it does not exist.
    pub async fn pod_sandbox_status(
        &self,
        pod_sandbox_id: &str,
    ) -> Result<PodSandboxStatus, CriError> {
        let request = PodSandboxStatusRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            verbose: false,
        };
        let response: PodSandboxStatusResponse = self
            .runtime("PodSandboxStatus", request, self.timeouts.short)
            .await?;
        response.status.ok_or_else(|| CriError::Protocol {
            method: "PodSandboxStatus",
            detail: "the response has no status".into(),
        })
    }

    /// `ListPodSandbox`: every sandbox (ready or not) that matches `filter`.
    pub async fn list_pod_sandbox(
        &self,
        filter: Option<PodSandboxFilter>,
    ) -> Result<Vec<PodSandbox>, CriError> {
        let response: ListPodSandboxResponse = self
            .runtime(
                "ListPodSandbox",
                ListPodSandboxRequest { filter },
                self.timeouts.short,
            )
            .await?;
        Ok(response.items)
    }

    /// `CreateContainer`: creates (does not start) a container in a sandbox and returns its id.
    /// The image must be present; `sandbox_config` is the config the sandbox was created with.
    pub async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String, CriError> {
        let request = CreateContainerRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let response: CreateContainerResponse = self
            .runtime("CreateContainer", request, self.timeouts.long)
            .await?;
        Ok(response.container_id)
    }

    /// `StartContainer`: starts a created container.
    pub async fn start_container(&self, container_id: &str) -> Result<(), CriError> {
        let request = StartContainerRequest {
            container_id: container_id.to_string(),
        };
        let _: StartContainerResponse = self
            .runtime("StartContainer", request, self.timeouts.long)
            .await?;
        Ok(())
    }

    /// `StopContainer`: SIGTERM, then SIGKILL after `grace` (rounded up to whole seconds, as CRI
    /// counts them); returns once the process is gone. The deadline is `grace` plus the long
    /// timeout. Stopping a stopped container succeeds.
    pub async fn stop_container(
        &self,
        container_id: &str,
        grace: Duration,
    ) -> Result<(), CriError> {
        let seconds = grace.as_secs() + u64::from(grace.subsec_nanos() > 0);
        let request = StopContainerRequest {
            container_id: container_id.to_string(),
            timeout: i64::try_from(seconds).unwrap_or(i64::MAX),
        };
        let deadline = grace.saturating_add(self.timeouts.long);
        let _: StopContainerResponse = self.runtime("StopContainer", request, deadline).await?;
        Ok(())
    }

    /// `RemoveContainer`: removes a container (killing it if it still runs). Idempotent.
    pub async fn remove_container(&self, container_id: &str) -> Result<(), CriError> {
        let request = RemoveContainerRequest {
            container_id: container_id.to_string(),
        };
        let _: RemoveContainerResponse = self
            .runtime("RemoveContainer", request, self.timeouts.long)
            .await?;
        Ok(())
    }

    /// `ListContainers`: every container that matches `filter`.
    pub async fn list_containers(
        &self,
        filter: Option<ContainerFilter>,
    ) -> Result<Vec<Container>, CriError> {
        let response: ListContainersResponse = self
            .runtime(
                "ListContainers",
                ListContainersRequest { filter },
                self.timeouts.short,
            )
            .await?;
        Ok(response.containers)
    }

    /// `ContainerStatus`: state, exit code, reason and timestamps of one container; `NotFound` if
    /// it does not exist.
    pub async fn container_status(&self, container_id: &str) -> Result<ContainerStatus, CriError> {
        let request = ContainerStatusRequest {
            container_id: container_id.to_string(),
            verbose: false,
        };
        let response: ContainerStatusResponse = self
            .runtime("ContainerStatus", request, self.timeouts.short)
            .await?;
        response.status.ok_or_else(|| CriError::Protocol {
            method: "ContainerStatus",
            detail: "the response has no status".into(),
        })
    }

    /// `ListContainerStats`: CPU and memory usage of every container that matches `filter`, as
    /// the runtime reads them from the containers' cgroups.
    pub async fn list_container_stats(
        &self,
        filter: Option<ContainerStatsFilter>,
    ) -> Result<Vec<ContainerStats>, CriError> {
        let response: ListContainerStatsResponse = self
            .runtime(
                "ListContainerStats",
                ListContainerStatsRequest { filter },
                self.timeouts.short,
            )
            .await?;
        Ok(response.stats)
    }

    /// `UpdateContainerResources`: changes the cgroup limits of a running container.
    pub async fn update_container_resources(
        &self,
        container_id: &str,
        resources: LinuxContainerResources,
    ) -> Result<(), CriError> {
        let request = UpdateContainerResourcesRequest {
            container_id: container_id.to_string(),
            linux: Some(resources),
            annotations: Default::default(),
        };
        let _: UpdateContainerResourcesResponse = self
            .runtime("UpdateContainerResources", request, self.timeouts.short)
            .await?;
        Ok(())
    }

    /// `ReopenContainerLog`: makes the runtime open the container's log path again, after log
    /// rotation renamed the file.
    pub async fn reopen_container_log(&self, container_id: &str) -> Result<(), CriError> {
        let request = ReopenContainerLogRequest {
            container_id: container_id.to_string(),
        };
        let _: ReopenContainerLogResponse = self
            .runtime("ReopenContainerLog", request, self.timeouts.short)
            .await?;
        Ok(())
    }

    /// `ExecSync`: runs `cmd` in the container and returns its output and exit code. `timeout`
    /// bounds the command (whole seconds; `None` lets it run until the long timeout cancels the
    /// call). A command that cannot be started is an `Unknown` error such as "executable file not
    /// found in $PATH", not an exit code; the kubelet's probes map that to a failure.
    pub async fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Option<Duration>,
    ) -> Result<ExecSyncResponse, CriError> {
        let (seconds, deadline) = match timeout {
            Some(timeout) => {
                let seconds = timeout.as_secs().max(1);
                (
                    i64::try_from(seconds).unwrap_or(i64::MAX),
                    timeout.saturating_add(self.timeouts.short),
                )
            }
            None => (0, self.timeouts.long),
        };
        let request = ExecSyncRequest {
            container_id: container_id.to_string(),
            cmd,
            timeout: seconds,
        };
        self.runtime("ExecSync", request, deadline).await
    }

    /// `Exec`: prepares an exec session and returns its single-use URL on the runtime's streaming
    /// server (websocket `v4.channel.k8s.io` or SPDY/3.1; containerd 1.6 refuses `v5`).
    pub async fn exec(&self, request: ExecRequest) -> Result<String, CriError> {
        let response: ExecResponse = self.runtime("Exec", request, self.timeouts.short).await?;
        Ok(response.url)
    }

    /// `Attach`: prepares an attach session and returns its single-use streaming URL.
    pub async fn attach(&self, request: AttachRequest) -> Result<String, CriError> {
        let response: AttachResponse = self.runtime("Attach", request, self.timeouts.short).await?;
        Ok(response.url)
    }

    /// `PortForward`: prepares a port-forward session into the sandbox's network namespace and
    /// returns its single-use streaming URL.
    pub async fn port_forward(
        &self,
        pod_sandbox_id: &str,
        ports: Vec<i32>,
    ) -> Result<String, CriError> {
        let request = PortForwardRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            port: ports,
        };
        let response: PortForwardResponse = self
            .runtime("PortForward", request, self.timeouts.short)
            .await?;
        Ok(response.url)
    }

    // --- ImageService ---------------------------------------------------------------------

    /// `ListImages`: the images present, optionally only those matching `filter`.
    pub async fn list_images(&self, filter: Option<ImageFilter>) -> Result<Vec<Image>, CriError> {
        let response: ListImagesResponse = self
            .image(
                "ListImages",
                ListImagesRequest { filter },
                self.timeouts.short,
            )
            .await?;
        Ok(response.images)
    }

    /// `ImageStatus`: the image if it is present, `None` if not (absence is not an error).
    pub async fn image_status(&self, image: &str) -> Result<Option<Image>, CriError> {
        let request = ImageStatusRequest {
            image: Some(image_spec(image)),
            verbose: false,
        };
        let response: ImageStatusResponse = self
            .image("ImageStatus", request, self.timeouts.short)
            .await?;
        Ok(response.image)
    }

    /// `PullImage`: pulls `image` and returns its image reference (`sha256:…`). Without a
    /// registry every pull fails at once with `Unknown` ("failed to resolve reference …").
    pub async fn pull_image(
        &self,
        image: &str,
        auth: Option<AuthConfig>,
        sandbox_config: Option<PodSandboxConfig>,
    ) -> Result<String, CriError> {
        let request = PullImageRequest {
            image: Some(image_spec(image)),
            auth,
            sandbox_config,
        };
        let response: PullImageResponse =
            self.image("PullImage", request, self.timeouts.long).await?;
        Ok(response.image_ref)
    }

    /// `RemoveImage`: removes an image by reference or id. Idempotent. Remove images through CRI
    /// only: one removed behind CRI's back (`ctr images rm`) stays in its cache until restart.
    pub async fn remove_image(&self, image: &str) -> Result<(), CriError> {
        let request = RemoveImageRequest {
            image: Some(image_spec(image)),
        };
        let _: RemoveImageResponse = self
            .image("RemoveImage", request, self.timeouts.long)
            .await?;
        Ok(())
    }

    /// `ImageFsInfo`: usage of the filesystem that holds images.
    pub async fn image_fs_info(&self) -> Result<ImageFsInfoResponse, CriError> {
        self.image("ImageFsInfo", ImageFsInfoRequest {}, self.timeouts.short)
            .await
    }
}

fn image_spec(image: &str) -> ImageSpec {
    ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

/// Dials the socket and completes the HTTP/2 handshake; the connection is driven by a task of
/// its own until either side closes it.
async fn dial(socket_path: &Path) -> Result<SendRequest<Full<Bytes>>, CriError> {
    let stream = UnixStream::connect(socket_path)
        .await
        .map_err(|source| CriError::Connect {
            path: socket_path.to_path_buf(),
            source,
        })?;
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(4 << 20)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|source| CriError::Handshake {
            path: socket_path.to_path_buf(),
            source,
        })?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "cri connection closed");
        }
    });
    Ok(sender)
}

/// One length-prefixed gRPC message: flag 0 (uncompressed), big-endian length, the message.
fn encode_frame(message: &impl Message) -> Result<Bytes, String> {
    let encoded = message.encode_to_vec();
    let length = u32::try_from(encoded.len())
        .map_err(|_| format!("the request is too large ({} bytes)", encoded.len()))?;
    let mut frame = Vec::with_capacity(5 + encoded.len());
    frame.push(0);
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(&encoded);
    Ok(Bytes::from(frame))
}

/// The one message of a unary response body.
fn decode_frame(body: Bytes) -> Result<Bytes, String> {
    if body.is_empty() {
        return Err("the response has no message".into());
    }
    let Some((header, rest)) = body.split_first_chunk::<5>() else {
        return Err(format!(
            "the message header is truncated ({} bytes)",
            body.len()
        ));
    };
    let [flag, length @ ..] = *header;
    if flag != 0 {
        return Err(format!(
            "the message is compressed (flag {flag}) but no compression was negotiated"
        ));
    }
    let length = u32::from_be_bytes(length) as usize;
    if rest.len() < length {
        return Err(format!(
            "the message is truncated ({} of {length} bytes)",
            rest.len()
        ));
    }
    if rest.len() > length {
        return Err("a unary response carries more than one message".into());
    }
    Ok(body.slice(5..))
}

/// The gRPC status in `headers`, if there is one: `Ok(())` for OK, the error otherwise.
fn grpc_status(headers: &HeaderMap) -> Option<Result<(), CriError>> {
    let value = headers.get("grpc-status")?;
    let code = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
        .map_or(GrpcCode::Unknown, GrpcCode::from_i32);
    if code == GrpcCode::Ok {
        return Some(Ok(()));
    }
    let message = headers
        .get("grpc-message")
        .map(|m| percent_decode(m.as_bytes()))
        .unwrap_or_default();
    Some(Err(CriError::Status { code, message }))
}

/// Decodes `grpc-message`'s percent-encoding (`%XX` of UTF-8 bytes). A `%` not followed by two
/// hex digits is kept as it is, as the gRPC spec asks of receivers.
fn percent_decode(encoded: &[u8]) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut decoded = Vec::with_capacity(encoded.len());
    let mut i = 0;
    while i < encoded.len() {
        if encoded[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                encoded.get(i + 1).copied().and_then(hex),
                encoded.get(i + 2).copied().and_then(hex),
            )
        {
            decoded.push(hi << 4 | lo);
            i += 3;
        } else {
            decoded.push(encoded[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// The `grpc-timeout` header value: at most 8 digits and a unit, in the finest unit that fits.
fn grpc_timeout(timeout: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let millis = timeout.as_millis();
    if millis <= MAX {
        return format!("{}m", millis.max(1));
    }
    let seconds = timeout.as_secs() as u128;
    if seconds <= MAX {
        return format!("{seconds}S");
    }
    format!("{}H", (seconds / 3600).min(MAX))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::stream;
    use http::{HeaderValue, Response};
    use http_body_util::StreamBody;
    use hyper::body::{Frame, Incoming};
    use hyper::service::service_fn;
    use tokio::net::UnixListener;

    use super::*;

    #[test]
    fn frames_are_flag_length_and_message() {
        let frame = encode_frame(&StartContainerRequest {
            container_id: "ab".into(),
        })
        .expect("encodes");
        assert_eq!(&frame[..], &[0, 0, 0, 0, 4, 0x0a, 2, b'a', b'b']);
        assert_eq!(
            &decode_frame(frame).expect("decodes")[..],
            &[0x0a, 2, b'a', b'b']
        );
    }

    #[test]
    fn an_empty_message_is_a_five_byte_frame() {
        let frame = encode_frame(&StopPodSandboxResponse {}).expect("encodes");
        assert_eq!(&frame[..], &[0, 0, 0, 0, 0]);
        assert!(decode_frame(frame).expect("decodes").is_empty());
    }

    #[test]
    fn malformed_frames_are_rejected_with_the_reason() {
        let cases: [(&[u8], &str); 5] = [
            (&[], "no message"),
            (&[0, 0, 0], "header is truncated"),
            (&[1, 0, 0, 0, 0], "compressed"),
            (&[0, 0, 0, 0, 3, 1], "truncated (1 of 3 bytes)"),
            (&[0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0], "more than one message"),
        ];
        for (body, reason) in cases {
            let error = decode_frame(Bytes::copy_from_slice(body)).expect_err("rejected");
            assert!(error.contains(reason), "{body:?}: {error}");
        }
    }

    #[test]
    fn grpc_message_is_percent_decoded() {
        assert_eq!(
            percent_decode(b"image %22busybox%22 not found: 100%25%20sure"),
            "image \"busybox\" not found: 100% sure"
        );
        assert_eq!(percent_decode(b"caf%C3%A9"), "café");
        assert_eq!(percent_decode(b"50% off %4"), "50% off %4");
    }

    #[test]
    fn grpc_status_reads_code_and_message() {
        let mut headers = HeaderMap::new();
        assert!(grpc_status(&headers).is_none());
        headers.insert("grpc-status", HeaderValue::from_static("0"));
        assert!(matches!(grpc_status(&headers), Some(Ok(()))));
        headers.insert("grpc-status", HeaderValue::from_static("5"));
        headers.insert(
            "grpc-message",
            HeaderValue::from_static("no%20such%20sandbox"),
        );
        let Some(Err(error)) = grpc_status(&headers) else {
            panic!("expected an error status");
        };
        assert!(error.is_not_found());
        assert_eq!(
            error.to_string(),
            "rpc error: code = NotFound desc = no such sandbox"
        );
        headers.insert("grpc-status", HeaderValue::from_static("99"));
        assert!(matches!(
            grpc_status(&headers),
            Some(Err(CriError::Status {
                code: GrpcCode::Unknown,
                ..
            }))
        ));
    }

    #[test]
    fn grpc_timeout_uses_at_most_eight_digits() {
        assert_eq!(grpc_timeout(Duration::from_secs(30)), "30000m");
        assert_eq!(grpc_timeout(Duration::from_micros(10)), "1m");
        assert_eq!(grpc_timeout(Duration::from_secs(200_000)), "200000S");
        assert_eq!(grpc_timeout(Duration::from_secs(400_000_000)), "111111H");
    }

    #[test]
    fn http_statuses_map_to_grpc_codes() {
        assert_eq!(
            GrpcCode::from_http_status(StatusCode::NOT_FOUND),
            GrpcCode::Unimplemented
        );
        assert_eq!(
            GrpcCode::from_http_status(StatusCode::SERVICE_UNAVAILABLE),
            GrpcCode::Unavailable
        );
        assert_eq!(
            GrpcCode::from_http_status(StatusCode::IM_A_TEAPOT),
            GrpcCode::Unknown
        );
    }

    type TestBody = StreamBody<stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

    fn grpc_response(message: &impl Message, status: &'static str) -> Response<TestBody> {
        let frame = encode_frame(message).expect("encodes");
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static(status));
        let frames = vec![Ok(Frame::data(frame)), Ok(Frame::trailers(trailers))];
        Response::builder()
            .header(CONTENT_TYPE, "application/grpc")
            .body(StreamBody::new(stream::iter(frames)))
            .expect("valid response")
    }

    /// A stand-in CRI server: `Version` answers, `ContainerStatus` echoes the requested id,
    /// `StopPodSandbox` fails trailers-only, `StartContainer` never answers.
    async fn fake_runtime(request: Request<Incoming>) -> Result<Response<TestBody>, Infallible> {
        let path = request.uri().path().to_string();
        let grpc_headers_ok = request.headers().get(CONTENT_TYPE)
            == Some(&HeaderValue::from_static("application/grpc"))
            && request.headers().get(TE) == Some(&HeaderValue::from_static("trailers"))
            && request.headers().contains_key("grpc-timeout");
        let body = request
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        if !grpc_headers_ok {
            let mut response = Response::new(StreamBody::new(stream::iter(Vec::new())));
            *response.status_mut() = StatusCode::BAD_REQUEST;
            return Ok(response);
        }
        Ok(match path.as_str() {
            "/runtime.v1.RuntimeService/Version" => grpc_response(
                &VersionResponse {
                    runtime_name: "fake".into(),
                    runtime_api_version: "v1".into(),
                    ..Default::default()
                },
                "0",
            ),
            "/runtime.v1.RuntimeService/ContainerStatus" => {
                let request = decode_frame(body)
                    .ok()
                    .and_then(|m| ContainerStatusRequest::decode(m).ok())
                    .unwrap_or_default();
                let status = ContainerStatus {
                    id: request.container_id,
                    state: ContainerState::ContainerRunning as i32,
                    ..Default::default()
                };
                grpc_response(
                    &ContainerStatusResponse {
                        status: Some(status),
                        info: Default::default(),
                    },
                    "0",
                )
            }
            "/runtime.v1.RuntimeService/StartContainer" => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                grpc_response(&StartContainerResponse {}, "0")
            }
            _ => Response::builder()
                .header(CONTENT_TYPE, "application/grpc")
                .header("grpc-status", "5")
                .header("grpc-message", "sandbox%20%22x%22%20not%20found")
                .body(StreamBody::new(stream::iter(Vec::new())))
                .expect("valid response"),
        })
    }

    /// Serves [`fake_runtime`] on a socket in `dir`; counts accepted connections.
    fn serve(listener: UnixListener, connections: Arc<AtomicUsize>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            // A JoinSet, so that aborting the server also closes its connections.
            let mut served = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                connections.fetch_add(1, Ordering::SeqCst);
                served.spawn(async move {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service_fn(fake_runtime))
                        .await;
                });
            }
        })
    }

    #[tokio::test]
    async fn unary_calls_round_trip_through_an_http2_server() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("cri.sock");
        let connections = Arc::new(AtomicUsize::new(0));
        let server = serve(
            UnixListener::bind(&socket).expect("bind"),
            connections.clone(),
        );

        let client = CriClient::connect(&socket).await.expect("connects");
        let version = client.version().await.expect("version");
        assert_eq!(version.runtime_name, "fake");
        assert_eq!(version.runtime_api_version, "v1");

        let error = client.stop_pod_sandbox("x").await.expect_err("not found");
        assert!(error.is_not_found(), "{error}");
        assert_eq!(
            error.to_string(),
            "rpc error: code = NotFound desc = sandbox \"x\" not found"
        );

        // Many concurrent calls share the one connection.
        let calls = (0..20).map(|i| {
            let client = client.clone();
            async move { client.container_status(&format!("c{i}")).await }
        });
        for (i, status) in futures::future::join_all(calls)
            .await
            .into_iter()
            .enumerate()
        {
            let status = status.expect("status");
            assert_eq!(status.id, format!("c{i}"));
            assert_eq!(status.state(), ContainerState::ContainerRunning);
        }
        assert_eq!(connections.load(Ordering::SeqCst), 1);
        server.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_deadline_fails_with_deadline_exceeded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("cri.sock");
        let server = serve(
            UnixListener::bind(&socket).expect("bind"),
            Arc::new(AtomicUsize::new(0)),
        );
        let client = CriClient::connect(&socket)
            .await
            .expect("connects")
            .with_timeouts(Timeouts {
                short: Duration::from_secs(1),
                long: Duration::from_secs(5),
            });
        let error = client.start_container("c").await.expect_err("times out");
        assert!(
            matches!(error, CriError::Timeout { method: "StartContainer", timeout } if timeout == Duration::from_secs(5)),
            "{error}"
        );
        assert_eq!(error.code(), GrpcCode::DeadlineExceeded);
        // The connection is still usable after a cancelled call.
        client.version().await.expect("version");
        server.abort();
    }

    #[tokio::test]
    async fn the_client_dials_again_after_the_runtime_restarts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("cri.sock");
        let connections = Arc::new(AtomicUsize::new(0));
        let server = serve(
            UnixListener::bind(&socket).expect("bind"),
            connections.clone(),
        );
        let client = CriClient::connect(&socket).await.expect("connects");
        client.version().await.expect("version");

        server.abort();
        let _ = server.await;
        std::fs::remove_file(&socket).expect("remove socket");
        let error = client.version().await.expect_err("runtime is gone");
        assert_eq!(error.code(), GrpcCode::Unavailable, "{error}");

        let server = serve(
            UnixListener::bind(&socket).expect("bind"),
            connections.clone(),
        );
        client.version().await.expect("version after restart");
        assert_eq!(connections.load(Ordering::SeqCst), 2);
        server.abort();
    }

    #[tokio::test]
    async fn connecting_to_a_missing_socket_fails_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let error = CriClient::connect(dir.path().join("none.sock"))
            .await
            .expect_err("no socket");
        assert!(matches!(error, CriError::Connect { .. }), "{error}");
        assert_eq!(error.code(), GrpcCode::Unavailable);
    }
}
