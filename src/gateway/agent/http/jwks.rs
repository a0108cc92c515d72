//! A JWKS fetched from a URL (`--jwks-url`, `jwksUrl`) for the HTTP front's resource-server
//! mode: fetched at start, and again when a token names a key id the set does not hold (key
//! rotation), at most once per `jwksRefetch` seconds whoever asks, each fetch bounded by
//! `FETCH_TIMEOUT`. While no set could ever be fetched, JWT requests are refused (the reason
//! logged and sent); a failed refetch keeps the last good set.
//!
//! Only `http://` on a loopback address: keys fetched in clear text from elsewhere could be
//! replaced in transit and would then admit anyone, and palisade carries no TLS client.
//! A sidecar on loopback (or the issuer's JWKS saved to a file, `--jwks`) serves the rest.
//!
//! Pure except `fetch` and `JwksSource::refresh`: URL checks, response parsing and the
//! refetch decision are plain functions.
//!
//! Never: admit a token while no key set is known, or fetch more often than the rate allows
//! however many unknown key ids arrive.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::jwt::KeySet;

/// A fetch (connect, send, read to the end) that takes longer fails.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// A JWKS response larger than this is refused.
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Where the JWKS is: a loopback `http://` URL.
#[derive(Debug, Clone, PartialEq)]
pub struct JwksUrl {
    pub url: String,
    host: String,
    port: u16,
    /// The path and query, as sent in the request line.
    target: String,
}

impl JwksUrl {
    pub fn parse(text: &str) -> Result<JwksUrl, String> {
        let url = url::Url::parse(text).map_err(|e| format!("{text}: not a URL ({e})"))?;
        if url.scheme() != "http" {
            return Err(format!(
                "{text}: only http:// on a loopback address is fetched (palisade has no TLS \
                 client); serve the JWKS through a loopback sidecar or save it to a file (--jwks)"
            ));
        }
        let (host, loopback) = match url.host() {
            Some(url::Host::Ipv4(ip)) => (ip.to_string(), ip.is_loopback()),
            Some(url::Host::Ipv6(ip)) => (ip.to_string(), ip.is_loopback()),
            Some(url::Host::Domain(d)) => (d.to_string(), d.eq_ignore_ascii_case("localhost")),
            None => (String::new(), false),
        };
        if !loopback {
            return Err(format!(
                "{text}: a JWKS over plain HTTP from a host other than loopback could be \
                 replaced in transit (and then admit anyone); serve it on loopback or save it \
                 to a file (--jwks)"
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!("{text}: credentials in the URL are not sent"));
        }
        let mut target = url.path().to_string();
        if let Some(q) = url.query() {
            target.push('?');
            target.push_str(q);
        }
        Ok(JwksUrl {
            url: text.to_string(),
            host,
            port: url.port_or_known_default().unwrap_or(80),
            target,
        })
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// One GET of the JWKS: the response body, or why there is none.
pub async fn fetch(url: &JwksUrl) -> Result<String, String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect((url.host.as_str(), url.port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        // HTTP/1.0: the answer is never chunked and ends when the connection closes.
        let request = format!(
            "GET {} HTTP/1.0\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: palisade\r\n\r\n",
            url.target,
            url.authority()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("cannot send the request: {e}"))?;
        let mut buf = Vec::new();
        (&mut stream)
            .take(MAX_RESPONSE_BYTES as u64 + 1)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| format!("cannot read the answer: {e}"))?;
        Ok::<_, String>(buf)
    };
    let buf = tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no complete answer within {FETCH_TIMEOUT:?}"))??;
    response_body(&buf)
}

/// The body of a complete `200` response, or why it is not one.
pub fn response_body(raw: &[u8]) -> Result<String, String> {
    if raw.len() > MAX_RESPONSE_BYTES {
        return Err(format!("the answer is over {MAX_RESPONSE_BYTES} bytes"));
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("not an HTTP response")?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|_| "not an HTTP response")?;
    let body = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or("");
    let mut words = status.split_whitespace();
    let (Some(version), Some(code)) = (words.next(), words.next()) else {
        return Err("not an HTTP response".into());
    };
    if !version.starts_with("HTTP/1.") {
        return Err("not an HTTP/1 response".into());
    }
    if code != "200" {
        return Err(format!("the answer is `{status}`, not 200"));
    }
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err("a malformed header line".into());
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(format!(
                "an HTTP/1.0 request answered with Transfer-Encoding {value}"
            ));
        }
        if name.eq_ignore_ascii_case("content-length") {
            let want: usize = value.parse().map_err(|_| "a malformed Content-Length")?;
            if want != body.len() {
                return Err(format!(
                    "the answer was cut: {} of {want} bytes",
                    body.len()
                ));
            }
        }
    }
    String::from_utf8(body.to_vec()).map_err(|_| "the body is not UTF-8".into())
}

