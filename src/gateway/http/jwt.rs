//! OAuth 2.1 resource-server mode of the HTTP front: a bearer token that is a JWT access
//! token is accepted when its signature verifies against a key of the configured JWKS, and
//! its issuer, audience (this resource), expiry and scopes are right. The principal is its
//! `sub`. Only asymmetric algorithms: a shared-secret (`HS*`) or unsigned (`none`) token is
//! refused, as is a key whose own `alg` disagrees with the token's header.
//!
//! Pure once loaded (`load` reads the JWKS file).

use std::path::Path;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::tokens::valid_principal;

/// What the front checks an access token against.
#[derive(Clone)]
pub struct JwtVerifier {
    keys: Vec<(Option<String>, Option<Algorithm>, DecodingKey)>,
    pub issuer: String,
    pub audience: String,
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("keys", &self.keys.len())
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("scopes", &self.scopes)
            .finish()
    }
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Vec<String>>,
}

const ASYMMETRIC: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

impl JwtVerifier {
    /// Reads the JWKS at `jwks`; every key must be usable.
    pub fn load(
        jwks: &Path,
        issuer: String,
        audience: String,
        scopes: Vec<String>,
    ) -> Result<JwtVerifier, String> {
        let text = std::fs::read_to_string(jwks).map_err(|e| format!("{}: {e}", jwks.display()))?;
        JwtVerifier::from_jwks(&text, issuer, audience, scopes)
            .map_err(|e| format!("{}: {e}", jwks.display()))
    }

    pub fn from_jwks(
        text: &str,
        issuer: String,
        audience: String,
        scopes: Vec<String>,
    ) -> Result<JwtVerifier, String> {
        let set: JwkSet = serde_json::from_str(text).map_err(|e| format!("not a JWKS: {e}"))?;
        if set.keys.is_empty() {
            return Err("the JWKS holds no key".into());
        }
        let mut keys = Vec::new();
        for jwk in &set.keys {
            let kid = jwk.common.key_id.clone();
            let key = DecodingKey::from_jwk(jwk)
                .map_err(|e| format!("key {}: {e}", kid.as_deref().unwrap_or("(no kid)")))?;
            let alg = jwk
                .common
                .key_algorithm
                .and_then(|a| Algorithm::try_from(a).ok());
            keys.push((kid, alg, key));
        }
        if issuer.is_empty() || audience.is_empty() {
            return Err("an issuer and an audience (this resource) are required".into());
        }
        Ok(JwtVerifier {
            keys,
            issuer,
            audience,
            scopes,
        })
    }

    /// The principal of a valid token, or why it is not valid (never the token itself).
    pub fn verify(&self, token: &str) -> Result<String, String> {
        let header = decode_header(token).map_err(|_| "not a JWT".to_string())?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(format!("algorithm {:?} is not accepted", header.alg));
        }
        let key = match (&header.kid, self.keys.len()) {
            (Some(kid), _) => self.keys.iter().find(|(k, _, _)| k.as_deref() == Some(kid)),
            (None, 1) => self.keys.first(),
            (None, _) => None,
        }
        .ok_or_else(|| "no key of the JWKS matches the token's kid".to_string())?;
        if key.1.is_some_and(|a| a != header.alg) {
            return Err("the token's algorithm is not its key's".into());
        }
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.leeway = 30;
        let data = decode::<Claims>(token, &key.2, &v).map_err(|e| format!("{e}"))?;
        let granted: Vec<String> = match (data.claims.scope, data.claims.scp) {
            (Some(s), _) => s.split_whitespace().map(str::to_string).collect(),
            (None, Some(v)) => v,
            (None, None) => Vec::new(),
        };
        if let Some(missing) = self.scopes.iter().find(|s| !granted.contains(s)) {
            return Err(format!("the token lacks the scope `{missing}`"));
        }
        Ok(principal_of(&data.claims.sub))
    }

    /// RFC 9728 protected-resource metadata.
    pub fn metadata(&self) -> serde_json::Value {
        serde_json::json!({
            "resource": self.audience,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
            "scopes_supported": self.scopes,
        })
    }
}

/// A `sub` as a principal name: as it is when it is a safe directory name, else `sub-` and
/// the start of its SHA-256 (`auth0|123` must not name a path).
pub fn principal_of(sub: &str) -> String {
    if valid_principal(sub) {
        sub.to_string()
    } else {
        format!("sub-{}", &hex::encode(Sha256::digest(sub.as_bytes()))[..24])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_subjects_become_hashed_principals() {
        assert_eq!(principal_of("alice"), "alice");
        let p = principal_of("auth0|12/../x");
        assert!(
            p.starts_with("sub-") && p.len() == 28 && valid_principal(&p),
            "{p}"
        );
        assert_eq!(p, principal_of("auth0|12/../x"));
    }

    #[test]
    fn a_jwks_without_keys_or_audience_is_refused() {
        let e = JwtVerifier::from_jwks(r#"{"keys": []}"#, "i".into(), "a".into(), vec![]);
        assert!(e.unwrap_err().contains("no key"));
        let e = JwtVerifier::from_jwks("nope", "i".into(), "a".into(), vec![]);
        assert!(e.unwrap_err().contains("not a JWKS"));
    }
}
