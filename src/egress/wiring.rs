//! How a sandboxed server is connected to the egress proxy. Pure: from the host path of the
//! server's proxy socket to (a) the extra bwrap arguments, (b) the in-sandbox wrapper command
//! that starts socat bridges on 127.0.0.1 and then execs the server, (c) the proxy
//! environment variables. The launcher appends (a) to its argv, sets (c) in the command's
//! environment, and runs (b) instead of the bare command.
//!
//! It assumes the launcher gives the sandbox its own network namespace (`--unshare-net`),
//! `/proc` (the wrapper waits for the bridges in `/proc/net/tcp`), `/dev/null`, `/bin/sh`
//! and socat, and its own PID namespace: the bridges are reaped when the namespace ends with
//! the server. With a shared PID namespace (the `share_pid` relaxation) they would outlive
//! the server. It must never do I/O or decide policy.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use crate::sandbox::NetworkSpec;

/// Where the proxy socket appears inside every sandbox.
pub const SANDBOX_SOCKET: &str = "/run/palisade/egress.sock";
/// The conventional ports (srt's too), so tools that hard-code them work.
pub const HTTP_PORT: u16 = 3128;
pub const SOCKS_PORT: u16 = 1080;

/// Inputs of the wiring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WiringOptions {
    /// Host path of this server's proxy socket (`EgressProxy::add_server`'s result).
    pub host_socket: PathBuf,
    /// Path of the socket inside the sandbox.
    pub sandbox_socket: PathBuf,
    pub http_port: u16,
    pub socks_port: u16,
    /// socat as visible inside the sandbox (the launcher resolved it, e.g. /usr/bin/socat).
    pub socat: PathBuf,
    /// The shell that runs the wrapper inside the sandbox.
    pub shell: PathBuf,
}

impl WiringOptions {
    /// Default ports and paths for a socket.
    pub fn new(host_socket: impl Into<PathBuf>, socat: impl Into<PathBuf>) -> WiringOptions {
        WiringOptions {
            host_socket: host_socket.into(),
            sandbox_socket: PathBuf::from(SANDBOX_SOCKET),
            http_port: HTTP_PORT,
            socks_port: SOCKS_PORT,
            socat: socat.into(),
            shell: PathBuf::from("/bin/sh"),
        }
    }

    /// From a spec's network: `Some` only for `NetworkSpec::Proxied`.
    pub fn from_spec(network: &NetworkSpec) -> Option<WiringOptions> {
        match network {
            NetworkSpec::Proxied {
                socket,
                http_port,
                socks_port,
                socat,
            } => Some(WiringOptions {
                http_port: *http_port,
                socks_port: *socks_port,
                ..WiringOptions::new(socket.clone(), socat.clone())
            }),
            NetworkSpec::None | NetworkSpec::Host | NetworkSpec::Loopback { .. } => None,
        }
    }
}

/// What the launcher adds for one proxied server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressWiring {
    /// Appended to the bwrap argv before `--`: the socket bind. Paths are kept as bytes
    /// (`OsString`): a lossy conversion would bind another path than the spec's (found by
    /// the bwrap_argv fuzz target with a non-UTF-8 socket path).
    pub bwrap_args: Vec<OsString>,
    /// Set in the sandboxed command's environment.
    pub env: BTreeMap<String, String>,
    /// Everything before the server's own argv (see [`EgressWiring::wrap`]).
    pub wrapper_prefix: Vec<OsString>,
}

/// The in-sandbox wrapper. Values arrive as positional parameters (never spliced into the
/// script), so no quoting can go wrong: `$1` socat, `$2` socket, `$3` HTTP port, `$4` SOCKS
/// port, then the server's argv. socat's stdin and stdout are /dev/null: the server's stdio is
/// the MCP channel. It waits (at most ~5 s) until both ports are in LISTEN state (`0A`) in
/// /proc/net/tcp, so the server's first connection cannot beat the bridge.
const WRAPPER_SCRIPT: &str = r#"socat=$1 sock=$2 http=$3 socks=$4
shift 4
"$socat" -b65536 TCP4-LISTEN:"$http",bind=127.0.0.1,reuseaddr,fork UNIX-CONNECT:"$sock" </dev/null >/dev/null &
"$socat" -b65536 TCP4-LISTEN:"$socks",bind=127.0.0.1,reuseaddr,fork UNIX-CONNECT:"$sock" </dev/null >/dev/null &
hh=$(printf '%04X' "$http")
hs=$(printf '%04X' "$socks")
i=0
while :; do
  up=0
  while read -r _ local _ st _; do
    [ "$st" = 0A ] || continue
    case "$local" in
      *:"$hh") up=$((up | 1)) ;;
      *:"$hs") up=$((up | 2)) ;;
    esac
  done </proc/net/tcp
  [ "$up" = 3 ] && break
  i=$((i + 1))
  if [ "$i" -ge 500 ]; then
    echo "palisade: the egress bridge (socat) did not start inside the sandbox" >&2
    exit 127
  fi
  sleep 0.01
