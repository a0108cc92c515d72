//! Canonicalisation proven on a real temporary tree: `..` above the root, `~` and relative
//! paths, bad input, symlinks through missing tails, a process's own view, Unicode-equivalent
//! names, the links a walk names, component-wise containment.

use super::*;

#[test]
fn dotdot_cannot_climb_above_root() {
    let b = Base::default();
    assert_eq!(
        normalize("/a/../../etc", &b).unwrap(),
        PathBuf::from("/etc")
    );
    assert_eq!(normalize("/a/./b/../c", &b).unwrap(), PathBuf::from("/a/c"));
}

#[test]
fn tilde_and_relative_use_the_servers_view() {
    let b = Base {
        cwd: Some(Path::new("/srv/work")),
        home: Some(Path::new("/home/u")),
    };
    assert_eq!(normalize("~/x", &b).unwrap(), PathBuf::from("/home/u/x"));
    assert_eq!(
        normalize("x/../y", &b).unwrap(),
        PathBuf::from("/srv/work/y")
    );
    assert_eq!(
        normalize("x", &Base::default()).unwrap_err(),
        PathError::Relative
    );
}

#[test]
fn bad_inputs_are_refused() {
    let b = Base::default();
    assert_eq!(normalize("", &b).unwrap_err(), PathError::Empty);
    assert_eq!(normalize("/a\0b", &b).unwrap_err(), PathError::Nul);
    let long = format!("/{}", "a".repeat(MAX_PATH_LEN));
    assert_eq!(normalize(&long, &b).unwrap_err(), PathError::TooLong);
}

#[test]
fn symlinks_are_followed_through_missing_tails() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink("/etc", real.join("link")).unwrap();
    let p = real.join("link/not-there/x");
    let got = canonicalize(p.to_str().unwrap(), &Base::default()).unwrap();
    assert_eq!(got, PathBuf::from("/etc/not-there/x"));
}

#[test]
fn a_processs_own_view_is_refused_however_it_is_reached() {
    let b = Base::default();
    for p in [
        "/proc/self/cwd/x",
        "/proc/self/environ",
        "/proc/thread-self/root/etc",
        "/proc/1/environ",
        "/dev/fd/3",
        "/dev/stdin",
        "/proc/../proc/self/cwd",
        "file:///proc/self/cwd/x",
    ] {
        assert!(
            matches!(canonicalize(p, &b), Err(PathError::OwnProcess(_))),
            "{p}: {:?}",
            canonicalize(p, &b)
        );
    }
    // Through a link planted in a root, too.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/proc/self/cwd", dir.path().join("here")).unwrap();
    let p = dir.path().join("here/x");
    assert!(matches!(
        canonicalize(p.to_str().unwrap(), &b),
        Err(PathError::OwnProcess(_))
    ));
    // /proc itself and per-host files are not a process's own view.
    assert!(canonicalize("/proc/cpuinfo", &b).is_ok());
    assert!(canonicalize("/procfs/self", &b).is_ok());
}

#[test]
fn a_name_with_a_unicode_equivalent_on_disk_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(dir.path()).unwrap();
    let b = Base::default();
    // café in NFC planted; asked in NFD (missing) and the reverse (both existing).
    std::fs::create_dir(d.join("caf\u{e9}")).unwrap();
    let nfd = d.join("cafe\u{301}/Makefile");
    assert!(matches!(
        canonicalize(nfd.to_str().unwrap(), &b),
        Err(PathError::UnicodeAmbiguous { .. })
    ));
    std::fs::create_dir(d.join("cafe\u{301}")).unwrap();
    assert!(matches!(
        canonicalize(nfd.to_str().unwrap(), &b),
        Err(PathError::UnicodeAmbiguous { .. })
    ));
    // KELVIN SIGN normalises to K: an ASCII name that is missing still finds it.
    std::fs::create_dir(d.join("\u{212a}ey")).unwrap();
    let k = d.join("Key/x");
    assert!(matches!(
        canonicalize(k.to_str().unwrap(), &b),
        Err(PathError::UnicodeAmbiguous { .. })
    ));
    // Control: an unambiguous non-ASCII name and a new ASCII name resolve.
    std::fs::create_dir(d.join("na\u{ef}ve")).unwrap();
    let ok = d.join("na\u{ef}ve/new");
    assert_eq!(canonicalize(ok.to_str().unwrap(), &b).unwrap(), ok);
    let ok = d.join("plain/new");
    assert_eq!(canonicalize(ok.to_str().unwrap(), &b).unwrap(), ok);
}

#[test]
fn the_walk_names_the_links_it_followed() {
    let dir = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir(d.join("real")).unwrap();
    std::os::unix::fs::symlink(d.join("real"), d.join("link")).unwrap();
    let r = canonicalize_traced(d.join("link/f").to_str().unwrap(), &Base::default()).unwrap();
    assert_eq!(r.path, d.join("real/f"));
    assert_eq!(r.links, vec![d.join("link")]);
    let r = canonicalize_traced(d.join("real/f").to_str().unwrap(), &Base::default()).unwrap();
    assert!(r.links.is_empty());
}

#[test]
fn within_is_component_wise() {
    assert!(is_within(Path::new("/a/b/c"), Path::new("/a/b")));
    assert!(is_within(Path::new("/a/b"), Path::new("/a/b")));
    assert!(!is_within(Path::new("/a/bc"), Path::new("/a/b")));
}
