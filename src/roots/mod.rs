//! One source of truth for where each server may operate: path canonicalisation (`canon`),
//! `file://` URIs (`uri`), containment checks (`guard`) and per-server root sets (`derive`).

pub mod canon;
pub mod derive;
pub mod guard;
pub mod uri;
