//! Egress proxy measurements on loopback (no criterion: a plain program printing a table).
//!
//!   cargo bench --bench egress            # full run
//!   cargo bench --bench egress -- --quick # fewer iterations, 256 MiB bulk
//!   (under `cargo test --all-targets`: a smoke run with tiny sizes)
//!
//! Connection setup: TCP connect + 1-byte echo round trip, directly vs through the proxy's
//! unix socket (HTTP CONNECT, SOCKS5), and through a host socat bridge in front of the socket
//! (the path a sandboxed server takes: TCP 127.0.0.1:3128 → socat → unix socket → proxy).
//! Bulk: bytes pushed one way into a discarding origin that reports the count at the end.
//! Memory: one socat bridge listener (RSS, PSS over ten, private; two per proxied server) and
//! the proxy's own cost per registered server.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use palisade::config::DomainLists;
use palisade::egress::{EgressOptions, EgressProxy, Resolver};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UnixStream};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

async fn echo_origin() -> SocketAddr {
    let l = TcpListener::bind((LO, 0)).await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    a
}

/// Reads until EOF, then writes the byte count (u64, big-endian).
async fn sink_origin() -> SocketAddr {
    let l = TcpListener::bind((LO, 0)).await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 256 * 1024];
                let mut n: u64 = 0;
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => n += k as u64,
                    }
                }
                let _ = s.write_all(&n.to_be_bytes()).await;
            });
        }
    });
    a
}

async fn connect_tunnel<S: AsyncRead + AsyncWrite + Unpin>(s: S, port: u16) -> BufReader<S> {
    let mut r = BufReader::new(s);
    r.get_mut()
        .write_all(format!("CONNECT bench.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut line = String::new();
    r.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    line.clear();
    r.read_line(&mut line).await.unwrap();
    r
}

async fn socks_tunnel(mut s: UnixStream, port: u16) -> UnixStream {
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel).await.unwrap();
    let name = b"bench.test";
    let mut req = vec![5, 1, 0, 3, name.len() as u8];
    req.extend_from_slice(name);
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).await.unwrap();
    assert_eq!(rep[1], 0);
    s
}

async fn ping<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
    s.write_all(b"x").await.unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).await.unwrap();
}

#[derive(Clone, Copy)]
enum Path_ {
    Direct,
    Connect,
    Socks,
    SocatConnect,
}

struct Setup {
    sock: PathBuf,
    bridge: Option<SocketAddr>,
}

