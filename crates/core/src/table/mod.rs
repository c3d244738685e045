//! Server-side printing: the `meta.k8s.io/v1` `Table` columns and row cells `kubectl get` shows,
//! per resource type.
//!
//! A port of upstream's `pkg/printers/internalversion/printers.go` (`AddHandlers` for the
//! column definitions, one `print<Kind>` per resource for the cells) at the v1.32 column
//! layout, plus the two fallbacks upstream uses for types without a printer:
//! `rest.defaultTableConvertor` (NAME, CREATED AT — e.g. LimitRanges) and the custom resource
//! table convertor (NAME, AGE — e.g. GMSACredentialSpecs, which upstream serves as a CRD).
//!
//! Like upstream's `printerstorage.TableConvertor`, rows always carry the wide (priority 1)
//! cells: `kubectl` hides those columns unless asked for `-o wide`.

mod admissionregistration;
mod age;
mod autoscaling;
mod certificates;
mod cluster_api;
mod json;
mod networking;
mod pod;
mod printers;
mod rbac;
mod storage;

use serde_json::{Value, json};

pub use age::{human_duration, parse_rfc3339};

use crate::registry::ResourceType;

/// One column of a `Table` (`metav1.TableColumnDefinition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnDefinition {
    /// Human-readable column name; kubectl upper-cases it (`Nominated Node` → `NOMINATED NODE`).
    pub name: &'static str,
    /// OpenAPI type of the cells: `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: &'static str,
    /// `name` for the column holding the object name, otherwise empty.
    pub format: &'static str,
    /// What the column shows (upstream uses the field's API documentation).
    pub description: &'static str,
    /// 0 for columns shown by default, 1 for columns shown only with `-o wide`.
    pub priority: i32,
}

impl ColumnDefinition {
    /// The column as `TableColumnDefinition` JSON (every field present, as upstream encodes it).
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.type_,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const CONTAINERS_DESC: &str = "Names of each container in the template.";
const IMAGES_DESC: &str = "Images referenced by each container in the template.";
const SELECTOR_DESC: &str = "Label query over pods that should match the replica count. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";

/// A column shown by default.
const fn col(
    name: &'static str,
    type_: &'static str,
    description: &'static str,
) -> ColumnDefinition {
    ColumnDefinition {
        name,
        type_,
        format: "",
        description,
        priority: 0,
    }
}

/// A column shown only with `-o wide`.
const fn wide(
    name: &'static str,
    type_: &'static str,
    description: &'static str,
) -> ColumnDefinition {
    ColumnDefinition {
        priority: 1,
        ..col(name, type_, description)
    }
}

const NAME: ColumnDefinition = ColumnDefinition {
    name: "Name",
    type_: "string",
    format: "name",
    description: NAME_DESC,
    priority: 0,
};
const AGE: ColumnDefinition = col("Age", "string", AGE_DESC);
const CONTAINERS: ColumnDefinition = wide("Containers", "string", CONTAINERS_DESC);
const IMAGES: ColumnDefinition = wide("Images", "string", IMAGES_DESC);
const SELECTOR: ColumnDefinition = wide("Selector", "string", SELECTOR_DESC);

/// Which upstream printer (or fallback) a resource type uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Printer {
    Pod,
    Node,
    Namespace,
    Service,
    Endpoints,
    ConfigMap,
    Secret,
    ServiceAccount,
    Event,
    EventsV1,
    ReplicationController,
    PersistentVolumeClaim,
    PersistentVolume,
    ResourceQuota,
    PodTemplate,
    Deployment,
    ReplicaSet,
    DaemonSet,
    StatefulSet,
    ControllerRevision,
    Job,
    CronJob,
    RuntimeClass,
    Lease,
    EndpointSlice,
    RoleBinding,
    ClusterRoleBinding,
    CertificateSigningRequest,
    Ingress,
    IngressClass,
    NetworkPolicy,
    PodDisruptionBudget,
    HorizontalPodAutoscaler,
    PriorityClass,
    StorageClass,
    CsiDriver,
    CsiNode,
    CsiStorageCapacity,
    VolumeAttachment,
    ApiService,
    WebhookConfiguration,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
    /// `rest.defaultTableConvertor`: built-in types without a printer (LimitRange, Role,
    /// ClusterRole).
    CreatedAt,
    /// The custom resource table convertor with no additional printer columns.
    CustomResource,
}

