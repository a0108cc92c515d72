//! `FsServer`: the rmcp `ServerHandler` of the built-in filesystem server.
//!
//! Sits at the end of the flow as a downstream server (the gateway's default, the demo's and
//! the benchmark's). Every access goes guard first (canonical path, root, ro/rw), then the
//! blocking operation on `spawn_blocking`, always on the canonical path the guard returned.
//! It must never write to stdout itself (stdout is the MCP channel) and never block the
//! runtime.
// Roots are deprecated by SEP-2577 but still what real clients send; see NOTES.md.
#![allow(deprecated)]

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode as RpcCode,
    ErrorData, Implementation, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, ResourceTemplate, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::{ErrorCode, FsError};
use super::ops::{self, Limits};
use super::resources::{self, Target};
use super::state::{RootSet, RootState};
use super::tools;
use crate::roots::guard::Need;
use crate::sandbox::Access;

/// How long the server waits for the client's `roots/list` answer.
pub const ROOTS_TIMEOUT: Duration = Duration::from_secs(5);

/// Start-up settings of the server.
#[derive(Debug, Clone, Default)]
pub struct FsServerOptions {
    pub roots: Vec<(PathBuf, Access)>,
    pub limits: Limits,
    /// Expansion of `~` in paths (the server's HOME).
    pub home: Option<PathBuf>,
}

/// The handler; cheap to clone (one shared state).
#[derive(Clone)]
pub struct FsServer {
    state: Arc<RootState>,
    limits: Limits,
    tools: Arc<Vec<Tool>>,
}

impl FsServer {
    pub fn new(opts: FsServerOptions) -> anyhow::Result<Self> {
        let tools = tools::catalogue(opts.limits.max_read_bytes, opts.limits.max_search_results);
        Ok(FsServer {
            state: Arc::new(RootState::new(opts.roots, opts.home)?),
            limits: opts.limits,
            tools: Arc::new(tools),
        })
    }

    /// The current root set (for logs and tests).
    pub fn roots(&self) -> Arc<RootSet> {
        self.state.snapshot()
    }

    /// Asks the client for its roots (with a timeout) and applies the valid ones. Runs on its
    /// own task so notification handling never waits on the client.
    fn spawn_roots_fetch(&self, peer: Peer<RoleServer>, why: &'static str) {
        let state = Arc::clone(&self.state);
        let fetch = state.begin_fetch();
        tokio::spawn(async move {
            let answer = tokio::time::timeout(ROOTS_TIMEOUT, peer.list_roots()).await;
            let uris: Vec<(String, crate::sandbox::Access)> = match answer {
                Ok(Ok(r)) => r
                    .roots
                    .into_iter()
                    .map(|r| {
                        let access = crate::roots::access_from_meta(r.meta.as_ref().map(|m| &m.0));
                        (r.uri, access)
                    })
                    .collect(),
                Ok(Err(e)) => {
                    tracing::warn!("roots/list ({why}) failed: {e}; keeping the current roots");
                    return;
                }
                Err(_) => {
                    tracing::warn!(
                        "roots/list ({why}) got no answer in {ROOTS_TIMEOUT:?}; keeping the current roots"
                    );
                    return;
                }
            };
            // Canonicalising reads the filesystem: keep it off the async workers.
            let applied = tokio::task::spawn_blocking(move || {
                let (rejected, replaced) = state.apply_client_roots(fetch, &uris);
                (rejected, replaced, state.snapshot())
            })
            .await;
            match applied {
                Ok((rejected, replaced, set)) => {
                    for r in rejected {
                        tracing::warn!("ignoring client root {r}");
                    }
                    if replaced {
                        tracing::info!(
                            "roots v{} from the client ({why}): {}",
                            set.version,
                            set.guard.describe_roots()
                        );
                    } else {
                        tracing::warn!(
                            "client roots ({why}) not applied (none valid, or a newer answer won); still using: {}",
                            set.guard.describe_roots()
                        );
                    }
                }
                Err(e) => tracing::error!("applying client roots failed: {e}"),
            }
        });
    }