async fn open(kind: Path_, setup: &Setup, origin: SocketAddr) -> Box<dyn Stream> {
    match kind {
        Path_::Direct => {
            let s = TcpStream::connect(origin).await.unwrap();
            s.set_nodelay(true).unwrap();
            Box::new(s)
        }
        Path_::Connect => Box::new(
            connect_tunnel(
                UnixStream::connect(&setup.sock).await.unwrap(),
                origin.port(),
            )
            .await,
        ),
        Path_::Socks => Box::new(
            socks_tunnel(
                UnixStream::connect(&setup.sock).await.unwrap(),
                origin.port(),
            )
            .await,
        ),
        Path_::SocatConnect => {
            let s = TcpStream::connect(setup.bridge.unwrap()).await.unwrap();
            s.set_nodelay(true).unwrap();
            Box::new(connect_tunnel(s, origin.port()).await)
        }
    }
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

async fn latency(kind: Path_, setup: &Setup, origin: SocketAddr, n: usize) -> (Duration, Duration) {
    for _ in 0..n / 10 {
        let mut s = open(kind, setup, origin).await;
        ping(&mut s).await;
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let mut s = open(kind, setup, origin).await;
        ping(&mut s).await;
        v.push(t.elapsed());
    }
    (pct(&mut v, 0.5), pct(&mut v, 0.99))
}

async fn bulk(kind: Path_, setup: &Setup, origin: SocketAddr, bytes: u64) -> f64 {
    let mut s = open(kind, setup, origin).await;
    let chunk = vec![0xa5u8; 256 * 1024];
    let t = Instant::now();
    let mut sent = 0u64;
    while sent < bytes {
        s.write_all(&chunk).await.unwrap();
        sent += chunk.len() as u64;
    }
    s.shutdown().await.unwrap();
    let mut n = [0u8; 8];
    s.read_exact(&mut n).await.unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(u64::from_be_bytes(n), sent);
    sent as f64 / secs / 1e9
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Proportional set size: shared library pages divided among the processes mapping them,
/// the fair "added memory" of one more socat.
fn smaps_kib(pid: u32, key: &str) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    rollup
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind((LO, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_socat(sock: &Path) -> Option<(std::process::Child, SocketAddr)> {
    let port = free_port();
    let child = std::process::Command::new("socat")
        .arg("-b65536")
        .arg(format!("TCP4-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork"))
        .arg(format!("UNIX-CONNECT:{}", sock.display()))
        .spawn()
        .ok()?;
    let addr = SocketAddr::new(LO, port);
    for _ in 0..200 {
        if std::net::TcpStream::connect(addr).is_ok() {
            // That probe reached the proxy as an empty connection; harmless.
            return Some((child, addr));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this without it, and then
    // only a smoke run proves the paths work (its figures mean nothing).
    let (n, bytes) = if !args.iter().any(|a| a == "--bench") {
        println!("smoke run (use `cargo bench --bench egress` for figures)");
        (20, 8u64 << 20)
    } else if args.iter().any(|a| a == "--quick") {
        (300, 256u64 << 20)
    } else {
        (2000, 2u64 << 30)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socat = rt.block_on(async {
        let echo = echo_origin().await;
        let sink = sink_origin().await;
        let proxy = EgressProxy::new(
            EgressOptions::new(dir.path().join("egress"))
                .with_resolver(Resolver::with_overrides([("bench.test", vec![LO])]).overrides_only()),
        )
        .unwrap();
        let sock = proxy
            .add_server(
                "bench",
                &DomainLists {
                    allowed_domains: vec![format!("bench.test:{}", echo.port()), format!("bench.test:{}", sink.port())],
                    denied_domains: vec![],
                },
            )
            .unwrap();
        let socat = start_socat(&sock);
        let setup = Setup {
            sock: sock.clone(),
            bridge: socat.as_ref().map(|(_, a)| *a),
        };
        let mut kinds = vec![
            ("direct TCP", Path_::Direct),
            ("proxy, HTTP CONNECT (unix socket)", Path_::Connect),
            ("proxy, SOCKS5 (unix socket)", Path_::Socks),
        ];
        if setup.bridge.is_some() {
            kinds.push(("socat bridge + proxy, HTTP CONNECT", Path_::SocatConnect));
        }
        println!("connection setup + 1-byte round trip, {n} connections (median / p99):");
        for (label, k) in &kinds {
            let (med, p99) = latency(*k, &setup, echo, n).await;
            println!("  {label:<38} {:>8.1} us / {:>8.1} us", med.as_secs_f64() * 1e6, p99.as_secs_f64() * 1e6);
        }
        println!("bulk, {} MiB one way (best of 3):", bytes >> 20);
        for (label, k) in &kinds {
            let mut best: f64 = 0.0;
            for _ in 0..3 {
                best = best.max(bulk(*k, &setup, sink, bytes).await);
            }
            println!("  {label:<38} {best:>8.2} GB/s");
        }
        if let Some((child, _)) = &socat {
            // Ten bridges side by side: the PSS average is what each one adds once the shared
            // library pages are split, private pages are what it adds on its own.
            let mut more: Vec<std::process::Child> = (0..9)
                .filter_map(|_| start_socat(&setup.sock).map(|(c, _)| c))
                .collect();
            let pids: Vec<u32> = std::iter::once(child.id()).chain(more.iter().map(|c| c.id())).collect();
            let pss: u64 = pids.iter().filter_map(|p| smaps_kib(*p, "Pss:")).sum();
            let private = smaps_kib(child.id(), "Private_Dirty:").unwrap_or(0)
                + smaps_kib(child.id(), "Private_Clean:").unwrap_or(0);
            println!(
                "memory: idle socat bridge listener: {:?} KiB RSS; {} KiB PSS averaged over {} bridges; {} KiB private (two bridges per proxied server)",
                rss_kib(child.id()),
                pss / pids.len() as u64,
                pids.len(),
                private
            );
            for c in &mut more {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if let Some(before) = rss_kib(std::process::id()) {
            let extra = 200;
            for i in 0..extra {
                let lists = DomainLists {
                    allowed_domains: vec!["example.com".into(), "*.example.org".into()],
                    denied_domains: vec![],
                };
                proxy.add_server(&format!("s{i}"), &lists).unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Some(after) = rss_kib(std::process::id()) {
                println!(
                    "memory: proxy cost per registered server (socket + listener task): {:.1} KiB ({extra} servers: {before} -> {after} KiB RSS)",
                    after.saturating_sub(before) as f64 / extra as f64
                );
            }
        }
        socat
    });
    if let Some((mut child, _)) = socat {
        let _ = child.kill();
        let _ = child.wait();
    }
}