impl Printer {
    fn of(rt: &ResourceType) -> Printer {
        match (rt.group.as_str(), rt.plural.as_str()) {
            ("", "pods") => Printer::Pod,
            ("", "nodes") => Printer::Node,
            ("", "namespaces") => Printer::Namespace,
            ("", "services") => Printer::Service,
            ("", "endpoints") => Printer::Endpoints,
            ("", "configmaps") => Printer::ConfigMap,
            ("", "secrets") => Printer::Secret,
            ("", "serviceaccounts") => Printer::ServiceAccount,
            ("", "events") => Printer::Event,
            ("events.k8s.io", "events") => Printer::EventsV1,
            ("", "replicationcontrollers") => Printer::ReplicationController,
            ("", "persistentvolumeclaims") => Printer::PersistentVolumeClaim,
            ("", "persistentvolumes") => Printer::PersistentVolume,
            ("", "resourcequotas") => Printer::ResourceQuota,
            ("", "podtemplates") => Printer::PodTemplate,
            ("", "limitranges") => Printer::CreatedAt,
            ("apps", "deployments") => Printer::Deployment,
            ("apps", "replicasets") => Printer::ReplicaSet,
            ("apps", "daemonsets") => Printer::DaemonSet,
            ("apps", "statefulsets") => Printer::StatefulSet,
            ("apps", "controllerrevisions") => Printer::ControllerRevision,
            ("batch", "jobs") => Printer::Job,
            ("batch", "cronjobs") => Printer::CronJob,
            ("node.k8s.io", "runtimeclasses") => Printer::RuntimeClass,
            ("coordination.k8s.io", "leases") => Printer::Lease,
            ("discovery.k8s.io", "endpointslices") => Printer::EndpointSlice,
            ("rbac.authorization.k8s.io", "roles" | "clusterroles") => Printer::CreatedAt,
            // apiextensions-apiserver registers no printer for CRDs either.
            ("apiextensions.k8s.io", "customresourcedefinitions") => Printer::CreatedAt,
            ("rbac.authorization.k8s.io", "rolebindings") => Printer::RoleBinding,
            ("rbac.authorization.k8s.io", "clusterrolebindings") => Printer::ClusterRoleBinding,
            ("certificates.k8s.io", "certificatesigningrequests") => {
                Printer::CertificateSigningRequest
            }
            ("networking.k8s.io", "ingresses") => Printer::Ingress,
            ("networking.k8s.io", "ingressclasses") => Printer::IngressClass,
            ("networking.k8s.io", "networkpolicies") => Printer::NetworkPolicy,
            ("policy", "poddisruptionbudgets") => Printer::PodDisruptionBudget,
            ("autoscaling", "horizontalpodautoscalers") => Printer::HorizontalPodAutoscaler,
            ("scheduling.k8s.io", "priorityclasses") => Printer::PriorityClass,
            ("storage.k8s.io", "storageclasses") => Printer::StorageClass,
            ("storage.k8s.io", "csidrivers") => Printer::CsiDriver,
            ("storage.k8s.io", "csinodes") => Printer::CsiNode,
            ("storage.k8s.io", "volumeattachments") => Printer::VolumeAttachment,
            ("storage.k8s.io", "csistoragecapacities") => Printer::CsiStorageCapacity,
            ("apiregistration.k8s.io", "apiservices") => Printer::ApiService,
            (
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations" | "mutatingwebhookconfigurations",
            ) => Printer::WebhookConfiguration,
            ("admissionregistration.k8s.io", "validatingadmissionpolicies") => {
                Printer::ValidatingAdmissionPolicy
            }
            ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => {
                Printer::ValidatingAdmissionPolicyBinding
            }
            _ => Printer::CustomResource,
        }
    }
}

