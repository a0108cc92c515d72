//! One source of truth for where each server may operate: path canonicalisation (`canon`),
//! `file://` URIs (`uri`), containment checks (`guard`), paths hidden in other values (`path_like`), per-server root sets (`derive`) and
//! roots placed in a server's argv/env (`args`).

pub mod args;
pub mod canon;
pub mod derive;
pub mod guard;
pub mod path_like;
pub mod uri;
