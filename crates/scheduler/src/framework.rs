//! The scheduling framework: for one pod, run the filters over the nodes (cheap ones first,
//! stopping once enough feasible nodes are found, like upstream's `percentageOfNodesToScore`),
//! score the feasible ones with normalised, weighted plugins, and pick the best. When nothing fits,
//! a [`FitError`] explains why in upstream's words.
//!
//! Mirrors upstream `pkg/scheduler/schedule_one.go` (`schedulePod`, `findNodesThatFitPod`,
//! `numFeasibleNodesToFind`, `prioritizeNodes`, `selectHost`) and the default plugin set and
//! weights of `pkg/scheduler/apis/config/v1/default_plugins.go`. Pure: no I/O.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Pod, Toleration};

use crate::os::{self, Os, OsSource, WindowsBuild};
use crate::plugins::node_affinity::NodeAffinity;
use crate::plugins::node_ports::HostPort;
use crate::plugins::node_resources::Insufficient;
use crate::plugins::volume_binding;
use crate::plugins::{
    image_locality, inter_pod_affinity, node_affinity, node_name, node_ports, node_resources,
    node_unschedulable, os_placement, pod_topology_spread, selector_spread, taint_toleration,
};
use crate::resources::{Resources, pod_non_zero_requests, pod_requests};
use crate::signature::StaticFits;
use crate::snapshot::{NodeInfo, Snapshot, controller_uid};

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// Upstream's `MaxNodeScore`.
pub const MAX_NODE_SCORE: i64 = 100;

/// How bad a rejection is (upstream `framework.Code`): preemption could help an `Unschedulable`
/// node but never an `UnschedulableAndUnresolvable` one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Unschedulable,
    UnschedulableAndUnresolvable,
}

/// Why a filter rejected a node. Cheap to build (filters run for thousands of nodes per pod);
/// the words come from [`Rejection::reasons`] only when a message is needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// A fixed upstream reason.
    Reason(&'static str, Code),
    /// The node's taint at this index is not tolerated.
    UntoleratedTaint(usize),
    /// The node runs another OS than the pod needs.
    WrongOs,
    /// The pod image at this index (of `CycleState::image_builds`) cannot run on the node's build.
    WrongBuild(usize),
    /// Requests that do not fit.
    Insufficient(Insufficient),
    /// The pod's claims rule out every node (VolumeBinding's PreFilter); the words are in
    /// [`CycleState::volumes`].
    VolumePreFilter,
}

impl Rejection {
    /// The upstream code.
    pub fn code(&self) -> Code {
        match self {
            Rejection::Reason(_, c) => *c,
            Rejection::Insufficient(_) => Code::Unschedulable,
            Rejection::UntoleratedTaint(_)
            | Rejection::WrongOs
            | Rejection::WrongBuild(_)
            | Rejection::VolumePreFilter => Code::UnschedulableAndUnresolvable,
        }
    }

    /// The reasons, as the histogram of a [`FitError`] counts them.
    pub fn reasons(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Vec<String> {
        match self {
            Rejection::Reason(r, _) => vec![(*r).to_string()],
            Rejection::UntoleratedTaint(i) => node
                .taints
                .get(*i)
                .map(taint_toleration::reason)
                .into_iter()
                .collect(),
            Rejection::WrongOs => vec![os_placement::os_reason(cs, node)],
            Rejection::WrongBuild(i) => vec![os_placement::build_reason(cs, node, *i)],
            Rejection::Insufficient(ins) => ins.reasons(),
            Rejection::VolumePreFilter => volume_binding::pre_filter_reasons(cs),
        }
    }
}

/// Everything about the pod the plugins read, computed once per scheduling attempt (upstream's
/// PreFilter results in `CycleState`).
#[derive(Debug)]
pub struct CycleState<'a> {
    pub pod: &'a Pod,
    pub namespace: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub node_name: Option<&'a str>,
    pub tolerations: &'a [Toleration],
    pub requests: Resources,
    pub non_zero: (i64, i64),
    pub host_ports: Vec<HostPort>,
    pub node_affinity: NodeAffinity<'a>,
    pub os: Os,
    pub os_source: OsSource,
    /// Images naming a Windows build (only when OS placement is on).
    pub image_builds: Vec<(String, WindowsBuild)>,
    /// Normalised image names of every container, for image locality.
    pub images: Vec<String>,
    pub owner: Option<String>,
    pub inter_pod: Option<inter_pod_affinity::PreState>,
    pub spread: Option<pod_topology_spread::PreState>,
    /// The pod's claims (`None` for a pod without any).
    pub volumes: Option<volume_binding::PreState>,
}

