//! The pod subresources a node agent serves — `log`, `exec`, `attach`, `portforward` — proxied to
//! the agent of the pod's node, as kube-apiserver proxies them to the kubelet.
//!
//! What mirrors upstream, and where it comes from:
//! - options: query parameters decode as upstream's parameter codec does (`k8s.io/apimachinery/
//!   pkg/runtime/conversion.go`: a boolean present with any value but `0`/`false` is true, an
//!   integer that does not parse is a 400 carrying `strconv.ParseInt`'s message); log options are
//!   then validated by `ValidatePodLogOptions` (`pkg/apis/core/validation`), a 422 on
//!   `PodLogOptions` (`pkg/registry/core/pod/rest/log.go`);
//! - the container (`validateContainer` in `pkg/registry/core/pod/strategy.go`): omitted, it is the
//!   pod's only container; otherwise it must name an init, regular or ephemeral container;
//! - the location (`LogLocation`, `streamLocation`, `PortForwardLocation`, same file): a pod
//!   without a node has empty logs (`204 No Content`, from `LocationStreamer` with no location)
//!   and cannot be exec'd, attached or port-forwarded (400); the node must exist (its `NotFound`
//!   passes through) and report an address (`GetPreferredNodeAddress` in `pkg/util/node`, via
//!   `NodeConnectionInfoGetter` in `pkg/kubelet/client`);
//! - streaming (`UpgradeAwareHandler`, `k8s.io/apimachinery/pkg/util/proxy/upgradeaware.go`):
//!   exec, attach and port-forward must be upgrade requests; the upgrade is forwarded as it is and
//!   the connections spliced by [`tandem_netproxy`], so websocket and SPDY both work end to end;
//!   an agent's refusal (`>= 400`) goes back to the client unchanged, which is what lets kubectl
//!   fall back from websocket to SPDY; an agent that cannot be dialled is a 500
//!   `error dialing backend: …`.
//!
//! The agent is reached over HTTPS on the node's `InternalIP` (else `Hostname`) and
//! `status.daemonEndpoints.kubeletEndpoint.Port`, as the API server's own user
//! `kube-apiserver-kubelet-client`, without verifying the agent's serving certificate (see
//! [`kubelet_client`]; upstream's default without `--kubelet-certificate-authority`). Where
//! tandem's agent contract differs from the kubelet's, the contract wins: exec and attach stream
//! flags go to the agent as `stdin=true`… rather than the kubelet's `input=1`…; port-forward's
//! query passes unchanged. The client's `Authorization` header is not forwarded (upstream's
//! authentication filter removes it once the request is authenticated).
//!
//! One addition: upstream never checks that an exec names a command (the runtime refuses an empty
//! one); here an exec without `command` is a 400 at once, with kubectl's wording.

use std::convert::Infallible;
use std::error::Error as StdError;
use std::num::IntErrorKind;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, Limited, StreamBody};
use hyper::body::Incoming;
use serde_json::{Value, json};
use tandem_core::field::{FieldError, go_quote};
use tandem_netproxy::{ProxyError, is_upgrade_request};

use crate::error::{ApiError, ApiResult};
use crate::request::{ResourceRequest, percent_decode};
use crate::state::State;

pub mod kubelet_client;
pub mod proxy;

/// The response body type of the server.
pub type ProxyBody = UnsyncBoxBody<Bytes, Infallible>;

/// The port used when a node reports none: upstream's `--kubelet-port` default.
pub const DEFAULT_KUBELET_PORT: u16 = 10250;

/// How much of an agent's error body is read to turn it into a `Status` (upstream's
/// `maxReadLength` in `registry/generic/rest/response_checker.go`).
const MAX_ERROR_BODY: usize = 50_000;

/// Node address types tried in order (upstream's `--kubelet-preferred-address-types`, narrowed
/// to what tandem's agent reports).
const PREFERRED_ADDRESS_TYPES: [&str; 2] = ["InternalIP", "Hostname"];

/// kubectl's message for an exec without a command (`kubectl/pkg/cmd/exec/exec.go`).
const EXEC_NEEDS_COMMAND: &str = "you must specify at least one command for the container";

/// A pod subresource served by the pod's node agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// `pods/log`: GET, streamed text.
    Log,
    /// `pods/exec`: GET or POST, upgraded.
    Exec,
    /// `pods/attach`: GET or POST, upgraded.
    Attach,
    /// `pods/portforward`: GET or POST, upgraded.
    PortForward,
}