/// Whether a fetch may start now, the last one having started at `last`.
pub fn may_fetch(last: Option<Instant>, now: Instant, min_interval: Duration) -> bool {
    last.is_none_or(|at| now.saturating_duration_since(at) >= min_interval)
}

#[derive(Default)]
struct State {
    keys: Option<Arc<KeySet>>,
    last_attempt: Option<Instant>,
    last_error: Option<String>,
}

/// The JWKS at a URL, as last fetched.
pub struct JwksSource {
    pub url: JwksUrl,
    min_interval: Duration,
    state: Mutex<State>,
    /// One fetch at a time; those who waited then see its result.
    fetching: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for JwksSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwksSource")
            .field("url", &self.url.url)
            .field("min_interval", &self.min_interval)
            .finish()
    }
}

impl JwksSource {
    pub fn new(url: JwksUrl, min_interval: Duration) -> JwksSource {
        JwksSource {
            url,
            min_interval,
            state: Mutex::default(),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The last set fetched, if any.
    pub fn keys(&self) -> Option<Arc<KeySet>> {
        self.state().keys.clone()
    }

    /// Fetches the set again if the rate allows, and returns the set known afterwards (the
    /// old one when the rate does not allow or the fetch fails); `Err` with the reason while
    /// no set was ever fetched.
    pub async fn refresh(&self) -> Result<Arc<KeySet>, String> {
        let _one = self.fetching.lock().await;
        let allowed = may_fetch(self.state().last_attempt, Instant::now(), self.min_interval);
        if allowed {
            self.state().last_attempt = Some(Instant::now());
            let fetched = fetch(&self.url).await.and_then(|text| KeySet::parse(&text));
            let mut st = self.state();
            match fetched {
                Ok(set) => {
                    tracing::info!(url = %self.url.url, keys = set.len(), "JWKS fetched");
                    st.keys = Some(Arc::new(set));
                    st.last_error = None;
                }
                Err(why) => {
                    tracing::warn!(
                        url = %self.url.url,
                        "cannot fetch the JWKS: {why}{}",
                        if st.keys.is_some() { "; keeping the last set" } else { "; JWT requests are refused until it can be fetched" }
                    );
                    st.last_error = Some(why);
                }
            }
        }
        let st = self.state();
        st.keys.clone().ok_or_else(|| {
            format!(
                "the JWKS at {} could not be fetched ({}); retried at most every {:?}",
                self.url.url,
                st.last_error.as_deref().unwrap_or("not fetched yet"),
                self.min_interval
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_http_urls_are_fetched() {
        let u = JwksUrl::parse("http://127.0.0.1:8081/keys/jwks.json?x=1").unwrap();
        assert_eq!((u.port, u.target.as_str()), (8081, "/keys/jwks.json?x=1"));
        assert_eq!(u.authority(), "127.0.0.1:8081");
        let u = JwksUrl::parse("http://[::1]/jwks").unwrap();
        assert_eq!(
            (u.authority().as_str(), u.target.as_str()),
            ("[::1]:80", "/jwks")
        );
        assert!(JwksUrl::parse("http://localhost:9/j").is_ok());
        for (bad, why) in [
            ("https://issuer.example/jwks", "no TLS"),
            ("http://issuer.example/jwks", "replaced in transit"),
            ("http://10.0.0.1/jwks", "replaced in transit"),
            ("http://u:p@127.0.0.1/jwks", "credentials"),
            ("file:///etc/jwks", "only http://"),
            ("nope", "not a URL"),
        ] {
            let e = JwksUrl::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn only_a_complete_200_answer_is_a_body() {
        let ok =
            b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(response_body(ok).unwrap(), "{}");
        let no_length = b"HTTP/1.1 200 OK\r\n\r\n{\"keys\":[]}";
        assert_eq!(response_body(no_length).unwrap(), "{\"keys\":[]}");
        for (raw, why) in [
            (&b"HTTP/1.0 404 Not Found\r\n\r\n"[..], "not 200"),
            (b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\n{}", "cut"),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
                "Transfer-Encoding",
            ),
            (b"HTTP/1.0 200 OK\r\n", "not an HTTP response"),
            (b"SSH-2.0 x\r\n\r\n", "not an HTTP/1"),
        ] {
            let e = response_body(raw).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        let huge = vec![b'x'; MAX_RESPONSE_BYTES + 1];
        assert!(response_body(&huge).unwrap_err().contains("over"));
    }

    #[test]
    fn fetches_are_spaced_by_the_minimum_interval() {
        let t0 = Instant::now();
        let min = Duration::from_secs(30);
        assert!(may_fetch(None, t0, min));
        assert!(!may_fetch(Some(t0), t0 + Duration::from_secs(29), min));
        assert!(may_fetch(Some(t0), t0 + Duration::from_secs(30), min));
        assert!(may_fetch(Some(t0), t0, Duration::ZERO));
    }
}
