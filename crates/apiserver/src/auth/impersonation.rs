//! Impersonation (`kubectl --as`, `--as-group`, `--as-uid`), as upstream's
//! `endpoints/filters/impersonation.go`: each `Impersonate-*` header is authorized as the verb
//! `impersonate` on `users`, `serviceaccounts` (in the account's namespace), `groups`, `uids` or
//! `userextras/<key>`, and the request then runs as the impersonated user.

use http::HeaderMap;

use super::authz::{self, Attributes};
use super::sa_token::{service_account_groups, split_service_account_user};
use super::{AUTHENTICATED, UserInfo};
use crate::error::ApiError;
use crate::state::State;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

/// The user a request runs as: `requester`, or whom its headers impersonate once each is
/// authorized. `Ok(None)` when there is nothing to impersonate.
pub fn impersonate(
    state: &State,
    requester: &UserInfo,
    headers: &HeaderMap,
) -> Result<Option<UserInfo>, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let user = values(USER).into_iter().next();
    let groups = values(GROUP);
    let uid = values(UID).into_iter().next();
    let mut extras: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX)
            && let Ok(v) = value.to_str()
        {
            let key = crate::request::percent_decode(key);
            extras.push((key, v.to_string()));
        }
    }
    let Some(user) = user else {
        if !groups.is_empty() || uid.is_some() || !extras.is_empty() {
            return Err(ApiError::bad_request(
                "requested impersonation of groups, uid or extra without impersonating a user",
            ));
        }
        return Ok(None);
    };
    let check = |attrs: Attributes| authz::check(state, requester, &attrs);
    match split_service_account_user(&user) {
        Some((ns, name)) => check(Attributes::resource(
            "impersonate",
            "",
            "serviceaccounts",
            ns,
            name,
        ))?,
        None => check(Attributes::resource("impersonate", "", "users", "", &user))?,
    }
    for g in &groups {
        check(Attributes::resource("impersonate", "", "groups", "", g))?;
    }
    if let Some(uid) = &uid {
        check(Attributes::resource("impersonate", "", "uids", "", uid))?;
    }
    for (key, value) in &extras {
        let mut attrs = Attributes::resource(
            "impersonate",
            "authentication.k8s.io",
            "userextras",
            "",
            value,
        );
        attrs.subresource = key.clone();
        check(attrs)?;
    }
    let mut out = UserInfo {
        name: user.clone(),
        uid: uid.unwrap_or_default(),
        groups,
        extra: Default::default(),
    };
    for (key, value) in extras {
        out.extra.entry(key).or_default().push(value);
    }
    if out.groups.is_empty()
        && let Some((ns, _)) = split_service_account_user(&user)
    {
        out.groups = service_account_groups(ns);
    }
    if user == "system:anonymous" {
        if !out.in_group("system:unauthenticated") {
            out.groups.push("system:unauthenticated".to_string());
        }
    } else if !out.in_group(AUTHENTICATED) {
        out.groups.push(AUTHENTICATED.to_string());
    }
    Ok(Some(out))
}