/// A request for one of the agent's subresources of one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeRequest<'a> {
    pub subresource: Subresource,
    pub namespace: &'a str,
    pub pod: &'a str,
}

impl<'a> NodeRequest<'a> {
    /// The agent subresource a parsed request asks for, if it asks for one
    /// (`/api/v1/namespaces/{ns}/pods/{name}/{log|exec|attach|portforward}`).
    pub fn of(rr: &'a ResourceRequest) -> Option<NodeRequest<'a>> {
        if !rr.group.is_empty() || rr.version != "v1" || rr.resource != "pods" {
            return None;
        }
        let subresource = match rr.subresource.as_deref()? {
            "log" => Subresource::Log,
            "exec" => Subresource::Exec,
            "attach" => Subresource::Attach,
            "portforward" => Subresource::PortForward,
            _ => return None,
        };
        Some(NodeRequest {
            subresource,
            namespace: rr.namespace.as_deref()?,
            pod: rr.name.as_deref()?,
        })
    }
}

/// Serves one agent subresource request. `req` must be the request as hyper's server handed it
/// over (its body untouched, its upgrade still pending) on a connection served with upgrades.
pub async fn serve(
    state: &State,
    target: NodeRequest<'_>,
    req: Request<Incoming>,
) -> ApiResult<Response<ProxyBody>> {
    match target.subresource {
        Subresource::Log => log(state, target, req).await,
        _ => stream(state, target, req).await,
    }
}

/// `pods/log`: upstream's `LogREST.Get` with a `LocationStreamer`.
async fn log(
    state: &State,
    target: NodeRequest<'_>,
    req: Request<Incoming>,
) -> ApiResult<Response<ProxyBody>> {
    if req.method() != Method::GET {
        return Err(method_not_allowed());
    }
    let params = Params::parse(req.uri().query());
    let opts = LogOptions::parse(&params)?;
    opts.validate(target.pod)?;
    let pod = get_pod(state, target).await?;
    let container = resolve_container(&pod, target.pod, opts.container.as_deref())?;
    let Some(node) = node_name(&pod) else {
        // No node, no logs yet: upstream's streamer has no location and answers 204.
        let mut resp = Response::new(empty());
        *resp.status_mut() = StatusCode::NO_CONTENT;
        return Ok(resp);
    };
    let agent = agent_address(state, node).await?;
    let url = agent.url(
        &format!(
            "/containerLogs/{}/{}/{}",
            escape_segment(target.namespace),
            escape_segment(target.pod),
            escape_segment(&container)
        ),
        &opts.agent_query(),
    );
    let request = Request::get("/")
        .body(Empty::<Bytes>::new())
        .map_err(|e| ApiError::internal(format!("cannot build the agent request: {e}")))?;
    let resp = state
        .kubelet_client
        .forward(request, &url)
        .await
        .map_err(|e| unknown_error(format!("Get {}: {}", go_quote(&url), error_chain(&e))))?;
    if !(200..=206).contains(&resp.status().as_u16()) {
        return log_error(resp, target.pod).await;
    }
    let mut out = Response::new(stream_body(resp.into_body()));
    out.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(out)
}

/// `pods/exec`, `pods/attach`, `pods/portforward`: upstream's `Connect` with an
/// `UpgradeAwareHandler` that requires an upgrade.
async fn stream(
    state: &State,
    target: NodeRequest<'_>,
    mut req: Request<Incoming>,
) -> ApiResult<Response<ProxyBody>> {
    if !matches!(*req.method(), Method::GET | Method::POST) {
        return Err(method_not_allowed());
    }
    let params = Params::parse(req.uri().query());
    let (ns, name) = (escape_segment(target.namespace), escape_segment(target.pod));
    let (agent, path, query) = match target.subresource {
        Subresource::Exec | Subresource::Attach => {
            let exec = target.subresource == Subresource::Exec;
            let opts = StreamOptions::parse(&params, exec)?;
            if exec && opts.command.is_empty() {
                return Err(ApiError::bad_request(EXEC_NEEDS_COMMAND));
            }
            let pod = get_pod(state, target).await?;
            let container = resolve_container(&pod, target.pod, opts.container.as_deref())?;
            let agent = agent_address(state, scheduled_node(&pod, target.pod)?).await?;
            let verb = if exec { "exec" } else { "attach" };
            let path = format!("/{verb}/{ns}/{name}/{}", escape_segment(&container));
            (agent, path, opts.agent_query())
        }
        // `Log` never gets here (`serve` sends it to `log`); it is matched to stay exhaustive.
        Subresource::PortForward | Subresource::Log => {
            let query = port_forward_query(&params)?;
            let pod = get_pod(state, target).await?;
            let agent = agent_address(state, scheduled_node(&pod, target.pod)?).await?;
            (agent, format!("/portForward/{ns}/{name}"), query)
        }
    };
    if !is_upgrade_request(req.headers()) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    req.headers_mut().remove(header::AUTHORIZATION);
    let url = agent.url(&path, &query);
    let resp = state
        .kubelet_client
        .forward(req, &url)
        .await
        .map_err(|e| dial_error(&e))?;
    let status = resp.status();
    if status == StatusCode::SWITCHING_PROTOCOLS {
        // The splice is running; the 101 goes back with the agent's headers.
        return Ok(resp.map(|_| empty()));
    }
    if status.as_u16() >= 400 {
        // The agent's refusal, echoed as upstream echoes the backend's response.
        return Ok(resp.map(stream_body));
    }
    Err(unknown_error(format!(
        "invalid upgrade response: status code {}",
        status.as_u16()
    )))
}

/// The agent's query for `pods/portforward`: the API's `ports` (repeated, or one value with
/// commas, as upstream's `Convert_Slice_string_To_Slice_int32` reads it) become the kubelet's one
/// `port=80,443` parameter (upstream `streamParams` for `PodPortForwardOptions`). SPDY clients
/// name their ports in stream headers instead and send none.
fn port_forward_query(params: &Params) -> ApiResult<String> {
    let mut ports = Vec::new();
    for value in params.all("ports") {
        for part in value.split(',') {
            let port: i32 = part.trim().parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "strconv.ParseInt: parsing {:?}: invalid syntax",
                    part.trim()
                ))
            })?;
            ports.push(port.to_string());
        }
    }
    Ok(if ports.is_empty() {
        String::new()
    } else {
        format!("port={}", ports.join(","))
    })
}

