//! The closure's tests: what a command's runtime closure grants, and what it leaves out.

use super::*;
use std::os::unix::fs::{symlink, PermissionsExt};

fn exe(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

// Adversarial review of stop 43: a tool in `~/.local/bin` (with pip --user's
// `~/.local/lib`) granted all of `~/.local`: keyrings, and other servers' state.
#[test]
fn a_prefix_in_the_home_directory_grants_its_libraries_not_itself() {
    let d = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(d.path()).unwrap();
    let local = home.join(".local");
    exe(&local.join("bin/tool"), "\x7fELF");
    std::fs::create_dir_all(local.join("lib/python3.11/site-packages")).unwrap();
    std::fs::create_dir_all(local.join("share/keyrings")).unwrap();
    let l = Lookup {
        home: Some(&home),
        ..lk("/usr/bin", &home)
    };
    let c = closure(&local.join("bin/tool"), &[], &l);
    assert!(c.contains(&local.join("bin/tool")), "{c:?}");
    assert!(c.contains(&local.join("lib")), "{c:?}");
    assert!(!c.contains(&local), "{c:?}");
    assert!(
        !c.iter().any(|p| p.starts_with(local.join("share"))),
        "{c:?}"
    );
    // Control: the same layout outside the home directory grants its prefix whole.
    let opt = home.join("opt/tool");
    exe(&opt.join("bin/tool"), "\x7fELF");
    std::fs::create_dir_all(opt.join("lib")).unwrap();
    let c = closure(&opt.join("bin/tool"), &[], &l);
    assert!(c.contains(&opt), "{c:?}");
}

fn lk<'a>(path_var: &'a str, cwd: &'a Path) -> Lookup<'a> {
    Lookup {
        path_var,
        cwd,
        home: None,
        grants: None,
    }
}

/// A venv inside a read-write grant whose `pyvenv.cfg` and `python` link the server
/// rewrote, pointing at a prefix of the host's: neither is followed out of the grants,
/// unless the venv is carved read-only (then the server cannot have changed them).
#[test]
fn what_an_input_the_server_can_write_names_is_not_granted() {
    let d = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(d.path()).unwrap();
    let secret = d.join("secret-prefix");
    exe(&secret.join("bin/python3.11"), "\x7fELF");
    std::fs::create_dir_all(secret.join("lib")).unwrap();
    let work = d.join("work");
    let venv = work.join(".venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::write(
        venv.join("pyvenv.cfg"),
        format!("home = {}\n", secret.join("bin").display()),
    )
    .unwrap();
    symlink(secret.join("bin/python3.11"), venv.join("bin/python")).unwrap();
    exe(&work.join("server.py"), "import os\n");
    let args = vec![work.join("server.py").display().to_string()];
    let with = |g: &Writable| {
        let l = Lookup {
            grants: Some(g),
            ..lk("/usr/bin", &d)
        };
        closure(&venv.join("bin/python"), &args, &l)
    };
    // Control: with no grants known, both are followed, as before.
    let all = closure(&venv.join("bin/python"), &args, &lk("/usr/bin", &d));
    assert!(all.contains(&secret), "{all:?}");
    let writable = Writable::new([(work.clone(), true)], []);
    let c = with(&writable);
    assert!(!c.iter().any(|p| p.starts_with(&secret)), "{c:?}");
    // The venv carved read-only inside the writable root: trusted again.
    let carved = Writable::new([(work.clone(), true)], [venv.clone()]);
    let c = with(&carved);
    assert!(c.contains(&secret), "{c:?}");
    // A target inside the grants is followed (the sandbox shows it anyway).
    let inside = Writable::new([(work.clone(), true), (secret.clone(), false)], []);
    let c = with(&inside);
    assert!(c.contains(&secret), "{c:?}");
    // A directory on the way replaced by a link (the venv's `bin` now the secret's):
    // not followed either.
    std::fs::remove_file(venv.join("bin/python")).unwrap();
    std::fs::remove_dir(venv.join("bin")).unwrap();
    symlink(secret.join("bin"), venv.join("bin")).unwrap();
    let c = with(&writable);
    assert!(!c.iter().any(|p| p.starts_with(&secret)), "{c:?}");
    // A Python installation (a standard library under lib/) is no secret: a venv in a
    // writable root made from one keeps it.
    let python = d.join("pythons/3.11");
    exe(&python.join("bin/python3.11"), "\x7fELF");
    std::fs::create_dir_all(python.join("lib/python3.11")).unwrap();
    std::fs::write(python.join("lib/python3.11/os.py"), "").unwrap();
    std::fs::remove_file(venv.join("bin")).unwrap();
    std::fs::create_dir(venv.join("bin")).unwrap();
    symlink(python.join("bin/python3.11"), venv.join("bin/python")).unwrap();
    std::fs::write(
        venv.join("pyvenv.cfg"),
        format!("home = {}\n", python.join("bin").display()),
    )
    .unwrap();
    let c = with(&writable);
    assert!(c.contains(&python), "{c:?}");
    assert!(!c.iter().any(|p| p.starts_with(&secret)), "{c:?}");
}

/// A node project in a writable root: its `.bin` link stays inside the root and its
/// `#!/usr/bin/env node` is found through PATH (the config's), so the interpreter's
/// installation is granted as before.
#[test]
fn a_node_project_in_a_writable_root_keeps_its_interpreter() {
    let d = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(d.path()).unwrap();
    let nvm = d.join("nvm/versions/node/v20");
    exe(&nvm.join("bin/node"), "\x7fELF");
    std::fs::create_dir_all(nvm.join("lib")).unwrap();
    let proj = d.join("proj");
    let entry = proj.join("node_modules/@x/server/dist/index.js");
    exe(&entry, "#!/usr/bin/env node\n");
    std::fs::create_dir_all(proj.join("node_modules/.bin")).unwrap();
    symlink(
        "../@x/server/dist/index.js",
        proj.join("node_modules/.bin/server"),
    )
    .unwrap();
    let path_var = format!("{}:/usr/bin", nvm.join("bin").display());
    let grants = Writable::new([(proj.clone(), true)], []);
    let l = Lookup {
        grants: Some(&grants),
        ..lk(&path_var, &d)
    };
    let c = closure(&proj.join("node_modules/.bin/server"), &[], &l);
    assert!(c.contains(&nvm), "{c:?}");
}

#[test]
fn node_bin_link_grants_the_project_holding_node_modules() {
    let d = tempfile::tempdir().unwrap();
    let proj = d.path().join("proj");
    let entry = proj.join("node_modules/@x/server/dist/index.js");
    exe(&entry, "#!/usr/bin/env node\n");
    std::fs::create_dir_all(proj.join("node_modules/.bin")).unwrap();
    symlink(
        "../@x/server/dist/index.js",
        proj.join("node_modules/.bin/server"),
    )
    .unwrap();
    let bin = proj.join("node_modules/.bin");
    let path_var = format!("{}:/usr/bin", bin.display());
    let l = lk(&path_var, d.path());
    let prog = resolve_program("server", &l).unwrap();
    assert_eq!(prog, bin.join("server"));
    let c = closure(&prog, &[], &l);
    assert_eq!(c, vec![std::fs::canonicalize(&proj).unwrap()]);
}

#[test]
fn venv_grants_the_venv_and_its_base_installation() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().join("pyenv/versions/3.11.7");
    exe(&base.join("bin/python3.11"), "\x7fELF");
    std::fs::create_dir_all(base.join("lib/python3.11")).unwrap();
    let venv = d.path().join("proj/venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::write(
        venv.join("pyvenv.cfg"),
        format!("home = {}\n", base.join("bin").display()),
    )
    .unwrap();
    symlink(base.join("bin/python3.11"), venv.join("bin/python")).unwrap();
    exe(
        &venv.join("bin/mcp-server-git"),
        &format!("#!{}\nimport x\n", venv.join("bin/python").display()),
    );
    let c = closure(
        &venv.join("bin/mcp-server-git"),
        &[],
        &lk("/usr/bin", d.path()),
    );
    let mut want = vec![base, venv];
    want.sort();
    assert_eq!(c, want);
}

