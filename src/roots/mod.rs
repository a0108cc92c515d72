//! One source of truth for where each server may operate: path canonicalisation (`canon`),
//! `file://` URIs (`uri`), containment checks (`guard`), one call's paths resolved once for every
//! stage (`resolved`), paths hidden in other values (`path_like`), per-server root sets (`derive`)
//! and roots placed in a server's argv/env (`args`).

pub mod args;
pub mod canon;
pub mod derive;
pub mod guard;
pub mod path_like;
pub mod resolved;
pub mod uri;

use crate::sandbox::Access;

/// The `_meta` key with which an MCP root announced by palisade says its access (`"ro"` or
/// `"rw"`). MCP roots carry no access of their own; a server that took a read-only mount for
/// read-write would report it wrongly and fail late, at the kernel. Palisade's fs-server
/// reads it; other servers ignore it.
pub const ACCESS_META_KEY: &str = "dev.palisade/access";

/// The access a root's `_meta` declares: read-only only when it says `"ro"`, else read-write
/// (a plain client's roots are the folders its user works in).
pub fn access_from_meta(meta: Option<&serde_json::Map<String, serde_json::Value>>) -> Access {
    match meta
        .and_then(|m| m.get(ACCESS_META_KEY))
        .and_then(|v| v.as_str())
    {
        Some("ro") => Access::Ro,
        _ => Access::Rw,
    }
}

/// `"ro"` or `"rw"`.
pub fn access_str(access: Access) -> &'static str {
    match access {
        Access::Rw => "rw",
        Access::Ro => "ro",
    }
}