/// The error of an upgrade that never reached the agent's answer.
fn dial_error(e: &ProxyError) -> ApiError {
    if e.is_dial() {
        unknown_error(format!("error dialing backend: {}", error_chain(e)))
    } else {
        unknown_error(error_chain(e))
    }
}

/// An agent's failure to serve logs. A JSON `Status` is passed through with its code; any other
/// body becomes a `Status` as upstream's `GenericHttpResponseChecker` builds it.
async fn log_error(resp: Response<Incoming>, pod: &str) -> ApiResult<Response<ProxyBody>> {
    let (parts, body) = resp.into_parts();
    let body = match Limited::new(body, MAX_ERROR_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Err(internal_error(&e.to_string())),
    };
    if is_status(&body) {
        let mut out = Response::new(full(body));
        *out.status_mut() = parts.status;
        out.headers_mut().insert(
            header::CONTENT_TYPE,
            parts
                .headers
                .get(header::CONTENT_TYPE)
                .cloned()
                .unwrap_or(HeaderValue::from_static("application/json")),
        );
        return Ok(out);
    }
    let text = String::from_utf8_lossy(&body);
    Err(match parts.status.as_u16() {
        500 => internal_error(&text),
        400 => ApiError::bad_request(text),
        code => generic_server_response(code, &text, pod),
    })
}

/// Whether a body is a JSON `metav1.Status`.
fn is_status(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .ok()
        .is_some_and(|v| v.get("kind").and_then(Value::as_str) == Some("Status"))
}

/// Upstream's `errors.NewInternalError`.
fn internal_error(message: &str) -> ApiError {
    ApiError {
        details: Some(json!({"causes": [{"message": message}]})),
        ..ApiError::internal(format!("Internal error occurred: {message}"))
    }
}

/// What upstream answers for an error that is not a `Status`: a 500 with no reason
/// (`ErrorToAPIStatus` in `apiserver/pkg/endpoints/handlers/responsewriters/status.go`).
fn unknown_error(message: String) -> ApiError {
    ApiError::new(500, "", message)
}

