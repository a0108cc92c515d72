//! OAuth 2.1 resource-server mode of the HTTP front: a bearer token that is a JWT access
//! token is accepted when its signature verifies against a key of the configured JWKS, and
//! its issuer, audience (this resource), expiry and scopes are right. The principal is its
//! `sub`. Only asymmetric algorithms: a shared-secret (`HS*`) or unsigned (`none`) token is
//! refused, as is a key whose own `alg` disagrees with the token's header.
//!
//! The keys come from a JWKS file read at start (`load`) or from a URL (`jwks::JwksSource`,
//! fetched at start and again for an unknown key id).
//!
//! Pure once loaded (`load` reads the JWKS file), apart from the URL source's fetches.

use std::path::Path;
use std::sync::Arc;

use jsonwebtoken::{decode, decode_header, Algorithm, Validation};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::tokens::valid_principal;

pub use super::keyset::{KeySet, KeySetError};

/// Why a verifier cannot be set up (refused at start).
#[derive(Debug, thiserror::Error)]
pub enum VerifierError {
    #[error(transparent)]
    Keys(#[from] KeySetError),
    #[error("an issuer and an audience (this resource) are required")]
    IssuerAndAudience,
    #[error("{}: {cause}", path.display())]
    Read {
        path: std::path::PathBuf,
        cause: std::io::Error,
    },
    #[error("{}: {cause}", path.display())]
    File {
        path: std::path::PathBuf,
        cause: Box<VerifierError>,
    },
}

/// Where the keys come from.
#[derive(Clone)]
enum Keys {
    /// A JWKS file, read at start.
    Fixed(Arc<KeySet>),
    /// A JWKS URL, fetched at start and on an unknown key id.
    Url(Arc<super::jwks::JwksSource>),
}

/// What the front checks an access token against.
#[derive(Clone)]
pub struct JwtVerifier {
    keys: Keys,
    pub issuer: String,
    pub audience: String,
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = match &self.keys {
            Keys::Fixed(set) => format!("{} keys", set.len()),
            Keys::Url(source) => source.url.url.clone(),
        };
        f.debug_struct("JwtVerifier")
            .field("keys", &keys)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JwtError {
    /// The token is not valid (401).
    #[error("{0}")]
    Invalid(String),
    /// No key set is known to check it against (503): the JWKS URL could not be fetched.
    #[error("cannot check access tokens now: {0}")]
    Unavailable(String),
}

/// One check against one key set.
enum Check {
    Valid(String),
    UnknownKid,
    Invalid(String),
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
    ) -> Result<JwtVerifier, VerifierError> {
        let text = std::fs::read_to_string(jwks).map_err(|source| VerifierError::Read {
            path: jwks.to_path_buf(),
            cause: source,
        })?;
        JwtVerifier::from_jwks(&text, issuer, audience, scopes).map_err(|e| VerifierError::File {
            path: jwks.to_path_buf(),
            cause: Box::new(e),
        })
    }

    pub fn from_jwks(
        text: &str,
        issuer: String,
        audience: String,
        scopes: Vec<String>,
    ) -> Result<JwtVerifier, VerifierError> {
        let set = KeySet::parse(text)?;
        JwtVerifier::new(Keys::Fixed(Arc::new(set)), issuer, audience, scopes)
    }

    /// Keys from a JWKS URL, fetched on first need (see `prefetch`).
    pub fn from_url(
        source: super::jwks::JwksSource,
        issuer: String,
        audience: String,
        scopes: Vec<String>,
    ) -> Result<JwtVerifier, VerifierError> {
        JwtVerifier::new(Keys::Url(Arc::new(source)), issuer, audience, scopes)
    }

    fn new(
        keys: Keys,
        issuer: String,
        audience: String,
        scopes: Vec<String>,
    ) -> Result<JwtVerifier, VerifierError> {
        if issuer.is_empty() || audience.is_empty() {
            return Err(VerifierError::IssuerAndAudience);
        }
        Ok(JwtVerifier {
            keys,
            issuer,
            audience,
            scopes,
        })
    }

    /// The first fetch of a URL's keys, at start; a failure is logged (requests are refused
    /// until a later fetch succeeds), not fatal.
    pub async fn prefetch(&self) {
        if let Keys::Url(source) = &self.keys {
            let _ = source.refresh().await;
        }
    }

    /// The principal of a valid token, or why it is not accepted (never the token itself).
    pub async fn verify(&self, token: &str) -> Result<String, JwtError> {
        let source = match &self.keys {
            Keys::Fixed(set) => return self.verify_with(set, token),
            Keys::Url(source) => source,
        };
        let set = match source.keys() {
            Some(set) => set,
            None => source.refresh().await.map_err(JwtError::Unavailable)?,
        };
        match self.check(&set, token) {
            Check::Valid(p) => Ok(p),
            Check::Invalid(why) => Err(JwtError::Invalid(why)),
            // Perhaps a rotated key: fetch again (rate-limited) and check once more.
            Check::UnknownKid => match source.refresh().await {
                Ok(newer) if !Arc::ptr_eq(&newer, &set) => self.verify_with(&newer, token),
                _ => Err(JwtError::Invalid(UNKNOWN_KID.into())),
            },
        }
    }

    fn verify_with(&self, set: &KeySet, token: &str) -> Result<String, JwtError> {
        match self.check(set, token) {
            Check::Valid(p) => Ok(p),
            Check::Invalid(why) => Err(JwtError::Invalid(why)),
            Check::UnknownKid => Err(JwtError::Invalid(UNKNOWN_KID.into())),
        }
    }

    fn check(&self, set: &KeySet, token: &str) -> Check {
        match self.check_inner(set, token) {
            Ok(p) => Check::Valid(p),
            Err(None) => Check::UnknownKid,
            Err(Some(why)) => Check::Invalid(why),
        }
    }

    /// `Err(None)`: no key of the set matches the token's kid.
    fn check_inner(&self, set: &KeySet, token: &str) -> Result<String, Option<String>> {
        let header = decode_header(token).map_err(|_| Some("not a JWT".to_string()))?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(Some(format!("algorithm {:?} is not accepted", header.alg)));
        }
        let keys = &set.keys;
        let key = match (&header.kid, keys.len()) {
            (Some(kid), _) => keys.iter().find(|(k, _, _)| k.as_deref() == Some(kid)),
            (None, 1) => keys.first(),
            (None, _) => None,
        }
        .ok_or(None)?;
        if key.1.is_some_and(|a| a != header.alg) {
            return Err(Some("the token's algorithm is not its key's".into()));
        }
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        // A token not valid yet (`nbf` in the future, past the leeway) is refused too.
        v.validate_nbf = true;
        v.leeway = 30;
        let data = decode::<Claims>(token, &key.2, &v).map_err(|e| Some(format!("{e}")))?;
        let granted: Vec<String> = match (data.claims.scope, data.claims.scp) {
            (Some(s), _) => s.split_whitespace().map(str::to_string).collect(),
            (None, Some(v)) => v,
            (None, None) => Vec::new(),
        };
        if let Some(missing) = self.scopes.iter().find(|s| !granted.contains(s)) {
            return Err(Some(format!("the token lacks the scope `{missing}`")));
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

const UNKNOWN_KID: &str = "no key of the JWKS matches the token's kid";

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
        assert!(e.unwrap_err().to_string().contains("no key"));
        let e = JwtVerifier::from_jwks("nope", "i".into(), "a".into(), vec![]);
        assert!(e.unwrap_err().to_string().contains("not a JWKS"));
    }
}
