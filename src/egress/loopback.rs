//! The egress proxy's loopback endpoint, for sandboxes without a network namespace (the
//! Landlock tier): one 127.0.0.1 TCP port per server, opened beside its unix socket, that
//! serves only clients presenting that server's secret. Landlock lets the server connect to
//! that port number and nothing else; the secret is what keeps the other local processes,
//! which can reach loopback too, from using the server's allowlist.
//!
//! This module is the pure part: the secret (random per server per start, compared in
//! constant time, never printed: its `Debug` is redacted), the credentials a client must
//! present (HTTP `Proxy-Authorization: Basic`, SOCKS5 username/password, RFC 1929), and the
//! proxy environment the server is told the endpoint by. `server` owns the listener. Never:
//! log, serialize or audit a secret.

use std::collections::BTreeMap;
use std::io::Read;

/// The user name in the proxy URL; the secret is the password.
pub const USER: &str = "palisade";

/// Bytes of randomness in a secret (hex-encoded: twice as many characters).
const SECRET_BYTES: usize = 24;

/// A per-server proxy secret: hex text, so it needs no escaping in a URL.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxySecret(String);

impl std::fmt::Debug for ProxySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProxySecret(<redacted>)")
    }
}

impl ProxySecret {
    /// A fresh secret from the kernel's random source.
    pub fn generate() -> std::io::Result<ProxySecret> {
        let mut bytes = [0u8; SECRET_BYTES];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        Ok(ProxySecret(hex::encode(bytes)))
    }

    /// A fixed secret (tests).
    pub fn from_text(text: &str) -> ProxySecret {
        ProxySecret(text.to_string())
    }

    /// The secret itself, for the server's environment only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is this secret (constant time in the candidate's content).
    pub fn matches(&self, candidate: &[u8]) -> bool {
        constant_time_eq(self.0.as_bytes(), candidate)
    }

    /// The `Proxy-Authorization` value a client with this secret sends.
    pub fn basic_credentials(&self) -> String {
        format!("Basic {}", base64(format!("{USER}:{}", self.0).as_bytes()))
    }

    /// Whether the request headers carry this secret (`Proxy-Authorization: Basic ...` for
    /// user `palisade`). A request with several such headers is refused unless all match.
    pub fn authorizes_http(&self, headers: &[(String, String)]) -> bool {
        let expected = self.basic_credentials();
        let mut found = false;
        for (name, value) in headers {
            if !name.eq_ignore_ascii_case("proxy-authorization") {
                continue;
            }
            let Some((scheme, token)) = value.trim().split_once(' ') else {
                return false;
            };
            let (_, want) = expected.split_at("Basic ".len());
            if !scheme.eq_ignore_ascii_case("basic")
                || !constant_time_eq(want.as_bytes(), token.trim().as_bytes())
            {
                return false;
            }
            found = true;
        }
        found
    }

    /// Whether a SOCKS5 username/password pair (RFC 1929) is this server's.
    pub fn authorizes_socks(&self, user: &[u8], password: &[u8]) -> bool {
        // Both compared, whatever the first says.
        let user_ok = user == USER.as_bytes();
        let password_ok = self.matches(password);
        user_ok & password_ok
    }
}

/// A server's loopback endpoint: where it is and what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopbackEndpoint {
    pub port: u16,
    pub secret: ProxySecret,
}

impl LoopbackEndpoint {
    /// The proxy variables the server is given: HTTP(S) through the HTTP proxy, everything
    /// else through SOCKS5 with remote resolution, both on the one port, both with the
    /// secret. Upper and lower case, as programs read either.
    pub fn env(&self) -> BTreeMap<String, String> {
        let auth = format!("{USER}:{}@127.0.0.1:{}", self.secret.expose(), self.port);
        super::wiring::proxy_env(&format!("http://{auth}"), &format!("socks5h://{auth}"))
    }
}

/// Equal length and content, in time that depends on the length only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Standard base64 with padding (RFC 4648), as HTTP Basic credentials use it.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), enc, "{plain}");
        }
    }

    #[test]
    fn secrets_are_random_hex_and_never_printed() {
        let a = ProxySecret::generate().unwrap();
        let b = ProxySecret::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 2 * SECRET_BYTES);
        assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
        let ep = LoopbackEndpoint {
            port: 4242,
            secret: a.clone(),
        };
        let shown = format!("{ep:?} {a:?}");
        assert!(!shown.contains(a.expose()), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
    }

    #[test]
    fn http_credentials_must_name_the_user_and_the_secret() {
        let s = ProxySecret::from_text("s3cret");
        // curl's header for http://palisade:s3cret@...
        let good = vec![(
            "Proxy-Authorization".to_string(),
            "Basic cGFsaXNhZGU6czNjcmV0".to_string(),
        )];
        assert_eq!(s.basic_credentials(), "Basic cGFsaXNhZGU6czNjcmV0");
        assert!(s.authorizes_http(&good));
        let lower = vec![(
            "proxy-authorization".to_string(),
            "basic cGFsaXNhZGU6czNjcmV0".to_string(),
        )];
        assert!(s.authorizes_http(&lower));
        let other = ProxySecret::from_text("other");
        assert!(!other.authorizes_http(&good), "another server's secret");
        assert!(!s.authorizes_http(&[]), "no credentials");
        let wrong_user = vec![(
            "Proxy-Authorization".to_string(),
            format!("Basic {}", base64(b"admin:s3cret")),
        )];
        assert!(!s.authorizes_http(&wrong_user));
        let bearer = vec![(
            "Proxy-Authorization".to_string(),
            "Bearer s3cret".to_string(),
        )];
        assert!(!s.authorizes_http(&bearer));
        let mut twice = good.clone();
        twice.push(("Proxy-Authorization".into(), "Basic eDp5".into()));
        assert!(!s.authorizes_http(&twice), "a second, wrong header refuses");
    }

    #[test]
    fn socks_credentials_must_name_the_user_and_the_secret() {
        let s = ProxySecret::from_text("s3cret");
        assert!(s.authorizes_socks(b"palisade", b"s3cret"));
        assert!(!s.authorizes_socks(b"palisade", b"s3cre"));
        assert!(!s.authorizes_socks(b"root", b"s3cret"));
        assert!(!s.authorizes_socks(b"", b""));
    }

    #[test]
    fn golden_env() {
        let ep = LoopbackEndpoint {
            port: 40123,
            secret: ProxySecret::from_text("abc"),
        };
        let env: Vec<(String, String)> = ep.env().into_iter().collect();
        let http = "http://palisade:abc@127.0.0.1:40123";
        let socks = "socks5h://palisade:abc@127.0.0.1:40123";
        let no = "localhost,127.0.0.1";
        let want: Vec<(String, String)> = [
            ("ALL_PROXY", socks),
            ("HTTPS_PROXY", http),
            ("HTTP_PROXY", http),
            ("NO_PROXY", no),
            ("all_proxy", socks),
            ("http_proxy", http),
            ("https_proxy", http),
            ("no_proxy", no),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(env, want);
    }
}
