//! The enforce/warn decision proven over made-up machines: every gap kind, under both
//! policies, for each tier. Pure inputs, so no sandbox is started here.

use super::*;
use crate::sandbox::capabilities::{BwrapInfo, Landlock, Userns};

fn good() -> Capabilities {
    Capabilities {
        bwrap: Some(BwrapInfo {
            path: "/usr/bin/bwrap".into(),
            version: Some("0.8.0".into()),
            disable_userns: true,
        }),
        bwrap_override_problem: None,
        userns: Userns::Usable,
        max_user_namespaces: Some(1000),
        unprivileged_userns_clone: None,
        apparmor_restrict_userns: None,
        root: false,
        seccomp: true,
        socat: Some("/usr/bin/socat".into()),
        ripgrep: Some("/usr/bin/rg".into()),
        srt: None,
        srt_problem: None,
        landlock: Landlock::Available { abi: 7 },
        connect_mediation: true,
    }
}

fn needs() -> Needs {
    Needs {
        sandboxed: true,
        backend: Backend::Bwrap,
        egress: false,
        egress_problem: None,
        allowlist_by_port: false,
    }
}

const FULL: Plan = Plan {
    bwrap: true,
    seccomp: true,
    host_network: false,
    srt: false,
    landlock: false,
};
const DIRECT: Plan = Plan {
    bwrap: false,
    seccomp: false,
    host_network: true,
    srt: false,
    landlock: false,
};
const LANDLOCK: Plan = Plan {
    bwrap: false,
    seccomp: true,
    host_network: false,
    srt: false,
    landlock: true,
};

