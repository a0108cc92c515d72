//! What the user wrote: the server file (`{"mcpServers": {...}}`, Claude Desktop's format, or
//! IronCurtain's flat map) and the optional `"palisade"` settings block in the same file.
//!
//! Stage one of two (see docs/architecture.md): this module only parses and validates what
//! was written. It never probes the machine; `sandbox::resolve` does that.

pub mod filter;
mod load;
mod types;

pub use filter::NameFilter;
pub use load::{
    load_file, parse_str, validate_relay, ConfigError, RELAY_MAX_CONCURRENT, RELAY_MAX_PER_MINUTE,
};
pub use types::*;