/// Upstream's `errors.NewGenericServerResponse(code, "", pods/log, name, body, 0, false)`.
fn generic_server_response(code: u16, body: &str, pod: &str) -> ApiError {
    let (reason, message) = match code {
        409 => ("Conflict", "the server reported a conflict".to_string()),
        404 => (
            "NotFound",
            "the server could not find the requested resource".to_string(),
        ),
        400 => (
            "BadRequest",
            "the server rejected our request for an unknown reason".to_string(),
        ),
        401 => (
            "Unauthorized",
            "the server has asked for the client to provide credentials".to_string(),
        ),
        403 => ("Forbidden", body.to_string()),
        405 => (
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource".to_string(),
        ),
        422 => (
            "Invalid",
            "the server rejected our request due to an error in our request".to_string(),
        ),
        504 => (
            "Timeout",
            "the server was unable to return a response in the time allotted, but may still be processing the request".to_string(),
        ),
        429 => (
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later"
                .to_string(),
        ),
        code if code >= 500 => (
            "InternalError",
            format!(
                "an error on the server ({}) has prevented the request from succeeding",
                go_quote(body)
            ),
        ),
        code => (
            "",
            format!(
                "the server responded with the status code {code} but did not return more information"
            ),
        ),
    };
    ApiError {
        details: Some(json!({"kind": "pods/log", "name": pod})),
        ..ApiError::new(code, reason, format!("{message} ( pods/log {pod})"))
    }
}

fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed("the server does not allow this method on the requested resource")
}

async fn get_pod(state: &State, target: NodeRequest<'_>) -> ApiResult<Value> {
    let rt = state.resource("", "v1", "pods")?;
    state.get(&rt, Some(target.namespace), target.pod).await
}

fn node_name(pod: &Value) -> Option<&str> {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
}

/// The pod's node, which exec, attach and port-forward require (upstream's `streamLocation`).
fn scheduled_node<'p>(pod: &'p Value, name: &str) -> ApiResult<&'p str> {
    node_name(pod)
        .ok_or_else(|| ApiError::bad_request(format!("pod {name} does not have a host assigned")))
}

/// The container a request is for (upstream's `validateContainer`): the named one if the pod has
/// it among its init, regular and ephemeral containers; the only regular container if none is
/// named.
fn resolve_container(pod: &Value, name: &str, requested: Option<&str>) -> ApiResult<String> {
    let names = |list: &str| -> Vec<&str> {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c.get("name").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default()
    };
    let all = || -> Vec<&str> {
        ["initContainers", "containers", "ephemeralContainers"]
            .iter()
            .flat_map(|list| names(list))
            .collect()
    };
    match requested {
        Some(container) if all().contains(&container) => Ok(container.to_string()),
        Some(container) => Err(ApiError::bad_request(format!(
            "container {container} is not valid for pod {name}"
        ))),
        None => match names("containers").as_slice() {
            [only] => Ok(only.to_string()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                all().join(" ")
            ))),
        },
    }
}

/// Where a node's agent listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentAddress {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl AgentAddress {
    pub(crate) fn url(&self, path: &str, query: &str) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if query.is_empty() {
            format!("https://{host}:{}{path}", self.port)
        } else {
            format!("https://{host}:{}{path}?{query}", self.port)
        }
    }
}

/// The agent address of a node: upstream's `NodeConnectionInfoGetter.GetConnectionInfo`.
async fn agent_address(state: &State, node: &str) -> ApiResult<AgentAddress> {
    let rt = state.resource("", "v1", "nodes")?;
    let node = state.get(&rt, None, node).await?;
    node_agent_address(&node)
}

pub(crate) fn node_agent_address(node: &Value) -> ApiResult<AgentAddress> {
    let addresses: Vec<(&str, &str)> = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|a| {
                    let field = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or_default();
                    (field("type"), field("address"))
                })
                .collect()
        })
        .unwrap_or_default();
    let host = PREFERRED_ADDRESS_TYPES
        .iter()
        .find_map(|wanted| {
            addresses
                .iter()
                .find(|(kind, address)| kind == wanted && !address.is_empty())
        })
        .map(|(_, address)| address.to_string())
        .ok_or_else(|| {
            // Go's `%v` of `[]NodeAddress`: `[{InternalIP 10.0.0.1} {Hostname n1}]`.
            let known: Vec<String> = addresses
                .iter()
                .map(|(kind, address)| format!("{{{kind} {address}}}"))
                .collect();
            unknown_error(format!(
                "no preferred addresses found; known addresses: [{}]",
                known.join(" ")
            ))
        })?;
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_i64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or(DEFAULT_KUBELET_PORT);
    Ok(AgentAddress { host, port })
}

/// Query parameters in order, decoded; repeated keys kept (exec's `command`).
#[derive(Debug, Default)]
struct Params(Vec<(String, String)>);