impl<'a> CycleState<'a> {
    /// Runs every PreFilter for `pod` against `snapshot`.
    pub fn new(pod: &'a Pod, snapshot: &Snapshot, os_placement: bool) -> CycleState<'a> {
        let spec = pod.spec.as_ref();
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
        let node_affinity = NodeAffinity::of(spec);
        let (os, os_source) = os::pod_os(pod);
        let images = spec
            .map(|s| {
                s.init_containers
                    .iter()
                    .flatten()
                    .chain(&s.containers)
                    .filter_map(|c| {
                        c.image
                            .as_deref()
                            .map(image_locality::normalized_image_name)
                    })
                    .collect()
            })
            .unwrap_or_default();
        CycleState {
            pod,
            namespace,
            labels,
            node_name: spec.and_then(|s| s.node_name.as_deref()),
            tolerations: spec
                .and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default(),
            requests: pod_requests(pod),
            non_zero: pod_non_zero_requests(pod),
            host_ports: node_ports::host_ports(pod),
            os,
            os_source,
            image_builds: if os_placement {
                os::pod_image_builds(pod)
            } else {
                Vec::new()
            },
            images,
            owner: controller_uid(pod),
            inter_pod: inter_pod_affinity::pre_filter(pod, namespace, labels, snapshot),
            spread: pod_topology_spread::pre_filter(
                pod,
                namespace,
                labels,
                &node_affinity,
                snapshot,
            ),
            node_affinity,
            volumes: volume_binding::pre_filter(pod, namespace, snapshot.volumes()),
        }
    }
}

/// Runs the filters in order, cheapest and most selective first; the first rejection wins (as
/// upstream's `RunFilterPlugins`).
pub fn run_filters(
    cs: &CycleState<'_>,
    node: &NodeInfo,
    os_placement: bool,
) -> Result<(), Rejection> {
    run_node_filters(cs, node, os_placement)?;
    run_placement_filters(cs, node)
}

/// The filters whose answer depends only on the pod's placement constraints and on the node
/// object (labels, taints, cordoning, name): the same for every pod of one
/// [signature](crate::signature) until the node changes.
pub fn run_node_filters(
    cs: &CycleState<'_>,
    node: &NodeInfo,
    os_placement: bool,
) -> Result<(), Rejection> {
    if os_placement {
        os_placement::filter_os(cs, node)?;
        if !cs.image_builds.is_empty() {
            os_placement::filter_build(cs, node)?;
        }
    }
    node_unschedulable::filter(cs, node)?;
    node_name::filter(cs, node)?;
    taint_toleration::filter(cs, node)?;
    node_affinity::filter(cs, node)
}

/// The filters that depend on what is placed on the node: ports, resources, spreading and
/// inter-pod affinity.
pub fn run_placement_filters(cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
    if !cs.host_ports.is_empty() {
        node_ports::filter(cs, node)?;
    }
    node_resources::filter(cs, node)?;
    pod_topology_spread::filter(cs, node)?;
    inter_pod_affinity::filter(cs, node)?;
    if cs.volumes.is_some() {
        volume_binding::filter(cs, node)?;
    }
    Ok(())
}

/// Why a pod fits nowhere: how many nodes there were and how often each reason was given.
/// Displays as upstream's `FitError` with the default preemption's post-filter message appended:
/// the outcome of [`crate::preemption`] once the scheduling loop has run it
/// ([`FitError::post_filter`]), else the summary upstream gives when no node has lower-priority
/// victims (what a framework-only caller such as the benchmark reports).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FitError {
    pub num_all_nodes: usize,
    /// Reason → number of nodes giving it.
    pub reasons: BTreeMap<String, usize>,
    /// Nodes whose rejection preemption could never fix.
    pub unresolvable_nodes: usize,
    /// Nodes whose rejection (resources, ports, anti-affinity, spread) evicting pods might fix.
    pub resolvable_nodes: usize,
    /// `spec.preemptionPolicy: Never`.
    pub preemption_never: bool,
    /// Positions (in [`Snapshot::nodes`] of the snapshot scheduled against) of the nodes whose
    /// rejection was `Unschedulable`: where preemption might help (upstream
    /// `NodesForStatusCode(Unschedulable)`).
    pub potential_nodes: Vec<usize>,
    /// The preemption outcome (upstream's `PostFilterMsg` without its `preemption: ` prefix),
    /// once preemption has run; empty for no message.
    pub post_filter: Option<String>,
}

