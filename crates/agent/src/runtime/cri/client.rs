//! A CRI v1 client on containerd's Unix socket: the tonic clients `k8s-cri` generates from
//! upstream's `api.proto` (`RuntimeServiceClient`, `ImageServiceClient`), run on one tonic
//! channel whose connector dials the socket path, with the kubelet's habits around them: a
//! deadline on every call (the kubelet's `runtimeRequestTimeout`, sent as `grpc-timeout` too) and
//! errors that read like grpc-go's (`rpc error: code = NotFound desc = …`), which is what the
//! kubelet puts into events.
//!
//! A [`CriClient`] holds one HTTP/2 connection and multiplexes concurrent calls on it; clones
//! share it. When the connection drops (containerd restarted), the channel dials again on the
//! next call (tonic's reconnecting channel); a call that finds nothing listening fails with
//! `Unavailable` and the one after it dials again.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use super::proto::*;

/// The largest response the client accepts (tonic's default is 4 MiB). containerd's own limit
/// for messages it sends is 16 MiB; a `ListContainers` of a full node is far below that.
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// A gRPC status code (`google.golang.org/grpc/codes`); the variants are the codes 0 to 16 in
/// order. CRI runtimes mostly answer `NotFound` for a missing id and `Unknown` for everything
/// else (failed pulls, failed execs, runc errors).
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

impl From<tonic::Code> for GrpcCode {
    fn from(code: tonic::Code) -> GrpcCode {
        use tonic::Code;
        match code {
            Code::Ok => GrpcCode::Ok,
            Code::Cancelled => GrpcCode::Cancelled,
            Code::Unknown => GrpcCode::Unknown,
            Code::InvalidArgument => GrpcCode::InvalidArgument,
            Code::DeadlineExceeded => GrpcCode::DeadlineExceeded,
            Code::NotFound => GrpcCode::NotFound,
            Code::AlreadyExists => GrpcCode::AlreadyExists,
            Code::PermissionDenied => GrpcCode::PermissionDenied,
            Code::ResourceExhausted => GrpcCode::ResourceExhausted,
            Code::FailedPrecondition => GrpcCode::FailedPrecondition,
            Code::Aborted => GrpcCode::Aborted,
            Code::OutOfRange => GrpcCode::OutOfRange,
            Code::Unimplemented => GrpcCode::Unimplemented,
            Code::Internal => GrpcCode::Internal,
            Code::Unavailable => GrpcCode::Unavailable,
            Code::DataLoss => GrpcCode::DataLoss,
            Code::Unauthenticated => GrpcCode::Unauthenticated,
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
        source: tonic::transport::Error,
    },
    /// The connection failed while the call was in flight.
    #[error("cri call {method} failed in transport")]
    Transport {
        method: &'static str,
        #[source]
        source: tonic::Status,
    },
    /// No answer within the call's deadline; the call was cancelled.
    #[error("cri call {method} timed out after {timeout:?}")]
    Timeout {
        method: &'static str,
        timeout: Duration,
    },
    /// The answer lacks what the call needs (a status message without its status, say).
    #[error("cri call {method} got a malformed response: {detail}")]
    Protocol {
        method: &'static str,
        detail: String,
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
            CriError::Protocol { .. } => GrpcCode::Internal,
        }
    }

