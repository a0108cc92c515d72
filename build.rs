//! Links the functions palisade actually runs first and together, in release builds.
//!
//! Why: the kernel maps a program's code in 64 KiB windows around each page it first
//! touches. Left where the compiler puts them, the few thousand functions that a launch or a
//! gateway's calls run are spread over 12 MB of text, so nearly all of it ends up resident
//! and each launch faults in window after window. `scripts/hot-functions.txt` lists them in
//! the order they first run (`scripts/hot_functions.py` regenerates it); handed to the linker
//! as a symbol ordering, they become the front of the text. docs/benchmarks.md ("Hot code
//! first") has the figures.
//!
//! Only where the linker is known to be LLD, which takes `--symbol-ordering-file`: Rust 1.90
//! and later link x86_64-unknown-linux-gnu with the LLD they ship, unless a linker is
//! configured. Anywhere else the build is the same minus the ordering. Names the binary no
//! longer has (renamed code, a new compiler's symbol hashes) are skipped, quietly: a stale
//! list costs speed, never correctness.

use std::env;
use std::process::Command;

const ORDER_FILE: &str = "scripts/hot-functions.txt";

fn main() {
    println!("cargo::rerun-if-changed={ORDER_FILE}");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=RUSTC_LINKER");
    if linker_is_bundled_lld() && env::var("PROFILE").as_deref() == Ok("release") {
        let dir = env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
        println!("cargo::rustc-link-arg-bins=-Wl,--symbol-ordering-file={dir}/{ORDER_FILE}");
        println!("cargo::rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// Whether this build links with the LLD that rustup's Rust 1.90+ uses by default here.
fn linker_is_bundled_lld() -> bool {
    if env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu")
        || env::var_os("RUSTC_LINKER").is_some()
    {
        return false;
    }
    // A linker chosen through flags (`-C linker=`, `-C link-arg=-fuse-ld=...`,
    // `-C linker-features=-lld`, `-C link-self-contained=...`) may not be LLD.
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if ["linker", "fuse-ld", "link-self-contained"]
        .iter()
        .any(|f| flags.contains(f))
    {
        return false;
    }
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("-V").output() else {
        return false;
    };
    minor_version(&String::from_utf8_lossy(&out.stdout)).is_some_and(|minor| minor >= 90)
}

/// `rustc 1.95.0 (59807616e 2026-04-14)` -> 95.
fn minor_version(version: &str) -> Option<u32> {
    let number = version.split_whitespace().nth(1)?;
    let mut parts = number.split('.');
    (parts.next()? == "1").then_some(())?;
    parts.next()?.parse().ok()
}
