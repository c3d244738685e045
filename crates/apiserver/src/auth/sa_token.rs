//! ServiceAccount tokens: the signing key, issuing bound tokens (the TokenRequest API) and
//! verifying them, and the OIDC discovery documents, as kube-apiserver's
//! `pkg/serviceaccount` (`claims.go`, `jwt.go`) and `--service-account-issuer` do.
//!
//! Tokens are ES256 JWTs signed by a key kept in `<data-dir>/pki/sa.key` (created on first start;
//! upstream takes `--service-account-signing-key-file`). Their claims are upstream's: `iss`,
//! `sub` (`system:serviceaccount:<ns>:<name>`), `aud`, `exp`, `iat`, `nbf`, `jti` and the private
//! `kubernetes.io` claim naming the namespace, the ServiceAccount and the object the token is
//! bound to (a Pod, Secret or Node) with their UIDs. Verification checks the signature, issuer,
//! audience and times here; that the ServiceAccount and the bound object still exist with those
//! UIDs is checked by the authenticator against the watch cache.

use std::path::Path;

use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rcgen::{KeyPair, PublicKeyData};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::pki::PkiError;

/// The issuer (and default audience) of tokens: kubeadm's default `--service-account-issuer`.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Seconds of clock skew accepted on `exp` and `nbf`, as upstream's validator allows.
const LEEWAY_SECONDS: u64 = 60;

/// Signs and verifies ServiceAccount tokens.
pub struct TokenIssuer {
    issuer: String,
    key_id: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// The public key's coordinates (base64url), for the JWKS document.
    x: String,
    y: String,
}

impl std::fmt::Debug for TokenIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIssuer")
            .field("issuer", &self.issuer)
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// What a token is bound to (`kubernetes.io.pod`, `.secret`, `.node`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundRef {
    pub name: String,
    pub uid: String,
}

/// The `kubernetes.io` private claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaim {
    pub namespace: String,
    pub serviceaccount: BoundRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<BoundRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<BoundRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<BoundRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnafter: Option<i64>,
}

/// Every claim of a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub nbf: i64,
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaim,
}

/// Why a token was not accepted (the message a TokenReview reports).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("token is not a JWT signed by this cluster's service account issuer")]
    NotOurs,
    #[error("service account token has expired")]
    Expired,
    #[error("service account token is not valid yet")]
    NotYetValid,
    #[error("token audiences {token:?} is invalid for the target audiences {wanted:?}")]
    Audience {
        token: Vec<String>,
        wanted: Vec<String>,
    },
    #[error("{0}")]
    Invalid(String),
}

impl TokenIssuer {
    /// Loads the signing key from `pki_dir/sa.key`, creating it on first use.
    pub fn load_or_create(pki_dir: &Path, issuer: &str) -> Result<TokenIssuer, PkiError> {
        let path = pki_dir.join("sa.key");
        let pem = match std::fs::read_to_string(&path) {
            Ok(pem) => pem,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = KeyPair::generate()?;
                let pem = key.serialize_pem();
                crate::pki::write_private(&path, &pem)?;
                pem
            }
            Err(source) => return Err(PkiError::Io { path, source }),
        };
        let key = KeyPair::from_pem(&pem)?;
        Self::from_key(&key, issuer).ok_or(PkiError::Invalid {
            path,
            what: "ECDSA P-256 service account key",
        })
    }

    /// An issuer signing with `key` (ECDSA P-256).
    pub fn from_key(key: &KeyPair, issuer: &str) -> Option<TokenIssuer> {
        let raw = key.public_key_raw();
        // An uncompressed P-256 point: 0x04, then 32 bytes of x and 32 of y.
        if raw.len() != 65 || raw[0] != 4 {
            return None;
        }
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let digest = ring::digest::digest(&ring::digest::SHA256, &key.subject_public_key_info());
        Some(TokenIssuer {
            issuer: issuer.to_string(),
            key_id: b64.encode(digest.as_ref()),
            encoding: EncodingKey::from_ec_der(&key.serialize_der()),
            decoding: DecodingKey::from_ec_der(raw),
            x: b64.encode(&raw[1..33]),
            y: b64.encode(&raw[33..65]),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Signs `claims` (their `iss` is set to this issuer).
    pub fn sign(&self, mut claims: Claims) -> Result<String, TokenError> {
        claims.iss = self.issuer.clone();
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.key_id.clone());
        jsonwebtoken::encode(&header, &claims, &self.encoding)
            .map_err(|e| TokenError::Invalid(format!("cannot sign the token: {e}")))
    }

    /// Verifies signature, issuer, times and audiences (`audiences` empty = this issuer's
    /// default audience) and returns the claims. Does not look at the cluster's objects.
    pub fn verify(
        &self,
        token: &str,
        audiences: &[String],
        now: i64,
    ) -> Result<Claims, TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::NotOurs)?;
        if header.alg != Algorithm::ES256 {
            return Err(TokenError::NotOurs);
        }
        let mut validation = Validation::new(Algorithm::ES256);
        // Times and audiences are checked below, with upstream's messages.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        validation.set_issuer(&[&self.issuer]);
        let data = jsonwebtoken::decode::<Value>(token, &self.decoding, &validation)
            .map_err(|_| TokenError::NotOurs)?;
        let claims: Claims = serde_json::from_value(normalize_audience(data.claims))
            .map_err(|e| TokenError::Invalid(format!("malformed service account claims: {e}")))?;
        let leeway = LEEWAY_SECONDS as i64;
        if now > claims.exp + leeway {
            return Err(TokenError::Expired);
        }
        if now + leeway < claims.nbf {
            return Err(TokenError::NotYetValid);
        }
        let default = [self.issuer.clone()];
        let wanted = if audiences.is_empty() {
            &default[..]
        } else {
            audiences
        };
        if !claims.aud.iter().any(|a| wanted.contains(a)) {
            return Err(TokenError::Audience {
                token: claims.aud.clone(),
                wanted: wanted.to_vec(),
            });
        }
        Ok(claims)
    }

    /// `/.well-known/openid-configuration`: upstream's discovery document for the issuer.
    pub fn openid_configuration(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "jwks_uri": format!("{}/openid/v1/jwks", self.issuer.trim_end_matches('/')),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    }

    /// `/openid/v1/jwks`: the public key.
    pub fn jwks(&self) -> Value {
        json!({
            "keys": [{
                "use": "sig",
                "kty": "EC",
                "kid": self.key_id,
                "crv": "P-256",
                "alg": "ES256",
                "x": self.x,
                "y": self.y,
            }]
        })
    }
}

