//! Loopback origins and a proxy configured for them, shared by the egress test binaries.
//! Nothing here reaches beyond 127.0.0.1.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use palisade::config::DomainLists;
use palisade::egress::{EgressOptions, EgressProxy, Limits, Resolver};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixStream};

pub const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A plain HTTP origin: answers every request with 200 and a body naming the request line
/// and the Host header it saw, then closes.
pub async fn http_origin() -> SocketAddr {
    let l = TcpListener::bind((LOOPBACK, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            tokio::spawn(async move {
                let mut r = BufReader::new(s);
                let mut request_line = String::new();
                if r.read_line(&mut request_line).await.is_err() {
                    return;
                }
                let mut host = String::new();
                loop {
                    let mut line = String::new();
                    match r.read_line(&mut line).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    if line == "\r\n" || line == "\n" {
                        break;
                    }
                    if let Some(v) = line.strip_prefix("Host:").or(line.strip_prefix("host:")) {
                        host = v.trim().to_string();
                    }
                }
                let body = format!("origin saw [{}] host [{}]", request_line.trim_end(), host);
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                    body.len(),
                    body
                );
                let mut s = r.into_inner();
                let _ = s.write_all(resp.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

/// A TCP echo origin.
pub async fn echo_origin() -> SocketAddr {
    let l = TcpListener::bind((LOOPBACK, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

pub fn lists(allowed: &[String], denied: &[&str]) -> DomainLists {
    DomainLists {
        allowed_domains: allowed.to_vec(),
        denied_domains: denied.iter().map(|s| s.to_string()).collect(),
    }
}

/// A proxy whose resolver maps `allowed.test` and `denied.test` (and `*.wild.test` names
/// used by tests) to 127.0.0.1; other names go to the system resolver.
pub fn proxy(dir: &Path, limits: Limits) -> EgressProxy {
    let resolver = Resolver::with_overrides([
        ("allowed.test", vec![LOOPBACK]),
        ("denied.test", vec![LOOPBACK]),
        ("api.wild.test", vec![LOOPBACK]),
        ("wild.test", vec![LOOPBACK]),
    ]);
    EgressProxy::new(
        EgressOptions::new(dir.join("egress"))
            .with_resolver(resolver)
            .with_limits(limits),
    )
    .unwrap()
}

/// Sends a CONNECT and returns the status line, the response head and the stream.
pub async fn http_connect(
    socket: &Path,
    authority: &str,
) -> (String, String, BufReader<UnixStream>) {
    let mut s = UnixStream::connect(socket).await.unwrap();
    s.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut r = BufReader::new(s);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await.unwrap() == 0 {
            break;
        }
        let end = line == "\r\n";
        head.push_str(&line);
        if end {
            break;
        }
    }
    let status = head.lines().next().unwrap_or("").to_string();
    (status, head, r)
}

/// Sends raw bytes, half-closes, and reads everything the proxy answers.
pub async fn raw_exchange(socket: &Path, bytes: &[u8]) -> Vec<u8> {
    let mut s = UnixStream::connect(socket).await.unwrap();
    s.write_all(bytes).await.unwrap();
    s.shutdown().await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out))
        .await
        .expect("proxy must answer or close")
        .unwrap();
    out
}

/// SOCKS5 CONNECT with a domain name (ATYP 3). Returns the reply code and the stream.
pub async fn socks5_domain(socket: &Path, name: &str, port: u16) -> (u8, UnixStream) {
    let mut req = vec![3, name.len() as u8];
    req.extend_from_slice(name.as_bytes());
    req.extend_from_slice(&port.to_be_bytes());
    socks5_request(socket, &req).await
}

/// SOCKS5 CONNECT with an IPv4 literal (ATYP 1).
pub async fn socks5_ipv4(socket: &Path, ip: Ipv4Addr, port: u16) -> (u8, UnixStream) {
    let mut req = vec![1];
    req.extend_from_slice(&ip.octets());
    req.extend_from_slice(&port.to_be_bytes());
    socks5_request(socket, &req).await
}

/// Greeting (no-auth), then CONNECT with `addr_part` = ATYP, address, port.
async fn socks5_request(socket: &Path, addr_part: &[u8]) -> (u8, UnixStream) {
    let mut s = UnixStream::connect(socket).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel).await.unwrap();
    assert_eq!(sel, [5, 0], "no-auth method selected");
    let mut req = vec![5, 1, 0];
    req.extend_from_slice(addr_part);
    s.write_all(&req).await.unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[0], 5);
    (reply[1], s)
}

/// Writes `msg` and reads the same number of bytes back.
pub async fn echo_roundtrip<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    msg: &[u8],
) -> Vec<u8> {
    s.write_all(msg).await.unwrap();
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).await.unwrap();
    back
}

pub fn socket_of(p: &EgressProxy, server: &str) -> PathBuf {
    p.socket_path(server).unwrap()
}