fn histogram(counts: impl IntoIterator<Item = (String, usize)>) -> String {
    let mut parts: Vec<String> = counts
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| format!("{n} {r}"))
        .collect();
    // Upstream sorts the formatted "<count> <reason>" strings, count included.
    parts.sort();
    parts.join(", ")
}

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.num_all_nodes == 0 {
            // Upstream `ErrNoNodesAvailable`.
            return f.write_str("no nodes available to schedule pods");
        }
        let n = self.num_all_nodes;
        write!(
            f,
            "0/{n} nodes are available: {}.",
            histogram(self.reasons.iter().map(|(r, c)| (r.clone(), *c)))
        )?;
        if let Some(msg) = &self.post_filter {
            if !msg.is_empty() {
                write!(f, " preemption: {msg}")?;
            }
            return Ok(());
        }
        if self.preemption_never {
            return f.write_str(" preemption: not eligible due to preemptionPolicy=Never.");
        }
        let pre = histogram([
            (
                "Preemption is not helpful for scheduling".to_string(),
                self.unresolvable_nodes,
            ),
            (
                "No preemption victims found for incoming pod".to_string(),
                self.resolvable_nodes,
            ),
        ]);
        write!(f, " preemption: 0/{n} nodes are available: {pre}.")
    }
}

impl std::error::Error for FitError {}

/// How ties between equally scored nodes are broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TieBreak {
    /// Uniformly at random among the best (upstream `selectHost`).
    #[default]
    Random,
    /// The first best node in evaluation order (reproducible; for tests).
    FirstInOrder,
}

/// Framework settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameworkOptions {
    /// tandem's OS placement and Windows build compatibility (on by default).
    pub os_placement: bool,
    /// Upstream `percentageOfNodesToScore`; `None` is upstream's adaptive default
    /// (50% − nodes/125, at least 5%, at least 100 nodes).
    pub percentage_of_nodes_to_score: Option<u32>,
    pub tie_break: TieBreak,
    /// Seed of the tie-breaking generator.
    pub seed: u64,
}

impl Default for FrameworkOptions {
    fn default() -> Self {
        FrameworkOptions {
            os_placement: true,
            percentage_of_nodes_to_score: None,
            tie_break: TieBreak::Random,
            seed: 0x9e37_79b9_7f4a_7c15,
        }
    }
}

/// A successful placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub node: String,
    /// Nodes the filters looked at.
    pub evaluated_nodes: usize,
    /// Nodes that passed them.
    pub feasible_nodes: usize,
}