/// The options object admission sees for a CONNECT of an agent subresource
/// (`PodExecOptions`, `PodAttachOptions`, `PodPortForwardOptions`), read from the query as
/// upstream's parameter codec reads it; `None` for `log`, which is a GET.
pub(crate) fn connect_options(sub: Subresource, query: Option<&str>) -> Option<Value> {
    let params = Params::parse(query);
    let flag = |k: &str| params.first(k).is_some_and(|v| v == "true" || v == "1");
    let (kind, mut body) = match sub {
        Subresource::Log => return None,
        Subresource::Exec | Subresource::Attach => {
            let mut o = serde_json::json!({
                "stdin": flag("stdin"),
                "stdout": flag("stdout"),
                "stderr": flag("stderr"),
                "tty": flag("tty"),
            });
            if let Some(c) = params.string("container") {
                o["container"] = serde_json::json!(c);
            }
            if sub == Subresource::Exec {
                o["command"] = serde_json::json!(params.all("command").collect::<Vec<_>>());
                ("PodExecOptions", o)
            } else {
                ("PodAttachOptions", o)
            }
        }
        Subresource::PortForward => {
            let ports: Vec<u64> = params
                .all("ports")
                .flat_map(|v| v.split(','))
                .filter_map(|p| p.trim().parse().ok())
                .collect();
            ("PodPortForwardOptions", serde_json::json!({"ports": ports}))
        }
    };
    body["kind"] = serde_json::json!(kind);
    body["apiVersion"] = serde_json::json!("v1");
    Some(body)
}

impl Params {
    fn parse(raw: Option<&str>) -> Params {
        Params(
            raw.unwrap_or_default()
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    (
                        percent_decode(&k.replace('+', " ")),
                        percent_decode(&v.replace('+', " ")),
                    )
                })
                .collect(),
        )
    }

    /// The first value of `key`, as upstream's conversions read `values[0]`.
    fn first(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn all<'s>(&'s self, key: &'s str) -> impl Iterator<Item = &'s str> + 's {
        self.0
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A string parameter; empty counts as absent.
    fn string(&self, key: &str) -> Option<String> {
        self.first(key)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    }

    /// Upstream's `Convert_Slice_string_To_bool`: present and neither `0` nor `false` (any case).
    fn bool(&self, key: &str) -> bool {
        self.first(key)
            .is_some_and(|v| !(v == "0" || v.eq_ignore_ascii_case("false")))
    }

    /// Upstream's `Convert_Slice_string_To_Pointer_int64`, with `strconv.ParseInt`'s message.
    fn int(&self, key: &str) -> ApiResult<Option<i64>> {
        let Some(v) = self.first(key) else {
            return Ok(None);
        };
        v.parse::<i64>().map(Some).map_err(|e| {
            let why = match e.kind() {
                IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => "value out of range",
                _ => "invalid syntax",
            };
            ApiError::bad_request(format!("strconv.ParseInt: parsing {}: {why}", go_quote(v)))
        })
    }
}

/// `PodLogOptions` as the API server reads them from the query.
#[derive(Debug, Default, PartialEq)]
struct LogOptions {
    container: Option<String>,
    follow: bool,
    previous: bool,
    timestamps: bool,
    since_seconds: Option<i64>,
    since_time: Option<String>,
    tail_lines: Option<i64>,
    limit_bytes: Option<i64>,
}

impl LogOptions {
    fn parse(params: &Params) -> ApiResult<LogOptions> {
        let since_time = params.string("sinceTime");
        if let Some(t) = &since_time
            && !is_rfc3339(t)
        {
            return Err(ApiError::bad_request(format!(
                "parsing time {} as \"2006-01-02T15:04:05Z07:00\": cannot parse {} as RFC 3339",
                go_quote(t),
                go_quote(t)
            )));
        }
        Ok(LogOptions {
            container: params.string("container"),
            follow: params.bool("follow"),
            previous: params.bool("previous"),
            timestamps: params.bool("timestamps"),
            since_seconds: params.int("sinceSeconds")?,
            since_time,
            tail_lines: params.int("tailLines")?,
            limit_bytes: params.int("limitBytes")?,
        })
    }

    /// Upstream's `ValidatePodLogOptions`, as a 422 on `PodLogOptions` named after the pod.
    fn validate(&self, pod: &str) -> ApiResult<()> {
        let mut errors = Vec::new();
        if let Some(n) = self.tail_lines.filter(|n| *n < 0) {
            errors.push(FieldError::invalid(
                "tailLines",
                &json!(n),
                "must be greater than or equal to 0",
            ));
        }
        if let Some(n) = self.limit_bytes.filter(|n| *n < 1) {
            errors.push(FieldError::invalid(
                "limitBytes",
                &json!(n),
                "must be greater than 0",
            ));
        }
        match (self.since_seconds, &self.since_time) {
            (Some(_), Some(_)) => errors.push(FieldError::forbidden(
                "",
                "at most one of `sinceTime` or `sinceSeconds` may be specified",
            )),
            (Some(n), None) if n < 1 => errors.push(FieldError::invalid(
                "sinceSeconds",
                &json!(n),
                "must be greater than 0",
            )),
            _ => {}
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(invalid_log_options(pod, &errors))
        }
    }

