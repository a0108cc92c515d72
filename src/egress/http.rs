//! The HTTP front end of the egress proxy: `CONNECT host:port` tunnels and plain
//! `GET http://host/...` forwarding, on a connection that arrived on one server's socket.
//!
//! The request head is read under the proxy's size and time bounds, parsed by the pure
//! functions below, checked and dialled through `dial`, then bytes are relayed with
//! `copy_bidirectional`. Plain HTTP is forwarded with `Connection: close`, so one proxy
//! connection carries one request to one checked origin. Refusals answer 403 with the reason;
//! malformed requests 400; upstream failures 502/504. This module must never forward a byte
//! before the destination has passed `dial`.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::dial::{dial, DialError, ServerCtx};
use super::events::Protocol;
use super::loopback::ProxySecret;
use super::relay::{close_after_reply, relay};

/// At most this many header lines in a request head.
const MAX_HEADERS: usize = 128;

/// A parsed request line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `CONNECT host:port HTTP/1.x`
    Connect { host: String, port: u16 },
    /// `METHOD http://host[:port]/path HTTP/1.x`
    Forward {
        method: String,
        host: String,
        port: u16,
        /// Origin-form target to send upstream (`/` when the URI had no path).
        path: String,
        version: String,
    },
}

/// Why a request is malformed (answered with 400, never a crash).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("malformed request line")]
    RequestLine,
    #[error("unsupported HTTP version {0:?}")]
    Version(String),
    #[error("CONNECT needs host:port")]
    ConnectAuthority,
    #[error("only http:// URIs can be forwarded; use CONNECT for https")]
    Scheme,
    #[error("a proxy request needs an absolute http:// URI")]
    NotAbsolute,
    #[error("malformed authority in URI")]
    Authority,
    #[error("malformed header line")]
    Header,
}

/// Parses `METHOD TARGET VERSION` (without the line ending).
pub fn parse_request_line(line: &str) -> Result<Target, ParseError> {
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ParseError::RequestLine);
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(ParseError::RequestLine);
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(ParseError::Version(version.chars().take(16).collect()));
    }
    if method == "CONNECT" {
        let (host, port) = split_authority(target, None).ok_or(ParseError::ConnectAuthority)?;
        return Ok(Target::Connect { host, port });
    }
    let has_prefix = |p: &str| {
        target
            .get(..p.len())
            .is_some_and(|t| t.eq_ignore_ascii_case(p))
    };
    let rest = if has_prefix("http://") {
        &target[7..]
    } else if target.contains("://") {
        return Err(ParseError::Scheme);
    } else {
        return Err(ParseError::NotAbsolute);
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let (host, port) = split_authority(authority, Some(80)).ok_or(ParseError::Authority)?;
    let path = match path.split('#').next() {
        Some(p) if p.starts_with('/') => p.to_string(),
        Some(p) if !p.is_empty() => format!("/{p}"),
        _ => "/".to_string(),
    };
    Ok(Target::Forward {
        method: method.to_string(),
        host,
        port,
        path,
        version: version.to_string(),
    })
}

/// Splits `host:port` or `[v6]:port`; without a port, `default` (CONNECT has none).
/// Userinfo (`user@host`) is refused: it only ever serves to confuse which host is meant.
fn split_authority(a: &str, default: Option<u16>) -> Option<(String, u16)> {
    if a.is_empty() || a.contains('@') {
        return None;
    }
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let close = rest.find(']')?;
        let host = &rest[..close];
        let after = &rest[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return None,
        };
        (format!("[{host}]"), port)
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h.to_string(), Some(p)),
            Some(_) => return None,
            None => (a.to_string(), None),
        }
    };
    let port = match port {
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return None,
        },
        None => default?,
    };
    if host.is_empty() || host == "[]" {
        return None;
    }
    Some((host, port))
}