/// Upstream default score plugin weights.
const WEIGHT_TAINT: i64 = 3;
const WEIGHT_NODE_AFFINITY: i64 = 2;
const WEIGHT_SPREAD: i64 = 2;
const WEIGHT_LEAST_ALLOCATED: i64 = 1;
const WEIGHT_BALANCED: i64 = 1;
const WEIGHT_IMAGE: i64 = 1;

/// The scheduling algorithm with its rotating start index and tie-breaking state.
#[derive(Debug, Clone)]
pub struct Framework {
    options: FrameworkOptions,
    next_start: usize,
    rng: u64,
    feasible: Vec<usize>,
    static_fits: StaticFits,
}

impl Framework {
    /// A framework with `options`.
    pub fn new(options: FrameworkOptions) -> Framework {
        let rng = options.seed | 1;
        Framework {
            options,
            next_start: 0,
            rng,
            feasible: Vec::new(),
            static_fits: StaticFits::default(),
        }
    }

    /// The options.
    pub fn options(&self) -> &FrameworkOptions {
        &self.options
    }

    /// Upstream `numFeasibleNodesToFind`.
    pub fn num_feasible_nodes_to_find(&self, all: usize) -> usize {
        const MIN_FEASIBLE: usize = 100;
        const MIN_PERCENTAGE: usize = 5;
        let pct = match self.options.percentage_of_nodes_to_score {
            Some(p) => p as usize,
            None => 50usize.saturating_sub(all / 125).max(MIN_PERCENTAGE),
        };
        if all < MIN_FEASIBLE
            || pct >= 100
            || pct == 0 && self.options.percentage_of_nodes_to_score.is_some()
        {
            return all;
        }
        (all * pct / 100).max(MIN_FEASIBLE)
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: tie-breaking needs no more than this.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Finds the best node for `pod` in `snapshot`.
    pub fn schedule(&mut self, snapshot: &Snapshot, pod: &Pod) -> Result<Placement, FitError> {
        let nodes = snapshot.nodes();
        let preemption_never = pod
            .spec
            .as_ref()
            .and_then(|s| s.preemption_policy.as_deref())
            == Some("Never");
        if nodes.is_empty() {
            return Err(FitError {
                preemption_never,
                ..FitError::default()
            });
        }
        let os_placement = self.options.os_placement;
        let cs = CycleState::new(pod, snapshot, os_placement);
        let want = self.num_feasible_nodes_to_find(nodes.len());
        let n = nodes.len();
        let start = self.next_start % n;
        self.feasible.clear();
        let mut processed = n;
        let mut known = self.static_fits.lookup(&cs, snapshot.node_generation(), n);
        for k in 0..n {
            let i = (start + k) % n;
            let node = &nodes[i];
            let fits = match known.get(i) {
                Some(node_fits) => node_fits && run_placement_filters(&cs, node).is_ok(),
                None => {
                    let node_fits = run_node_filters(&cs, node, os_placement).is_ok();
                    known.set(i, node_fits);
                    node_fits && run_placement_filters(&cs, node).is_ok()
                }
            };
            if fits {
                self.feasible.push(i);
                if self.feasible.len() >= want {
                    processed = k + 1;
                    break;
                }
            }
        }
        self.next_start = (start + processed) % n;
        if self.feasible.is_empty() {
            let mut err = FitError {
                num_all_nodes: n,
                preemption_never,
                ..FitError::default()
            };
            // Remembered rejections skipped their reasons; every node failed, so ask them all.
            for (i, node) in nodes.iter().enumerate() {
                let Err(r) = run_filters(&cs, node, os_placement) else {
                    continue;
                };
                for reason in r.reasons(&cs, node) {
                    *err.reasons.entry(reason).or_insert(0) += 1;
                }
                match r.code() {
                    Code::Unschedulable => {
                        err.resolvable_nodes += 1;
                        err.potential_nodes.push(i);
                    }
                    Code::UnschedulableAndUnresolvable => err.unresolvable_nodes += 1,
                }
            }
            return Err(err);
        }
        let feasible = std::mem::take(&mut self.feasible);
        let best = if feasible.len() == 1 {
            feasible[0]
        } else {
            self.select(&cs, snapshot, &feasible)
        };
        let placement = Placement {
            node: nodes[best].name.clone(),
            evaluated_nodes: processed,
            feasible_nodes: feasible.len(),
        };
        self.feasible = feasible;
        Ok(placement)
    }

    /// Whether `pod` passes every filter on the node named `node` (upstream
    /// `evaluateNominatedNode`: a pod nominated by preemption tries its nominated node first).
    pub fn fits_node(&self, snapshot: &Snapshot, pod: &Pod, node: &str) -> bool {
        let Some(info) = snapshot.node(node) else {
            return false;
        };
        let cs = CycleState::new(pod, snapshot, self.options.os_placement);
        run_filters(&cs, info, self.options.os_placement).is_ok()
    }

    /// Scores every feasible node (upstream `prioritizeNodes`) and picks the best (`selectHost`).
    fn select(&mut self, cs: &CycleState<'_>, snapshot: &Snapshot, feasible: &[usize]) -> usize {
        let scores = score_nodes(cs, snapshot, feasible);
        let mut best = feasible[0];
        let mut best_score = i64::MIN;
        let mut ties = 0u64;
        for (&i, &s) in feasible.iter().zip(&scores) {
            if s > best_score {
                best_score = s;
                best = i;
                ties = 1;
            } else if s == best_score && self.options.tie_break == TieBreak::Random {
                ties += 1;
                if self.next_random().is_multiple_of(ties) {
                    best = i;
                }
            }
        }
        best
    }
}

/// Upstream `helper.DefaultNormalizeScore`: scale to 0–`MAX_NODE_SCORE` by the maximum, reversed
/// when lower raw values are better.
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        *s = MAX_NODE_SCORE * *s / max;
        if reverse {
            *s = MAX_NODE_SCORE - *s;
        }
    }
}

