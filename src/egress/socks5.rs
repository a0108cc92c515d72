//! The SOCKS5 front end (RFC 1928) of the egress proxy, on a connection that arrived on one
//! server's socket (no-authentication method only) or its loopback port (username/password
//! only, RFC 1929, checked against its secret), CONNECT only (no BIND, no UDP ASSOCIATE:
//! the sandbox gets no UDP), remote DNS through ATYP 3 (domain name). IPv4/IPv6 literals
//! (ATYP 1/4) go through the same policy, which refuses them unless an allow entry names
//! that exact address.
//!
//! Greeting and request are read under the proxy's handshake timeout; every field has a fixed
//! or one-byte-bounded length. This module must never reply "succeeded" before `dial` has
//! returned a connected upstream.

use std::net::{Ipv4Addr, Ipv6Addr};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::dial::{dial, DialError, ServerCtx};
use super::events::Protocol;
use super::loopback::ProxySecret;
use super::relay::{close_after_reply, relay};

const VERSION: u8 = 5;
const METHOD_NO_AUTH: u8 = 0x00;
const METHOD_USER_PASS: u8 = 0x02;
/// The version byte of the username/password subnegotiation (RFC 1929).
const USER_PASS_VERSION: u8 = 0x01;
const METHOD_NONE_ACCEPTABLE: u8 = 0xff;
const CMD_CONNECT: u8 = 0x01;

/// Reply codes (RFC 1928 section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Reply {
    Succeeded = 0x00,
    GeneralFailure = 0x01,
    NotAllowedByRuleset = 0x02,
    HostUnreachable = 0x04,
    ConnectionRefused = 0x05,
    TtlExpired = 0x06,
    CommandNotSupported = 0x07,
    AddressTypeNotSupported = 0x08,
}

/// The reply frame; the bound address is reported as 0.0.0.0:0 (meaningless inside the
/// sandbox, and it would leak the host's addresses).
pub fn reply_frame(code: Reply) -> [u8; 10] {
    [VERSION, code as u8, 0, 1, 0, 0, 0, 0, 0, 0]
}

/// What went wrong in the handshake, and what to answer.
#[derive(Debug)]
enum Handshake {
    Request {
        host: String,
        port: u16,
    },
    /// Answer with this method-selection or reply frame and close.
    Reject(Vec<u8>, &'static str),
}

/// Reads the greeting and picks the method: no authentication on a server's socket,
/// username/password (RFC 1929) where a secret is required. `Ok(Err(frame, why))`: answer
/// `frame` and close.
async fn greet<R: AsyncRead + Unpin>(
    r: &mut R,
    method: u8,
) -> std::io::Result<Result<(), (Vec<u8>, &'static str)>> {
    let mut head = [0u8; 2];
    r.read_exact(&mut head).await?;
    if head[0] != VERSION || head[1] == 0 {
        return Ok(Err((vec![VERSION, METHOD_NONE_ACCEPTABLE], "bad greeting")));
    }
    let mut methods = vec![0u8; head[1] as usize];
    r.read_exact(&mut methods).await?;
    if !methods.contains(&method) {
        return Ok(Err((
            vec![VERSION, METHOD_NONE_ACCEPTABLE],
            "client offers no acceptable method",
        )));
    }
    Ok(Ok(()))
}

/// Reads the username/password subnegotiation (RFC 1929) and says whether it carries
/// `secret`.
async fn authenticate<R: AsyncRead + Unpin>(
    r: &mut R,
    secret: &ProxySecret,
) -> std::io::Result<bool> {
    if r.read_u8().await? != USER_PASS_VERSION {
        return Ok(false);
    }
    let ulen = r.read_u8().await? as usize;
    let mut user = vec![0u8; ulen];
    r.read_exact(&mut user).await?;
    let plen = r.read_u8().await? as usize;
    let mut password = vec![0u8; plen];
    r.read_exact(&mut password).await?;
    Ok(secret.authorizes_socks(&user, &password))
}

async fn read_request<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Handshake> {
    let mut req = [0u8; 4];
    r.read_exact(&mut req).await?;
    if req[0] != VERSION || req[2] != 0 {
        return Ok(Handshake::Reject(
            reply_frame(Reply::GeneralFailure).to_vec(),
            "malformed request",
        ));
    }
    if req[1] != CMD_CONNECT {
        return Ok(Handshake::Reject(
            reply_frame(Reply::CommandNotSupported).to_vec(),
            "only CONNECT is supported",
        ));
    }
    let host = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            r.read_exact(&mut a).await?;
            Ipv4Addr::from(a).to_string()
        }
        3 => {
            let len = r.read_u8().await? as usize;
            let mut name = vec![0u8; len];
            r.read_exact(&mut name).await?;
            match String::from_utf8(name) {
                Ok(n) if !n.is_empty() => n,
                _ => {
                    return Ok(Handshake::Reject(
                        reply_frame(Reply::GeneralFailure).to_vec(),
                        "domain name is not valid text",
                    ))
                }
            }
        }
        4 => {
            let mut a = [0u8; 16];
            r.read_exact(&mut a).await?;
            format!("[{}]", Ipv6Addr::from(a))
        }
        _ => {
            return Ok(Handshake::Reject(
                reply_frame(Reply::AddressTypeNotSupported).to_vec(),
                "unknown address type",
            ))
        }
    };
    let port = r.read_u16().await?;
    if port == 0 {
        return Ok(Handshake::Reject(
            reply_frame(Reply::GeneralFailure).to_vec(),
            "port 0",
        ));
    }
    Ok(Handshake::Request { host, port })
}

