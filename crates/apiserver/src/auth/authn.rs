//! Authentication, as kube-apiserver's union of authenticators: an X.509 client certificate
//! signed by the cluster CA (user = subject CN, groups = O), then a bearer token: a bootstrap
//! token (`<id>.<secret>`, a `bootstrap.kubernetes.io/token` Secret in kube-system), a
//! ServiceAccount JWT, or a line of the static token file. Every user gets
//! `system:authenticated`. Anonymous requests are refused (401), as with `--anonymous-auth=false`
//! (k3s's setting).
//!
//! ServiceAccount tokens are checked against the cluster as upstream's validator does: the
//! ServiceAccount, and the Pod, Secret or Node the token is bound to, must still exist with the
//! UIDs the token names, so deleting a pod revokes its tokens. The signature check is cached per
//! token; the existence checks run on every request (cheap lookups in the watch cache).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use serde::Deserialize;
use serde_json::Value;

use super::UserInfo;
use super::sa_token::{self, Claims, TokenError, TokenIssuer};
use crate::pki::StaticToken;
use crate::state::State;

/// How many verified tokens the signature cache keeps before it starts over.
const VERIFIED_CACHE_LIMIT: usize = 4096;

/// The bearer-token authenticators.
pub struct Authenticator {
    static_tokens: Vec<StaticToken>,
    pub issuer: Arc<TokenIssuer>,
    verified: Mutex<HashMap<String, Claims>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("static_tokens", &self.static_tokens.len())
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    pub fn new(static_tokens: Vec<StaticToken>, issuer: Arc<TokenIssuer>) -> Authenticator {
        Authenticator {
            static_tokens,
            issuer,
            verified: Mutex::new(HashMap::new()),
        }
    }

    /// The user a bearer token names, or why it names none.
    pub fn authenticate_token(&self, state: &State, token: &str) -> Result<UserInfo, String> {
        if let Some((id, secret)) = parse_bootstrap_token(token) {
            return bootstrap_user(state, id, secret);
        }
        if token.matches('.').count() == 2 {
            let claims = self.verify_jwt(token, &[])?;
            return service_account_user(state, &claims);
        }
        self.static_tokens
            .iter()
            .find(|t| constant_time_eq(t.token.as_bytes(), token.as_bytes()))
            .map(|t| UserInfo::authenticated(&t.user, "", t.groups.clone()))
            .ok_or_else(|| "invalid bearer token".to_string())
    }

    /// Verifies a ServiceAccount JWT's signature, issuer, times and audiences, with a cache of
    /// tokens already verified (the times are checked again on every use).
    pub fn verify_jwt(&self, token: &str, audiences: &[String]) -> Result<Claims, String> {
        let now = now_unix();
        if audiences.is_empty()
            && let Ok(cache) = self.verified.lock()
            && let Some(claims) = cache.get(token)
        {
            if now > claims.exp + 60 {
                return Err(TokenError::Expired.to_string());
            }
            return Ok(claims.clone());
        }
        let claims = self
            .issuer
            .verify(token, audiences, now)
            .map_err(|e| e.to_string())?;
        if audiences.is_empty()
            && let Ok(mut cache) = self.verified.lock()
        {
            if cache.len() >= VERIFIED_CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(token.to_string(), claims.clone());
        }
        Ok(claims)
    }
}

pub(crate) fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Compares secrets without an early exit on the first differing byte.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `<6 lower-case alphanumerics>.<16 lower-case alphanumerics>`: a bootstrap token's shape.
pub fn parse_bootstrap_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

/// The metadata fields the validators read, without parsing the rest of an object.
#[derive(Deserialize, Default)]
struct MetaOnly {
    #[serde(default)]
    metadata: MetaFields,
}

#[derive(Deserialize, Default)]
struct MetaFields {
    #[serde(default)]
    uid: String,
    #[serde(default, rename = "deletionTimestamp")]
    deletion_timestamp: Option<String>,
}