/// The weighted total score of each feasible node, in the order given.
pub fn score_nodes(cs: &CycleState<'_>, snapshot: &Snapshot, feasible: &[usize]) -> Vec<i64> {
    let nodes = snapshot.nodes();
    let mut total = vec![0i64; feasible.len()];
    let mut add = |raw: &mut Vec<i64>, weight: i64, normalize: Option<bool>| {
        if let Some(reverse) = normalize {
            default_normalize(raw, reverse);
        }
        for (t, s) in total.iter_mut().zip(raw.iter()) {
            *t += s * weight;
        }
    };
    let mut raw: Vec<i64> = feasible
        .iter()
        .map(|&i| taint_toleration::score(cs, &nodes[i]))
        .collect();
    add(&mut raw, WEIGHT_TAINT, Some(true));
    if !cs.node_affinity.preferred.is_empty() {
        let mut raw: Vec<i64> = feasible
            .iter()
            .map(|&i| node_affinity::score(cs, &nodes[i]))
            .collect();
        add(&mut raw, WEIGHT_NODE_AFFINITY, Some(false));
    }
    let mut raw: Vec<i64> = feasible
        .iter()
        .map(|&i| node_resources::least_allocated(cs, &nodes[i]))
        .collect();
    add(&mut raw, WEIGHT_LEAST_ALLOCATED, None);
    let mut raw: Vec<i64> = feasible
        .iter()
        .map(|&i| node_resources::balanced_allocation(cs, &nodes[i]))
        .collect();
    add(&mut raw, WEIGHT_BALANCED, None);
    let mut raw: Vec<i64> = feasible
        .iter()
        .map(|&i| image_locality::score(cs, &nodes[i], snapshot))
        .collect();
    add(&mut raw, WEIGHT_IMAGE, None);
    if cs.owner.is_some() {
        let mut raw: Vec<i64> = feasible
            .iter()
            .map(|&i| selector_spread::score(cs, &nodes[i]))
            .collect();
        add(&mut raw, WEIGHT_SPREAD, Some(true));
    }
    total
}