    /// Whether the runtime said the sandbox, container or image does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == GrpcCode::NotFound
    }

    /// The failure a tonic call of `method` on the socket `path` ended with. tonic reports local
    /// failures as statuses too, with the cause as the status' source; a status the runtime sent
    /// has no source.
    fn from_status(
        status: tonic::Status,
        method: &'static str,
        timeout: Duration,
        path: &Path,
    ) -> CriError {
        use std::error::Error as _;
        if status.source().is_none() {
            return CriError::Status {
                code: status.code().into(),
                message: status.message().to_string(),
            };
        }
        let mut cause = status.source();
        let mut dialling = false;
        while let Some(error) = cause {
            if error.is::<tonic::TimeoutExpired>() {
                return CriError::Timeout { method, timeout };
            }
            dialling |= error.is::<tonic::ConnectError>();
            if dialling && let Some(io) = error.downcast_ref::<std::io::Error>() {
                return CriError::Connect {
                    path: path.to_path_buf(),
                    source: std::io::Error::new(io.kind(), io.to_string()),
                };
            }
            cause = error.source();
        }
        CriError::Transport {
            method,
            source: status,
        }
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

/// One RPC through [`CriClient::call`]: `rpc!(self.runtime.status, "Status", short, message)`
/// calls the generated client's `status` on `self.runtime` as CRI method `Status`, with the
/// client's short deadline (`long` for the long one, or any `Duration` expression).
macro_rules! rpc {
    ($client:ident . $service:ident . $rpc:ident, $method:expr, short, $message:expr) => {
        rpc!(
            $client.$service.$rpc,
            $method,
            $client.timeouts.short,
            $message
        )
    };
    ($client:ident . $service:ident . $rpc:ident, $method:expr, long, $message:expr) => {
        rpc!(
            $client.$service.$rpc,
            $method,
            $client.timeouts.long,
            $message
        )
    };
    ($client:ident . $service:ident . $rpc:ident, $method:expr, $timeout:expr, $message:expr) => {
        $client
            .call(
                &$client.$service,
                $method,
                $timeout,
                $message,
                |mut c, r| async move { c.$rpc(r).await },
            )
            .await
    };
}

/// A CRI v1 client on a Unix socket (containerd's `containerd.sock`).
///
/// Cheap to clone; clones share one HTTP/2 connection, and calls from any number of tasks run
/// concurrently on it. Every call has a deadline (see [`Timeouts`]), sent to the runtime as
/// `grpc-timeout` too, and is cancelled when it passes or when the returned future is dropped.
#[derive(Clone)]
pub struct CriClient {
    socket_path: Arc<Path>,
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
    timeouts: Timeouts,
}

impl fmt::Debug for CriClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CriClient")
            .field("socket_path", &self.socket_path)
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

/// Dials the runtime's Unix socket for the channel; the URI the channel asks for is ignored.
#[derive(Clone)]
struct UnixConnector {
    socket_path: Arc<Path>,
}

type Dialling = Pin<Box<dyn Future<Output = std::io::Result<TokioIo<UnixStream>>> + Send>>;

impl tonic::codegen::Service<Uri> for UnixConnector {
    type Response = TokioIo<UnixStream>;
    type Error = std::io::Error;
    type Future = Dialling;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Dialling {
        let socket_path = self.socket_path.clone();
        Box::pin(async move { Ok(TokioIo::new(UnixStream::connect(&*socket_path).await?)) })
    }
}

/// The channel's settings: the authority is a placeholder (containerd does not look at it), the
/// windows are larger than HTTP/2's 64 KiB default so large lists arrive in few round trips.
fn endpoint() -> Endpoint {
    let endpoint = Endpoint::from_static("http://localhost")
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(4 << 20);
    endpoint
        .clone()
        .user_agent("tandem-agent")
        .unwrap_or(endpoint)
}

/// A request for a call with deadline `timeout`, which the runtime sees as `grpc-timeout`.
fn request<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}

