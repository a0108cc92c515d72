//! Property tests (proptest, on the stable toolchain; the cargo-fuzz targets in fuzz/ run the
//! same checks longer, see scripts/fuzz.sh) for the parsers and builders an attacker's input
//! reaches: the bwrap argv builder, domain matching (policy and egress), policy/annotation/list
//! loading, and the gateway's JSON-RPC line framing. Path canonicalisation
//! and file URIs have their own properties in src/roots/canon/ and src/roots/uri.rs.
//! Case counts and run times are recorded in docs/security.md.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../fuzz/checks/mod.rs"]
mod checks;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use palisade::policy::domains::{is_ip_literal, matches_pattern};
use palisade::sandbox::bwrap::{render, Mask, Render};
use palisade::sandbox::{
    Access, Mount, MountOrigin, NetworkSpec, ResourceLimits, SandboxSpec, Symlink,
};
use proptest::prelude::*;

/// One path component an attacker might choose: option-like, control characters, dots.
fn component() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,6}",
        Just("--bind".to_string()),
        Just("--share-net".to_string()),
        Just("-".to_string()),
        Just("a\nb".to_string()),
        Just(" ".to_string()),
        Just("...".to_string()),
        "[\\x01-\\x7f&&[^/\\x00]]{1,4}",
    ]
}

fn abs_path() -> impl Strategy<Value = PathBuf> {
    prop::collection::vec(component(), 1..4)
        .prop_map(|c| PathBuf::from(format!("/{}", c.join("/"))))
}

fn mount() -> impl Strategy<Value = Mount> {
    (abs_path(), any::<bool>()).prop_map(|(path, rw)| Mount {
        path,
        access: if rw { Access::Rw } else { Access::Ro },
        origin: MountOrigin::Root,
    })
}

fn spec() -> impl Strategy<Value = (SandboxSpec, Vec<PathBuf>, Vec<PathBuf>)> {
    (
        prop::collection::vec(mount(), 0..6),
        prop::collection::vec(abs_path(), 0..3),
        prop::collection::vec(abs_path(), 0..3),
        prop::collection::vec("[ -~]{0,8}", 0..3),
        abs_path(),
    )
        .prop_map(|(mounts, deny, protect, args, cwd)| {
            let spec = SandboxSpec {
                program: "/usr/bin/python3".into(),
                args,
                env: BTreeMap::new(),
                cwd,
                mounts,
                links: vec![Symlink {
                    path: "/bin".into(),
                    target: "usr/bin".into(),
                }],
                deny: deny.clone(),
                home: "/home/u".into(),
                network: NetworkSpec::None,
                limits: ResourceLimits::default(),
                share_pid: false,
                seccomp: true,
            };
            (spec, deny, protect)
        })
}

