//! A webhook's `matchConditions`: CEL expressions over the review's `request`, `object`,
//! `oldObject` and `namespaceObject` (compiled once with the webhook, evaluated by
//! `tandem_core::admission::policy`); the webhook is called only when all are true. An
//! expression that cannot be evaluated fails the call, and the failure policy decides, as
//! upstream's dispatcher does (`failed evaluating match conditions: …`).

use serde_json::Value;
use tandem_core::admission::policy::Activation;
use tandem_core::admission::review;

use super::config::Hook;

/// Whether every condition of `hook` holds for `request`.
pub(super) fn matches(
    hook: &Hook,
    request: &review::Request,
    namespace_object: Option<&Value>,
) -> Result<bool, String> {
    if hook.match_conditions.is_empty() {
        return Ok(true);
    }
    let request_json = request.to_json();
    let mut act = Activation::new(&request_json);
    act.object = request.object.as_ref();
    act.old_object = request.old_object.as_ref();
    act.namespace_object = namespace_object;
    hook.match_conditions
        .evaluate(&act)
        .map_err(|e| format!("failed evaluating match conditions: {e}"))
}