/// The uid and deletion timestamp of a cached object, if it exists.
pub(crate) fn cached_meta(
    state: &State,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> Option<(String, Option<String>)> {
    let rt = state.registry.by_plural("", "v1", plural)?;
    let obj = state.cache.get(&rt, &rt.key(namespace, name))?;
    let meta: MetaOnly = serde_json::from_slice(&obj.json).unwrap_or_default();
    Some((meta.metadata.uid, meta.metadata.deletion_timestamp))
}

/// One cached core object, parsed.
pub(crate) fn cached_value(
    state: &State,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> Option<Value> {
    let rt = state.registry.by_plural("", "v1", plural)?;
    state
        .cache
        .get(&rt, &rt.key(namespace, name))
        .and_then(|o| o.to_value())
}

/// Upstream's `validator.Validate`: the ServiceAccount and the bound object still exist with
/// the token's UIDs. Returns the user the token stands for.
pub fn service_account_user(state: &State, claims: &Claims) -> Result<UserInfo, String> {
    let k = &claims.kubernetes;
    let ns = k.namespace.as_str();
    let sa = &k.serviceaccount;
    let expected_sub = sa_token::service_account_user(ns, &sa.name);
    if claims.sub != expected_sub {
        return Err("service account token claims do not match its subject".to_string());
    }
    match cached_meta(state, "serviceaccounts", Some(ns), &sa.name) {
        None => {
            return Err(format!(
                "serviceaccounts \"{}\" not found: service account {ns}/{} has been deleted",
                sa.name, sa.name
            ));
        }
        Some((uid, _)) if uid != sa.uid => {
            return Err(format!(
                "service account UID ({}) does not match claim ({})",
                uid, sa.uid
            ));
        }
        Some(_) => {}
    }
    let mut user =
        UserInfo::authenticated(&expected_sub, &sa.uid, sa_token::service_account_groups(ns));
    let bound = [
        ("pods", &k.pod, Some(ns), "Pod"),
        ("secrets", &k.secret, Some(ns), "Secret"),
        ("nodes", &k.node, None, "Node"),
    ];
    for (plural, reference, scope, kind) in bound {
        let Some(r) = reference else { continue };
        let Some((uid, deleting)) = cached_meta(state, plural, scope, &r.name) else {
            return Err(format!(
                "{plural} \"{}\" not found: the {kind} this token is bound to has been deleted",
                r.name
            ));
        };
        if uid != r.uid {
            return Err(format!(
                "{kind} UID ({uid}) does not match claim ({}): the object this token is bound to was replaced",
                r.uid
            ));
        }
        if kind == "Pod"
            && let Some(ts) = deleting
            && tandem_core::table::parse_rfc3339(&ts).is_some_and(|t| t + 60 < now_unix())
        {
            return Err(format!(
                "the Pod {ns}/{} this token is bound to is being deleted",
                r.name
            ));
        }
        let key = format!("authentication.kubernetes.io/{}-name", kind.to_lowercase());
        user.extra.insert(key, vec![r.name.clone()]);
        let key = format!("authentication.kubernetes.io/{}-uid", kind.to_lowercase());
        user.extra.insert(key, vec![r.uid.clone()]);
    }
    if !claims.jti.is_empty() {
        user.extra.insert(
            "authentication.kubernetes.io/credential-id".to_string(),
            vec![format!("JTI={}", claims.jti)],
        );
    }
    Ok(user)
}

/// Upstream's bootstrap token authenticator (`plugin/pkg/auth/authenticator/token/bootstrap`).
fn bootstrap_user(state: &State, id: &str, secret: &str) -> Result<UserInfo, String> {
    let invalid = || "invalid bootstrap token".to_string();
    let name = format!("bootstrap-token-{id}");
    let obj = cached_value(state, "secrets", Some("kube-system"), &name).ok_or_else(invalid)?;
    if obj.get("type").and_then(Value::as_str) != Some("bootstrap.kubernetes.io/token")
        || obj.pointer("/metadata/deletionTimestamp").is_some()
    {
        return Err(invalid());
    }
    let field = |key: &str| -> Option<String> {
        let b64 = obj.get("data")?.get(key)?.as_str()?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        String::from_utf8(bytes).ok()
    };
    if field("token-id").as_deref() != Some(id) {
        return Err(invalid());
    }
    let stored = field("token-secret").unwrap_or_default();
    if !constant_time_eq(stored.as_bytes(), secret.as_bytes()) {
        return Err(invalid());
    }
    if field("usage-bootstrap-authentication").as_deref() != Some("true") {
        return Err(invalid());
    }
    if let Some(exp) = field("expiration") {
        match tandem_core::table::parse_rfc3339(&exp) {
            Some(t) if t > now_unix() => {}
            _ => return Err("the bootstrap token has expired".to_string()),
        }
    }
    let mut groups = vec!["system:bootstrappers".to_string()];
    for g in field("auth-extra-groups").unwrap_or_default().split(',') {
        let g = g.trim();
        if g.starts_with("system:bootstrappers:") && !groups.iter().any(|x| x == g) {
            groups.push(g.to_string());
        }
    }
    Ok(UserInfo::authenticated(
        &format!("system:bootstrap:{id}"),
        "",
        groups,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_token_shape() {
        assert_eq!(
            parse_bootstrap_token("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        assert_eq!(parse_bootstrap_token("ABCDEF.0123456789abcdef"), None);
        assert_eq!(parse_bootstrap_token("abcdef.0123456789abcde"), None);
        assert_eq!(parse_bootstrap_token("a.b.c"), None);
    }

    #[test]
    fn constant_time_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