    /// The agent's query: the options set, keys sorted as Go's `url.Values.Encode` writes them.
    fn agent_query(&self) -> String {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        if self.follow {
            pairs.push(("follow", "true".into()));
        }
        if let Some(n) = self.limit_bytes {
            pairs.push(("limitBytes", n.to_string()));
        }
        if self.previous {
            pairs.push(("previous", "true".into()));
        }
        if let Some(n) = self.since_seconds {
            pairs.push(("sinceSeconds", n.to_string()));
        }
        if let Some(t) = &self.since_time {
            pairs.push(("sinceTime", t.clone()));
        }
        if let Some(n) = self.tail_lines {
            pairs.push(("tailLines", n.to_string()));
        }
        if self.timestamps {
            pairs.push(("timestamps", "true".into()));
        }
        encode_query(pairs.iter().map(|(k, v)| (*k, v.as_str())))
    }
}

/// Upstream's `errors.NewInvalid(api.Kind("PodLogOptions"), name, errs)`.
fn invalid_log_options(pod: &str, errors: &[FieldError]) -> ApiError {
    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let message = match list.as_slice() {
        [one] => format!("PodLogOptions {} is invalid: {one}", go_quote(pod)),
        _ => format!(
            "PodLogOptions {} is invalid: [{}]",
            go_quote(pod),
            list.join(", ")
        ),
    };
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| {
            let mut cause = json!({"reason": e.kind.reason(), "message": e.cause_message()});
            if !e.field.is_empty() {
                cause["field"] = json!(e.field);
            }
            cause
        })
        .collect();
    ApiError {
        details: Some(json!({"name": pod, "kind": "PodLogOptions", "causes": causes})),
        ..ApiError::new(422, "Invalid", message)
    }
}

/// `PodExecOptions` / `PodAttachOptions` as the API server reads them from the query.
#[derive(Debug, Default, PartialEq)]
struct StreamOptions {
    container: Option<String>,
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

impl StreamOptions {
    fn parse(params: &Params, exec: bool) -> ApiResult<StreamOptions> {
        Ok(StreamOptions {
            container: params.string("container"),
            command: if exec {
                params.all("command").map(str::to_string).collect()
            } else {
                Vec::new()
            },
            stdin: params.bool("stdin"),
            stdout: params.bool("stdout"),
            stderr: params.bool("stderr"),
            tty: params.bool("tty"),
        })
    }

