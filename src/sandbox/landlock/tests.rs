//! The Landlock plan proven over made-up specs and directory listings, and the ruleset built
//! for real where the kernel has Landlock.

use super::*;
use crate::sandbox::spec::{Mount, MountOrigin, NetworkSpec, ResourceLimits};
use std::collections::BTreeMap;

fn spec(mounts: &[(&str, Access)], deny: &[&str]) -> SandboxSpec {
    SandboxSpec {
        program: "/usr/bin/true".into(),
        args: vec![],
        env: BTreeMap::new(),
        cwd: "/".into(),
        mounts: mounts
            .iter()
            .map(|(p, a)| Mount {
                path: PathBuf::from(p),
                access: *a,
                origin: MountOrigin::Root,
            })
            .collect(),
        links: vec![],
        deny: deny.iter().map(PathBuf::from).collect(),
        home: "/home/u".into(),
        network: NetworkSpec::None,
        limits: ResourceLimits::default(),
        share_pid: false,
        seccomp: true,
    }
}

/// A fake tree: directory -> entries (names ending in `/` are directories, in `@`
/// symlinks).
fn tree(t: &[(&str, &[&str])]) -> impl Fn(&Path) -> std::io::Result<Vec<Entry>> {
    let map: BTreeMap<PathBuf, Vec<Entry>> = t
        .iter()
        .map(|(dir, names)| {
            let entries = names
                .iter()
                .map(|n| Entry {
                    path: Path::new(dir).join(n.trim_end_matches(['/', '@'])),
                    is_dir: n.ends_with('/'),
                    is_symlink: n.ends_with('@'),
                })
                .collect();
            (PathBuf::from(dir), entries)
        })
        .collect();
    move |p: &Path| {
        map.get(p)
            .cloned()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::PermissionDenied, "unreadable"))
    }
}

fn rules(p: &Plan) -> Vec<(String, Rights)> {
    p.rules
        .iter()
        .filter(|r| r.path != Path::new("/proc") && !r.path.starts_with("/dev"))
        .map(|r| (r.path.display().to_string(), r.rights))
        .collect()
}

fn plan_of(
    s: &SandboxSpec,
    read_only: &[&str],
    list: &dyn Fn(&Path) -> std::io::Result<Vec<Entry>>,
) -> Plan {
    let ro: Vec<PathBuf> = read_only.iter().map(PathBuf::from).collect();
    plan(
        &Inputs {
            spec: s,
            read_only: &ro,
            scratch: &[PathBuf::from("/tmp/s/home")],
            net: Net::Closed,
        },
        list,
        &|p: &Path| p.extension().is_none() && !p.ends_with(".env"),
    )
}

#[test]
fn grants_become_rules_with_their_access_plus_proc_devices_and_scratch() {
    let s = spec(&[("/usr", Access::Ro), ("/work", Access::Rw)], &[]);
    let p = plan_of(&s, &[], &tree(&[]));
    assert_eq!(
        rules(&p),
        [
            ("/usr".to_string(), Rights::Read),
            ("/work".into(), Rights::ReadWrite),
            ("/tmp/s/home".into(), Rights::ReadWrite),
        ]
    );
    assert!(p
        .rules
        .iter()
        .any(|r| r.path == Path::new("/dev/null") && r.rights == Rights::Device));
    assert!(p
        .rules
        .iter()
        .any(|r| r.path == Path::new("/proc") && r.rights == Rights::Read));
    assert!(p.gaps.is_empty());
}

#[test]
fn a_deny_read_file_is_carved_out_its_directory_stays_listable() {
    let s = spec(&[("/work", Access::Rw)], &["/work/.env"]);
    let list = tree(&[("/work", &[".env", "src/", "a.txt", "link@"])]);
    let p = plan_of(&s, &[], &list);
    assert_eq!(
        rules(&p),
        [
            ("/work".to_string(), Rights::List),
            ("/work/src".into(), Rights::ReadWrite),
            ("/work/a.txt".into(), Rights::ReadWrite),
            ("/tmp/s/home".into(), Rights::ReadWrite),
        ],
        "no rule for the denied file nor for the symlink"
    );
    assert!(p.gaps.is_empty());
}