fn reasons(r: &Resolution) -> String {
    match r {
        Resolution::Degraded { reasons, .. } | Resolution::Refused { reasons } => reasons
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[test]
fn a_capable_machine_sandboxes_under_both_policies() {
    for p in [SandboxPolicy::Enforce, SandboxPolicy::Warn] {
        assert_eq!(
            resolve(&good(), &needs(), p),
            Resolution::Sandboxed { plan: FULL }
        );
    }
}

#[test]
fn opted_out_is_opted_out_whatever_the_machine() {
    let mut caps = good();
    caps.bwrap = None;
    let n = Needs {
        sandboxed: false,
        ..needs()
    };
    assert_eq!(
        resolve(&caps, &n, SandboxPolicy::Enforce),
        Resolution::OptedOut
    );
}

#[test]
fn missing_bwrap_refuses_in_enforce_and_runs_directly_in_warn() {
    let mut caps = good();
    caps.bwrap = None;
    let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
    assert!(matches!(r, Resolution::Refused { .. }));
    assert!(reasons(&r).contains("apt install bubblewrap"), "{r:?}");
    let r = resolve(&caps, &needs(), SandboxPolicy::Warn);
    assert!(
        matches!(r, Resolution::Degraded { plan: DIRECT, .. }),
        "{r:?}"
    );
}

#[test]
fn a_bad_override_is_named() {
    let mut caps = good();
    caps.bwrap = None;
    caps.bwrap_override_problem = Some("PALISADE_BWRAP=/nope cannot be run".into());
    let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
    assert!(reasons(&r).contains("PALISADE_BWRAP=/nope"), "{r:?}");
}

#[test]
fn old_bwrap_without_disable_userns_is_a_hard_gap() {
    let mut caps = good();
    if let Some(b) = caps.bwrap.as_mut() {
        b.disable_userns = false;
        b.version = Some("0.6.2".into());
    }
    let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
    assert!(reasons(&r).contains("0.6.2 is too old"), "{r:?}");
    let r = resolve(&caps, &needs(), SandboxPolicy::Warn);
    assert!(matches!(r, Resolution::Degraded { plan: DIRECT, .. }));
}

#[test]
fn apparmor_restriction_names_the_profile_and_the_sysctl() {
    let mut caps = good();
    caps.apparmor_restrict_userns = Some(true);
    caps.userns = Userns::Unusable {
        error: "bwrap: setting up uid map: Permission denied".into(),
    };
    let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
    let text = reasons(&r);
    assert!(text.contains("/etc/apparmor.d/bwrap"), "{text}");
    assert!(
        text.contains("kernel.apparmor_restrict_unprivileged_userns=0"),
        "{text}"
    );
    assert!(text.contains("Permission denied"), "{text}");
}

#[test]
fn static_signals_decide_when_the_trial_was_not_run() {
    let mut caps = good();
    caps.userns = Userns::NotProbed;
    assert_eq!(
        resolve(&caps, &needs(), SandboxPolicy::Enforce),
        Resolution::Sandboxed { plan: FULL }
    );
    caps.max_user_namespaces = Some(0);
    let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
    assert!(
        reasons(&r).contains("user.max_user_namespaces=15000"),
        "{r:?}"
    );
    caps.max_user_namespaces = Some(10);
    caps.unprivileged_userns_clone = Some(false);
    let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
    assert!(reasons(&r).contains("unprivileged_userns_clone=1"), "{r:?}");
    // root is not subject to the unprivileged restrictions
    caps.root = true;
    caps.apparmor_restrict_userns = Some(true);
    assert!(matches!(
        resolve(&caps, &needs(), SandboxPolicy::Enforce),
        Resolution::Sandboxed { .. }
    ));
}

#[test]
fn failed_trial_without_a_known_cause_still_refuses() {
    let mut caps = good();
    caps.userns = Userns::Unusable {
        error: "bwrap: No permissions to create new namespace".into(),
    };
    let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
    assert!(reasons(&r).contains("No permissions"), "{r:?}");
    assert!(reasons(&r).contains("CONFIG_USER_NS"), "{r:?}");
}

#[test]
fn no_seccomp_is_soft_warn_keeps_the_sandbox() {
    let mut caps = good();
    caps.seccomp = false;
    assert!(matches!(
        resolve(&caps, &needs(), SandboxPolicy::Enforce),
        Resolution::Refused { .. }
    ));
    let r = resolve(&caps, &needs(), SandboxPolicy::Warn);
    assert_eq!(
        r,
        Resolution::Degraded {
            plan: Plan {
                seccomp: false,
                ..FULL
            },
            reasons: vec![reason(
                "the kernel has no seccomp filter support: AF_VSOCK, io_uring and keyring calls stay open",
                "use a kernel built with CONFIG_SECCOMP_FILTER"
            )]
        }
    );
}

fn egress() -> Needs {
    Needs {
        egress: true,
        ..needs()
    }
}

#[test]
fn egress_with_socat_and_a_proxy_is_fully_sandboxed() {
    for p in [SandboxPolicy::Enforce, SandboxPolicy::Warn] {
        assert_eq!(
            resolve(&good(), &egress(), p),
            Resolution::Sandboxed { plan: FULL }
        );
    }
}

#[test]
fn egress_without_socat_is_refused_in_enforce_and_gets_the_host_network_in_warn() {
    let mut caps = good();
    caps.socat = None;
    let r = resolve(&caps, &egress(), SandboxPolicy::Enforce);
    assert!(matches!(r, Resolution::Refused { .. }), "{r:?}");
    assert!(reasons(&r).contains("apt install socat"), "{r:?}");
    let r = resolve(&caps, &egress(), SandboxPolicy::Warn);
    assert_eq!(
        r,
        Resolution::Degraded {
            plan: Plan {
                host_network: true,
                ..FULL
            },
            reasons: match resolve(&caps, &egress(), SandboxPolicy::Enforce) {
                Resolution::Refused { reasons } => reasons,
                _ => unreachable!(),
            }
        }
    );
    // A server without an allowlist does not care about socat.
    assert_eq!(
        resolve(&caps, &needs(), SandboxPolicy::Enforce),
        Resolution::Sandboxed { plan: FULL }
    );
}

#[test]
fn a_proxy_that_cannot_start_is_a_soft_gap_naming_the_cause() {
    let n = Needs {
        egress_problem: Some("cannot create /tmp/x: read-only file system".into()),
        ..egress()
    };
    let r = resolve(&good(), &n, SandboxPolicy::Enforce);
    assert!(reasons(&r).contains("read-only file system"), "{r:?}");
    assert!(matches!(
        resolve(&good(), &n, SandboxPolicy::Warn),
        Resolution::Degraded {
            plan: Plan {
                bwrap: true,
                host_network: true,
                ..
            },
            ..
        }
    ));
}

fn srt_caps() -> Capabilities {
    Capabilities {
        srt: Some("/opt/srt/bin/srt".into()),
        ..good()
    }
}

#[test]
fn srt_backend_runs_under_srt_when_it_and_its_tools_are_there() {
    let n = Needs {
        backend: Backend::Srt,
        ..egress()
    };
    // srt brings its own proxy: socat is its dependency, not an egress gap.
    assert_eq!(
        resolve(&srt_caps(), &n, SandboxPolicy::Enforce),
        Resolution::Sandboxed {
            plan: Plan { srt: true, ..FULL }
        }
    );
}

#[test]
fn srt_missing_with_an_allowlist_falls_back_to_the_native_proxy_in_warn() {
    let n = Needs {
        backend: Backend::Srt,
        ..egress()
    };
    // The proxy socket is ready: the fallback keeps the allowlist enforced.
    assert!(matches!(
        resolve(&good(), &n, SandboxPolicy::Warn),
        Resolution::Degraded { plan: FULL, .. }
    ));
    // And without socat the fallback would share the host network, which is said.
    let mut caps = good();
    caps.socat = None;
    let r = resolve(&caps, &n, SandboxPolicy::Warn);
    assert!(reasons(&r).contains("apt install socat"), "{r:?}");
    assert!(matches!(
        r,
        Resolution::Degraded {
            plan: Plan {
                host_network: true,
                ..
            },
            ..
        }
    ));
}

#[test]
fn srt_missing_or_broken_or_without_its_tools_is_refused_in_enforce_and_falls_back_in_warn() {
    let n = Needs {
        backend: Backend::Srt,
        ..needs()
    };
    let r = resolve(&good(), &n, SandboxPolicy::Enforce);
    assert!(reasons(&r).contains("srt (Anthropic sandbox-runtime) is not installed"));
    assert!(reasons(&r).contains("set backend to bwrap"), "{r:?}");
    assert!(matches!(
        resolve(&good(), &n, SandboxPolicy::Warn),
        Resolution::Degraded { plan: FULL, .. }
    ));
    let mut caps = srt_caps();
    caps.srt_problem = Some("node v20 is too old".into());
    assert!(reasons(&resolve(&caps, &n, SandboxPolicy::Enforce)).contains("node v20"));
    let mut caps = srt_caps();
    caps.ripgrep = None;
    let r = resolve(&caps, &n, SandboxPolicy::Enforce);
    assert!(reasons(&r).contains("srt needs ripgrep (rg)"), "{r:?}");
    let r = resolve(&caps, &n, SandboxPolicy::Warn);
    assert!(
        matches!(r, Resolution::Degraded { plan: FULL, .. }),
        "{r:?}"
    );
}

#[test]
fn hard_and_soft_gaps_are_all_reported() {
    let mut caps = good();
    caps.bwrap = None;
    caps.seccomp = false;
    let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
    let Resolution::Refused { reasons } = r else {
        panic!("expected refusal")
    };
    assert_eq!(reasons.len(), 2);
}
fn landlock_needs() -> Needs {
    Needs {
        backend: Backend::Landlock,
        ..needs()
    }
}

fn no_userns() -> Capabilities {
    let mut caps = good();
    caps.userns = Userns::Unusable {
        error: "bwrap: No space left on device".into(),
    };
    caps
}

#[test]
fn auto_picks_bwrap_where_it_works_and_landlock_where_it_does_not() {
    let auto = Needs {
        backend: Backend::Auto,
        ..needs()
    };
    assert_eq!(
        resolve(&good(), &auto, SandboxPolicy::Enforce),
        Resolution::Sandboxed { plan: FULL }
    );
    assert_eq!(
        resolve(&no_userns(), &auto, SandboxPolicy::Enforce),
        Resolution::Sandboxed { plan: LANDLOCK }
    );
    let (tier_used, why) = tier(&no_userns(), Backend::Auto);
    assert_eq!(tier_used, Backend::Landlock);
    assert!(why.contains("No space left on device"), "{why}");
    assert!(why.contains("Landlock ABI 7"), "{why}");
}

#[test]
fn auto_with_neither_tier_refuses_in_enforce_naming_both_and_runs_directly_in_warn() {
    let mut caps = no_userns();
    caps.landlock = Landlock::NotImplemented;
    let auto = Needs {
        backend: Backend::Auto,
        ..needs()
    };
    let r = resolve(&caps, &auto, SandboxPolicy::Enforce);
    assert!(matches!(r, Resolution::Refused { .. }), "{r:?}");
    assert!(reasons(&r).contains("No space left"), "{r:?}");
    assert!(reasons(&r).contains("Landlock is not available"), "{r:?}");
    assert!(matches!(
        resolve(&caps, &auto, SandboxPolicy::Warn),
        Resolution::Degraded { plan: DIRECT, .. }
    ));
}

#[test]
fn landlock_backend_needs_no_bubblewrap() {
    let mut caps = no_userns();
    caps.bwrap = None;
    assert_eq!(
        resolve(&caps, &landlock_needs(), SandboxPolicy::Enforce),
        Resolution::Sandboxed { plan: LANDLOCK }
    );
    caps.landlock = Landlock::NotEnabled;
    let r = resolve(&caps, &landlock_needs(), SandboxPolicy::Enforce);
    assert!(reasons(&r).contains("lsm="), "{r:?}");
}

#[test]
fn an_allowlist_under_landlock_is_enforced_where_palisade_checks_each_connect() {
    let n = Needs {
        egress: true,
        ..landlock_needs()
    };
    let mut caps = good();
    caps.socat = None;
    assert!(caps.connect_mediation);
    assert_eq!(
        resolve(&caps, &n, SandboxPolicy::Enforce),
        Resolution::Sandboxed { plan: LANDLOCK }
    );
}

#[test]
fn an_allowlist_under_landlock_without_connect_checks_is_refused_in_enforce_and_held_by_port_in_warn(
) {
    let n = Needs {
        egress: true,
        ..landlock_needs()
    };
    let mut caps = good();
    caps.socat = None;
    caps.connect_mediation = false;
    // Landlock's network rules name the proxy's port, not its address: without palisade
    // checking each connect, any host's listener on that port number is reachable, so the
    // allowlist cannot be enforced.
    let r = resolve(&caps, &n, SandboxPolicy::Enforce);
    assert!(matches!(r, Resolution::Refused { .. }), "{r:?}");
    assert!(
        reasons(&r).contains("sandbox.network.allowedDomains cannot be enforced"),
        "{r:?}"
    );
    // Palisade's package fetch sandbox accepts it (the user's own npm or uv).
    let fetch = Needs {
        allowlist_by_port: true,
        ..n.clone()
    };
    assert_eq!(
        resolve(&caps, &fetch, SandboxPolicy::Enforce),
        Resolution::Sandboxed { plan: LANDLOCK }
    );
    // warn: still in Landlock, through the proxy (no host network), degraded with the reason.
    match resolve(&caps, &n, SandboxPolicy::Warn) {
        Resolution::Degraded { plan, reasons } => {
            assert_eq!(plan, LANDLOCK, "through the proxy, not the host network");
            assert!(reasons[0].problem.contains("name ports, not addresses"));
        }
        other => panic!("{other:?}"),
    }
    // A proxy that could not serve it: refused in enforce, host network in warn.
    let failed = Needs {
        egress_problem: Some("cannot open a loopback proxy port".into()),
        ..n.clone()
    };
    let r = resolve(&caps, &failed, SandboxPolicy::Enforce);
    assert!(reasons(&r).contains("loopback proxy port"), "{r:?}");
    assert!(matches!(
        resolve(&caps, &failed, SandboxPolicy::Warn),
        Resolution::Degraded {
            plan: Plan {
                landlock: true,
                host_network: true,
                ..
            },
            ..
        }
    ));
}

#[test]
fn an_allowlist_under_landlock_before_abi_4_is_refused_in_enforce_naming_the_field_and_gets_the_host_network_in_warn(
) {
    let n = Needs {
        egress: true,
        ..landlock_needs()
    };
    let mut caps = good();
    caps.landlock = Landlock::Available { abi: 3 };
    let r = resolve(&caps, &n, SandboxPolicy::Enforce);
    assert!(matches!(r, Resolution::Refused { .. }), "{r:?}");
    assert!(
        reasons(&r).contains("sandbox.network.allowedDomains needs Landlock ABI 4 (Linux 6.7)"),
        "{r:?}"
    );
    assert!(reasons(&r).contains("this kernel has ABI 3"), "{r:?}");
    assert!(reasons(&r).contains("backend bwrap"), "{r:?}");
    assert!(matches!(
        resolve(&caps, &n, SandboxPolicy::Warn),
        Resolution::Degraded {
            plan: Plan {
                landlock: true,
                host_network: true,
                ..
            },
            ..
        }
    ));
}

#[test]
fn landlock_before_abi_6_cannot_scope_signals_and_says_so() {
    let mut caps = good();
    caps.landlock = Landlock::Available { abi: 5 };
    let r = resolve(&caps, &landlock_needs(), SandboxPolicy::Enforce);
    assert!(reasons(&r).contains("cannot scope signals"), "{r:?}");
    assert!(matches!(
        resolve(&caps, &landlock_needs(), SandboxPolicy::Warn),
        Resolution::Degraded { plan: LANDLOCK, .. }
    ));
}
