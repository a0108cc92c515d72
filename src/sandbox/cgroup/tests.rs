//! A server's cgroup proven: `/proc/self/cgroup` parsed, the pure v2 plan over made-up
//! cgroups, and creation against fixture hierarchies in a temporary directory (no real cgroup
//! is touched).

use super::plan::*;
use super::*;

#[test]
fn finds_v1_and_v2_paths() {
    let hybrid = "9:name=systemd:/\n8:pids:/a\n4:memory:/process_api/x\n1:cpu,cpuacct:/\n0::/\n";
    assert_eq!(
        parse_self(hybrid),
        (
            Some("/".into()),
            Some("/process_api/x".into()),
            Some("/a".into())
        )
    );
    assert_eq!(
        parse_self("0::/user.slice/s\n"),
        (Some("/user.slice/s".into()), None, None)
    );
}

const BOTH: Controllers = Controllers {
    memory: true,
    pids: true,
};
const MEMORY: Controllers = Controllers {
    memory: true,
    pids: false,
};
const PIDS: Controllers = Controllers {
    memory: false,
    pids: true,
};

#[test]
fn v2_plan_moves_only_palisades_own_processes() {
    let both = "cpu memory pids";
    assert_eq!(
        plan_v2(false, both, "memory pids", &[5], &[5]),
        V2Plan::Ready(BOTH)
    );
    assert_eq!(plan_v2(false, both, "", &[], &[]), V2Plan::Enable(BOTH));
    // The root cgroup is exempt from the no-internal-processes rule.
    assert_eq!(plan_v2(true, both, "", &[1, 5], &[5]), V2Plan::Enable(BOTH));
    assert_eq!(
        plan_v2(false, both, "cpu", &[5, 6], &[5, 6]),
        V2Plan::MoveThenEnable(vec![5, 6], BOTH)
    );
    // A terminal's scope: the shell is not palisade's to move.
    let V2Plan::Unusable(why) = plan_v2(false, both, "", &[4, 5], &[5]) else {
        panic!("a shared cgroup must not be taken over");
    };
    assert!(why.contains("1 other process(es) (e.g. pid 4)"), "{why}");
    let V2Plan::Unusable(why) = plan_v2(false, "cpu io", "", &[5], &[5]) else {
        panic!("neither controller");
    };
    assert!(why.contains("not delegated"), "{why}");
}

// Regression (first contact #10): on a v2 host delegating `memory` but not `pids`, every
// cgroup limit was dropped ("RLIMITS ONLY"). The controllers that exist are used.
#[test]
fn v2_plan_uses_the_controllers_that_are_delegated() {
    assert_eq!(
        plan_v2(false, "cpu memory", "", &[5], &[5]),
        V2Plan::MoveThenEnable(vec![5], MEMORY)
    );
    assert_eq!(plan_v2(false, "pids", "", &[], &[]), V2Plan::Enable(PIDS));
    assert_eq!(
        plan_v2(false, "cpu memory", "memory", &[], &[]),
        V2Plan::Ready(MEMORY)
    );
    // Others in the cgroup bar enabling pids, but memory already is enabled.
    assert_eq!(
        plan_v2(false, "memory pids", "memory", &[4, 5], &[5]),
        V2Plan::Ready(MEMORY)
    );
}

/// A fixture cgroup v2 hierarchy: palisade (pid-less: no processes listed) sits in
/// `/svc`, whose parent delegates `delegated`.
fn fixture_v2(delegated: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let svc = t.path().join("svc");
    std::fs::create_dir_all(&svc).unwrap();
    std::fs::write(t.path().join("cgroup.controllers"), delegated).unwrap();
    std::fs::write(svc.join("cgroup.controllers"), delegated).unwrap();
    std::fs::write(svc.join("cgroup.subtree_control"), "").unwrap();
    std::fs::write(svc.join("cgroup.procs"), "").unwrap();
    t
}

