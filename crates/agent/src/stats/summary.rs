//! `/stats/summary`: the kubelet's Summary API (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`,
//! `Summary`), the CPU and memory parts and the image filesystem's use. Field names and units
//! are upstream's: `usageCoreNanoSeconds` is cumulative, `usageNanoCores` the rate over the last
//! interval (absent until there are two samples), memory in bytes, times RFC 3339.
//!
//! As the kubelet's CRI stats provider, pods are those with a ready sandbox, a pod's
//! `startTime` is its sandbox's creation, and a pod's CPU and memory are the sums of its
//! containers'. On an emulated node the figures are the declared ones
//! ([`super::emulated`]); `/metrics/resource` says so (`tandem_resource_metrics_emulated`).

use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{ContainerSnapshot, PodSnapshot, Snapshot};
use crate::clock;

/// `Summary`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub node: NodeSummary,
    pub pods: Vec<PodSummary>,
}

/// `NodeStats`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSummary {
    pub node_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
}

/// `RuntimeStats`: the filesystem of the runtime's images.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
}

/// `FsStats`, the part the runtime reports.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
}

/// `PodReference`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

/// `PodStats`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSummary {
    pub pod_ref: PodReference,
    pub start_time: Time,
    pub containers: Vec<ContainerSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
}

/// `ContainerStats`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSummary {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    pub cpu: CpuStats,
    pub memory: MemoryStats,
}

/// `CPUStats`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: Time,
    /// Nanocores over the last interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// Cumulative core-nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

/// `MemoryStats`, without the page fault counters.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
}

fn container(c: &ContainerSnapshot) -> ContainerSummary {
    let time = clock::time(c.stats.timestamp);
    ContainerSummary {
        name: c.stats.name.clone(),
        start_time: c.stats.started_at.map(clock::time),
        cpu: CpuStats {
            time: time.clone(),
            usage_nano_cores: c.nano_cores,
            usage_core_nano_seconds: Some(c.stats.cpu_core_nanos),
        },
        memory: MemoryStats {
            time,
            available_bytes: None,
            usage_bytes: c.stats.memory_usage_bytes,
            working_set_bytes: Some(c.stats.memory_working_set_bytes),
        },
    }
}

fn pod(p: &PodSnapshot) -> PodSummary {
    let time = p.timestamp().map(clock::time);
    PodSummary {
        pod_ref: PodReference {
            name: p.name.clone(),
            namespace: p.namespace.clone(),
            uid: p.uid.clone(),
        },
        start_time: clock::time(p.start_time),
        containers: p.containers.iter().map(container).collect(),
        cpu: time.clone().map(|time| CpuStats {
            time,
            usage_nano_cores: p.nano_cores(),
            usage_core_nano_seconds: Some(p.cpu_core_nanos()),
        }),
        memory: time.map(|time| MemoryStats {
            time,
            available_bytes: None,
            usage_bytes: p.containers.iter().try_fold(0u64, |s, c| {
                c.stats.memory_usage_bytes.map(|u| s.saturating_add(u))
            }),
            working_set_bytes: Some(p.memory_working_set_bytes()),
        }),
    }
}

impl Summary {
    /// The Summary of a snapshot.
    pub fn from_snapshot(s: &Snapshot) -> Summary {
        let node = s.node.as_ref();
        let time = |t: SystemTime| clock::time(t);
        Summary {
            node: NodeSummary {
                node_name: s.node_name.clone(),
                start_time: node.map(|n| time(n.start_time)),
                cpu: node.map(|n| CpuStats {
                    time: time(n.timestamp),
                    usage_nano_cores: s.node_nano_cores,
                    usage_core_nano_seconds: Some(n.cpu_core_nanos),
                }),
                memory: node.map(|n| MemoryStats {
                    time: time(n.timestamp),
                    available_bytes: n.memory_available_bytes,
                    usage_bytes: n.memory_usage_bytes,
                    working_set_bytes: Some(n.memory_working_set_bytes),
                }),
                runtime: node.map(|n| RuntimeStats {
                    image_fs: Some(FsStats {
                        time: time(n.timestamp),
                        used_bytes: Some(s.image_bytes),
                    }),
                }),
            },
            pods: s.pods.iter().map(pod).collect(),
        }
    }
}
