//! A JWKS fetched from a URL (`--jwks-url`, `jwksUrl`) for the HTTP front's resource-server
//! mode: fetched at start, and again when a token names a key id the set does not hold (key
//! rotation), at most once per `jwksRefetch` seconds whoever asks, each fetch bounded by
//! `FETCH_TIMEOUT` and `MAX_RESPONSE_BYTES`. While no set could ever be fetched, JWT requests
//! are refused (the reason logged and sent); a failed refetch keeps the last good set.
//!
//! `https://` to any host, its certificate always verified (`tls_client`: the system trust
//! store plus `--jwks-ca FILE`); a TLS failure (unknown CA, wrong host name, expired) is a
//! failed fetch, its reason logged. `http://` only on a loopback address: keys fetched in
//! clear text from elsewhere could be replaced in transit and would then admit anyone.
//! One GET (HTTP/1.1, `Connection: close`; the answer ends at its `Content-Length`, its last
//! chunk or the close) over either stream, read by one function; redirects are not followed
//! (a `3xx` is a failure).
//!
//! Pure except `fetch` and `JwksSource::refresh`: URL checks, response parsing and the
//! refetch decision are plain functions.
//!
//! Never: admit a token while no key set is known, fetch keys in clear text from another
//! host, skip certificate verification, or fetch more often than the rate allows however many
//! unknown key ids arrive.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::keyset::KeySet;
use super::proxy::Proxy;
use super::tls_client::TlsClient;

/// A fetch (connect, handshake, send, read to the end) that takes longer fails.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// A JWKS response larger than this is refused.
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// How the JWKS is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP, on a loopback address only.
    Http,
    /// HTTP over TLS, the server's certificate verified.
    Https,
}

impl Scheme {
    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// Where the JWKS is: an `https://` URL, or an `http://` one on a loopback address.
#[derive(Debug, Clone, PartialEq)]
pub struct JwksUrl {
    pub url: String,
    pub scheme: Scheme,
    host: String,
    port: u16,
    /// The path and query, as sent in the request line.
    target: String,
}

/// Why a JWKS URL is refused (at start; the text begins with the URL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwksUrlError {
    #[error("{url}: not a URL ({cause})")]
    NotUrl { url: String, cause: url::ParseError },
    #[error(
        "{0}: only https:// (or http:// on a loopback address) is fetched; give the issuer's \
         https:// JWKS URL or save the JWKS to a file (--jwks)"
    )]
    Scheme(String),
    #[error("{0}: names no host")]
    NoHost(String),
    #[error(
        "{0}: a JWKS over plain HTTP from a host other than loopback could be replaced in \
         transit (and then admit anyone); use the issuer's https:// URL"
    )]
    PlainHttp(String),
    #[error("{0}: credentials in the URL are not sent")]
    Credentials(String),
}