    async fn run_tool(&self, name: &str, args: Value) -> Result<Value, FsError> {
        let set = self.state.snapshot();
        let limits = self.limits;
        match name {
            tools::LIST_ROOTS => {
                let _: tools::NoArgs = parse_args(args)?;
                Ok(set.describe())
            }
            tools::READ => {
                let a: tools::ReadArgs = parse_args(args)?;
                let max = a
                    .max_bytes
                    .map_or(limits.max_read_bytes, |m| m.min(limits.max_read_bytes));
                let text = blocking(move || {
                    let p = set.guard.check(&a.path, Need::Read)?.path;
                    ops::read_text(&p, max)
                })
                .await?;
                Ok(Value::String(text))
            }
            tools::LIST => {
                let a: tools::PathArgs = parse_args(args)?;
                blocking(move || {
                    let p = set.guard.check(&a.path, Need::Read)?.path;
                    ops::list_dir(&p, limits.max_list_entries)
                })
                .await
            }
            tools::STAT => {
                let a: tools::PathArgs = parse_args(args)?;
                blocking(move || {
                    let p = set.guard.check(&a.path, Need::Read)?.path;
                    ops::stat(&p)
                })
                .await
            }
            tools::WRITE => {
                let a: tools::WriteArgs = parse_args(args)?;
                blocking(move || {
                    let p = set.guard.check(&a.path, Need::Write)?.path;
                    ops::write_file(&p, &a.content, limits.max_write_bytes)
                })
                .await
            }
            tools::SEARCH => {
                let a: tools::SearchArgs = parse_args(args)?;
                if a.pattern.is_empty() {
                    return Err(FsError::new(ErrorCode::BadArguments, "pattern is empty"));
                }
                blocking(move || {
                    let p = set.guard.check(&a.path, Need::Read)?.path;
                    let max = a.max_results.unwrap_or(100);
                    ops::search(&p, &a.pattern, &limits, max)
                })
                .await
            }
            other => Err(FsError::new(
                ErrorCode::BadArguments,
                format!("unknown tool {other}"),
            )),
        }
    }

    async fn read_target(&self, uri: &str) -> Result<ResourceContents, FsError> {
        let set = self.state.snapshot();
        let limits = self.limits;
        let json = |v: Value| {
            ResourceContents::text(v.to_string(), uri).with_mime_type("application/json")
        };
        match resources::parse(uri)? {
            Target::Policy => Ok(json(resources::policy_doc(&set, &limits))),
            Target::Index => Ok(json(resources::index_doc(&set))),
            Target::Dir(p) => {
                let v = blocking(move || {
                    let p = set.guard.check_path(&p, Need::Read)?.path;
                    ops::list_dir(&p, limits.max_list_entries)
                })
                .await?;
                Ok(json(v))
            }
            Target::File(p) => {
                let t = blocking(move || {
                    let p = set.guard.check_path(&p, Need::Read)?.path;
                    ops::read_text(&p, limits.max_read_bytes)
                })
                .await?;
                Ok(ResourceContents::text(t, uri).with_mime_type("text/plain"))
            }
            Target::Any(p) => {
                let (is_dir, v) = blocking(move || {
                    let p = set.guard.check_path(&p, Need::Read)?.path;
                    if p.is_dir() {
                        Ok((true, ops::list_dir(&p, limits.max_list_entries)?))
                    } else {
                        Ok((
                            false,
                            Value::String(ops::read_text(&p, limits.max_read_bytes)?),
                        ))
                    }
                })
                .await?;
                Ok(match (is_dir, v) {
                    (false, Value::String(t)) => {
                        ResourceContents::text(t, uri).with_mime_type("text/plain")
                    }
                    (_, v) => json(v),
                })
            }
        }
    }
}

fn parse_args<T: DeserializeOwned>(args: Value) -> Result<T, FsError> {
    serde_json::from_value(args)
        .map_err(|e| FsError::new(ErrorCode::BadArguments, format!("invalid arguments: {e}")))
}

