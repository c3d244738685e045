//! The pod row: a port of upstream `printPod` (pkg/printers/internalversion/printers.go), the
//! source of the READY, STATUS and RESTARTS columns every `kubectl get pods` user reads.

use serde_json::Value;

use super::age::{self, created};
use super::json::{arr_at, get, int_at, name, opt_bool_at, s, str_at};

/// `node.NodeUnreachablePodReason`: the reason the node lifecycle controller sets on pods of a
/// node that stopped reporting.
const NODE_UNREACHABLE_POD_REASON: &str = "NodeLost";

/// Whether a condition of `conditions` of `type_` has status `True`; the first match decides
/// (`isPodInitializedConditionTrue`).
fn first_condition_true(status: &Value, type_: &str) -> bool {
    arr_at(status, &["conditions"])
        .iter()
        .find(|c| str_at(c, &["type"]) == type_)
        .is_some_and(|c| str_at(c, &["status"]) == "True")
}

/// `hasPodReadyCondition`: any `Ready` condition with status `True`.
fn has_pod_ready_condition(status: &Value) -> bool {
    arr_at(status, &["conditions"])
        .iter()
        .any(|c| str_at(c, &["type"]) == "Ready" && str_at(c, &["status"]) == "True")
}

/// The `finishedAt` of a container's last termination, if set.
fn last_terminated_at(container: &Value) -> Option<i64> {
    age::timestamp(get(container, &["lastState", "terminated", "finishedAt"]))
}

/// `Signal:9` / `ExitCode:1` for a termination without a reason.
fn exit_description(terminated: &Value) -> String {
    let signal = int_at(terminated, &["signal"]);
    if signal != 0 {
        format!("Signal:{signal}")
    } else {
        format!("ExitCode:{}", int_at(terminated, &["exitCode"]))
    }
}

/// The cells of one pod row, wide columns included (the server always prints wide; kubectl
/// hides priority-1 columns itself).
pub fn cells(pod: &Value, now: i64) -> Vec<Value> {
    let empty = Value::Null;
    let spec = get(pod, &["spec"]).unwrap_or(&empty);
    let status = get(pod, &["status"]).unwrap_or(&empty);

    let mut restarts: i64 = 0;
    let mut restartable_init_restarts: i64 = 0;
    let init_specs = arr_at(spec, &["initContainers"]);
    let mut total = arr_at(spec, &["containers"]).len();
    let mut ready = 0usize;
    let mut last_restart: Option<i64> = None;
    let mut last_restartable_init_restart: Option<i64> = None;

    let phase = str_at(status, &["phase"]);
    let mut reason = phase.to_string();
    let status_reason = str_at(status, &["reason"]);
    if !status_reason.is_empty() {
        reason = status_reason.to_string();
    }
    let scheduling_gated = arr_at(status, &["conditions"]).iter().any(|c| {
        str_at(c, &["type"]) == "PodScheduled" && str_at(c, &["reason"]) == "SchedulingGated"
    });
    if scheduling_gated {
        reason = "SchedulingGated".to_string();
    }

    let is_restartable = |container_name: &str| {
        init_specs
            .iter()
            .find(|c| str_at(c, &["name"]) == container_name)
            .is_some_and(|c| str_at(c, &["restartPolicy"]) == "Always")
    };
    total += init_specs
        .iter()
        .filter(|c| str_at(c, &["restartPolicy"]) == "Always")
        .count();

    let mut initializing = false;
    for (i, container) in arr_at(status, &["initContainerStatuses"])
        .iter()
        .enumerate()
    {
        let restart_count = int_at(container, &["restartCount"]);
        restarts += restart_count;
        let finished = last_terminated_at(container);
        if finished > last_restart {
            last_restart = finished;
        }
        let restartable = is_restartable(str_at(container, &["name"]));
        if restartable {
            restartable_init_restarts += restart_count;
            if finished > last_restartable_init_restart {
                last_restartable_init_restart = finished;
            }
        }
        let terminated = get(container, &["state", "terminated"]).filter(|t| t.is_object());
        let waiting_reason = str_at(container, &["state", "waiting", "reason"]);
        if terminated.is_some_and(|t| int_at(t, &["exitCode"]) == 0) {
            continue;
        }
        if restartable && opt_bool_at(container, &["started"]) == Some(true) {
            if opt_bool_at(container, &["ready"]) == Some(true) {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = terminated {
            let terminated_reason = str_at(t, &["reason"]);
            reason = if terminated_reason.is_empty() {
                format!("Init:{}", exit_description(t))
            } else {
                format!("Init:{terminated_reason}")
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    if !initializing || first_condition_true(status, "Initialized") {
        restarts = restartable_init_restarts;
        last_restart = last_restartable_init_restart;
        let mut has_running = false;
        for container in arr_at(status, &["containerStatuses"]).iter().rev() {
            restarts += int_at(container, &["restartCount"]);
            let finished = last_terminated_at(container);
            if finished > last_restart {
                last_restart = finished;
            }
            let waiting_reason = str_at(container, &["state", "waiting", "reason"]);
            let terminated = get(container, &["state", "terminated"]).filter(|t| t.is_object());
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_string();
            } else if let Some(t) = terminated {
                let terminated_reason = str_at(t, &["reason"]);
                reason = if terminated_reason.is_empty() {
                    exit_description(t)
                } else {
                    terminated_reason.to_string()
                };
            } else if opt_bool_at(container, &["ready"]) == Some(true)
                && get(container, &["state", "running"]).is_some_and(Value::is_object)
            {
                has_running = true;
                ready += 1;
            }
        }
        // A pod whose last container completed but another still runs is shown as running.
        if reason == "Completed" && has_running {
            reason = if has_pod_ready_condition(status) {
                "Running"
            } else {
                "NotReady"
            }
            .to_string();
        }
    }

    let deleting = age::timestamp(get(pod, &["metadata", "deletionTimestamp"])).is_some();
    if deleting && status_reason == NODE_UNREACHABLE_POD_REASON {
        reason = "Unknown".to_string();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".to_string();
    }

    let restarts_cell = match last_restart {
        Some(at) if restarts != 0 => format!(
            "{restarts} ({} ago)",
            age::human_duration(now.saturating_sub(at))
        ),
        _ => restarts.to_string(),
    };

    let none = |x: &str| {
        if x.is_empty() {
            "<none>".to_string()
        } else {
            x.to_string()
        }
    };
    // The internal type keeps only `podIPs`; v1 conversion fills it from `podIP` when absent.
    let pod_ip = arr_at(status, &["podIPs"])
        .first()
        .map(|ip| str_at(ip, &["ip"]))
        .unwrap_or_else(|| str_at(status, &["podIP"]));
    let gates = arr_at(spec, &["readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conditions = arr_at(status, &["conditions"]);
        let true_count = gates
            .iter()
            .filter(|g| {
                let wanted = str_at(g, &["conditionType"]);
                conditions
                    .iter()
                    .find(|c| str_at(c, &["type"]) == wanted)
                    .is_some_and(|c| str_at(c, &["status"]) == "True")
            })
            .count();
        format!("{true_count}/{}", gates.len())
    };
    vec![
        s(name(pod)),
        s(format!("{ready}/{total}")),
        s(reason),
        s(restarts_cell),
        created(pod, now),
        s(none(pod_ip)),
        s(none(str_at(spec, &["nodeName"]))),
        s(none(str_at(status, &["nominatedNodeName"]))),
        s(readiness_gates),
    ]
}