#[test]
fn partial_delegation_holds_each_limit_with_the_controller_that_exists() {
    let limits = CgroupLimits {
        memory_bytes: Some(256 << 20),
        pids: Some(64),
    };
    for (delegated, memory, pids) in [
        ("cpu memory pids", true, true),
        ("cpu memory", true, false),
        ("pids", false, true),
    ] {
        let t = fixture_v2(delegated);
        let cg = Cgroup::create_in(t.path(), "0::/svc\n", "fs", limits)
            .unwrap()
            .unwrap_or_else(|| panic!("{delegated}: no cgroup"));
        assert_eq!(cg.limits_memory(), memory, "{delegated}");
        assert_eq!(cg.limits_pids(), pids, "{delegated}");
        let dir = &cg.dirs[0].1;
        assert_eq!(dir.join("memory.max").exists(), memory, "{delegated}");
        assert_eq!(dir.join("pids.max").exists(), pids, "{delegated}");
        let enabled = std::fs::read_to_string(t.path().join("svc/cgroup.subtree_control")).unwrap();
        assert_eq!(
            enabled.contains("+memory"),
            memory,
            "{delegated}: {enabled}"
        );
        assert_eq!(enabled.contains("+pids"), pids, "{delegated}: {enabled}");
        // The fixture's files are not cgroupfs: clear them so the drop's rmdir works.
        for f in ["memory.max", "memory.swap.max", "pids.max"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
    }
    // Neither delegated: no cgroup, and the reason says why.
    let t = fixture_v2("cpu io");
    let err = Cgroup::create_in(t.path(), "0::/svc\n", "fs", limits).unwrap_err();
    assert!(err.to_string().contains("not delegated"), "{err}");
    // Only pids delegated and only a memory limit asked: no cgroup is made at all.
    let t = fixture_v2("pids");
    let only_memory = CgroupLimits {
        memory_bytes: Some(1 << 30),
        pids: None,
    };
    assert!(Cgroup::create_in(t.path(), "0::/svc\n", "fs", only_memory)
        .unwrap()
        .is_none());
}

#[test]
fn server_cgroups_go_beside_the_gateway_leaf() {
    assert_eq!(
        v2_base("/system.slice/p.service", 42),
        "/system.slice/p.service"
    );
    assert_eq!(
        v2_base("/system.slice/p.service/palisade-42-gateway", 42),
        "/system.slice/p.service"
    );
    // Another palisade's leaf is not ours.
    assert_eq!(
        v2_base("/s/palisade-7-gateway", 42),
        "/s/palisade-7-gateway"
    );
    assert_eq!(v2_base("/palisade-42-gateway", 42), "/");
}

#[test]
fn names_are_safe_directory_names() {
    let n = dir_name("../evil/name with space", 255);
    assert!(
        !n.contains('/') && !n.contains(' ') && !n.contains(".."),
        "{n}"
    );
    assert!(n.ends_with("-ff"), "{n}");
}

#[test]
fn orphans_are_known_by_the_name_palisade_gave_them() {
    assert_eq!(
        orphan_owner("palisade-8505-fs-18eb7be9f70e58e2"),
        Some(8505)
    );
    assert_eq!(orphan_owner(&dir_name("a b", 7)), Some(std::process::id()));
    assert_eq!(orphan_owner(&gateway_leaf(42)), Some(42));
    for other in [
        "palisade-",
        "palisade-12",
        "palisade-12-",
        "palisade-x1-fs",
        "system.slice",
        "palisade--fs",
    ] {
        assert_eq!(orphan_owner(other), None, "{other}");
    }
}

/// A killed palisade's cgroups go when the next one makes a cgroup beside them; a live
/// palisade's, this one's, and anything not named by palisade stay.
#[test]
fn a_dead_palisades_cgroups_are_removed_beside_a_new_one() {
    let base = tempfile::tempdir().unwrap();
    let dead = {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        c.wait().unwrap();
        c.id()
    };
    let me = std::process::id();
    let live = std::os::unix::process::parent_id();
    let orphan = base.path().join(format!("palisade-{dead}-fs-1"));
    let busy = base.path().join(format!("palisade-{dead}-fs-2"));
    let kept = [
        base.path().join(format!("palisade-{me}-fs-3")),
        base.path().join(format!("palisade-{live}-fs-4")),
        base.path().join("user.slice"),
    ];
    for d in kept.iter().chain([&orphan, &busy]) {
        std::fs::create_dir(d).unwrap();
    }
    // Stands in for a cgroup that still holds a process: rmdir refuses it.
    std::fs::write(busy.join("cgroup.procs"), "1").unwrap();
    super::orphans::remove_orphans(base.path(), me);
    assert!(!orphan.exists());
    assert!(busy.exists());
    for d in &kept {
        assert!(d.exists(), "{}", d.display());
    }
}

#[test]
fn a_cgroup_is_empty_when_its_procs_list_none() {
    let limits = CgroupLimits {
        memory_bytes: None,
        pids: Some(64),
    };
    let t = fixture_v2("pids");
    let cg = Cgroup::create_in(t.path(), "0::/svc\n", "fs", limits)
        .unwrap()
        .expect("a cgroup");
    let dir = cg.dirs[0].1.clone();
    std::fs::write(dir.join("cgroup.procs"), "4242\n").unwrap();
    assert!(!cg.is_empty());
    std::fs::write(dir.join("cgroup.procs"), "").unwrap();
    assert!(cg.is_empty());
    // The fixture's files are not cgroupfs: clear them so the drop's rmdir works.
    for f in ["cgroup.procs", "pids.max"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
}

#[test]
fn a_child_joins_v1_through_tasks_and_v2_through_cgroup_procs() {
    let limits = CgroupLimits {
        memory_bytes: Some(256 << 20),
        pids: Some(64),
    };
    let file_names = |cg: &Cgroup| -> Vec<String> {
        cg.join_files()
            .iter()
            .map(|f| {
                let path = Path::new(std::ffi::OsStr::from_bytes(f.as_bytes()));
                path.file_name().unwrap().to_string_lossy().into_owned()
            })
            .collect()
    };
    // v1: a memory and a pids hierarchy, each joined through `tasks` (no global lock).
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("memory/x")).unwrap();
    std::fs::write(t.path().join("memory/x/memory.limit_in_bytes"), "").unwrap();
    std::fs::create_dir_all(t.path().join("pids/a")).unwrap();
    std::fs::write(t.path().join("pids/a/cgroup.procs"), "").unwrap();
    let cg = Cgroup::create_in(t.path(), "8:pids:/a\n4:memory:/x\n", "fs", limits)
        .unwrap()
        .expect("a v1 cgroup");
    assert_eq!(file_names(&cg), ["tasks", "tasks"]);
    for (_, dir) in &cg.dirs {
        assert!(cg
            .join_files()
            .iter()
            .any(|f| f.as_bytes() == dir.join("tasks").as_os_str().as_bytes()));
    }
    // v2: one domain cgroup, which has no `tasks`.
    let t = fixture_v2("memory pids");
    let cg = Cgroup::create_in(t.path(), "0::/svc\n", "fs", limits)
        .unwrap()
        .expect("a v2 cgroup");
    assert_eq!(file_names(&cg), ["cgroup.procs"]);
    for f in ["memory.max", "memory.swap.max", "pids.max"] {
        let _ = std::fs::remove_file(cg.dirs[0].1.join(f));
    }
}