#[test]
fn a_relative_script_is_made_absolute_and_nothing_else_is() {
    let d = tempfile::tempdir().unwrap();
    let node = d.path().join("bin/node");
    exe(&node, "");
    let script = d.path().join("proj/build/index.js");
    exe(&script, "");
    let proj = d.path().join("proj");
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        absolute_script(&node, &args(&["build/index.js", "x"]), &proj),
        Some(script.display().to_string())
    );
    // Already absolute, an option, a file that is not there, a program that is no
    // interpreter: left as written.
    let abs = script.display().to_string();
    assert_eq!(absolute_script(&node, &args(&[&abs]), &proj), None);
    assert_eq!(absolute_script(&node, &args(&["--version"]), &proj), None);
    assert_eq!(
        absolute_script(&node, &args(&["build/none.js"]), &proj),
        None
    );
    assert_eq!(
        absolute_script(&script, &args(&["build/index.js"]), &proj),
        None
    );
}

#[test]
fn interpreter_script_argument_is_included_but_other_arguments_are_not() {
    let d = tempfile::tempdir().unwrap();
    let script = d.path().join("tools/srv/server.js");
    exe(&script, "console.log(1)");
    std::fs::write(d.path().join("tools/srv/package.json"), "{}").unwrap();
    let secret = d.path().join("secret.txt");
    std::fs::write(&secret, "s").unwrap();
    let node = which::which("node").unwrap_or_else(|_| PathBuf::from("/usr/bin/node"));
    let args = vec![script.display().to_string(), secret.display().to_string()];
    let c = closure(&node, &args, &lk("/usr/bin", d.path()));
    assert_eq!(c, vec![d.path().join("tools/srv")]);
}