/// The columns of `rt`'s table, in order (upstream `AddHandlers`).
pub fn columns(rt: &ResourceType) -> Vec<ColumnDefinition> {
    match Printer::of(rt) {
        Printer::Pod => vec![
            NAME,
            col(
                "Ready",
                "string",
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            col(
                "Status",
                "string",
                "The aggregate status of the containers in this pod.",
            ),
            col(
                "Restarts",
                "string",
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            AGE,
            wide(
                "IP",
                "string",
                "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
            ),
            wide(
                "Node",
                "string",
                "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName.",
            ),
            wide(
                "Nominated Node",
                "string",
                "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.",
            ),
            wide(
                "Readiness Gates",
                "string",
                "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\"",
            ),
        ],
        Printer::Node => vec![
            NAME,
            col("Status", "string", "The status of the node"),
            col("Roles", "string", "The roles of the node"),
            AGE,
            col("Version", "string", "Kubelet Version reported by the node."),
            wide(
                "Internal-IP",
                "string",
                "List of addresses reachable to the node.",
            ),
            wide(
                "External-IP",
                "string",
                "List of addresses reachable to the node.",
            ),
            wide(
                "OS-Image",
                "string",
                "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
            ),
            wide(
                "Kernel-Version",
                "string",
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            ),
            wide(
                "Container-Runtime",
                "string",
                "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
            ),
        ],
        Printer::Namespace => vec![
            NAME,
            col("Status", "string", "The status of the namespace"),
            AGE,
        ],
        Printer::Service => vec![
            NAME,
            col(
                "Type",
                "string",
                "type determines how the Service is exposed. Defaults to ClusterIP.",
            ),
            col(
                "Cluster-IP",
                "string",
                "clusterIP is the IP address of the service and is usually assigned randomly.",
            ),
            col(
                "External-IP",
                "string",
                "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
            ),
            col(
                "Port(s)",
                "string",
                "The list of ports that are exposed by this service.",
            ),
            AGE,
            wide(
                "Selector",
                "string",
                "Route service traffic to pods with label keys and values matching this selector.",
            ),
        ],
        Printer::Endpoints => vec![
            NAME,
            col(
                "Endpoints",
                "string",
                "The set of all endpoints is the union of all subsets.",
            ),
            AGE,
        ],
        Printer::ConfigMap => vec![
            NAME,
            col(
                "Data",
                "string",
                "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'.",
            ),
            AGE,
        ],
        Printer::Secret => vec![
            NAME,
            col(
                "Type",
                "string",
                "Used to facilitate programmatic handling of secret data.",
            ),
            col(
                "Data",
                "string",
                "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'.",
            ),
            AGE,
        ],
        Printer::ServiceAccount => vec![
            NAME,
            col(
                "Secrets",
                "string",
                "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
            ),
            AGE,
        ],
        Printer::Event | Printer::EventsV1 => vec![
            col(
                "Last Seen",
                "string",
                "The time at which the most recent occurrence of this event was recorded.",
            ),
            col(
                "Type",
                "string",
                "Type of this event (Normal, Warning), new types could be added in the future",
            ),
            col(
                "Reason",
                "string",
                "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
            ),
            col("Object", "string", "The object that this event is about."),
            wide(
                "Subobject",
                "string",
                "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.",
            ),
            wide(
                "Source",
                "string",
                "The component reporting this event. Should be a short machine understandable string.",
            ),
            col(
                "Message",
                "string",
                "A human-readable description of the status of this operation.",
            ),
            wide(
                "First Seen",
                "string",
                "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
            ),
            wide(
                "Count",
                "string",
                "The number of times this event has occurred.",
            ),
            ColumnDefinition {
                priority: 1,
                ..NAME
            },
        ],
        Printer::ReplicationController | Printer::ReplicaSet => vec![
            NAME,
            col(
                "Desired",
                "integer",
                "Replicas is the number of desired replicas.",
            ),
            col(
                "Current",
                "integer",
                "Replicas is the most recently observed number of replicas.",
            ),
            col(
                "Ready",
                "integer",
                "The number of ready replicas for this replica set.",
            ),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ],
        Printer::PersistentVolumeClaim => vec![
            NAME,
            col(
                "Status",
                "string",
                "phase represents the current phase of PersistentVolumeClaim.",
            ),
            col(
                "Volume",
                "string",
                "volumeName is the binding reference to the PersistentVolume backing this claim.",
            ),
            col(
                "Capacity",
                "string",
                "capacity represents the actual resources of the underlying volume.",
            ),
            col(
                "Access Modes",
                "string",
                "accessModes contains the actual access modes the volume backing the PVC has.",
            ),
            col("StorageClass", "string", "StorageClass of the pvc"),
            col(
                "VolumeAttributesClass",
                "string",
                "VolumeAttributesClass of the pvc",
            ),
            AGE,
            wide(
                "VolumeMode",
                "string",
                "volumeMode defines what type of volume is required by the claim.",
            ),
        ],
        Printer::PersistentVolume => vec![
            NAME,
            col(
                "Capacity",
                "string",
                "capacity is the description of the persistent volume's resources and capacity.",
            ),
            col(
                "Access Modes",
                "string",
                "accessModes contains all ways the volume can be mounted.",
            ),
            col(
                "Reclaim Policy",
                "string",
                "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.",
            ),
            col(
                "Status",
                "string",
                "phase indicates if a volume is available, bound to a claim, or released by a claim.",
            ),
            col(
                "Claim",
                "string",
                "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim.",
            ),
            col("StorageClass", "string", "StorageClass of the pv"),
            col(
                "VolumeAttributesClass",
                "string",
                "VolumeAttributesClass of the pv",
            ),
            col(
                "Reason",
                "string",
                "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.",
            ),
            AGE,
            wide(
                "VolumeMode",
                "string",
                "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.",
            ),
        ],
        Printer::ResourceQuota => vec![
            NAME,
            AGE,
            col(
                "Request",
                "string",
                "Request represents a minimum amount of cpu/memory that a container may consume.",
            ),
            col(
                "Limit",
                "string",
                "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
            ),
        ],
        Printer::PodTemplate => vec![
            NAME,
            col("Containers", "string", CONTAINERS_DESC),
            col("Images", "string", IMAGES_DESC),
            col("Pod Labels", "string", "The labels for the pod template."),
        ],
        Printer::Deployment => vec![
            NAME,
            col("Ready", "string", "Number of the pod with ready state"),
            col(
                "Up-to-date",
                "string",
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
            ),
            col(
                "Available",
                "string",
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
            ),
            AGE,
            CONTAINERS,
            IMAGES,
            wide(
                "Selector",
                "string",
                "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
            ),
        ],
        Printer::DaemonSet => vec![
            NAME,
            col(
                "Desired",
                "integer",
                "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).",
            ),
            col(
                "Current",
                "integer",
                "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
            ),
            col(
                "Ready",
                "integer",
                "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
            ),
            col(
                "Up-to-date",
                "integer",
                "The total number of nodes that are running updated daemon pod",
            ),
            col(
                "Available",
                "integer",
                "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
            ),
            col(
                "Node Selector",
                "string",
                "NodeSelector is a selector which must be true for the pod to fit on a node.",
            ),
            AGE,
            CONTAINERS,
            IMAGES,
            wide(
                "Selector",
                "string",
                "A label query over pods that are managed by the daemon set.",
            ),
        ],
        Printer::StatefulSet => vec![
            NAME,
            col("Ready", "string", "Number of the pod with ready state"),
            AGE,
            CONTAINERS,
            IMAGES,
        ],
        Printer::ControllerRevision => vec![
            NAME,
            col("Controller", "string", "Controller of the object"),
            col(
                "Revision",
                "string",
                "Revision indicates the revision of the state represented by Data.",
            ),
            AGE,
        ],
        Printer::Job => vec![
            NAME,
            col("Status", "string", "Status of the job."),
            col(
                "Completions",
                "string",
                "The number of pods which reached phase Succeeded.",
            ),
            col("Duration", "string", "Time required to complete the job."),
            AGE,
            CONTAINERS,
            IMAGES,
            wide(
                "Selector",
                "string",
                "A label query over pods that should match the pod count.",
            ),
        ],
        Printer::CronJob => vec![
            NAME,
            col(
                "Schedule",
                "string",
                "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
            ),
            col(
                "Timezone",
                "string",
                "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
            ),
            col(
                "Suspend",
                "boolean",
                "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.",
            ),
            col(
                "Active",
                "integer",
                "A list of pointers to currently running jobs.",
            ),
            col(
                "Last Schedule",
                "string",
                "Information when was the last time the job was successfully scheduled.",
            ),
            AGE,
            CONTAINERS,
            IMAGES,
            wide(
                "Selector",
                "string",
                "A label query over pods that should match the pod count.",
            ),
        ],
        Printer::RuntimeClass => vec![
            NAME,
            col(
                "Handler",
                "string",
                "Handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class.",
            ),
            AGE,
        ],
        Printer::Lease => vec![
            NAME,
            col(
                "Holder",
                "string",
                "holderIdentity contains the identity of the holder of a current lease.",
            ),
            AGE,
        ],
        Printer::EndpointSlice => vec![
            NAME,
            col(
                "AddressType",
                "string",
                "addressType specifies the type of address carried by this EndpointSlice.",
            ),
            col(
                "Ports",
                "string",
                "ports specifies the list of network ports exposed by each endpoint in this slice.",
            ),
            col(
                "Endpoints",
                "string",
                "endpoints is a list of unique endpoints in this slice.",
            ),
            AGE,
        ],
        Printer::RoleBinding => rbac::binding_columns(false),
        Printer::ClusterRoleBinding => rbac::binding_columns(true),
        Printer::CertificateSigningRequest => certificates::columns(),
        Printer::Ingress => networking::ingress_columns(),
        Printer::IngressClass => networking::ingress_class_columns(),
        Printer::NetworkPolicy => networking::network_policy_columns(),
        Printer::PodDisruptionBudget => cluster_api::pdb_columns(),
        Printer::HorizontalPodAutoscaler => autoscaling::hpa_columns(),
        Printer::PriorityClass => cluster_api::priority_class_columns(),
        Printer::StorageClass => storage::storage_class_columns(),
        Printer::CsiDriver => storage::csi_driver_columns(),
        Printer::CsiNode => storage::csi_node_columns(),
        Printer::VolumeAttachment => storage::volume_attachment_columns(),
        Printer::CsiStorageCapacity => storage::csi_storage_capacity_columns(),
        Printer::ApiService => cluster_api::api_service_columns(),
        Printer::WebhookConfiguration => admissionregistration::webhook_configuration_columns(),
        Printer::ValidatingAdmissionPolicy => admissionregistration::policy_columns(),
        Printer::ValidatingAdmissionPolicyBinding => admissionregistration::binding_columns(),
        Printer::CreatedAt => vec![NAME, col("Created At", "date", AGE_DESC)],
        Printer::CustomResource => vec![NAME, col("Age", "date", AGE_DESC)],
    }
}

/// The cells of one row for `obj` of type `rt`, in [`columns`] order, wide cells included.
/// Cells are JSON strings or integers as upstream's printers emit them; ages are measured
/// against `now_unix_secs`. Never panics, whatever the shape of `obj`.
pub fn cells(rt: &ResourceType, obj: &Value, now_unix_secs: i64) -> Vec<Value> {
    let now = now_unix_secs;
    match Printer::of(rt) {
        Printer::Pod => pod::cells(obj, now),
        Printer::Node => printers::node(obj, now),
        Printer::Namespace => printers::namespace(obj, now),
        Printer::Service => printers::service(obj, now),
        Printer::Endpoints => printers::endpoints(obj, now),
        Printer::ConfigMap => printers::config_map(obj, now),
        Printer::Secret => printers::secret(obj, now),
        Printer::ServiceAccount => printers::service_account(obj, now),
        Printer::Event => printers::event(&printers::EventView::core(obj), now),
        Printer::EventsV1 => printers::event(&printers::EventView::events_v1(obj), now),
        Printer::ReplicationController => printers::replication_controller(obj, now),
        Printer::PersistentVolumeClaim => printers::persistent_volume_claim(obj, now),
        Printer::PersistentVolume => printers::persistent_volume(obj, now),
        Printer::ResourceQuota => printers::resource_quota(obj, now),
        Printer::PodTemplate => printers::pod_template(obj),
        Printer::Deployment => printers::deployment(obj, now),
        Printer::ReplicaSet => printers::replica_set(obj, now),
        Printer::DaemonSet => printers::daemon_set(obj, now),
        Printer::StatefulSet => printers::stateful_set(obj, now),
        Printer::ControllerRevision => printers::controller_revision(obj, now),
        Printer::Job => printers::job(obj, now),
        Printer::CronJob => printers::cron_job(obj, now),
        Printer::RuntimeClass => printers::runtime_class(obj, now),
        Printer::Lease => printers::lease(obj, now),
        Printer::EndpointSlice => printers::endpoint_slice(obj, now),
        Printer::RoleBinding | Printer::ClusterRoleBinding => rbac::binding(obj, now),
        Printer::CertificateSigningRequest => certificates::cells(obj, now),
        Printer::Ingress => networking::ingress(obj, now),
        Printer::IngressClass => networking::ingress_class(obj, now),
        Printer::NetworkPolicy => networking::network_policy(obj, now),
        Printer::PodDisruptionBudget => cluster_api::pdb(obj, now),
        Printer::HorizontalPodAutoscaler => autoscaling::hpa(obj, now),
        Printer::PriorityClass => cluster_api::priority_class(obj, now),
        Printer::StorageClass => storage::storage_class(obj, now),
        Printer::CsiDriver => storage::csi_driver(obj, now),
        Printer::CsiNode => storage::csi_node(obj, now),
        Printer::VolumeAttachment => storage::volume_attachment(obj, now),
        Printer::CsiStorageCapacity => storage::csi_storage_capacity(obj),
        Printer::ApiService => cluster_api::api_service(obj, now),
        Printer::WebhookConfiguration => admissionregistration::webhook_configuration(obj, now),
        Printer::ValidatingAdmissionPolicy => admissionregistration::policy(obj, now),
        Printer::ValidatingAdmissionPolicyBinding => admissionregistration::binding(obj, now),
        Printer::CreatedAt => printers::created_at(obj),
        Printer::CustomResource => printers::custom_resource(obj, now),
    }
}

#[cfg(test)]
mod tests;
