//! Stand-ins for an issuer's JWKS host, for `jwt.rs`: a throwaway PKI, an HTTPS server
//! serving a JWKS file (counting its TLS handshakes), and an HTTP CONNECT proxy that records
//! what it was asked. Test plumbing only: nothing here asserts.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;

/// A test PKI: a fresh CA, and a server certificate it signs for `names` (DNS names or IP
/// addresses), valid now or, when `expired`, only in 2020. (CA PEM, the server's chain and key.)
pub fn test_pki(
    names: &[&str],
    expired: bool,
) -> (
    String,
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "palisade test CA");
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut leaf =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    if expired {
        leaf.not_before = rcgen::date_time_ymd(2020, 1, 1);
        leaf.not_after = rcgen::date_time_ymd(2020, 2, 1);
    }
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    (ca_pem, vec![cert.der().clone()], key)
}

/// An HTTPS server on 127.0.0.1 (tokio-rustls, on a runtime of its own, stopped when
/// dropped) answering every GET with the file `jwks` (chunked); it counts the TLS handshakes
/// attempted.
pub struct HttpsJwks {
    pub port: u16,
    handshakes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    _rt: tokio::runtime::Runtime,
}

impl HttpsJwks {
    pub fn start(
        chain: Vec<rustls::pki_types::CertificateDer<'static>>,
        key: rustls::pki_types::PrivateKeyDer<'static>,
        jwks: PathBuf,
    ) -> HttpsJwks {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let handshakes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = handshakes.clone();
        rt.spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, counted, jwks) = (acceptor.clone(), counted.clone(), jwks.clone());
                tokio::spawn(async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut request = Vec::new();
                    let mut byte = [0u8; 1];
                    while !request.ends_with(b"\r\n\r\n") {
                        match tls.read(&mut byte).await {
                            Ok(1) => request.push(byte[0]),
                            _ => return,
                        }
                    }
                    // HTTP/1.1 chunked, as many issuers answer: two chunks and the last.
                    let body = std::fs::read(&jwks).unwrap_or_default();
                    let (a, b) = body.split_at(body.len() / 2);
                    let mut answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                                       Transfer-Encoding: chunked\r\n\r\n"
                        .to_vec();
                    for part in [a, b, b""] {
                        answer.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                        answer.extend_from_slice(part);
                        answer.extend_from_slice(b"\r\n");
                    }
                    let _ = tls.write_all(&answer).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        HttpsJwks {
            port,
            handshakes,
            _rt: rt,
        }
    }

    pub fn handshakes(&self) -> usize {
        self.handshakes.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// An HTTP proxy that tunnels with CONNECT, for the tests: it records each request line; it
/// refuses every tunnel (403) when `refuse`, else it opens tunnels to `jwks.test:PORT` only,
/// a name only it resolves (to 127.0.0.1).
pub struct ConnectProxy {
    port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl ConnectProxy {
    pub fn start(refuse: bool) -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut client) = conn else { continue };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match client.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let line = text.lines().next().unwrap_or("").to_string();
                log.lock().unwrap().push(line.clone());
                let target = line
                    .strip_prefix("CONNECT jwks.test:")
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|p| p.parse::<u16>().ok());
                let upstream = match (refuse, target) {
                    (false, Some(p)) => TcpStream::connect(("127.0.0.1", p)).ok(),
                    _ => None,
                };
                let Some(upstream) = upstream else {
                    let _ =
                        client.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
                    continue;
                };
                let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                let (mut c2, mut u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                let (mut client, mut upstream) = (client, upstream);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut u2);
                    let _ = u2.shutdown(std::net::Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut upstream, &mut client);
                    let _ = client.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        ConnectProxy { port, seen }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}