impl CriClient {
    /// Dials `socket_path` and sets up HTTP/2, failing at once if nothing listens there.
    pub async fn connect(socket_path: impl Into<PathBuf>) -> Result<CriClient, CriError> {
        let socket_path: Arc<Path> = socket_path.into().into();
        let timeout = Timeouts::default().short;
        let connector = UnixConnector {
            socket_path: socket_path.clone(),
        };
        let endpoint = endpoint();
        let connecting = endpoint.connect_with_connector(connector);
        let channel = match tokio::time::timeout(timeout, connecting).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(error)) => return Err(connect_error(&socket_path, error)),
            Err(_) => {
                return Err(CriError::Timeout {
                    method: "connect",
                    timeout,
                });
            }
        };
        Ok(CriClient::on(socket_path, channel))
    }

    /// A client that dials on its first call (and again whenever the connection has dropped).
    /// Must be called within a tokio runtime (the channel's worker is a task).
    pub fn lazy(socket_path: impl Into<PathBuf>) -> CriClient {
        let socket_path: Arc<Path> = socket_path.into().into();
        let connector = UnixConnector {
            socket_path: socket_path.clone(),
        };
        let channel = endpoint().connect_with_connector_lazy(connector);
        CriClient::on(socket_path, channel)
    }

    fn on(socket_path: Arc<Path>, channel: Channel) -> CriClient {
        CriClient {
            socket_path,
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_RESPONSE_BYTES),
            image: ImageServiceClient::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES),
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
        &self.socket_path
    }

    /// The generated `RuntimeService` client on this client's connection, for RPCs the methods
    /// below do not cover (`RemoveContainer`, `UpdateContainerResources`, `ReopenContainerLog`,
    /// …). Give each request a deadline (`tonic::Request::set_timeout`): the channel has none.
    pub fn runtime_service(&self) -> RuntimeServiceClient<Channel> {
        self.runtime.clone()
    }

    /// The generated `ImageService` client on this client's connection (`RemoveImage`,
    /// `ImageFsInfo`, …); see [`CriClient::runtime_service`].
    pub fn image_service(&self) -> ImageServiceClient<Channel> {
        self.image.clone()
    }

    /// One call of `method` with deadline `timeout`: `call` is given a handle on `service`
    /// (one of this client's generated clients, sharing the connection) and the request for
    /// `message`, which carries the deadline as `grpc-timeout`; the answer is awaited at most
    /// `timeout`, and failures are mapped by [`CriError::from_status`].
    async fn call<S, Req, Resp, Fut>(
        &self,
        service: &S,
        method: &'static str,
        timeout: Duration,
        message: Req,
        call: impl FnOnce(S, tonic::Request<Req>) -> Fut,
    ) -> Result<Resp, CriError>
    where
        S: Clone,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let call = call(service.clone(), request(message, timeout));
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(CriError::from_status(
                status,
                method,
                timeout,
                &self.socket_path,
            )),
            Err(_) => Err(CriError::Timeout { method, timeout }),
        }
    }

    // --- RuntimeService -------------------------------------------------------------------

    /// `Version`: the runtime's name and version and the CRI API version it serves (`v1`).
    pub async fn version(&self) -> Result<VersionResponse, CriError> {
        let message = VersionRequest {
            version: "v1".into(),
        };
        rpc!(self.runtime.version, "Version", short, message)
    }

    /// `Status`: the runtime's conditions ([`RUNTIME_READY`], [`NETWORK_READY`]). containerd
    /// reports `NetworkReady=false` until a CNI config is in its conf dir.
    pub async fn status(&self) -> Result<RuntimeStatus, CriError> {
        let message = StatusRequest { verbose: false };
        let response = rpc!(self.runtime.status, "Status", short, message)?;
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
        let message = RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: runtime_handler.to_string(),
        };
        let response = rpc!(self.runtime.run_pod_sandbox, "RunPodSandbox", long, message)?;
        Ok(response.pod_sandbox_id)
    }

    /// `StopPodSandbox`: SIGKILLs every container of the sandbox (no grace: stop containers with
    /// [`CriClient::stop_container`] first for a graceful delete) and tears its network down.
    /// Idempotent.
    pub async fn stop_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        let message = StopPodSandboxRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
        };
        rpc!(
            self.runtime.stop_pod_sandbox,
            "StopPodSandbox",
            long,
            message
        )?;
        Ok(())
    }

    /// `RemovePodSandbox`: removes a sandbox and its containers. Idempotent.
    pub async fn remove_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        let message = RemovePodSandboxRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
        };
        rpc!(
            self.runtime.remove_pod_sandbox,
            "RemovePodSandbox",
            long,
            message
        )?;
        Ok(())
    }

    /// `PodSandboxStatus`: state, IP and metadata of one sandbox; `NotFound` if it does not exist.
    pub async fn pod_sandbox_status(
        &self,
        pod_sandbox_id: &str,
    ) -> Result<PodSandboxStatus, CriError> {
        let method = "PodSandboxStatus";
        let message = PodSandboxStatusRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            verbose: false,
        };
        let response = rpc!(self.runtime.pod_sandbox_status, method, short, message)?;
        response.status.ok_or_else(|| no_status(method))
    }

    /// `ListPodSandbox`: every sandbox (ready or not) that matches `filter`.
    pub async fn list_pod_sandbox(
        &self,
        filter: Option<PodSandboxFilter>,
    ) -> Result<Vec<PodSandbox>, CriError> {
        let message = ListPodSandboxRequest { filter };
        let response = rpc!(
            self.runtime.list_pod_sandbox,
            "ListPodSandbox",
            short,
            message
        )?;
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
        let message = CreateContainerRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let response = rpc!(
            self.runtime.create_container,
            "CreateContainer",
            long,
            message
        )?;
        Ok(response.container_id)
    }

    /// `StartContainer`: starts a created container.
    pub async fn start_container(&self, container_id: &str) -> Result<(), CriError> {
        let message = StartContainerRequest {
            container_id: container_id.to_string(),
        };
        rpc!(
            self.runtime.start_container,
            "StartContainer",
            long,
            message
        )?;
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
        let message = StopContainerRequest {
            container_id: container_id.to_string(),
            timeout: i64::try_from(seconds).unwrap_or(i64::MAX),
        };
        let timeout = grace.saturating_add(self.timeouts.long);
        rpc!(
            self.runtime.stop_container,
            "StopContainer",
            timeout,
            message
        )?;
        Ok(())
    }

    /// `ListContainers`: every container that matches `filter`.
    pub async fn list_containers(
        &self,
        filter: Option<ContainerFilter>,
    ) -> Result<Vec<Container>, CriError> {
        let message = ListContainersRequest { filter };
        let response = rpc!(
            self.runtime.list_containers,
            "ListContainers",
            short,
            message
        )?;
        Ok(response.containers)
    }

    /// `ContainerStatus`: state, exit code, reason and timestamps of one container; `NotFound` if
    /// it does not exist.
    pub async fn container_status(&self, container_id: &str) -> Result<ContainerStatus, CriError> {
        let method = "ContainerStatus";
        let message = ContainerStatusRequest {
            container_id: container_id.to_string(),
            verbose: false,
        };
        let response = rpc!(self.runtime.container_status, method, short, message)?;
        response.status.ok_or_else(|| no_status(method))
    }

    /// `ListContainerStats`: CPU and memory usage of every container that matches `filter`, as
    /// the runtime reads them from the containers' cgroups.
    pub async fn list_container_stats(
        &self,
        filter: Option<ContainerStatsFilter>,
    ) -> Result<Vec<ContainerStats>, CriError> {
        let message = ListContainerStatsRequest { filter };
        let response = rpc!(
            self.runtime.list_container_stats,
            "ListContainerStats",
            short,
            message
        )?;
        Ok(response.stats)
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
        let message = ExecSyncRequest {
            container_id: container_id.to_string(),
            cmd,
            timeout: seconds,
        };
        rpc!(self.runtime.exec_sync, "ExecSync", deadline, message)
    }

    /// `Exec`: prepares an exec session and returns its single-use URL on the runtime's streaming
    /// server (websocket `v4.channel.k8s.io` or SPDY/3.1; containerd 1.6 refuses `v5`).
    pub async fn exec(&self, message: ExecRequest) -> Result<String, CriError> {
        let response = rpc!(self.runtime.exec, "Exec", short, message)?;
        Ok(response.url)
    }

    /// `Attach`: prepares an attach session and returns its single-use streaming URL.
    pub async fn attach(&self, message: AttachRequest) -> Result<String, CriError> {
        let response = rpc!(self.runtime.attach, "Attach", short, message)?;
        Ok(response.url)
    }

    /// `PortForward`: prepares a port-forward session into the sandbox's network namespace and
    /// returns its single-use streaming URL.
    pub async fn port_forward(
        &self,
        pod_sandbox_id: &str,
        ports: Vec<i32>,
    ) -> Result<String, CriError> {
        let message = PortForwardRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            port: ports,
        };
        let response = rpc!(self.runtime.port_forward, "PortForward", short, message)?;
        Ok(response.url)
    }

    // --- ImageService ---------------------------------------------------------------------

    /// `ListImages`: the images present, optionally only those matching `filter`.
    pub async fn list_images(&self, filter: Option<ImageFilter>) -> Result<Vec<Image>, CriError> {
        let message = ListImagesRequest { filter };
        let response = rpc!(self.image.list_images, "ListImages", short, message)?;
        Ok(response.images)
    }

    /// `RemoveImage`: removes `image` (a name or ID); removing an absent image succeeds.
    pub async fn remove_image(&self, image: &str) -> Result<(), CriError> {
        let message = RemoveImageRequest {
            image: Some(image_spec(image)),
        };
        rpc!(self.image.remove_image, "RemoveImage", short, message)?;
        Ok(())
    }

    /// `ImageStatus`: the image if it is present, `None` if not (absence is not an error).
    pub async fn image_status(&self, image: &str) -> Result<Option<Image>, CriError> {
        let message = ImageStatusRequest {
            image: Some(image_spec(image)),
            verbose: false,
        };
        let response = rpc!(self.image.image_status, "ImageStatus", short, message)?;
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
        let message = PullImageRequest {
            image: Some(image_spec(image)),
            auth,
            sandbox_config,
        };
        let response = rpc!(self.image.pull_image, "PullImage", long, message)?;
        Ok(response.image_ref)
    }
}

