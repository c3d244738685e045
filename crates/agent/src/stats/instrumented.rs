//! A [`Runtime`] that counts the calls the pod workers make to another one, by operation, for
//! `kubelet_runtime_operations_total` and `kubelet_runtime_operations_errors_total`: the
//! kubelet's `instrumentedRuntimeService`/`instrumentedImageManagerService`
//! (`pkg/kubelet/kuberuntime/instrumented_services.go`), which wraps every CRI call the same way
//! and names each by its CRI method in snake case.
//!
//! Only calls that reach the runtime are counted; the trait's synchronous queries answer from the
//! backend's cache (tandem's PLEG) and are not runtime operations. Probes and hooks are not
//! counted either: the kubelet counts their `exec_sync` calls only, and an HTTP probe is no
//! runtime call.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod};

use super::emulated::DeclaredPods;
use super::kubelet::KubeletMetrics;
use crate::runtime::{
    ContainerInfo, ContainerStats, Credential, HookKind, ImageInfo, NodeResources, NodeStats,
    ProbeKind, ProbeResult, PullOutcome, Runtime, RuntimeError, RuntimeStats, SandboxConfig,
    SandboxInfo, StreamRequest,
};

/// `inner` with its operations counted in `metrics`.
pub struct InstrumentedRuntime {
    inner: Arc<dyn Runtime>,
    metrics: Arc<KubeletMetrics>,
}

impl InstrumentedRuntime {
    pub fn new(inner: Arc<dyn Runtime>, metrics: Arc<KubeletMetrics>) -> InstrumentedRuntime {
        InstrumentedRuntime { inner, metrics }
    }

    fn record<T>(
        &self,
        operation: &'static str,
        result: Result<T, RuntimeError>,
    ) -> Result<T, RuntimeError> {
        self.metrics.record_operation(operation, result.is_err());
        result
    }
}

#[async_trait]
impl Runtime for InstrumentedRuntime {
    fn version(&self) -> String {
        self.inner.version()
    }

    fn emulated(&self) -> bool {
        self.inner.emulated()
    }

    async fn run_sandbox(&self, config: &SandboxConfig) -> Result<SandboxInfo, RuntimeError> {
        let r = self.inner.run_sandbox(config).await;
        self.record("run_podsandbox", r)
    }

    async fn remove_sandbox(&self, sandbox_id: &str) -> Result<(), RuntimeError> {
        let r = self.inner.remove_sandbox(sandbox_id).await;
        self.record("remove_podsandbox", r)
    }

    async fn stop_sandbox(&self, sandbox_id: &str) -> Result<(), RuntimeError> {
        let r = self.inner.stop_sandbox(sandbox_id).await;
        self.record("stop_podsandbox", r)
    }

    fn list_sandboxes(&self) -> Vec<SandboxInfo> {
        self.inner.list_sandboxes()
    }

    fn image_status(&self, image: &str) -> Option<ImageInfo> {
        self.inner.image_status(image)
    }

    async fn pull_image(
        &self,
        image: &str,
        auth: Option<&Credential>,
    ) -> Result<PullOutcome, RuntimeError> {
        let r = self.inner.pull_image(image, auth).await;
        self.record("pull_image", r)
    }

    fn list_images(&self) -> Vec<ImageInfo> {
        self.inner.list_images()
    }

    async fn prepare_volumes(&self, pod: &Pod) -> Result<(), RuntimeError> {
        self.inner.prepare_volumes(pod).await
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        pod: &Pod,
        container: &Container,
        attempt: u32,
    ) -> Result<ContainerInfo, RuntimeError> {
        let r = self
            .inner
            .create_container(sandbox_id, pod, container, attempt)
            .await;
        self.record("create_container", r)
    }

    async fn start_container(&self, container_id: &str) -> Result<(), RuntimeError> {
        let r = self.inner.start_container(container_id).await;
        self.record("start_container", r)
    }

    async fn stop_container(
        &self,
        container_id: &str,
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        let r = self.inner.stop_container(container_id, grace).await;
        self.record("stop_container", r)
    }

    fn container_status(&self, container_id: &str) -> Result<ContainerInfo, RuntimeError> {
        self.inner.container_status(container_id)
    }

    fn list_containers(&self, sandbox_id: &str) -> Vec<ContainerInfo> {
        self.inner.list_containers(sandbox_id)
    }

    async fn probe(&self, container_id: &str, kind: ProbeKind) -> ProbeResult {
        self.inner.probe(container_id, kind).await
    }

    fn implicit_probes(&self, container_id: &str) -> Vec<ProbeKind> {
        self.inner.implicit_probes(container_id)
    }

    async fn run_hook(&self, container_id: &str, hook: HookKind) -> Result<(), RuntimeError> {
        self.inner.run_hook(container_id, hook).await
    }

    fn log_path(&self, container_id: &str) -> Result<PathBuf, RuntimeError> {
        self.inner.log_path(container_id)
    }

    async fn exec_url(
        &self,
        container_id: &str,
        req: &StreamRequest,
    ) -> Result<String, RuntimeError> {
        let r = self.inner.exec_url(container_id, req).await;
        self.record("exec", r)
    }

    async fn attach_url(
        &self,
        container_id: &str,
        req: &StreamRequest,
    ) -> Result<String, RuntimeError> {
        let r = self.inner.attach_url(container_id, req).await;
        self.record("attach", r)
    }

    async fn port_forward_url(
        &self,
        sandbox_id: &str,
        ports: &[u16],
    ) -> Result<String, RuntimeError> {
        let r = self.inner.port_forward_url(sandbox_id, ports).await;
        self.record("port_forward", r)
    }

    fn stats(&self) -> RuntimeStats {
        self.inner.stats()
    }

    async fn container_stats(
        &self,
        declared: &DeclaredPods,
    ) -> Result<Vec<ContainerStats>, RuntimeError> {
        let r = self.inner.container_stats(declared).await;
        self.record("list_container_stats", r)
    }

    async fn node_stats(
        &self,
        node: &NodeResources,
        containers: &[ContainerStats],
    ) -> Result<NodeStats, RuntimeError> {
        self.inner.node_stats(node, containers).await
    }
}