    /// The agent's query: each `command` in order, then the stream flags that are set.
    fn agent_query(&self) -> String {
        let flags = [
            ("stdin", self.stdin),
            ("stdout", self.stdout),
            ("stderr", self.stderr),
            ("tty", self.tty),
        ];
        encode_query(
            self.command.iter().map(|c| ("command", c.as_str())).chain(
                flags
                    .into_iter()
                    .filter(|(_, on)| *on)
                    .map(|(k, _)| (k, "true")),
            ),
        )
    }
}

/// `key=value&…` with Go's `url.QueryEscape` on both sides.
fn encode_query<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    pairs
        .map(|(k, v)| format!("{}={}", query_escape(k), query_escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

/// Go's `url.QueryEscape`: unreserved bytes kept, space as `+`, everything else `%XX`.
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        match b {
            b' ' => out.push('+'),
            b if is_unreserved(b) => out.push(char::from(b)),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// One path segment with everything but unreserved bytes percent-encoded.
fn escape_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if is_unreserved(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether `s` is an RFC 3339 date-time as Go's `time.RFC3339` layout parses it:
/// `2006-01-02T15:04:05[.fraction](Z|±07:00)`.
fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<u32> {
        let digits = b.get(from..from + len)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let date_time = num(0, 4).is_some()
        && at(4, b'-')
        && num(5, 2).is_some_and(|m| (1..=12).contains(&m))
        && at(7, b'-')
        && num(8, 2).is_some_and(|d| (1..=31).contains(&d))
        && at(10, b'T')
        && num(11, 2).is_some_and(|h| h < 24)
        && at(13, b':')
        && num(14, 2).is_some_and(|m| m < 60)
        && at(16, b':')
        && num(17, 2).is_some_and(|s| s < 60);
    if !date_time {
        return false;
    }
    let mut i = 19;
    if at(i, b'.') {
        let digits = b
            .get(i + 1..)
            .map(|rest| rest.iter().take_while(|c| c.is_ascii_digit()).count())
            .unwrap_or(0);
        if digits == 0 {
            return false;
        }
        i += 1 + digits;
    }
    match b.get(i) {
        Some(b'Z') => i + 1 == b.len(),
        Some(b'+' | b'-') => {
            num(i + 1, 2).is_some_and(|h| h < 24)
                && at(i + 3, b':')
                && num(i + 4, 2).is_some_and(|m| m < 60)
                && i + 6 == b.len()
        }
        _ => false,
    }
}

/// An error and its sources, joined as Go prints wrapped errors: `outer: inner: cause`.
fn error_chain(e: &dyn StdError) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

pub(crate) fn empty() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

fn full(bytes: Bytes) -> ProxyBody {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// The agent's body, frame by frame as it arrives. An error from the agent ends the body, as
/// upstream's `io.Copy` ends the response when the kubelet's stream fails.
pub(crate) fn stream_body(body: Incoming) -> ProxyBody {
    let frames = futures::stream::unfold(body, |mut body| async move {
        match body.frame().await? {
            Ok(frame) => Some((Ok::<_, Infallible>(frame), body)),
            Err(error) => {
                tracing::debug!(%error, "the node agent's response ended with an error");
                None
            }
        }
    });
    StreamBody::new(frames).boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "web"}, "spec": spec})
    }

    #[test]
    fn the_only_container_is_chosen_when_none_is_named() {
        let p = pod(json!({"initContainers": [{"name": "init"}], "containers": [{"name": "app"}]}));
        assert_eq!(resolve_container(&p, "web", None), Ok("app".to_string()));
        assert_eq!(
            resolve_container(&p, "web", Some("init")),
            Ok("init".to_string())
        );
    }

    #[test]
    fn several_containers_need_a_name_and_the_message_lists_all_kinds_in_upstream_order() {
        let p = pod(json!({
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "a"}, {"name": "b"}],
            "ephemeralContainers": [{"name": "debug"}],
        }));
        let err = resolve_container(&p, "web", None).expect_err("ambiguous");
        assert_eq!((err.code, err.reason), (400, "BadRequest"));
        assert_eq!(
            err.message,
            "a container name must be specified for pod web, choose one of: [init a b debug]"
        );
        let err = resolve_container(&p, "web", Some("nope")).expect_err("unknown");
        assert_eq!(err.message, "container nope is not valid for pod web");
        assert_eq!(
            resolve_container(&p, "web", Some("debug")),
            Ok("debug".to_string())
        );
        let err = resolve_container(&pod(json!({})), "web", None).expect_err("none");
        assert_eq!(
            err.message,
            "a container name must be specified for pod web"
        );
    }

    #[test]
    fn port_forward_ports_become_the_kubelets_port_parameter() {
        let q = |raw: &str| port_forward_query(&Params::parse(Some(raw)));
        assert_eq!(q("ports=8080"), Ok("port=8080".to_string()));
        assert_eq!(
            q("ports=80,443&ports=9090"),
            Ok("port=80,443,9090".to_string())
        );
        assert_eq!(q(""), Ok(String::new()));
        let err = q("ports=http").expect_err("not a number");
        assert_eq!((err.code, err.reason), (400, "BadRequest"));
    }

    #[test]
    fn query_values_decode_like_upstreams_parameter_codec() {
        let p = Params::parse(Some(
            "follow&previous=false&timestamps=0&stdin=True&tailLines=x&limitBytes=99999999999999999999&command=a&command=b+c",
        ));
        assert!(p.bool("follow"));
        assert!(!p.bool("previous"));
        assert!(!p.bool("timestamps"));
        assert!(p.bool("stdin"));
        assert!(!p.bool("absent"));
        assert_eq!(
            p.int("tailLines").expect_err("not a number").message,
            r#"strconv.ParseInt: parsing "x": invalid syntax"#
        );
        assert_eq!(
            p.int("limitBytes").expect_err("too large").message,
            r#"strconv.ParseInt: parsing "99999999999999999999": value out of range"#
        );
        assert_eq!(p.all("command").collect::<Vec<_>>(), ["a", "b c"]);
    }