#[test]
fn a_version_manager_shim_grants_the_managers_root() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("tools/.pyenv");
    exe(
        &root.join("shims/python3"),
        "#!/usr/bin/env bash\nexec pyenv exec python3\n",
    );
    std::fs::create_dir_all(root.join("versions/3.11.7")).unwrap();
    let c = closure(&root.join("shims/python3"), &[], &lk("/usr/bin", d.path()));
    assert_eq!(c, vec![root]);
}

/// A fake pyenv under `dir`: a shim for python3, version 3.11.7 installed (with its
/// `lib`), named by `ROOT/version`.
fn fake_pyenv(dir: &Path) -> PathBuf {
    let root = dir.join("home/.pyenv");
    exe(
        &root.join("shims/python3"),
        "#!/usr/bin/env bash\nexec pyenv exec python3\n",
    );
    exe(&root.join("versions/3.11.7/bin/python3"), "\x7fELF");
    std::fs::create_dir_all(root.join("versions/3.11.7/lib")).unwrap();
    std::fs::create_dir_all(root.join("versions/3.12.1/lib")).unwrap();
    std::fs::write(root.join("version"), "3.11.7\n").unwrap();
    root
}

// Regression (first contact #2): `python3 server.py` with an explicit interpreter granted
// the pyenv root, because the closure followed the script's `#!/usr/bin/env python3` and
// PATH led to a shim. The script's shebang is not what the kernel runs here.
#[test]
fn a_scripts_shebang_is_not_followed_when_an_interpreter_is_given() {
    let d = tempfile::tempdir().unwrap();
    let root = fake_pyenv(d.path());
    let proj = d.path().join("srv");
    exe(
        &proj.join("server.py"),
        "#!/usr/bin/env python3\nprint('hi')\n",
    );
    let path_var = format!("{}:/usr/bin", root.join("shims").display());
    let l = lk(&path_var, d.path());
    let interp = d.path().join("opt/py/bin/python3");
    exe(&interp, "\x7fELF");
    let args = vec![proj.join("server.py").display().to_string()];
    let c = closure(&interp, &args, &l);
    assert!(c.iter().all(|p| !p.starts_with(&root)), "{c:?}");
    assert!(c.contains(&proj.join("server.py")), "{c:?}");
}

// Regression (first contact #2): a shim is run as the version it would pick, and only that
// version's directory is granted, never the manager's root.
#[test]
fn a_shim_command_runs_its_version_and_grants_only_that_version() {
    let d = tempfile::tempdir().unwrap();
    let root = fake_pyenv(d.path());
    let path_var = format!("{}:/usr/bin", root.join("shims").display());
    let l = lk(&path_var, d.path());
    let prog = resolve_program("python3", &l).unwrap();
    assert_eq!(prog, root.join("versions/3.11.7/bin/python3"));
    assert_eq!(closure(&prog, &[], &l), vec![root.join("versions/3.11.7")]);
    // A project's `.python-version` wins over the global one.
    let proj = d.path().join("proj");
    std::fs::create_dir_all(proj.join("sub")).unwrap();
    std::fs::write(proj.join(".python-version"), "3.12.1\n").unwrap();
    exe(&root.join("versions/3.12.1/bin/python3"), "\x7fELF");
    let sub = proj.join("sub");
    let l = lk(&path_var, &sub);
    let prog = resolve_program("python3", &l).unwrap();
    assert_eq!(prog, root.join("versions/3.12.1/bin/python3"));
    // `system`, or a version not installed: the shim stays (its root is the fallback).
    std::fs::write(proj.join(".python-version"), "system\n").unwrap();
    assert_eq!(
        resolve_program("python3", &l).unwrap(),
        root.join("shims/python3")
    );
}

#[test]
fn never_broader_than_the_file_when_the_package_is_a_home_or_top_level_dir() {
    let home = Path::new("/home/alice");
    assert!(is_broad(home, None));
    assert!(is_broad(Path::new("/root"), None));
    assert!(is_broad(Path::new("/"), None));
    assert!(is_broad(Path::new("/srv/me"), Some(Path::new("/srv/me"))));
    assert!(!is_broad(Path::new("/home/alice/proj"), Some(home)));
}

#[test]
fn unknown_command_names_the_path_searched() {
    let d = tempfile::tempdir().unwrap();
    let e = resolve_program("no-such-cmd-xyz", &lk("/usr/bin", d.path())).unwrap_err();
    assert!(e.to_string().contains("/usr/bin"), "{e}");
}
