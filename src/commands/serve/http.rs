//! `serve --http`: the HTTP front's options from the flags and the config's `http` block
//! (flags win): the listen address, bearer tokens or a JWT verifier (a JWKS file or URL,
//! fetched through `HTTPS_PROXY` with the system trust store plus `--jwks-ca`), limits, and
//! each principal's approval chain. Apart from the stdio options so each reads on its own;
//! what the options cannot mean is refused by `HttpOptions::validate` before anything listens.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::{approval_chain_with, ServeArgs, DEFAULT_ESCALATION_TIMEOUT};

/// The HTTP front's options from the flags and the `http` settings (flags win); `None`
/// for stdio.
pub(super) fn http_options(
    args: &ServeArgs,
    s: &crate::config::Settings,
) -> anyhow::Result<Option<crate::gateway::agent::http::HttpOptions>> {
    use crate::gateway::agent::http::{Auth, HttpOptions, TokenTable};
    let block = s.http.clone().unwrap_or_default();
    let Some(listen) = args.http.clone().or(block.listen.clone()) else {
        if args.tokens.is_some() || args.no_auth || !args.allow_origins.is_empty() {
            anyhow::bail!("--tokens, --no-auth and --allow-origin need --http HOST:PORT");
        }
        return Ok(None);
    };
    let source = match (&args.http, &args.config) {
        (Some(_), _) => format!("--http {listen}"),
        (None, Some(file)) => format!("{}: palisade.http.listen `{listen}`", file.display()),
        (None, None) => format!("palisade.http.listen `{listen}`"),
    };
    let listen = listen_addr(&listen).with_context(|| {
        format!(
            "{source}: give an IP address and a port (`localhost` is read as 127.0.0.1), e.g. \
             127.0.0.1:8080 or [::1]:8080"
        )
    })?;
    let tokens = match args.tokens.clone().or(block.tokens.clone()) {
        Some(path) => Some(TokenTable::load(&path).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let jwks = match (
        args.jwks.clone().or(block.jwks.clone()),
        args.jwks_url.clone().or(block.jwks_url.clone()),
    ) {
        (None, None) => None,
        (Some(_), Some(_)) => anyhow::bail!("give --jwks FILE or --jwks-url URL, not both"),
        (Some(path), None) => Some(JwksFrom::File(path)),
        (None, Some(url)) => Some(JwksFrom::Url(url)),
    };
    let jwt = match jwks {
        Some(from) => Some(jwt_verifier(args, &block, from)?),
        None => None,
    };
    if jwt.is_none() {
        if let Some((flag, path)) = jwks_ca(args, &block) {
            anyhow::bail!(
                "{flag} {}: a CA file applies to an https:// --jwks-url (jwksUrl), and none \
                 is given; add the URL or drop the CA file",
                path.display()
            );
        }
    }
    let auth = match (tokens.is_some() || jwt.is_some(), args.no_auth) {
        (true, true) => {
            anyhow::bail!("--tokens/--jwks/--jwks-url and --no-auth exclude each other")
        }
        (true, false) => Auth::Bearer { tokens, jwt },
        (false, true) => Auth::Anonymous,
        (false, false) => anyhow::bail!(
            "--http needs authentication: give --tokens FILE (lines `PRINCIPAL SHA256HEX`), \
             --jwks FILE or --jwks-url URL with --jwt-issuer and --jwt-audience, or --no-auth \
             on a loopback address"
        ),
    };
    let mut allowed_origins = block.allow_origins.clone();
    allowed_origins.extend(args.allow_origins.iter().cloned());
    let http = HttpOptions {
        listen,
        auth,
        allowed_origins,
        idle_timeout: std::time::Duration::from_secs(
            args.idle_timeout
                .or(block.idle_timeout)
                .unwrap_or(900)
                .max(1),
        ),
        max_principals: block.max_principals.unwrap_or(200),
        max_body_bytes: block.max_body_bytes.unwrap_or(4 << 20),
        max_requests_per_principal: block.max_requests_per_principal.unwrap_or(16),
        shutdown_grace: std::time::Duration::from_secs(block.shutdown_grace.unwrap_or(10)),
        approver_for: None,
        fast_calls: true,
        rate: block
            .requests_per_minute
            .map(|n| (n, block.request_burst.unwrap_or(n))),
    };
    http.validate().map_err(anyhow::Error::msg)?;
    let mut http = http;
    let escalation = args.escalation.clone().or(s.escalation.clone());
    let mut asks_the_agent = false;
    for approver in escalation.iter().flat_map(|e| e.split(',')).map(str::trim) {
        let why = match approver {
            "tty" | "auto" => "no terminal belongs to a remote agent",
            "elicit" => {
                asks_the_agent = true;
                continue;
            }
            _ => continue,
        };
        anyhow::bail!(
            "--escalation {approver} cannot serve --http: {why}; use elicit, dir:PATH or exec:CMD"
        );
    }
    if let (Some(spec), true) = (escalation, asks_the_agent) {
        // Each principal's chain asks that principal's agent: the process-wide chain
        // (built around a link no agent connects to) is replaced per principal.
        let timeout_s = args
            .escalation_timeout
            .or(s.escalation_timeout)
            .unwrap_or(DEFAULT_ESCALATION_TIMEOUT);
        http.approver_for = Some(Arc::new(move |link| {
            let chain =
                approval_chain_with(&spec, timeout_s, link).map_err(|e| format!("{e:#}"))?;
            Ok(Arc::new(chain) as Arc<dyn crate::gateway::stages::ApprovalStage>)
        }));
    }
    Ok(Some(http))
}

enum JwksFrom {
    File(PathBuf),
    Url(String),
}

/// Resource-server mode: the JWT verifier for a JWKS file or URL, with the issuer, audience
/// and scopes of the flags and the `http` block.
fn jwt_verifier(
    args: &ServeArgs,
    block: &crate::config::HttpSettings,
    from: JwksFrom,
) -> anyhow::Result<crate::gateway::agent::http::jwt::JwtVerifier> {
    use crate::gateway::agent::http::{jwks, jwt::JwtVerifier};
    let issuer = args.jwt_issuer.clone().or(block.jwt_issuer.clone());
    let audience = args.jwt_audience.clone().or(block.jwt_audience.clone());
    let (Some(issuer), Some(audience)) = (issuer, audience) else {
        anyhow::bail!(
            "--jwks/--jwks-url need --jwt-issuer and --jwt-audience (this resource's URL)"
        );
    };
    let mut scopes = block.jwt_scopes.clone();
    scopes.extend(args.jwt_scopes.iter().cloned());
    let verifier = match from {
        JwksFrom::File(path) => {
            if let Some((flag, ca)) = jwks_ca(args, block) {
                anyhow::bail!(
                    "{flag} {}: a CA file applies to an https:// --jwks-url (jwksUrl), not to \
                     the JWKS file {}; drop the CA file",
                    ca.display(),
                    path.display()
                );
            }
            JwtVerifier::load(&path, issuer, audience, scopes)
        }
        JwksFrom::Url(url) => {
            let url = jwks::JwksUrl::parse(&url).map_err(|e| anyhow::anyhow!("--jwks-url {e}"))?;
            let tls = jwks_tls(&url, jwks_ca(args, block))?;
            let every = Duration::from_secs(block.jwks_refetch.unwrap_or(30));
            let proxy = jwks_proxy(&url)?;
            let source = jwks::JwksSource::new(url, tls, proxy, every);
            JwtVerifier::from_url(source, issuer, audience, scopes)
        }
    };
    verifier.map_err(anyhow::Error::msg)
}

/// The proxy an https:// JWKS URL is fetched through: `https_proxy`/`HTTPS_PROXY` unless
/// `no_proxy`/`NO_PROXY` names the host (or it is loopback); a proxy setting that cannot be
/// used stops palisade at start (a fetch around it would bypass the network's rules).
fn jwks_proxy(
    url: &crate::gateway::agent::http::jwks::JwksUrl,
) -> anyhow::Result<Option<crate::gateway::agent::http::proxy::Proxy>> {
    use crate::gateway::agent::http::{jwks::Scheme, proxy::ProxyEnv};
    if url.scheme != Scheme::Https {
        return Ok(None);
    }
    let proxy = ProxyEnv::read(|name| std::env::var(name).ok())
        .choose(url.host())
        .map_err(|e| anyhow::anyhow!("--jwks-url {}: {e}", url.url))?;
    if let Some(p) = &proxy {
        tracing::info!(
            url = %url.url,
            "the JWKS is fetched through the proxy {}:{} ({}), by CONNECT",
            p.host,
            p.port,
            p.from
        );
    }
    Ok(proxy)
}

/// The TLS client for an https:// JWKS URL: the system trust store plus the CA file, if
/// given (with where it was given); `None` for a loopback http:// URL, which takes no CA file.
fn jwks_tls(
    url: &crate::gateway::agent::http::jwks::JwksUrl,
    ca: Option<(&'static str, PathBuf)>,
) -> anyhow::Result<Option<crate::gateway::agent::http::tls_client::TlsClient>> {
    use crate::gateway::agent::http::{jwks::Scheme, tls_client::TlsClient};
    match (url.scheme, ca) {
        (Scheme::Http, None) => Ok(None),
        (Scheme::Http, Some((flag, path))) => anyhow::bail!(
            "{flag} {}: a CA file applies to an https:// --jwks-url, and {} is plain http on \
             loopback; use the https:// URL or drop the CA file",
            path.display(),
            url.url
        ),
        (Scheme::Https, ca) => {
            let client =
                TlsClient::new(ca.as_ref().map(|(_, p)| p.as_path())).map_err(|e| match &ca {
                    Some((flag, _)) => anyhow::anyhow!("{flag} {e}"),
                    None => anyhow::anyhow!("--jwks-url {}: {e}", url.url),
                })?;
            tracing::info!(
                url = %url.url,
                trusted_cas = client.roots,
                "the JWKS is fetched over TLS, its certificate checked against the system trust \
                 store{}",
                if ca.is_some() { " and the CA file" } else { "" }
            );
            Ok(Some(client))
        }
    }
}

/// The CA file for an https:// JWKS URL, with where it was given (the flag wins).
fn jwks_ca(
    args: &ServeArgs,
    block: &crate::config::HttpSettings,
) -> Option<(&'static str, PathBuf)> {
    match (&args.jwks_ca, &block.jwks_ca) {
        (Some(path), _) => Some(("--jwks-ca", path.clone())),
        (None, Some(path)) => Some(("http.jwksCa", path.clone())),
        (None, None) => None,
    }
}

/// `IP:PORT`, `[IPv6]:PORT`, or `localhost:PORT` as 127.0.0.1 (no name is looked up: the
/// address the front binds is the one written).
fn listen_addr(text: &str) -> Result<std::net::SocketAddr, std::net::AddrParseError> {
    match text.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}").parse(),
        None => text.parse(),
    }
}

#[cfg(test)]
mod listen_tests {
    #[test]
    fn localhost_is_loopback_and_other_names_are_refused() {
        assert_eq!(
            super::listen_addr("localhost:8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert!(super::listen_addr("[::1]:0").is_ok());
        assert!(super::listen_addr("example.com:80").is_err());
        assert!(super::listen_addr("localhost").is_err());
    }
}