/// Arity of every flag the builder may emit; anything else is a failure.
fn arity(flag: &str) -> Option<usize> {
    Some(match flag {
        "--unshare-all" | "--unshare-user" | "--disable-userns" | "--die-with-parent"
        | "--new-session" => 0,
        "--cap-drop" | "--proc" | "--dev" | "--tmpfs" | "--remount-ro" | "--seccomp"
        | "--chdir" => 1,
        "--symlink" | "--ro-bind" | "--bind" => 2,
        _ => return None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Parsing the argv the way bubblewrap does (each flag takes a fixed number of values,
    /// whatever they look like), no grant, deny or protected path yields a flag the spec did
    /// not ask for: no --share-net, every writable bind is a read-write mount of the spec (or a
    /// pin inside one),
    /// the namespaces and --remount-ro / are always there, and the command comes after `--`.
    #[test]
    fn argv_never_widens_the_sandbox((spec, deny, protect) in spec()) {
        let masks = deny.iter().map(|p| Mask::Dir(p.clone())).collect();
        let pinned = palisade::sandbox::bwrap::pins_for(&spec.mounts, protect.iter().chain(deny.iter()).map(PathBuf::as_path));
        let argv: Vec<OsString> = render(&spec, &Render { seccomp_fd: Some(5), masks, write_protect: protect, pinned });
        let argv: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let mut i = 0;
        let mut flags = Vec::new();
        let mut rw_binds = Vec::new();
        while argv[i] != "--" {
            let n = arity(&argv[i]);
            prop_assert!(n.is_some(), "unexpected flag {:?} at {} in {:?}", argv[i], i, argv);
            let n = n.unwrap();
            if argv[i] == "--bind" {
                rw_binds.push((argv[i + 1].clone(), argv[i + 2].clone()));
            }
            flags.push(argv[i].clone());
            i += 1 + n;
            prop_assert!(i < argv.len());
        }
        prop_assert!(flags.starts_with(&["--unshare-all".into(), "--unshare-user".into(), "--disable-userns".into()]));
        prop_assert!(!flags.iter().any(|f| f == "--share-net"));
        for (src, dst) in &rw_binds {
            prop_assert_eq!(src, dst);
            // A read-write mount of the spec, or a pin inside one (its deepest mount rw).
            let deepest = spec
                .mounts
                .iter()
                .filter(|m| std::path::Path::new(src).starts_with(&m.path))
                .max_by_key(|m| m.path.components().count());
            prop_assert!(
                deepest.is_some_and(|m| m.access == Access::Rw),
                "writable bind {} is not inside a read-write mount of the spec", src
            );
        }
        let tail = &argv[i + 1..];
        prop_assert_eq!(&tail[0], "/usr/bin/python3");
        prop_assert_eq!(&tail[1..], &spec.args[..]);
        let remount = argv.windows(2).any(|w| w[0] == "--remount-ro" && w[1] == "/");
        prop_assert!(remount);
    }

    /// `*` never matches an IP literal; `*.x` matches only x and names ending in `.x`; an
    /// exact pattern matches only itself (host part).
    #[test]
    fn domain_patterns_match_only_what_they_say(host in "[a-z0-9.:-]{1,20}", base in "[a-z]{1,6}\\.[a-z]{2,3}") {
        if is_ip_literal(&host) {
            prop_assert!(!matches_pattern(&host, "*"));
        }
        let wild = format!("*.{base}");
        if matches_pattern(&host, &wild) {
            let dotted = format!(".{}", base);
            prop_assert!(host == base || host.ends_with(&dotted));
        }
        if matches_pattern(&host, &base) {
            prop_assert_eq!(&host, &base);
        }
    }

    /// The egress proxy's parsers take any text without panicking, and a parsed wildcard
    /// entry never matches a host outside its suffix.
    #[test]
    fn egress_domain_parsing_never_panics(raw in "\\PC{0,40}", host in "[a-z0-9.-]{1,20}") {
        let entry = palisade::egress::domains::Entry::parse(&raw);
        let h = palisade::egress::domains::Host::parse(&host);
        if let (Ok(e), Ok(h)) = (entry, h) {
            let _ = e.matches_host(&h);
        }
        if let Ok(e) = palisade::egress::domains::Entry::parse("*.example.com") {
            if let Ok(h) = palisade::egress::domains::Host::parse(&host) {
                if e.matches_host(&h) {
                    prop_assert!(host.trim_end_matches('.').ends_with("example.com"), "{}", host);
                }
            }
        }
    }
}

/// Arbitrary JSON, nested a few levels, with the keys the loaders look for mixed in.
fn json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "\\PC{0,12}".prop_map(serde_json::Value::from),
        prop_oneof![
            Just("allow"),
            Just("deny"),
            Just("read-path"),
            Just("/tmp"),
            Just("~/x"),
            Just("@list")
        ]
        .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("rules".to_string()),
                    Just("if".to_string()),
                    Just("then".to_string()),
                    Just("name".to_string()),
                    Just("paths".to_string()),
                    Just("within".to_string()),
                    Just("roles".to_string()),
                    Just("servers".to_string()),
                    Just("tools".to_string()),
                    Just("args".to_string()),
                    Just("lists".to_string()),
                    Just("values".to_string()),
                    "[a-z]{1,5}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Loading any JSON as a policy, an annotation file or a list file never panics, and a
    /// refusal names the file.
    #[test]
    fn policy_loading_never_panics_and_errors_name_the_file(v in json(), which in 0usize..3) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("input.json");
        std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
        let mut paths = palisade::policy::PolicyPaths { policy: None, annotations: None, lists: None };
        match which {
            0 => paths.policy = Some(file.clone()),
            1 => paths.annotations = Some(file.clone()),
            _ => paths.lists = Some(file.clone()),
        }
        let opts = palisade::policy::PolicyOptions { home: Some("/home/u".into()), ..Default::default() };
        if let Err(e) = palisade::policy::Policy::load(&paths, opts) {
            let msg = e.to_string();
            prop_assert!(msg.contains(&file.display().to_string()), "{}", msg);
        }
    }
}

/// A stream of JSON-RPC-ish lines: messages, progress notifications, garbage, long lines.
fn jsonrpc_stream() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        Just(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#.to_vec()),
        Just(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":2}}"#.to_vec()),
        Just(br#"{"jsonrpc":"2.0","id":7,"method":"notifications/progress","params":{"progressToken":1,"progress":2}}"#.to_vec()),
        Just(br#"{"jsonrpc":"2.0","id":2,"result":{"text":"notifications/progress"}}"#.to_vec()),
        prop::collection::vec(any::<u8>(), 0..300),
        "[ -~]{0,80}".prop_map(String::into_bytes),
    ];
    prop::collection::vec((line, any::<bool>()), 0..8).prop_map(|lines| {
        let mut out = Vec::new();
        for (l, newline) in lines {
            out.extend(l);
            if newline {
                out.push(b'\n');
            }
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// The tap's line framing (gateway::server::tap) under any limit and any split of the reads:
    /// the frames are exactly the stream's lines, over-long ones dropped whole, and only
    /// real progress notifications are taken out (fuzz/checks/jsonrpc_framing.rs).
    #[test]
    fn jsonrpc_framing_keeps_lines_whole(limit in any::<u8>(), chunk in any::<u8>(), stream in jsonrpc_stream()) {
        let mut data = vec![limit, chunk];
        data.extend(stream);
        checks::jsonrpc_framing::run(&data);
    }

    /// The bwrap argv replayed through a model of bubblewrap's mount table never shows or
    /// makes writable a host path the spec does not grant (fuzz/checks/bwrap_argv.rs; the
    /// test above checks the argv's shape for specs built field by field).
    #[test]
    fn bwrap_argv_model_never_widens(data in prop::collection::vec(any::<u8>(), 0..200)) {
        checks::bwrap_argv::run(&data);
    }
}

/// A tool result's top level, as servers write it and as hostile ones might: `isError` and
/// `task` members among others, nested look-alikes, escaped keys, odd spacing.
fn result_object() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("isError".to_string()),
        Just("task".to_string()),
        Just("content".to_string()),
        Just("is\\u0045rror".to_string()),
        "[a-zA-Z_]{1,6}",
    ];
    let value = prop_oneof![
        json().prop_map(|v| v.to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        Just("null".to_string()),
        Just(r#""\"isError\":true""#.to_string()),
        Just(r#"{"isError":true,"t":"}\\"}"#.to_string()),
    ];
    let ws = prop_oneof![Just(""), Just(" "), Just("\n\t ")];
    prop::collection::vec((key, value, ws), 0..6).prop_map(|members| {
        let body: Vec<String> = members
            .into_iter()
            .map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}"))
            .collect();
        format!("{{{}}}", body.join(","))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The relay's fast look at a result (gateway::call::probe) never disagrees with serde:
    /// where it answers, serde answers the same; where it is unsure, it says so. A wrong
    /// answer would relay an error result unmarked and audit it as a success.
    #[test]
    fn the_result_probe_agrees_with_serde(object in result_object(), cut in any::<prop::sample::Index>()) {
        use palisade::gateway::call::probe::{probe, serde_probe};
        if let Some(ours) = probe(&object) {
            prop_assert_eq!(Some(ours), serde_probe(&object), "{}", object);
        }
        // A truncated object is never read as a whole one.
        let end = cut.index(object.len().max(1));
        if end < object.len() && object.is_char_boundary(end) {
            let part = &object[..end];
            if let Some(ours) = probe(part) {
                prop_assert_eq!(Some(ours), serde_probe(part), "{}", part);
            }
        }
    }
}

/// A JSON value's text as servers write it and as hostile ones might: valid values (nested,
/// escapes of every kind) and near misses serde refuses (bad escapes, raw control bytes,
/// numbers off the grammar, unbalanced or trailing-comma containers, cut literals).
fn hostile_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        json().prop_map(|v| v.to_string()),
        Just(r#""2.0""#.to_string()),
        Just("null".to_string()),
        Just(r#""a\"b\\""#.to_string()),
        Just(r#""\u00e9\ud800\n\/\b\f\r\t""#.to_string()),
        Just(r#""\x""#.to_string()),
        Just(r#""\u12G4""#.to_string()),
        Just(r#""\u12""#.to_string()),
        Just("\"a\tb\"".to_string()),
        Just("\"a\u{1}b\"".to_string()),
        Just("\"é\u{2028}\"".to_string()),
        Just("-0.5e+3".to_string()),
        Just("1E5".to_string()),
        Just("01".to_string()),
        Just("1.".to_string()),
        Just("-".to_string()),
        Just("1e".to_string()),
        Just(".5".to_string()),
        Just("tru".to_string()),
        Just("nul".to_string()),
        Just("[1,]".to_string()),
        Just("{\"a\":1,}".to_string()),
        Just("[}".to_string()),
        Just("{\"a\" 1}".to_string()),
        Just("{1:2}".to_string()),
        Just(r#"{"jsonrpc":"2.0","id":9,"result":{}}"#.to_string()),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        let ws = prop_oneof![Just(""), Just(" "), Just("\n"), Just("\t")];
        prop_oneof![
            prop::collection::vec((inner.clone(), ws.clone()), 0..4).prop_map(|items| {
                let items: Vec<String> =
                    items.into_iter().map(|(v, w)| format!("{w}{v}")).collect();
                format!("[{}]", items.join(","))
            }),
            prop::collection::vec(("[a-z]{0,3}|id|result|i\\\\u0064", inner, ws), 0..4).prop_map(
                |members| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(k, v, w)| format!("\"{k}\"{w}:{v}"))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }
            ),
        ]
    })
}

/// A line a server might send: envelope members in any order (escaped, repeated, `null`,
/// missing), unknown members, odd spacing, then something after the object or not.
fn hostile_line() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        4 => Just("jsonrpc".to_string()),
        4 => Just("id".to_string()),
        4 => Just("result".to_string()),
        1 => Just("method".to_string()),
        1 => Just("error".to_string()),
        1 => Just("params".to_string()),
        1 => Just("j\\u0073onrpc".to_string()),
        1 => Just("i\\u0064".to_string()),
        1 => Just("resul\\u0074".to_string()),
        1 => Just("ID".to_string()),
        1 => Just("é".to_string()),
        2 => "[a-z_]{1,6}",
    ];
    let value = prop_oneof![
        3 => hostile_value(),
        2 => Just(r#""2.0""#.to_string()),
        1 => Just(r#""2\u002e0""#.to_string()),
        1 => Just(r#"{"code":-32000,"message":"m"}"#.to_string()),
        1 => Just(r#""notifications/progress""#.to_string()),
        2 => any::<u32>().prop_map(|n| n.to_string()),
    ];
    let ws = prop_oneof![Just(""), Just(" "), Just("\t"), Just("\r\n")];
    let end = prop_oneof![
        Just("\n"),
        Just(""),
        Just(" \n"),
        Just("\r\n"),
        Just("}\n"),
        Just(" x")
    ];
    (prop::collection::vec((key, value, ws), 0..6), end).prop_map(|(members, end)| {
        let body: Vec<String> = members
            .into_iter()
            .map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}"))
            .collect();
        format!("{{{}}}{end}", body.join(","))
    })
}

/// A plain response with a hostile result: the fast path's own ground, so that most cases
/// exercise it rather than the fallback.
fn plain_response() -> impl Strategy<Value = String> {
    (any::<u32>(), hostile_value(), any::<bool>()).prop_map(|(id, result, first)| {
        if first {
            format!("{{\"result\":{result},\"jsonrpc\":\"2.0\",\"id\":{id}}}\n")
        } else {
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result}}}\n")
        }
    })
}

/// What a classification says, comparable across the scanner and serde.
fn said(kind: &palisade::gateway::server::envelope::Kind<'_>) -> String {
    use palisade::gateway::server::envelope::Kind;
    match kind {
        Kind::Response {
            id, reply: Ok(r), ..
        } => format!("result id={id} {r}"),
        Kind::Response {
            id, reply: Err(e), ..
        } => format!("error id={id} {e:?}"),
        Kind::Request { id, method, params } => {
            format!(
                "request {} {method} {:?}",
                id.get(),
                params.map(|p| p.get())
            )
        }
        Kind::Notification { method, params } => {
            format!("notification {method} {:?}", params.map(|p| p.get()))
        }
        Kind::Invalid(_) => "invalid".to_string(),
    }
}

/// The envelope scanner's answer for `line`, held to serde's: where it answers, serde reads
/// the same response (same id, same result bytes); the classification with the scanner in
/// front is serde's classification.
fn scanner_agrees(line: &str) -> Result<(), TestCaseError> {
    use palisade::gateway::server::envelope::{classify_serde, classify_text, response, LineText};
    let serde = classify_serde(line);
    if let Some(spans) = response(line) {
        prop_assert_eq!(
            said(&serde),
            format!("result id={} {}", &line[spans.id], &line[spans.result]),
            "{}",
            line
        );
    }
    let fast = classify_text(line);
    prop_assert_eq!(said(&fast), said(&serde), "{}", line);
    probe_read_with_envelope_agrees(&fast, line)?;
    // As the peer reads a line: a printable one skips the control-byte pass, the answer
    // stays serde's.
    let read = LineText::new(line.as_bytes().to_vec());
    prop_assert!(read.is_ok(), "a str is UTF-8: {}", line);
    if let Ok(read) = read {
        prop_assert_eq!(said(&read.classify()), said(&serde), "{}", line);
    }
    Ok(())
}

/// What the scanner read of a result object on its way through the envelope is what the
/// result probe reads of the result alone, and serde agrees. (A line the scanner leaves to
/// serde carries no reading: the caller probes the result itself.)
fn probe_read_with_envelope_agrees(
    kind: &palisade::gateway::server::envelope::Kind<'_>,
    line: &str,
) -> Result<(), TestCaseError> {
    use palisade::gateway::call::probe::{probe, serde_probe};
    use palisade::gateway::server::envelope::{response, Kind};
    let Kind::Response {
        reply: Ok(result),
        said,
        ..
    } = kind
    else {
        return Ok(());
    };
    if let Some(said) = said {
        prop_assert_eq!(Some(*said), serde_probe(result), "{}", line);
    }
    match response(line) {
        // The same reading, one walk or two: sure and unsure alike.
        Some(spans) if result.starts_with('{') => {
            prop_assert_eq!(spans.said, *said, "{}", line);
            prop_assert_eq!(*said, probe(result), "{}", line);
        }
        _ => prop_assert_eq!(*said, None, "{}", line),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A result object probed as the envelope is read (`probe_at` inside the envelope's
    /// walk) reads as the probe reads it alone and as serde reads it, whole, cut anywhere or
    /// with one byte changed.
    #[test]
    fn the_probe_read_with_the_envelope_agrees(
        object in result_object(),
        first in any::<bool>(),
        cut in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        use palisade::gateway::server::envelope::classify_text;
        let line = if first {
            format!("{{\"result\":{object},\"jsonrpc\":\"2.0\",\"id\":1}}\n")
        } else {
            format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{object}}}\n")
        };
        probe_read_with_envelope_agrees(&classify_text(&line), &line)?;
        let end = cut.index(line.len().max(1));
        if end < line.len() && line.is_char_boundary(end) && line.is_char_boundary(end + 1) && byte.is_ascii() {
            let mut changed = line.clone();
            changed.replace_range(end..end + 1, &char::from(byte).to_string());
            probe_read_with_envelope_agrees(&classify_text(&changed), &changed)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// The peer's envelope scanner (gateway::server::envelope) never disagrees with serde on
    /// hostile lines: escaped, repeated, `null` or missing envelope members, nested
    /// look-alikes, invalid JSON of every kind serde refuses, and any truncation. A wrong
    /// answer would relay bytes serde refuses (the agent's client would choke) or the wrong
    /// member as a result.
    #[test]
    fn the_envelope_scanner_agrees_with_serde(
        line in prop_oneof![hostile_line(), plain_response()],
        cut in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        scanner_agrees(&line)?;
        // Truncated anywhere.
        let end = cut.index(line.len().max(1));
        if line.is_char_boundary(end) {
            scanner_agrees(&line[..end])?;
            // One ASCII byte changed there.
            if end < line.len() && byte.is_ascii() && line.is_char_boundary(end + 1) {
                let mut changed = line.clone();
                changed.replace_range(end..end + 1, &char::from(byte).to_string());
                scanner_agrees(&changed)?;
            }
        }
    }
}

/// The fast path is exercised: plain responses with valid results are read by the scanner
/// (a scanner that always said "unsure" would pass the property above and speed nothing up).
#[test]
fn the_envelope_scanner_reads_plain_responses() {
    use palisade::gateway::server::envelope::response;
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{}\"}}],\"isError\":false}}}}\n",
        "y\\n\\\"".repeat(10_000)
    );
    for line in [
        big.as_str(),
        "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{\"k\":[1.5e-3,true,null,{}]}}\n",
        "{\"result\":[],\"id\":0,\"jsonrpc\":\"2.0\",\"x\":{\"id\":1}}",
    ] {
        let spans =
            response(line).unwrap_or_else(|| panic!("not read: {}", &line[..80.min(line.len())]));
        assert!(line[spans.result].starts_with(['{', '[']));
    }
}