    #[test]
    fn log_options_are_validated_with_upstreams_messages() {
        let opts = |q: &str| LogOptions::parse(&Params::parse(Some(q))).expect("parses");
        let err = opts("tailLines=-1").validate("web").expect_err("negative");
        assert_eq!((err.code, err.reason), (422, "Invalid"));
        assert_eq!(
            err.message,
            r#"PodLogOptions "web" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"#
        );
        let err = opts("limitBytes=0&sinceSeconds=0")
            .validate("web")
            .expect_err("zero");
        assert_eq!(
            err.message,
            r#"PodLogOptions "web" is invalid: [limitBytes: Invalid value: 0: must be greater than 0, sinceSeconds: Invalid value: 0: must be greater than 0]"#
        );
        let err = opts("sinceSeconds=5&sinceTime=2024-01-02T03:04:05Z")
            .validate("web")
            .expect_err("both");
        assert_eq!(
            err.message,
            "PodLogOptions \"web\" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
        );
        assert!(opts("tailLines=0&limitBytes=1").validate("web").is_ok());
    }

    #[test]
    fn the_agent_log_query_has_upstreams_sorted_keys() {
        let opts = LogOptions::parse(&Params::parse(Some(
            "timestamps=true&tailLines=10&follow=1&sinceTime=2024-01-02T03:04:05%2B02:00&limitBytes=5&container=app&pretty=true",
        )))
        .expect("parses");
        assert_eq!(
            opts.agent_query(),
            "follow=true&limitBytes=5&sinceTime=2024-01-02T03%3A04%3A05%2B02%3A00&tailLines=10&timestamps=true"
        );
        assert_eq!(LogOptions::default().agent_query(), "");
    }

    #[test]
    fn exec_query_keeps_the_command_order_and_normalises_flags() {
        let opts = StreamOptions::parse(
            &Params::parse(Some(
                "command=sh&command=-c&command=echo+hi%26bye&stdin=1&stdout=true&stderr=false&container=app",
            )),
            true,
        )
        .expect("parses");
        assert_eq!(opts.container.as_deref(), Some("app"));
        assert_eq!(
            opts.agent_query(),
            "command=sh&command=-c&command=echo+hi%26bye&stdin=true&stdout=true"
        );
    }

    #[test]
    fn rfc3339_times_are_recognised() {
        for ok in [
            "2024-01-02T03:04:05Z",
            "2024-01-02T03:04:05.123456789Z",
            "2024-01-02T03:04:05+02:00",
            "2024-01-02T03:04:05.5-07:30",
        ] {
            assert!(is_rfc3339(ok), "{ok}");
        }
        for bad in [
            "",
            "yesterday",
            "2024-01-02 03:04:05Z",
            "2024-13-02T03:04:05Z",
            "2024-01-02T03:04:05",
            "2024-01-02T03:04:05.Z",
            "2024-01-02T03:04:05+0200",
            "2024-01-02T03:04:05Zjunk",
            "２０２４-01-02T03:04:05Z",
        ] {
            assert!(!is_rfc3339(bad), "{bad}");
        }
    }

    #[test]
    fn the_agent_address_prefers_internal_ip_then_hostname_and_defaults_the_port() {
        let node = json!({"status": {
            "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.7"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10300}},
        }});
        assert_eq!(
            node_agent_address(&node),
            Ok(AgentAddress {
                host: "10.0.0.7".into(),
                port: 10300
            })
        );
        let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}});
        assert_eq!(
            node_agent_address(&node),
            Ok(AgentAddress {
                host: "n1".into(),
                port: DEFAULT_KUBELET_PORT
            })
        );
        let node = json!({"status": {"addresses": [{"type": "ExternalIP", "address": "1.2.3.4"}]}});
        let err = node_agent_address(&node).expect_err("no preferred address");
        assert_eq!((err.code, err.reason), (500, ""));
        assert_eq!(
            err.message,
            "no preferred addresses found; known addresses: [{ExternalIP 1.2.3.4}]"
        );
        let v6 = AgentAddress {
            host: "fd00::1".into(),
            port: 10250,
        };
        assert_eq!(v6.url("/p", "a=b"), "https://[fd00::1]:10250/p?a=b");
    }

    #[test]
    fn non_status_log_errors_become_upstreams_generic_responses() {
        let err = generic_server_response(404, "nope", "web");
        assert_eq!((err.code, err.reason), (404, "NotFound"));
        assert_eq!(
            err.message,
            "the server could not find the requested resource ( pods/log web)"
        );
        let err = generic_server_response(503, "down", "web");
        assert_eq!(
            err.message,
            r#"an error on the server ("down") has prevented the request from succeeding ( pods/log web)"#
        );
    }
}
