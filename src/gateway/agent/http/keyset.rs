//! The signing keys of a JWKS document, parsed once: what a JWKS file (`jwt::load`) and a
//! JWKS fetched from a URL (`jwks.rs`) both become, and what the verifier (`jwt.rs`) checks a
//! token's signature against. Pure.
//!
//! Never: keep a key that cannot be used, or an empty set (the document is refused whole).

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey};

/// The signing keys of a JWKS, each with its `kid` and `alg` when it names them.
pub struct KeySet {
    pub(super) keys: Vec<(Option<String>, Option<Algorithm>, DecodingKey)>,
}

/// Why a JWKS document cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeySetError {
    #[error("not a JWKS: {0}")]
    NotJwks(serde_json::Error),
    #[error("the JWKS holds no key")]
    Empty,
    #[error("key {kid}: {cause}")]
    Key {
        kid: String,
        cause: jsonwebtoken::errors::Error,
    },
}

impl KeySet {
    /// A JWKS document's keys; every key must be usable, and there must be one.
    pub fn parse(text: &str) -> Result<KeySet, KeySetError> {
        let set: JwkSet = serde_json::from_str(text).map_err(KeySetError::NotJwks)?;
        if set.keys.is_empty() {
            return Err(KeySetError::Empty);
        }
        let mut keys = Vec::new();
        for jwk in &set.keys {
            let kid = jwk.common.key_id.clone();
            let key = DecodingKey::from_jwk(jwk).map_err(|source| KeySetError::Key {
                kid: kid.as_deref().unwrap_or("(no kid)").to_string(),
                cause: source,
            })?;
            let alg = jwk
                .common
                .key_algorithm
                .and_then(|a| Algorithm::try_from(a).ok());
            keys.push((kid, alg, key));
        }
        Ok(KeySet { keys })
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}