done
exec "$@"
"#;

/// `$0` of the wrapper shell, as it shows in `ps` and error messages.
const WRAPPER_NAME: &str = "palisade-egress";

/// The wiring for one proxied server.
/// The proxy variables a sandboxed program is given: HTTP(S) through `http`, everything else
/// through `socks`, loopback never proxied; upper and lower case, as programs read either.
pub fn proxy_env(http: &str, socks: &str) -> BTreeMap<String, String> {
    let no_proxy = "localhost,127.0.0.1";
    [
        ("HTTP_PROXY", http),
        ("HTTPS_PROXY", http),
        ("ALL_PROXY", socks),
        ("NO_PROXY", no_proxy),
        ("http_proxy", http),
        ("https_proxy", http),
        ("all_proxy", socks),
        ("no_proxy", no_proxy),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

pub fn wiring(opts: &WiringOptions) -> EgressWiring {
    let http = format!("http://127.0.0.1:{}", opts.http_port);
    // socks5h: the client sends the name, the proxy resolves it (there is no DNS inside).
    let socks = format!("socks5h://127.0.0.1:{}", opts.socks_port);
    let env = proxy_env(&http, &socks);
    EgressWiring {
        // Read-only is enough to connect(2) to a socket and stops the sandbox from replacing
        // the mount point's inode.
        bwrap_args: vec![
            "--ro-bind".into(),
            opts.host_socket.clone().into(),
            opts.sandbox_socket.clone().into(),
        ],
        env,
        wrapper_prefix: vec![
            opts.shell.clone().into(),
            "-c".into(),
            WRAPPER_SCRIPT.into(),
            WRAPPER_NAME.into(),
            opts.socat.clone().into(),
            opts.sandbox_socket.clone().into(),
            opts.http_port.to_string().into(),
            opts.socks_port.to_string().into(),
        ],
    }
}

impl EgressWiring {
    /// The full in-sandbox argv as text: the wrapper, then the server's program and
    /// arguments (for srt and tests, whose command lines are text; bwrap takes
    /// `wrapper_prefix` as it is).
    pub fn wrap(&self, program: &str, args: &[String]) -> Vec<String> {
        let mut argv: Vec<String> = self
            .wrapper_prefix
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        argv.push(program.to_string());
        argv.extend(args.iter().cloned());
        argv
    }

    /// The wrapper as one shell-quoted string, for `sh -c '...'` callers (srt, tests).
    pub fn wrap_shell(&self, program: &str, args: &[String]) -> String {
        shell_words::join(self.wrap(program, args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_wiring() {
        let w = wiring(&WiringOptions::new(
            "/run/user/0/palisade/0-fetch.sock",
            "/usr/bin/socat",
        ));
        assert_eq!(
            w.bwrap_args,
            [
                "--ro-bind",
                "/run/user/0/palisade/0-fetch.sock",
                "/run/palisade/egress.sock"
            ]
        );
        let env: Vec<(&str, &str)> = w
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            env,
            [
                ("ALL_PROXY", "socks5h://127.0.0.1:1080"),
                ("HTTPS_PROXY", "http://127.0.0.1:3128"),
                ("HTTP_PROXY", "http://127.0.0.1:3128"),
                ("NO_PROXY", "localhost,127.0.0.1"),
                ("all_proxy", "socks5h://127.0.0.1:1080"),
                ("http_proxy", "http://127.0.0.1:3128"),
                ("https_proxy", "http://127.0.0.1:3128"),
                ("no_proxy", "localhost,127.0.0.1"),
            ]
        );
        let argv = w.wrap(
            "/usr/bin/python3",
            &["-m".into(), "mcp_server_fetch".into()],
        );
        assert_eq!(argv[..2], ["/bin/sh", "-c"]);
        assert_eq!(
            argv[3..],
            [
                "palisade-egress",
                "/usr/bin/socat",
                "/run/palisade/egress.sock",
                "3128",
                "1080",
                "/usr/bin/python3",
                "-m",
                "mcp_server_fetch"
            ]
        );
    }

    #[test]
    fn only_proxied_specs_are_wired() {
        assert!(WiringOptions::from_spec(&NetworkSpec::None).is_none());
        assert!(WiringOptions::from_spec(&NetworkSpec::Host).is_none());
        let o = WiringOptions::from_spec(&NetworkSpec::Proxied {
            socket: "/s.sock".into(),
            http_port: 8888,
            socks_port: 9999,
            socat: "/usr/bin/socat".into(),
        })
        .unwrap();
        assert_eq!((o.http_port, o.socks_port), (8888, 9999));
        assert_eq!(wiring(&o).env["HTTP_PROXY"], "http://127.0.0.1:8888");
    }
}
