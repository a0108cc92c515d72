//! The HTTP proxy of the JWKS fetch (`jwks.rs`): an `https://` JWKS URL is reached through
//! `https_proxy`/`HTTPS_PROXY` when one is set and `no_proxy`/`NO_PROXY` does not name the
//! host, by an HTTP `CONNECT` tunnel; the TLS handshake then runs end to end with the JWKS
//! host through it (the proxy sees only the host name and port), its certificate verified as
//! without a proxy.
//!
//! Pure except `tunnel`: which proxy applies (`choose`) and reading its answer are plain
//! functions. Loopback hosts are never proxied (a proxy cannot reach this machine's
//! loopback), nor is a plain `http://` URL (loopback only, see `jwks`).
//!
//! Never: send the JWKS request in clear text to the proxy, go around a proxy that refused
//! (a refusal is a failed fetch, its reason said), or read past the proxy's answer head
//! (what follows belongs to the TLS session).

use std::net::IpAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The longest `CONNECT` answer head read.
const MAX_HEAD: usize = 8 << 10;

/// An HTTP proxy that tunnels with `CONNECT`: `http://HOST:PORT` (or `HOST:PORT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    pub host: String,
    pub port: u16,
    /// Where it was given (`HTTPS_PROXY=…`), for messages.
    pub from: String,
}

/// The proxy settings of the environment, as read once at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    /// `https_proxy`, else `HTTPS_PROXY`: (variable, value).
    pub https_proxy: Option<(String, String)>,
    /// `no_proxy`, else `NO_PROXY`.
    pub no_proxy: Option<String>,
}

impl ProxyEnv {
    /// Reads the variables through `var` (the process environment at the edge; a map in tests).
    pub fn read(var: impl Fn(&str) -> Option<String>) -> ProxyEnv {
        let pick = |names: [&str; 2]| {
            names.into_iter().find_map(|n| {
                var(n)
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| (n.to_string(), v))
            })
        };
        ProxyEnv {
            https_proxy: pick(["https_proxy", "HTTPS_PROXY"]),
            no_proxy: pick(["no_proxy", "NO_PROXY"]).map(|(_, v)| v),
        }
    }

    /// The proxy to reach `host` through, if any; `Err` when the proxy variable cannot be
    /// used (refused at start rather than fetched around).
    pub fn choose(&self, host: &str) -> Result<Option<Proxy>, String> {
        let Some((var, value)) = &self.https_proxy else {
            return Ok(None);
        };
        if is_loopback(host) || self.no_proxy.as_deref().is_some_and(|n| bypassed(n, host)) {
            return Ok(None);
        }
        parse_proxy(value)
            .map(|(host, port)| {
                Some(Proxy {
                    host,
                    port,
                    from: format!("{var}={value}"),
                })
            })
            .map_err(|why| format!("{var}={value}: {why}"))
    }
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_matches(['[', ']'])
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `HOST:PORT` of a proxy URL (`http://` or no scheme; the port defaults to 80).
fn parse_proxy(value: &str) -> Result<(String, u16), String> {
    let value = value.trim();
    let with_scheme = if value.contains("://") {
        value.to_string()
    } else {
        format!("http://{value}")
    };
    let url = url::Url::parse(&with_scheme).map_err(|e| format!("not a proxy URL ({e})"))?;
    if url.scheme() != "http" {
        return Err(format!(
            "a {}:// proxy is not supported; give an http:// proxy (it tunnels TLS with CONNECT)",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "proxy credentials are not supported; use a proxy that admits this host \
                    without them, or name the JWKS host in NO_PROXY"
                .into(),
        );
    }
    let host = match url.host() {
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        Some(h) => h.to_string(),
        None => return Err("names no host".into()),
    };
    Ok((host, url.port().unwrap_or(80)))
}

/// Whether `no_proxy` (comma-separated: `*`, host names matching themselves and their
/// subdomains, a leading `.` or `*.` allowed, IP addresses, CIDR ranges; an optional `:PORT`
/// ignored) names `host`.
pub fn bypassed(no_proxy: &str, host: &str) -> bool {
    let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
    let ip = host.parse::<IpAddr>().ok();
    no_proxy.split(',').map(str::trim).any(|entry| {
        if entry == "*" {
            return true;
        }
        if let Some((net, bits)) = entry.split_once('/') {
            return match (ip, net.parse::<IpAddr>(), bits.parse::<u32>()) {
                (Some(ip), Ok(net), Ok(bits)) => in_cidr(ip, net, bits),
                _ => false,
            };
        }
        let entry = entry.trim_matches(['[', ']']);
        if let (Some(ip), Ok(e)) = (ip, entry.parse::<IpAddr>()) {
            return ip == e;
        }
        let name = entry
            .rsplit_once(':')
            .filter(|(_, p)| p.parse::<u16>().is_ok())
            .map_or(entry, |(n, _)| n);
        let name = name
            .trim_start_matches("*.")
            .trim_start_matches('.')
            .to_ascii_lowercase();
        !name.is_empty() && (host == name || host.ends_with(&format!(".{name}")))
    })
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u32) -> bool {
    let (a, b, width) = match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(u32::from(a)), u128::from(u32::from(b)), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return false,
    };
    if bits > width {
        return false;
    }
    let shift = width - bits;
    shift >= width || (a >> shift) == (b >> shift)
}

/// The status of a proxy's answer head (`HTTP/1.1 200 Connection established`), or why
/// it is not a tunnel.
pub fn connect_status(head: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(head);
    let line = text.lines().next().unwrap_or("").trim();
    let mut words = line.splitn(3, ' ');
    match (words.next(), words.next().map(str::parse::<u16>)) {
        (Some(v), Some(Ok(code))) if v.starts_with("HTTP/1.") => {
            if (200..300).contains(&code) {
                Ok(())
            } else {
                Err(format!("refused the tunnel: {line}"))
            }
        }
        _ => Err(format!(
            "did not answer CONNECT as an HTTP proxy: {:?}",
            line.chars().take(80).collect::<String>()
        )),
    }
}