#[test]
fn a_deny_read_directory_deep_in_a_grant_hides_the_directories_on_the_way() {
    let s = spec(&[("/work", Access::Ro)], &["/work/a/secret"]);
    let list = tree(&[
        ("/work", &["a/", "b/"]),
        ("/work/a", &["secret/", "ok.txt"]),
    ]);
    let p = plan_of(&s, &[], &list);
    assert_eq!(
        rules(&p),
        [
            ("/work/a/ok.txt".to_string(), Rights::Read),
            ("/work/b".into(), Rights::Read),
            ("/tmp/s/home".into(), Rights::ReadWrite),
        ]
    );
}

#[test]
fn write_protected_paths_stay_readable_and_their_siblings_writable() {
    let s = spec(&[("/work", Access::Rw)], &[]);
    let list = tree(&[
        ("/work", &[".git/", ".bashrc", "src/"]),
        ("/work/.git", &["hooks/", "config", "objects/"]),
    ]);
    let p = plan_of(
        &s,
        &["/work/.git/hooks", "/work/.git/config", "/work/.bashrc"],
        &list,
    );
    assert_eq!(
        rules(&p),
        [
            ("/work".to_string(), Rights::Read),
            ("/work/.git".into(), Rights::Read),
            ("/work/.git/hooks".into(), Rights::Read),
            ("/work/.git/config".into(), Rights::Read),
            ("/work/.git/objects".into(), Rights::ReadWrite),
            ("/work/.bashrc".into(), Rights::Read),
            ("/work/src".into(), Rights::ReadWrite),
            ("/tmp/s/home".into(), Rights::ReadWrite),
        ]
    );
}

#[test]
fn the_proxy_network_allows_its_one_port_the_closed_none_the_host_any() {
    assert_eq!(tcp_connect_ports(Net::Closed), Some(vec![]));
    assert_eq!(
        tcp_connect_ports(Net::Proxy { port: 41234 }),
        Some(vec![41234])
    );
    assert_eq!(tcp_connect_ports(Net::Host), None);
}

#[test]
fn a_read_only_mount_inside_a_read_write_one_is_not_widened() {
    let s = spec(&[("/work", Access::Rw), ("/work/vendor", Access::Ro)], &[]);
    let list = tree(&[("/work", &["vendor/", "src/"])]);
    let p = plan_of(&s, &[], &list);
    let r = rules(&p);
    assert!(r.contains(&("/work".to_string(), Rights::Read)), "{r:?}");
    assert!(
        r.contains(&("/work/src".to_string(), Rights::ReadWrite)),
        "{r:?}"
    );
    assert!(
        !r.contains(&("/work/vendor".to_string(), Rights::ReadWrite)),
        "{r:?}"
    );
}

#[test]
fn a_grant_inside_a_denied_path_is_dropped_and_said() {
    let s = spec(&[("/work/secret/sub", Access::Ro)], &["/work/secret"]);
    let p = plan_of(&s, &[], &tree(&[]));
    assert!(!rules(&p).iter().any(|(p, _)| p.starts_with("/work")));
    assert!(
        p.notes.iter().any(|n| n.contains("inside denyRead")),
        "{:?}",
        p.notes
    );
}

#[test]
fn a_deny_that_cannot_be_carved_is_a_gap_naming_the_fix_never_dropped() {
    let s = spec(&[("/work", Access::Rw)], &["/work/locked/key"]);
    // /work/locked cannot be listed.
    let list = tree(&[("/work", &["locked/"])]);
    let p = plan_of(&s, &[], &list);
    assert_eq!(p.gaps.len(), 1, "{:?}", p.gaps);
    assert!(
        p.gaps[0].problem.contains("/work/locked/key"),
        "{}",
        p.gaps[0]
    );
    assert!(
        p.gaps[0].problem.contains("cannot list /work/locked"),
        "{}",
        p.gaps[0]
    );
    assert!(p.gaps[0].fix.contains("backend bwrap"), "{}", p.gaps[0]);
    assert_eq!(
        p.uncarved,
        [Rule {
            path: "/work".into(),
            rights: Rights::ReadWrite
        }]
    );
}
