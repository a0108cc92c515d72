//! The set of known profiles: the built-in ones (`sandbox-profiles/*.json`, compiled into
//! the binary) and, when a directory is given (`palisade.profilesDir`, `--profiles-dir`),
//! its `*.json` files, which replace a built-in of the same name or add new ones.
//!
//! Parsing is strict: unknown keys, a bad template, an env name with `=`, or a relative
//! `read` path are errors that name the file and the field. The only I/O is reading the
//! override directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Profile;

/// The built-in profiles: (name, JSON text).
const BUILTIN: &[(&str, &str)] = &[
    (
        "server-filesystem",
        include_str!("../../sandbox-profiles/server-filesystem.json"),
    ),
    (
        "server-everything",
        include_str!("../../sandbox-profiles/server-everything.json"),
    ),
    (
        "server-memory",
        include_str!("../../sandbox-profiles/server-memory.json"),
    ),
    (
        "mcp-server-git",
        include_str!("../../sandbox-profiles/mcp-server-git.json"),
    ),
    (
        "mcp-server-fetch",
        include_str!("../../sandbox-profiles/mcp-server-fetch.json"),
    ),
    (
        "mcp-server-time",
        include_str!("../../sandbox-profiles/mcp-server-time.json"),
    ),
    (
        "palisade-fs-server",
        include_str!("../../sandbox-profiles/palisade-fs-server.json"),
    ),
    (
        "server-sequential-thinking",
        include_str!("../../sandbox-profiles/server-sequential-thinking.json"),
    ),
];

/// Where a profile came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "path")]
pub enum ProfileSource {
    BuiltIn,
    File(PathBuf),
}

impl std::fmt::Display for ProfileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProfileSource::BuiltIn => write!(f, "built-in"),
            ProfileSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A profile that cannot be loaded, named by file and field.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read profiles directory {path}: {cause}")]
    Dir {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("cannot read profile {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{file}: invalid JSON: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: field `{field}`: {message}")]
    Field {
        file: String,
        field: String,
        message: String,
    },
    #[error("{file}: profile name `{name}` must be 1-64 characters of [a-z0-9_-] (it is the file name without .json)")]
    Name { file: String, name: String },
}

/// All known profiles, by name.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    profiles: BTreeMap<String, (Profile, ProfileSource)>,
}

impl Catalog {
    /// The built-in profiles only.
    pub fn builtin() -> Result<Catalog, ProfileError> {
        let mut c = Catalog::default();
        for (name, text) in BUILTIN {
            c.insert_builtin(name, text)?;
        }
        Ok(c)
    }

    /// The built-in profiles, overridden and extended by `dir`'s `*.json` files.
    pub fn load(dir: Option<&Path>) -> Result<Catalog, ProfileError> {
        Catalog::builtin()?.with_dir(dir)
    }

    /// The catalog as far as choosing a profile for one launch needs it: `select(&c, name,
    /// command, args)` on it gives what it gives on `load(dir)`. Only the built-ins that can
    /// be chosen are parsed: the one named, or those whose text holds a word of the command
    /// line a match rule could compare (`select::could_match`); none for `"none"`. A name
    /// that is not built in loads them all (the refusal lists every known name). `dir` is
    /// read in full as by `load`, so its errors are reported the same.
    pub fn load_for(
        dir: Option<&Path>,
        name: Option<&str>,
        command: &str,
        args: &[String],
    ) -> Result<Catalog, ProfileError> {
        let wanted = |builtin: &str, text: &str| match name {
            Some(n) => n == builtin,
            None => super::select::could_match(text, command, args),
        };
        let builtin_named = name.is_some_and(|n| BUILTIN.iter().any(|(b, _)| *b == n));
        if name.is_some_and(|n| n != "none") && !builtin_named {
            return Catalog::load(dir);
        }
        let mut c = Catalog::default();
        for (builtin, text) in BUILTIN.iter().filter(|(b, t)| wanted(b, t)) {
            c.insert_builtin(builtin, text)?;
        }
        c.with_dir(dir)
    }

    fn insert_builtin(&mut self, name: &str, text: &str) -> Result<(), ProfileError> {
        let p = parse(
            name,
            text,
            &format!("sandbox-profiles/{name}.json (built-in)"),
        )?;
        self.profiles
            .insert(name.to_string(), (p, ProfileSource::BuiltIn));
        Ok(())
    }