impl JwksUrl {
    pub fn parse(text: &str) -> Result<JwksUrl, JwksUrlError> {
        let url = url::Url::parse(text).map_err(|source| JwksUrlError::NotUrl {
            url: text.to_string(),
            cause: source,
        })?;
        let scheme = match url.scheme() {
            "https" => Scheme::Https,
            "http" => Scheme::Http,
            _ => return Err(JwksUrlError::Scheme(text.to_string())),
        };
        let (host, loopback) = match url.host() {
            Some(url::Host::Ipv4(ip)) => (ip.to_string(), ip.is_loopback()),
            Some(url::Host::Ipv6(ip)) => (ip.to_string(), ip.is_loopback()),
            Some(url::Host::Domain(d)) => (d.to_string(), d.eq_ignore_ascii_case("localhost")),
            None => return Err(JwksUrlError::NoHost(text.to_string())),
        };
        if scheme == Scheme::Http && !loopback {
            return Err(JwksUrlError::PlainHttp(text.to_string()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(JwksUrlError::Credentials(text.to_string()));
        }
        let mut target = url.path().to_string();
        if let Some(q) = url.query() {
            target.push('?');
            target.push_str(q);
        }
        Ok(JwksUrl {
            url: text.to_string(),
            scheme,
            host,
            port: url.port().unwrap_or(scheme.default_port()),
            target,
        })
    }

    /// The host name or address the URL names.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The `Host` header: the host, and the port unless it is the scheme's default.
    fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == self.scheme.default_port() {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// How an answer's stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The connection was closed (over TLS: with `close_notify`).
    Closed,
    /// TLS closed without `close_notify`: the end cannot be told from a cut, so the answer
    /// must say its length.
    Unannounced,
}

/// One GET of the JWKS: the response body, or why there is none. `tls` is needed for an
/// `https://` URL.
/// With `proxy` (an `https://` URL only), through a `CONNECT` tunnel of that proxy, the
/// whole exchange (proxy included) within `FETCH_TIMEOUT`.
pub async fn fetch(
    url: &JwksUrl,
    tls: Option<&TlsClient>,
    proxy: Option<&Proxy>,
) -> Result<String, String> {
    let tls = match (url.scheme, tls) {
        (Scheme::Https, None) => return Err("an https:// URL without a TLS client".into()),
        (Scheme::Https, tls) => tls,
        (Scheme::Http, _) => None,
    };
    let exchange = async {
        let tcp = match (proxy, tls) {
            (Some(p), Some(_)) => {
                let via = |why: String| {
                    format!(
                        "through the proxy {}:{} ({}): {why}",
                        p.host, p.port, p.from
                    )
                };
                let mut tcp = tokio::net::TcpStream::connect((p.host.as_str(), p.port))
                    .await
                    .map_err(|e| via(format!("cannot connect: {e}")))?;
                super::proxy::tunnel(&mut tcp, &url.host, url.port)
                    .await
                    .map_err(via)?;
                tcp
            }
            _ => tokio::net::TcpStream::connect((url.host.as_str(), url.port))
                .await
                .map_err(|e| format!("cannot connect: {e}"))?,
        };
        match tls {
            None => get(tcp, url).await,
            Some(tls) => get(tls.connect(&url.host, tcp).await?, url).await,
        }
    };
    let (raw, end) = tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no complete answer within {FETCH_TIMEOUT:?}"))??;
    response_body(&raw, end)
}

/// Sends the GET over `stream` and reads the answer to its end (at most one byte over
/// `MAX_RESPONSE_BYTES`, which `response_body` refuses).
async fn get<S>(mut stream: S, url: &JwksUrl) -> Result<(Vec<u8>, End), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // HTTP/1.1 (some CDNs answer an HTTP/1.0 request with `426 Upgrade Required`), one
    // request per connection: the answer ends at its length, its last chunk, or the close.
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: palisade\r\n\
         Connection: close\r\n\r\n",
        url.target,
        url.authority()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("cannot send the request: {e}"))?;
    stream
        .flush()
        .await
        .map_err(|e| format!("cannot send the request: {e}"))?;
    let mut raw = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    let end = loop {
        match stream.read(&mut chunk).await {
            Ok(0) => break End::Closed,
            Ok(n) => {
                raw.extend_from_slice(&chunk[..n]);
                if raw.len() > MAX_RESPONSE_BYTES {
                    break End::Closed;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break End::Unannounced,
            Err(e) => return Err(format!("cannot read the answer: {e}")),
        }
    };
    Ok((raw, end))
}

/// The body of a complete `200` response, or why it is not one.
pub fn response_body(raw: &[u8], end: End) -> Result<String, String> {
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
    if code.starts_with('3') {
        return Err(format!(
            "the answer is `{status}`, not 200: redirects are not followed; give the URL the \
             JWKS is served at"
        ));
    }
    if code != "200" {
        return Err(format!("the answer is `{status}`, not 200"));
    }
    let (mut length, mut chunked) = (None, false);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err("a malformed header line".into());
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("transfer-encoding") {
            if !value.eq_ignore_ascii_case("chunked") {
                return Err(format!("an answer with Transfer-Encoding {value}"));
            }
            chunked = true;
        }
        if name.eq_ignore_ascii_case("content-length") {
            let want: usize = value.parse().map_err(|_| "a malformed Content-Length")?;
            if length.is_some_and(|l| l != want) {
                return Err("two different Content-Lengths".into());
            }
            length = Some(want);
        }
    }
    let body = match (chunked, length) {
        (true, Some(_)) => {
            return Err("an answer with both Transfer-Encoding and Content-Length".into())
        }
        (true, None) => dechunk(body)?,
        (false, Some(want)) if want != body.len() => {
            return Err(format!(
                "the answer was cut: {} of {want} bytes",
                body.len()
            ))
        }
        (false, Some(_)) => body.to_vec(),
        (false, None) if end == End::Unannounced => {
            return Err(
                "the TLS connection ended without close_notify and the answer names \
                        no length: it may have been cut"
                    .into(),
            )
        }
        (false, None) => body.to_vec(),
    };
    String::from_utf8(body).map_err(|_| "the body is not UTF-8".into())
}

/// The data of a whole chunked body (RFC 9112 7.1), which must end with its last chunk;
/// extensions and trailers are ignored.
pub fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    const CUT: &str = "the chunked answer was cut or is malformed";
    let mut data = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n").ok_or(CUT)?;
        let line = std::str::from_utf8(&rest[..eol]).map_err(|_| CUT)?;
        let hex = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(hex, 16).map_err(|_| CUT)?;
        rest = &rest[eol + 2..];
        if size == 0 {
            // Trailer lines, then the empty line that ends the message.
            let whole = rest.starts_with(b"\r\n") || rest.windows(4).any(|w| w == b"\r\n\r\n");
            return if whole { Ok(data) } else { Err(CUT.into()) };
        }
        if rest.len() < size.saturating_add(2) || &rest[size..size + 2] != b"\r\n" {
            return Err(CUT.into());
        }
        data.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
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
    /// For an `https://` URL.
    tls: Option<TlsClient>,
    /// For an `https://` URL when `HTTPS_PROXY` applies to its host.
    proxy: Option<Proxy>,
    min_interval: Duration,
    state: Mutex<State>,
    /// One fetch at a time; those who waited then see its result.
    fetching: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for JwksSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwksSource")
            .field("url", &self.url.url)
            .field("tls", &self.tls)
            .field("proxy", &self.proxy)
            .field("min_interval", &self.min_interval)
            .finish()
    }
}

impl JwksSource {
    /// `tls` is required for an `https://` URL (every fetch fails without it); `proxy`, if
    /// given, is used for an `https://` URL only.
    pub fn new(
        url: JwksUrl,
        tls: Option<TlsClient>,
        proxy: Option<Proxy>,
        min_interval: Duration,
    ) -> JwksSource {
        JwksSource {
            url,
            tls,
            proxy,
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
            let fetched = fetch(&self.url, self.tls.as_ref(), self.proxy.as_ref())
                .await
                .and_then(|text| KeySet::parse(&text).map_err(|e| e.to_string()));
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
mod tests;