/// Splits a header line into name and value; refuses names with whitespace or controls
/// (request-smuggling shapes) and obsolete line folding.
pub fn parse_header(line: &str) -> Result<(&str, &str), ParseError> {
    if line.starts_with([' ', '\t']) {
        return Err(ParseError::Header);
    }
    let (name, value) = line.split_once(':').ok_or(ParseError::Header)?;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ParseError::Header);
    }
    if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
        return Err(ParseError::Header);
    }
    Ok((name, value.trim()))
}

/// Headers meant for the proxy or for this hop only; dropped before forwarding.
fn is_hop_by_hop(name: &str) -> bool {
    [
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authorization",
        "host",
        "te",
    ]
    .iter()
    .any(|h| name.eq_ignore_ascii_case(h))
}

/// The head sent upstream for a forwarded request: origin-form target, the client's
/// end-to-end headers, `Host` from the URI (not from the client's `Host`, so the origin sees
/// the host the policy checked), and `Connection: close`.
pub fn forward_head(target: &Target, headers: &[(String, String)]) -> Option<String> {
    let Target::Forward {
        method,
        host,
        port,
        path,
        version,
    } = target
    else {
        return None;
    };
    let mut head = format!("{method} {path} {version}\r\n");
    head.push_str("Host: ");
    head.push_str(host);
    if *port != 80 {
        head.push_str(&format!(":{port}"));
    }
    head.push_str("\r\n");
    for (name, value) in headers {
        if !is_hop_by_hop(name) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str("Connection: close\r\n\r\n");
    Some(head)
}

/// Writes a small error response and closes.
async fn respond<W: AsyncRead + AsyncWrite + Unpin>(
    w: &mut W,
    status: &str,
    body: &str,
    reason: Option<&str>,
) {
    respond_with(w, status, body, reason, "").await;
}

/// `respond` with extra header lines (each ending in CRLF).
async fn respond_with<W: AsyncRead + AsyncWrite + Unpin>(
    w: &mut W,
    status: &str,
    body: &str,
    reason: Option<&str>,
    extra: &str,
) {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n{extra}",
        body.len() + 1
    );
    if let Some(r) = reason {
        // Header values cannot carry newlines; reasons never contain them, but be sure.
        let clean: String = r.chars().filter(|c| !c.is_control()).collect();
        head.push_str(&format!("X-Palisade-Refusal: {clean}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(body);
    head.push('\n');
    // The client may already be gone; nothing more to do for it then.
    let _ = w.write_all(head.as_bytes()).await;
    close_after_reply(w).await;
}

/// Outcome of reading the head, before any upstream work.
enum Head {
    Request {
        target: Target,
        headers: Vec<(String, String)>,
    },
    /// The client closed before sending anything.
    Eof,
    Bad(ParseError),
    TooLarge,
}

/// Reads one line of at most `budget` bytes. `Ok(None)` at EOF before any byte.
async fn read_line<R: AsyncBufReadExt + Unpin>(
    r: &mut R,
    budget: &mut usize,
) -> std::io::Result<Option<Result<String, bool>>> {
    let mut buf = Vec::new();
    let n = (&mut *r)
        .take(*budget as u64)
        .read_until(b'\n', &mut buf)
        .await?;
    if n == 0 {
        return Ok(None);
    }
    *budget -= n;
    if buf.last() != Some(&b'\n') {
        // Either the budget ran out (too large) or EOF mid-line (malformed).
        return Ok(Some(Err(*budget == 0)));
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(Some(String::from_utf8(buf).map_err(|_| false)))
}

async fn read_head<R: AsyncBufReadExt + Unpin>(r: &mut R, max: usize) -> std::io::Result<Head> {
    let mut budget = max;
    let line = match read_line(r, &mut budget).await? {
        None => return Ok(Head::Eof),
        Some(Err(true)) => return Ok(Head::TooLarge),
        Some(Err(false)) => return Ok(Head::Bad(ParseError::RequestLine)),
        Some(Ok(l)) => l,
    };
    let target = match parse_request_line(&line) {
        Ok(t) => t,
        Err(e) => return Ok(Head::Bad(e)),
    };
    let mut headers = Vec::new();
    loop {
        let line = match read_line(r, &mut budget).await? {
            None | Some(Err(false)) => return Ok(Head::Bad(ParseError::Header)),
            Some(Err(true)) => return Ok(Head::TooLarge),
            Some(Ok(l)) => l,
        };
        if line.is_empty() {
            return Ok(Head::Request { target, headers });
        }
        if headers.len() >= MAX_HEADERS {
            return Ok(Head::TooLarge);
        }
        match parse_header(&line) {
            Ok((n, v)) => headers.push((n.to_string(), v.to_string())),
            Err(e) => return Ok(Head::Bad(e)),
        }
    }
}

/// Serves one HTTP proxy connection. `client` is already buffered (the dispatcher peeked).
/// With `secret` (a loopback connection) the request must carry the server's credentials,
/// else it is answered 407 before anything is resolved or dialled.
pub(crate) async fn serve<S>(
    ctx: &ServerCtx,
    mut client: BufReader<S>,
    secret: Option<&ProxySecret>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let head = tokio::time::timeout(
        ctx.limits.handshake_timeout,
        read_head(&mut client, ctx.limits.max_head_bytes),
    )
    .await;
    let (target, headers) = match head {
        Err(_) => {
            tracing::info!(server = %ctx.name, "egress: request head not received in time");
            respond(
                &mut client,
                "408 Request Timeout",
                "request head too slow",
                None,
            )
            .await;
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!(server = %ctx.name, error = %e, "egress: client read failed");
            return;
        }
        Ok(Ok(Head::Eof)) => return,
        Ok(Ok(Head::TooLarge)) => {
            tracing::info!(server = %ctx.name, "egress: request head too large");
            respond(
                &mut client,
                "431 Request Header Fields Too Large",
                "request head too large",
                None,
            )
            .await;
            return;
        }
        Ok(Ok(Head::Bad(e))) => {
            tracing::info!(server = %ctx.name, error = %e, "egress: malformed request");
            respond(&mut client, "400 Bad Request", &e.to_string(), None).await;
            return;
        }
        Ok(Ok(Head::Request { target, headers })) => (target, headers),
    };
    if secret.is_some_and(|s| !s.authorizes_http(&headers)) {
        // Another local process, most likely: loopback is reachable from the whole host.
        tracing::warn!(server = %ctx.name, "egress: loopback client without this server's credentials refused (407)");
        respond_with(
            &mut client,
            "407 Proxy Authentication Required",
            "this proxy port serves one sandboxed server; its credentials are required",
            None,
            "Proxy-Authenticate: Basic realm=\"palisade\"\r\n",
        )
        .await;
        return;
    }
    let (host, port, protocol) = match &target {
        Target::Connect { host, port } => (host.as_str(), *port, Protocol::HttpConnect),
        Target::Forward { host, port, .. } => (host.as_str(), *port, Protocol::HttpForward),
    };
    let mut upstream = match dial(ctx, host, port, protocol).await {
        Ok(s) => s,
        Err(e) => {
            let (status, reason) = match &e {
                DialError::Refused(ev) => ("403 Forbidden", Some(ev.reason.to_string())),
                DialError::Timeout { .. } => ("504 Gateway Timeout", None),
                DialError::Resolve(_) | DialError::Connect { .. } => ("502 Bad Gateway", None),
            };
            if !matches!(e, DialError::Refused(_)) {
                tracing::info!(server = %ctx.name, host, port, error = %e, "egress: upstream failed");
            }
            respond(&mut client, status, &e.to_string(), reason.as_deref()).await;
            return;
        }
    };
    let early = client.buffer().to_vec();
    let mut client = client.into_inner();
    let prelude: Vec<u8> = match &target {
        Target::Connect { .. } => {
            if client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            early
        }
        Target::Forward { .. } => {
            // `forward_head` returns Some for every Forward target.
            let mut head = forward_head(&target, &headers)
                .unwrap_or_default()
                .into_bytes();
            head.extend_from_slice(&early);
            head
        }
    };
    if !prelude.is_empty() && upstream.write_all(&prelude).await.is_err() {
        return;
    }
    relay(ctx, &mut client, &mut upstream, host, port).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_lines_parse() {
        assert_eq!(
            parse_request_line("CONNECT allowed.test:443 HTTP/1.1"),
            Ok(Target::Connect {
                host: "allowed.test".into(),
                port: 443
            })
        );
        assert_eq!(
            parse_request_line("CONNECT [::1]:8443 HTTP/1.1"),
            Ok(Target::Connect {
                host: "[::1]".into(),
                port: 8443
            })
        );
        for bad in [
            "CONNECT allowed.test HTTP/1.1",
            "CONNECT allowed.test:0 HTTP/1.1",
            "CONNECT allowed.test:+80 HTTP/1.1",
            "CONNECT user@allowed.test:443 HTTP/1.1",
            "CONNECT ::1:443 HTTP/1.1",
            "CONNECT :443 HTTP/1.1",
        ] {
            assert_eq!(
                parse_request_line(bad),
                Err(ParseError::ConnectAuthority),
                "{bad}"
            );
        }
    }

    #[test]
    fn absolute_uris_parse() {
        assert_eq!(
            parse_request_line("GET http://Allowed.test/a/b?c=d#frag HTTP/1.1"),
            Ok(Target::Forward {
                method: "GET".into(),
                host: "Allowed.test".into(),
                port: 80,
                path: "/a/b?c=d".into(),
                version: "HTTP/1.1".into()
            })
        );
        assert!(matches!(
            parse_request_line("POST HTTP://x.test:8080 HTTP/1.0"),
            Ok(Target::Forward { port: 8080, ref path, .. }) if path == "/"
        ));
        assert!(matches!(
            parse_request_line("GET http://x.test?q HTTP/1.1"),
            Ok(Target::Forward { ref path, .. }) if path == "/?q"
        ));
    }

    #[test]
    fn malformed_request_lines_are_errors() {
        assert_eq!(
            parse_request_line("GET / HTTP/1.1"),
            Err(ParseError::NotAbsolute)
        );
        assert_eq!(
            parse_request_line("GET https://x.test/ HTTP/1.1"),
            Err(ParseError::Scheme)
        );
        assert_eq!(
            parse_request_line("GET ftp://x.test/ HTTP/1.1"),
            Err(ParseError::Scheme)
        );
        assert_eq!(
            parse_request_line("GET http://u:p@x.test/ HTTP/1.1"),
            Err(ParseError::Authority)
        );
        assert!(matches!(
            parse_request_line("GET http://x.test/ HTTP/2"),
            Err(ParseError::Version(_))
        ));
        for bad in [
            "",
            "GET",
            "GET  http://x.test/ HTTP/1.1",
            "G3T http://x/ HTTP/1.1",
            "\u{5}\u{1}\u{0}",
        ] {
            assert_eq!(
                parse_request_line(bad),
                Err(ParseError::RequestLine),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn headers_are_validated() {
        assert_eq!(parse_header("Accept: */*"), Ok(("Accept", "*/*")));
        assert!(parse_header(" folded").is_err());
        assert!(parse_header("Bad Name: x").is_err());
        assert!(parse_header("NoColon").is_err());
        assert!(parse_header("X: a\rb").is_err());
    }

    #[test]
    fn forwarded_heads_use_the_checked_host_and_close() {
        let t = parse_request_line("GET http://allowed.test:8080/p HTTP/1.1").unwrap();
        let headers = vec![
            ("Host".to_string(), "evil.test".to_string()),
            ("Proxy-Connection".to_string(), "keep-alive".to_string()),
            ("Proxy-Authorization".to_string(), "secret".to_string()),
            ("Accept".to_string(), "*/*".to_string()),
        ];
        assert_eq!(
            forward_head(&t, &headers).unwrap(),
            "GET /p HTTP/1.1\r\nHost: allowed.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }
}