/// `aud` may be a string or a list in a JWT; the claims type wants a list.
fn normalize_audience(mut claims: Value) -> Value {
    if let Some(aud) = claims.get_mut("aud")
        && let Some(one) = aud.as_str()
    {
        *aud = json!([one]);
    }
    claims
}

/// The user name of a ServiceAccount, `system:serviceaccount:<ns>:<name>`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// Splits `system:serviceaccount:<ns>:<name>` into its namespace and name.
pub fn split_service_account_user(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

/// The groups every ServiceAccount of `namespace` is in.
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{namespace}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer() -> TokenIssuer {
        let key = KeyPair::generate().expect("key");
        TokenIssuer::from_key(&key, DEFAULT_ISSUER).expect("issuer")
    }

    fn claims(now: i64, aud: &[&str]) -> Claims {
        Claims {
            iss: String::new(),
            sub: service_account_user("default", "web"),
            aud: aud.iter().map(|s| s.to_string()).collect(),
            exp: now + 3600,
            iat: now,
            nbf: now,
            jti: "j1".into(),
            kubernetes: KubernetesClaim {
                namespace: "default".into(),
                serviceaccount: BoundRef {
                    name: "web".into(),
                    uid: "sa-uid".into(),
                },
                pod: Some(BoundRef {
                    name: "p".into(),
                    uid: "pod-uid".into(),
                }),
                secret: None,
                node: None,
                warnafter: None,
            },
        }
    }

    #[test]
    fn a_signed_token_verifies_with_its_claims() {
        let i = issuer();
        let now = 1_700_000_000;
        let token = i.sign(claims(now, &[DEFAULT_ISSUER])).expect("sign");
        let got = i.verify(&token, &[], now + 10).expect("verify");
        assert_eq!(got.iss, DEFAULT_ISSUER);
        assert_eq!(got.kubernetes.pod.map(|p| p.uid), Some("pod-uid".into()));
    }

    #[test]
    fn expiry_audience_and_forgery_are_refused() {
        let i = issuer();
        let now = 1_700_000_000;
        let token = i.sign(claims(now, &["vault"])).expect("sign");
        assert_eq!(
            i.verify(&token, &[], now),
            Err(TokenError::Audience {
                token: vec!["vault".into()],
                wanted: vec![DEFAULT_ISSUER.into()]
            })
        );
        assert!(i.verify(&token, &["vault".into()], now).is_ok());
        assert_eq!(
            i.verify(&token, &["vault".into()], now + 3600 + 61),
            Err(TokenError::Expired)
        );
        // Signed by another key: not ours.
        let other = issuer();
        let forged = other.sign(claims(now, &[DEFAULT_ISSUER])).expect("sign");
        assert_eq!(i.verify(&forged, &[], now), Err(TokenError::NotOurs));
        // A tampered payload breaks the signature.
        let mut parts: Vec<&str> = token.split('.').collect();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let payload = b64.encode(br#"{"sub":"system:serviceaccount:kube-system:admin"}"#);
        parts[1] = &payload;
        assert_eq!(
            i.verify(&parts.join("."), &[], now),
            Err(TokenError::NotOurs)
        );
        assert_eq!(i.verify("garbage", &[], now), Err(TokenError::NotOurs));
    }

    #[test]
    fn jwks_publishes_the_verifying_key() {
        let i = issuer();
        let jwks = i.jwks();
        let key = &jwks["keys"][0];
        let x = key["x"].as_str().expect("x");
        let y = key["y"].as_str().expect("y");
        let decoding = DecodingKey::from_ec_components(x, y).expect("key");
        let now = 1_700_000_000;
        let token = i.sign(claims(now, &[DEFAULT_ISSUER])).expect("sign");
        let mut v = Validation::new(Algorithm::ES256);
        v.validate_exp = false;
        v.set_audience(&[DEFAULT_ISSUER]);
        assert!(jsonwebtoken::decode::<Value>(&token, &decoding, &v).is_ok());
        assert_eq!(
            i.openid_configuration()["jwks_uri"],
            format!("{DEFAULT_ISSUER}/openid/v1/jwks")
        );
    }

    #[test]
    fn service_account_user_names_round_trip() {
        assert_eq!(
            split_service_account_user("system:serviceaccount:ns:sa"),
            Some(("ns", "sa"))
        );
        assert_eq!(split_service_account_user("system:serviceaccount:ns"), None);
        assert_eq!(split_service_account_user("jane"), None);
    }
}