    /// This catalog overridden and extended by `dir`'s `*.json` files.
    fn with_dir(mut self, dir: Option<&Path>) -> Result<Catalog, ProfileError> {
        let Some(dir) = dir else { return Ok(self) };
        let entries = std::fs::read_dir(dir).map_err(|source| ProfileError::Dir {
            path: dir.to_path_buf(),
            cause: source,
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
            .collect();
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path).map_err(|source| ProfileError::Read {
                path: path.clone(),
                cause: source,
            })?;
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let p = parse(&name, &text, &path.display().to_string())?;
            self.profiles.insert(name, (p, ProfileSource::File(path)));
        }
        Ok(self)
    }

    pub fn get(&self, name: &str) -> Option<&Profile> {
        self.profiles.get(name).map(|(p, _)| p)
    }

    pub fn source(&self, name: &str) -> Option<&ProfileSource> {
        self.profiles.get(name).map(|(_, s)| s)
    }

    /// Every profile, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&Profile, &ProfileSource)> {
        self.profiles.values().map(|(p, s)| (p, s))
    }

    pub fn names(&self) -> Vec<&str> {
        self.profiles.keys().map(String::as_str).collect()
    }
}

/// Parses and validates one profile; `file` is only used in error messages.
pub fn parse(name: &str, text: &str, file: &str) -> Result<Profile, ProfileError> {
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid_name {
        return Err(ProfileError::Name {
            file: file.to_string(),
            name: name.to_string(),
        });
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let mut profile: Profile = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        let message = e.into_inner().to_string();
        if field == "." || field.is_empty() {
            ProfileError::Syntax {
                file: file.to_string(),
                message,
            }
        } else {
            ProfileError::Field {
                file: file.to_string(),
                field,
                message,
            }
        }
    })?;
    de.end().map_err(|e| ProfileError::Syntax {
        file: file.to_string(),
        message: e.to_string(),
    })?;
    profile.name = name.to_string();
    validate(&profile).map_err(|(field, message)| ProfileError::Field {
        file: file.to_string(),
        field,
        message,
    })?;
    Ok(profile)
}

/// Checks what serde cannot: templates, env names, paths, non-empty reasons.
fn validate(p: &Profile) -> Result<(), (String, String)> {
    let err = |f: &str, m: &str| Err((f.to_string(), m.to_string()));
    let m = &p.matches;
    if m.packages.is_empty()
        && m.executables.is_empty()
        && m.python_modules.is_empty()
        && m.argv_prefixes.is_empty()
    {
        // A profile without match rules can still be picked by name.
        tracing::debug!(profile = %p.name, "profile has no match rules; only selectable by name");
    }
    if m.argv_prefixes.iter().any(Vec::is_empty) {
        return err(
            "match.argvPrefixes",
            "an empty prefix would match every command",
        );
    }
    for (i, r) in p.read.iter().enumerate() {
        if !(r.starts_with('/') || r.starts_with("~/")) || r.split('/').any(|c| c == "..") {
            return err(
                &format!("read[{i}]"),
                "must be an absolute path or start with ~/, without `..`",
            );
        }
        if r == "/" || r == "~/" || r == "~" {
            return err(&format!("read[{i}]"), "must not be / or the whole home");
        }
    }
    for (k, v) in &p.env {
        let field = format!("env.{k}");
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return err(&field, "names are non-empty, without `=`");
        }
        for var in template_vars(v).map_err(|m| (field.clone(), m))? {
            match var.as_str() {
                "HOME" => {}
                "STATE_DIR" if p.state.is_some() => {}
                "STATE_DIR" => {
                    return err(&field, "uses ${STATE_DIR} but the profile has no `state`")
                }
                other => {
                    return Err((
                        field,
                        format!("unknown variable ${{{other}}} (known: ${{STATE_DIR}}, ${{HOME}})"),
                    ))
                }
            }
        }
    }
    if let Some(s) = &p.state {
        if s.reason.trim().is_empty() {
            return err("state.reason", "say why the server needs state");
        }
    }
    if let super::ProfileNetwork::Domains {
        allowed_domains,
        reason,
    } = &p.network
    {
        if reason.trim().is_empty() {
            return err("network.reason", "say why the server needs the network");
        }
        if allowed_domains
            .iter()
            .any(|d| d.trim().is_empty() || d.contains('/'))
        {
            return err(
                "network.allowedDomains",
                "domains are names like api.example.com or *.example.com",
            );
        }
    }
    if let Some(r) = &p.relax.share_pid {
        if r.trim().is_empty() {
            return err("relax.sharePid", "say why the relaxation is needed");
        }
    }
    if let Some(pkg) = &p.package {
        if pkg.reason.trim().is_empty() {
            return err(
                "package.reason",
                "say why the package needs its install scripts",
            );
        }
    }
    if let Some(relay) = &p.relay {
        crate::config::validate_relay(relay).map_err(|(k, m)| (format!("relay.{k}"), m))?;
    }
    Ok(())
}