/// Serves one SOCKS5 connection. `client` is already buffered (the dispatcher peeked).
/// With `secret` (a loopback connection) the client must authenticate with the server's
/// username and password; else it is refused before its request is read.
pub(crate) async fn serve<S>(
    ctx: &ServerCtx,
    mut client: BufReader<S>,
    secret: Option<&ProxySecret>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let limit = ctx.limits.handshake_timeout;
    let method = if secret.is_some() {
        METHOD_USER_PASS
    } else {
        METHOD_NO_AUTH
    };
    let greeting = match tokio::time::timeout(limit, greet(&mut client, method)).await {
        Ok(Ok(g)) => g,
        Ok(Err(_)) | Err(_) => {
            tracing::info!(server = %ctx.name, "egress: SOCKS5 greeting incomplete or too slow");
            return;
        }
    };
    if let Err((frame, why)) = greeting {
        tracing::info!(server = %ctx.name, why, "egress: SOCKS5 greeting refused");
        let _ = client.write_all(&frame).await;
        close_after_reply(&mut client).await;
        return;
    }
    if client.write_all(&[VERSION, method]).await.is_err() {
        return;
    }
    if let Some(secret) = secret {
        let ok = matches!(
            tokio::time::timeout(limit, authenticate(&mut client, secret)).await,
            Ok(Ok(true))
        );
        // RFC 1929: status 0 is success; anything else, and the connection closes.
        let status = if ok { 0 } else { 1 };
        if !ok {
            tracing::warn!(server = %ctx.name, "egress: loopback SOCKS5 client without this server's credentials refused");
        }
        if client
            .write_all(&[USER_PASS_VERSION, status])
            .await
            .is_err()
            || !ok
        {
            close_after_reply(&mut client).await;
            return;
        }
    }
    let (host, port) = match tokio::time::timeout(limit, read_request(&mut client)).await {
        Ok(Ok(Handshake::Request { host, port })) => (host, port),
        Ok(Ok(Handshake::Reject(frame, why))) => {
            tracing::info!(server = %ctx.name, why, "egress: SOCKS5 request refused");
            let _ = client.write_all(&frame).await;
            close_after_reply(&mut client).await;
            return;
        }
        Ok(Err(_)) | Err(_) => {
            tracing::info!(server = %ctx.name, "egress: SOCKS5 request incomplete or too slow");
            return;
        }
    };
    let mut upstream = match dial(ctx, &host, port, Protocol::Socks5).await {
        Ok(s) => s,
        Err(e) => {
            let code = match &e {
                DialError::Refused(_) => Reply::NotAllowedByRuleset,
                DialError::Resolve(_) => Reply::HostUnreachable,
                DialError::Timeout { .. } => Reply::TtlExpired,
                DialError::Connect { cause: source, .. }
                    if source.kind() == std::io::ErrorKind::ConnectionRefused =>
                {
                    Reply::ConnectionRefused
                }
                DialError::Connect { .. } => Reply::GeneralFailure,
            };
            if !matches!(e, DialError::Refused(_)) {
                tracing::info!(server = %ctx.name, host, port, error = %e, "egress: upstream failed");
            }
            let _ = client.write_all(&reply_frame(code)).await;
            close_after_reply(&mut client).await;
            return;
        }
    };
    if client
        .write_all(&reply_frame(Reply::Succeeded))
        .await
        .is_err()
    {
        return;
    }
    let early = client.buffer().to_vec();
    let mut client = client.into_inner();
    if !early.is_empty() && upstream.write_all(&early).await.is_err() {
        return;
    }
    relay(ctx, &mut client, &mut upstream, &host, port).await;
}
