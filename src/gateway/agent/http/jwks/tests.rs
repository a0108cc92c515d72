//! The JWKS key source proven: keys chosen by `kid`, refreshed, cached and refused as the
//! module header says.

use super::*;

#[test]
fn https_to_any_host_and_http_only_on_loopback_are_fetched() {
    let u = JwksUrl::parse("https://issuer.example/.well-known/jwks.json").unwrap();
    assert_eq!(u.scheme, Scheme::Https);
    assert_eq!(
        (u.authority().as_str(), u.target.as_str()),
        ("issuer.example", "/.well-known/jwks.json")
    );
    let u = JwksUrl::parse("https://10.0.0.1:8443/jwks").unwrap();
    assert_eq!(
        (u.scheme, u.authority().as_str()),
        (Scheme::Https, "10.0.0.1:8443")
    );
    let u = JwksUrl::parse("https://[2001:db8::1]/jwks").unwrap();
    assert_eq!((u.port, u.authority().as_str()), (443, "[2001:db8::1]"));
    let u = JwksUrl::parse("https://[2001:db8::1]:8443/jwks").unwrap();
    assert_eq!(u.authority(), "[2001:db8::1]:8443");
    let u = JwksUrl::parse("http://127.0.0.1:8081/keys/jwks.json?x=1").unwrap();
    assert_eq!(u.scheme, Scheme::Http);
    assert_eq!((u.port, u.target.as_str()), (8081, "/keys/jwks.json?x=1"));
    assert_eq!(u.authority(), "127.0.0.1:8081");
    let u = JwksUrl::parse("http://[::1]/jwks").unwrap();
    assert_eq!(
        (u.authority().as_str(), u.target.as_str()),
        ("[::1]", "/jwks")
    );
    assert!(JwksUrl::parse("http://localhost:9/j").is_ok());
    for (bad, why) in [
        ("http://issuer.example/jwks", "replaced in transit"),
        ("http://10.0.0.1/jwks", "replaced in transit"),
        ("http://[2001:db8::1]/jwks", "replaced in transit"),
        ("http://u:p@127.0.0.1/jwks", "credentials"),
        ("https://u@issuer.example/jwks", "credentials"),
        ("file:///etc/jwks", "only https://"),
        ("ftp://issuer.example/jwks", "only https://"),
        ("nope", "not a URL"),
    ] {
        let e = JwksUrl::parse(bad).unwrap_err().to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
}

#[test]
fn only_a_complete_200_answer_is_a_body() {
    let ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
    assert_eq!(response_body(ok, End::Closed).unwrap(), "{}");
    let no_length = b"HTTP/1.1 200 OK\r\n\r\n{\"keys\":[]}";
    assert_eq!(
        response_body(no_length, End::Closed).unwrap(),
        "{\"keys\":[]}"
    );
    for (raw, why) in [
        (&b"HTTP/1.0 404 Not Found\r\n\r\n"[..], "not 200"),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\n{}", "cut"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxx",
            "Transfer-Encoding gzip",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            "both",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n",
            "chunked answer was cut",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
            "two different",
        ),
        (b"HTTP/1.0 200 OK\r\n", "not an HTTP response"),
        (b"SSH-2.0 x\r\n\r\n", "not an HTTP/1"),
        (
            b"HTTP/1.1 301 Moved Permanently\r\nLocation: http://elsewhere/\r\n\r\n",
            "redirects are not followed",
        ),
    ] {
        let e = response_body(raw, End::Closed).unwrap_err();
        assert!(e.contains(why), "{e}");
    }
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                    2;ext=1\r\n{\"\r\n9\r\nkeys\":[]}\r\n0\r\n\r\n";
    assert_eq!(
        response_body(chunked, End::Closed).unwrap(),
        "{\"keys\":[]}"
    );
    // Over TLS without close_notify, only an answer that says where it ends is whole.
    assert_eq!(response_body(ok, End::Unannounced).unwrap(), "{}");
    assert_eq!(
        response_body(chunked, End::Unannounced).unwrap(),
        "{\"keys\":[]}"
    );
    let e = response_body(no_length, End::Unannounced).unwrap_err();
    assert!(e.contains("close_notify"), "{e}");
    let huge = vec![b'x'; MAX_RESPONSE_BYTES + 1];
    assert!(response_body(&huge, End::Closed)
        .unwrap_err()
        .contains("over"));
}

/// An HTTPS server on 127.0.0.1 for one connection, its certificate (for 127.0.0.1)
/// signed by a fresh CA: it answers `answer` and then, when `notify`, closes with
/// `close_notify`, else drops the connection. (The URL, a client trusting only that CA.)
async fn https_once(answer: &'static [u8], notify: bool) -> (JwksUrl, TlsClient) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_der: CertificateDer<'static> = ca.self_signed(&ca_key).unwrap().der().clone();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = acceptor.accept(tcp).await.unwrap();
        let mut request = Vec::new();
        while !request.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            if tls.read(&mut byte).await.unwrap() == 0 {
                return;
            }
            request.push(byte[0]);
        }
        tls.write_all(answer).await.unwrap();
        if notify {
            tls.shutdown().await.unwrap();
        } else {
            tls.flush().await.unwrap();
            // Close the TCP connection under TLS without close_notify.
            let (tcp, _) = tls.into_inner();
            drop(tcp);
        }
    });
    let url = JwksUrl::parse(&format!("https://127.0.0.1:{port}/jwks.json")).unwrap();
    let client = TlsClient::with_roots(vec![ca_der], None).unwrap();
    (url, client)
}

#[tokio::test]
async fn over_tls_an_answer_cut_without_close_notify_is_refused_unless_its_length_is_known() {
    let sized = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"keys\":[]}";
    let no_length = b"HTTP/1.1 200 OK\r\n\r\n{\"keys\":[]}";
    let (url, tls) = https_once(no_length, true).await;
    assert_eq!(
        fetch(&url, Some(&tls), None).await.unwrap(),
        "{\"keys\":[]}"
    );
    let (url, tls) = https_once(sized, false).await;
    assert_eq!(
        fetch(&url, Some(&tls), None).await.unwrap(),
        "{\"keys\":[]}"
    );
    let (url, tls) = https_once(no_length, false).await;
    let e = fetch(&url, Some(&tls), None).await.unwrap_err();
    assert!(e.contains("close_notify"), "{e}");
    // Without a TLS client an https:// URL is never fetched in clear text.
    let url = JwksUrl::parse("https://127.0.0.1:1/jwks.json").unwrap();
    let e = fetch(&url, None, None).await.unwrap_err();
    assert!(e.contains("without a TLS client"), "{e}");
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