/// The `${NAME}` variables used in `value`.
pub fn template_vars(value: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            return Err("unterminated ${".into());
        };
        out.push(after[..end].to_string());
        rest = &after[end + 1..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every string a match rule of `p` compares.
    fn match_strings(p: &Profile) -> Vec<String> {
        let m = &p.matches;
        m.packages
            .iter()
            .chain(&m.executables)
            .chain(&m.python_modules)
            .chain(m.argv_prefixes.iter().filter_map(|a| a.first()))
            .cloned()
            .collect()
    }

    /// `select::could_match` reads the texts of the built-ins: it is exact only when each
    /// string a rule compares is written there plainly, quoted and without escapes.
    #[test]
    fn every_builtin_writes_its_match_strings_plainly() {
        for (name, text) in BUILTIN {
            let p = Catalog::builtin().unwrap().get(name).unwrap().clone();
            let section = super::super::select::match_section(text);
            assert_ne!(section, *text, "{name}: the match object is found");
            for s in match_strings(&p) {
                assert!(!s.is_empty(), "{name}: empty match string");
                assert!(section.contains(&format!("\"{s}\"")), "{name}: {s:?}");
            }
        }
    }

    /// The launch catalog (only the built-ins that can be chosen parsed) chooses as the
    /// whole one does: for command lines each built-in's rules match, lines no rule matches,
    /// and every way of naming a profile.
    #[test]
    fn the_launch_catalog_chooses_as_the_whole_catalog_does() {
        let whole = Catalog::load(None).unwrap();
        let mut lines: Vec<(String, Vec<String>)> = vec![
            ("true".into(), vec![]),
            ("/bin/sh".into(), vec!["-c".into(), "exit 0".into()]),
            ("python3".into(), vec!["-m".into(), "http.server".into()]),
            ("npx".into(), vec!["-y".into(), "@scope/other@1.0".into()]),
            ("node".into(), vec!["/x/node_modules/other/index.js".into()]),
        ];
        for (p, _) in whole.iter() {
            let m = &p.matches;
            for pkg in &m.packages {
                lines.push(("npx".into(), vec!["-y".into(), pkg.clone()]));
                lines.push(("npx".into(), vec!["-y".into(), format!("{pkg}@1.2.3")]));
                lines.push((
                    "node".into(),
                    vec![format!("/x/node_modules/{pkg}/dist/index.js"), "/d".into()],
                ));
            }
            for e in &m.executables {
                lines.push((format!("/opt/bin/{e}"), vec!["/d".into()]));
                lines.push(("uvx".into(), vec![e.clone(), "--flag".into()]));
            }
            for module in &m.python_modules {
                lines.push(("python3".into(), vec!["-m".into(), module.clone()]));
            }
            for prefix in &m.argv_prefixes {
                let (first, rest) = prefix.split_first().unwrap();
                lines.push((format!("/usr/bin/{first}"), rest.to_vec()));
            }
        }
        let mut names: Vec<Option<String>> = vec![None, Some("none".into()), Some("nope".into())];
        names.extend(whole.names().into_iter().map(|n| Some(n.to_string())));
        let mut chosen = 0;
        for (command, args) in &lines {
            for name in &names {
                let name = name.as_deref();
                let want = crate::profiles::select(&whole, name, command, args);
                let part = Catalog::load_for(None, name, command, args).unwrap();
                let got = crate::profiles::select(&part, name, command, args);
                assert_eq!(got, want, "{name:?} {command} {args:?}");
                if name.is_none() && matches!(want, Ok(Some(_))) {
                    chosen += 1;
                }
            }
        }
        assert!(
            chosen >= whole.names().len(),
            "every built-in is chosen by some line"
        );
        let plain = Catalog::load_for(None, None, "true", &[]).unwrap();
        assert!(plain.names().is_empty(), "`true` parses no built-in");
    }

    #[test]
    fn every_builtin_profile_parses() {
        let c = Catalog::builtin().unwrap();
        assert_eq!(c.names().len(), BUILTIN.len());
        let mem = c.get("server-memory").unwrap();
        assert!(mem.state.is_some());
        assert_eq!(mem.env["MEMORY_FILE_PATH"], "${STATE_DIR}/memory.jsonl");
        assert_eq!(
            c.get("server-filesystem").unwrap().roots_tool.as_deref(),
            Some("list_allowed_directories")
        );
    }

    #[test]
    fn unknown_keys_are_rejected_with_file_and_field() {
        let e = parse(
            "x",
            r#"{"description": "d", "match": {"packagez": []}}"#,
            "x.json",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("x.json") && e.contains("match") && e.contains("packagez"),
            "{e}"
        );
        let e = parse(
            "x",
            r#"{"description": "d", "relax": {"sharePID": "r"}}"#,
            "x.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("relax") && e.contains("sharePID"), "{e}");
        let e = parse(
            "x",
            r#"{"description": "d", "network": {"allowedDomains": [], "reason": "r", "extra": 1}}"#,
            "x.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("network") && e.contains("extra"), "{e}");
        let e = parse(
            "x",
            r#"{"description": "d", "rootsAs": {"args": "prepend"}}"#,
            "x.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("rootsAs"), "{e}");
    }

    #[test]
    fn templates_paths_and_reasons_are_checked() {
        let bad = [
            (
                r#"{"description": "d", "env": {"A": "${STATE_DIR}/x"}}"#,
                "env.A",
            ),
            (r#"{"description": "d", "env": {"A": "${PATH}"}}"#, "env.A"),
            (r#"{"description": "d", "read": ["relative/x"]}"#, "read[0]"),
            (r#"{"description": "d", "read": ["/a/../etc"]}"#, "read[0]"),
            (
                r#"{"description": "d", "relax": {"sharePid": " "}}"#,
                "relax.sharePid",
            ),
            (
                r#"{"description": "d", "state": {"reason": ""}}"#,
                "state.reason",
            ),
            (
                r#"{"description": "d", "match": {"argvPrefixes": [[]]}}"#,
                "match.argvPrefixes",
            ),
            (
                r#"{"description": "d", "package": {"installScripts": true, "reason": ""}}"#,
                "package.reason",
            ),
            (
                r#"{"description": "d", "package": {"installScripts": true}}"#,
                "reason",
            ),
            (
                r#"{"description": "d", "package": {"scripts": true, "reason": "r"}}"#,
                "scripts",
            ),
        ];
        for (text, field) in bad {
            let e = parse("x", text, "x.json").unwrap_err().to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
        assert!(parse("Bad Name", r#"{"description": "d"}"#, "f").is_err());
    }

    #[test]
    fn install_scripts_are_on_only_when_a_package_section_says_so() {
        let on = parse(
            "x",
            r#"{"description": "d", "package": {"installScripts": true, "reason": "addon"}}"#,
            "x.json",
        )
        .unwrap();
        assert!(on.install_scripts());
        let off = parse(
            "x",
            r#"{"description": "d", "package": {"installScripts": false, "reason": "r"}}"#,
            "x.json",
        )
        .unwrap();
        assert!(!off.install_scripts());
        assert!(!parse("x", r#"{"description": "d"}"#, "x.json")
            .unwrap()
            .install_scripts());
        assert!(Catalog::builtin()
            .unwrap()
            .iter()
            .all(|(p, _)| !p.install_scripts()));
    }

    #[test]
    fn a_directory_overrides_and_extends_the_builtins() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("server-time-custom.json"),
            r#"{"description": "mine", "match": {"executables": ["my-time"]}}"#,
        )
        .unwrap();
        std::fs::write(
            d.path().join("mcp-server-time.json"),
            r#"{"description": "overridden"}"#,
        )
        .unwrap();
        let c = Catalog::load(Some(d.path())).unwrap();
        assert_eq!(c.get("mcp-server-time").unwrap().description, "overridden");
        assert!(matches!(
            c.source("mcp-server-time"),
            Some(ProfileSource::File(_))
        ));
        assert!(c.get("server-time-custom").is_some());
        assert_eq!(c.source("server-memory"), Some(&ProfileSource::BuiltIn));
        std::fs::write(d.path().join("broken.json"), r#"{"description": 1}"#).unwrap();
        let e = Catalog::load(Some(d.path())).unwrap_err().to_string();
        assert!(
            e.contains("broken.json") && e.contains("description"),
            "{e}"
        );
    }
}