/// Runs blocking filesystem work off the async workers.
async fn blocking<T, F>(f: F) -> Result<T, FsError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, FsError> + Send + 'static,
{
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(FsError::new(
            ErrorCode::IoError,
            format!("worker failed: {e}"),
        ))
    })
}

/// A refused or failed call as the agent sees it: `isError` and the JSON error object.
pub fn error_result(e: &FsError) -> CallToolResult {
    let body = e.to_json();
    let mut r = CallToolResult::error(vec![ContentBlock::text(body.to_string())]);
    r.structured_content = Some(body);
    r
}

/// A resource error as JSON-RPC: the code string and message in `data`.
pub fn resource_error(e: &FsError, uri: &str) -> ErrorData {
    let data = Some(serde_json::json!({
        "error": e.code.as_str(), "message": e.message, "uri": uri
    }));
    let code = match e.code {
        ErrorCode::NotFound => RpcCode::RESOURCE_NOT_FOUND,
        ErrorCode::IoError => RpcCode::INTERNAL_ERROR,
        _ => RpcCode::INVALID_PARAMS,
    };
    ErrorData::new(code, e.to_string(), data)
}

impl ServerHandler for FsServer {
    fn get_info(&self) -> ServerConfig {
        let set = self.state.snapshot();
        let roots = if set.guard.is_empty() {
            "It has no roots yet, so it refuses every path until the client offers roots."
                .to_string()
        } else {
            format!("Roots: {}.", set.guard.describe_roots())
        };
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("palisade-fs", env!("CARGO_PKG_VERSION")))
        .with_instructions(format!(
            "Filesystem access confined to roots (client roots/list, else --root). Paths are absolute or file:// URIs. {roots} See resource {} for the rules.",
            resources::POLICY_URI
        ))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        // Up to 2025-11-25: later revisions forbid asking the client for roots (NOTES.md).
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let offers_roots = context
            .peer
            .peer_info()
            .is_some_and(|info| info.capabilities.roots.is_some());
        if offers_roots {
            self.spawn_roots_fetch(context.peer.clone(), "after initialized");
        } else {
            let set = self.state.snapshot();
            if set.guard.is_empty() {
                tracing::warn!(
                    "the client offers no roots and no --root was given: every access will be refused"
                );
            } else {
                tracing::info!(
                    "the client offers no roots; using --root: {}",
                    set.guard.describe_roots()
                );
            }
        }
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.spawn_roots_fetch(context.peer.clone(), "roots/list_changed");
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.tools.iter().any(|t| t.name == name) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {name}"),
                None,
            ));
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = match self.run_tool(&name, args).await {
            Ok(Value::String(text)) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Ok(v) => {
                let mut r = CallToolResult::success(vec![ContentBlock::text(v.to_string())]);
                r.structured_content = Some(v);
                r
            }
            Err(e) => {
                tracing::debug!("{name}: {e}");
                error_result(&e)
            }
        };
        Ok(CallToolResponse::Complete(result))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let policy = Resource::new(resources::POLICY_URI, "policy")
            .with_description(
                "What this server may access: roots, rules, limits, the {path} encoding contract.",
            )
            .with_mime_type("application/json");
        let index = Resource::new(resources::INDEX_URI, "index")
            .with_description("The current roots, as dir/{path} resources.")
            .with_mime_type("application/json");
        Ok(ListResourcesResult::with_all_items(vec![policy, index]))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(resources::DIR_TEMPLATE, "dir")
                .with_description("A directory listing; {path} is the absolute path percent-encoded as one segment.")
                .with_mime_type("application/json"),
            ResourceTemplate::new(resources::FILE_TEMPLATE, "file")
                .with_description("A text file; {path} is the absolute path percent-encoded as one segment.")
                .with_mime_type("text/plain"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        match self.read_target(&request.uri).await {
            Ok(c) => Ok(ReadResourceResponse::Complete(ReadResourceResult::new(
                vec![c],
            ))),
            Err(e) => Err(resource_error(&e, &request.uri)),
        }
    }
}