/// Asks the proxy on `io` for a tunnel to `host:port`; `io` then carries the tunnel.
pub async fn tunnel<IO>(io: &mut IO, host: &str, port: u16) -> Result<(), String>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let request = format!(
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: palisade\r\n\r\n"
    );
    io.write_all(request.as_bytes())
        .await
        .map_err(|e| format!("cannot send CONNECT: {e}"))?;
    io.flush()
        .await
        .map_err(|e| format!("cannot send CONNECT: {e}"))?;
    // Byte by byte: the bytes after the head are the TLS server's, not the proxy's.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match io.read(&mut byte).await {
            Ok(0) => {
                return Err(format!(
                    "closed the connection instead of answering CONNECT{}",
                    if head.is_empty() { "" } else { " in full" }
                ))
            }
            Ok(_) => head.push(byte[0]),
            Err(e) => return Err(format!("cannot read its CONNECT answer: {e}")),
        }
        if head.len() > MAX_HEAD {
            return Err(format!("its CONNECT answer head is over {MAX_HEAD} bytes"));
        }
    }
    connect_status(&head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> ProxyEnv {
        ProxyEnv::read(|n| {
            vars.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn the_proxy_variable_applies_unless_no_proxy_or_loopback_says_otherwise() {
        let e = env(&[("HTTPS_PROXY", "http://proxy.corp:3128")]);
        let p = e.choose("issuer.example").unwrap().unwrap();
        assert_eq!((p.host.as_str(), p.port), ("proxy.corp", 3128));
        assert_eq!(p.from, "HTTPS_PROXY=http://proxy.corp:3128");
        for host in ["localhost", "127.0.0.1", "::1", "[::1]"] {
            assert_eq!(e.choose(host).unwrap(), None, "{host}");
        }
        // The lower-case spelling wins, as curl has it; a bare HOST:PORT is an http proxy.
        let e = env(&[("HTTPS_PROXY", "http://a:1"), ("https_proxy", "b:2")]);
        let p = e.choose("x.example").unwrap().unwrap();
        assert_eq!((p.host.as_str(), p.port), ("b", 2));
        assert_eq!(env(&[]).choose("x.example").unwrap(), None);
        assert_eq!(
            env(&[("HTTPS_PROXY", " ")]).choose("x.example").unwrap(),
            None
        );
        let e = env(&[
            ("HTTPS_PROXY", "http://p:1"),
            ("NO_PROXY", "issuer.example"),
        ]);
        assert_eq!(e.choose("login.issuer.example").unwrap(), None);
        assert!(e.choose("other.example").unwrap().is_some());
    }

    #[test]
    fn proxies_that_cannot_be_used_are_refused_with_the_reason() {
        for (value, why) in [
            ("https://p:443", "not supported"),
            ("socks5://p:1080", "not supported"),
            ("http://user:pw@p:3128", "credentials"),
            ("http://", "proxy URL"),
        ] {
            let e = env(&[("HTTPS_PROXY", value)])
                .choose("x.example")
                .unwrap_err();
            assert!(e.contains(why), "{value}: {e}");
            assert!(e.starts_with("HTTPS_PROXY="), "names the variable: {e}");
        }
    }

    #[test]
    fn no_proxy_entries() {
        let list = "*.corp.example, .internal, exact.example:443, 10.0.0.0/8, 192.0.2.7, fd00::/8";
        for host in [
            "a.corp.example",
            "corp.example",
            "x.internal",
            "exact.example",
            "10.1.2.3",
            "192.0.2.7",
            "fd00::1",
        ] {
            assert!(bypassed(list, host), "{host}");
        }
        for host in [
            "corp.example.evil",
            "notcorp.example",
            "exact.example.org",
            "11.0.0.1",
            "192.0.2.8",
            "fe80::1",
        ] {
            assert!(!bypassed(list, host), "{host}");
        }
        assert!(bypassed("*", "anything.example"));
        assert!(!bypassed("", "anything.example"));
        assert!(bypassed("0.0.0.0/0", "203.0.113.9"));
    }

    #[test]
    fn only_a_2xx_answer_is_a_tunnel() {
        assert!(connect_status(b"HTTP/1.1 200 Connection established\r\n\r\n").is_ok());
        assert!(connect_status(b"HTTP/1.0 200 OK\r\n\r\n").is_ok());
        let e = connect_status(b"HTTP/1.1 403 Forbidden\r\nX: y\r\n\r\n").unwrap_err();
        assert!(
            e.contains("refused the tunnel: HTTP/1.1 403 Forbidden"),
            "{e}"
        );
        assert!(connect_status(b"SSH-2.0-OpenSSH\r\n\r\n")
            .unwrap_err()
            .contains("did not answer CONNECT"));
    }

    #[tokio::test]
    async fn the_tunnel_request_names_the_host_and_leaves_what_follows_unread() {
        let (mut client, mut proxy) = tokio::io::duplex(4096);
        let far = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let n = proxy.read(&mut buf).await.unwrap();
            proxy
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\nTLS")
                .await
                .unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        tunnel(&mut client, "issuer.example", 443).await.unwrap();
        let mut rest = [0u8; 3];
        client.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"TLS");
        let sent = far.await.unwrap();
        assert!(
            sent.starts_with("CONNECT issuer.example:443 HTTP/1.1\r\nHost: issuer.example:443\r\n"),
            "{sent}"
        );
    }
}