/// The error of a `*Status` call whose answer lacks the status it exists to carry.
fn no_status(method: &'static str) -> CriError {
    CriError::Protocol {
        method,
        detail: "the response has no status".into(),
    }
}

fn image_spec(image: &str) -> ImageSpec {
    ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

/// Why [`CriClient::connect`] failed: dialling the socket ([`CriError::Connect`]) or setting up
/// HTTP/2 on it ([`CriError::Handshake`]).
fn connect_error(socket_path: &Path, error: tonic::transport::Error) -> CriError {
    use std::error::Error as _;
    let mut cause = error.source();
    while let Some(inner) = cause {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            return CriError::Connect {
                path: socket_path.to_path_buf(),
                source: std::io::Error::new(io.kind(), io.to_string()),
            };
        }
        cause = inner.source();
    }
    CriError::Handshake {
        path: socket_path.to_path_buf(),
        source: error,
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use futures::stream;
    use http::header::{CONTENT_TYPE, TE};
    use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::{Frame, Incoming};
    use hyper::service::service_fn;
    use hyper_util::rt::TokioExecutor;
    use prost::Message;
    use tokio::net::UnixListener;

    use super::*;

    /// One length-prefixed gRPC message (grpc/grpc `doc/PROTOCOL-HTTP2.md`): flag 0
    /// (uncompressed), big-endian length, the message.
    fn frame(message: &impl Message) -> Bytes {
        let encoded = message.encode_to_vec();
        let length = u32::try_from(encoded.len()).expect("a small test message");
        let mut frame = vec![0];
        frame.extend_from_slice(&length.to_be_bytes());
        frame.extend_from_slice(&encoded);
        Bytes::from(frame)
    }

    /// The message of a one-message request body.
    fn unframe(body: &[u8]) -> &[u8] {
        body.get(5..).unwrap_or_default()
    }

    type TestBody = StreamBody<stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

    fn grpc_response(message: &impl Message) -> Response<TestBody> {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let frames = vec![
            Ok(Frame::data(frame(message))),
            Ok(Frame::trailers(trailers)),
        ];
        Response::builder()
            .header(CONTENT_TYPE, "application/grpc")
            .body(StreamBody::new(stream::iter(frames)))
            .expect("valid response")
    }

    /// A stand-in CRI server: `Version` answers, `ContainerStatus` echoes the requested id,
    /// `ListContainers` answers with 5 MiB of containers, `StartContainer` never answers, and
    /// every other method fails trailers-only with `NotFound` and a percent-encoded message.
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
            "/runtime.v1.RuntimeService/Version" => grpc_response(&VersionResponse {
                runtime_name: "fake".into(),
                runtime_api_version: "v1".into(),
                ..Default::default()
            }),
            "/runtime.v1.RuntimeService/ContainerStatus" => {
                let request = ContainerStatusRequest::decode(unframe(&body)).unwrap_or_default();
                let status = ContainerStatus {
                    id: request.container_id,
                    state: ContainerState::ContainerRunning as i32,
                    ..Default::default()
                };
                grpc_response(&ContainerStatusResponse {
                    status: Some(status),
                    ..Default::default()
                })
            }
            "/runtime.v1.RuntimeService/ListContainers" => {
                let container = Container {
                    id: "x".repeat(1024),
                    ..Default::default()
                };
                grpc_response(&ListContainersResponse {
                    containers: vec![container; 5 * 1024],
                })
            }
            "/runtime.v1.RuntimeService/StartContainer" => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                grpc_response(&StartContainerResponse {})
            }
            _ => Response::builder()
                .header(CONTENT_TYPE, "application/grpc")
                .header("grpc-status", "5")
                .header("grpc-message", "sandbox%20%22x%22%20not%20found")
                .body(StreamBody::new(stream::iter(Vec::new())))
                .expect("valid response"),
        })
    }

    /// Serves [`fake_runtime`] on `listener`; counts accepted connections.
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

    #[test]
    fn codes_are_spelled_as_grpc_go_spells_them() {
        let error = CriError::Status {
            code: tonic::Code::Cancelled.into(),
            message: "stop".into(),
        };
        assert_eq!(error.to_string(), "rpc error: code = Canceled desc = stop");
        assert_eq!(
            GrpcCode::from(tonic::Code::FailedPrecondition).to_string(),
            "FailedPrecondition"
        );
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

    #[tokio::test]
    async fn responses_up_to_sixteen_mebibytes_are_accepted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("cri.sock");
        let server = serve(
            UnixListener::bind(&socket).expect("bind"),
            Arc::new(AtomicUsize::new(0)),
        );
        let client = CriClient::connect(&socket).await.expect("connects");
        // About 5 MiB: above tonic's default limit of 4 MiB, below containerd's 16 MiB.
        let containers = client.list_containers(None).await.expect("containers");
        assert_eq!(containers.len(), 5 * 1024);
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
    async fn a_lazy_client_dials_on_its_first_call() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("cri.sock");
        let client = CriClient::lazy(&socket);
        let error = client.version().await.expect_err("nothing listens yet");
        assert!(matches!(error, CriError::Connect { .. }), "{error}");
        assert_eq!(error.code(), GrpcCode::Unavailable);

        let connections = Arc::new(AtomicUsize::new(0));
        let server = serve(
            UnixListener::bind(&socket).expect("bind"),
            connections.clone(),
        );
        client
            .version()
            .await
            .expect("version once the runtime is up");
        assert_eq!(connections.load(Ordering::SeqCst), 1);
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
