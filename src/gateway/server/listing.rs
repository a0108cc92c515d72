//! A server's lists (tools, prompts, resources, templates), every page, as the supervisor
//! takes them at start and again on `list_changed`: one deadline for every page of every
//! kind, and caps on entries and bytes, so a server that pages without end or sends a
//! gigabyte of tool JSON is a failed start, not a gateway out of memory. Each entry keeps the
//! JSON the server sent beside the typed view (`registry::RawItems`).
//! Never: wait past the listing's deadline; hold more than the caps.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    ClientRequest, ListPromptsRequest, ListPromptsResult, ListResourceTemplatesRequest,
    ListResourceTemplatesResult, ListResourcesRequest, ListResourcesResult, ListToolsRequest,
    ListToolsResult, PaginatedRequestParams,
};

use crate::gateway::registry::{JsonObject, RawItems, ServerLists};
use crate::gateway::server::handler::ListKind;
use crate::gateway::server::request::{parse, Connection, ForwardError, OnBehalf};

/// Why a listing failed.
#[derive(Debug, thiserror::Error)]
#[error("listing its {what} failed: {cause}")]
pub struct ListError {
    pub what: &'static str,
    pub cause: ForwardError,
}

/// The most one server's lists may hold, all kinds together (issue 23, finding 5: pages
/// accumulated without bound, 1 GB of tool JSON took serve to 2.46 GB): this many entries…
const MAX_LISTED_ITEMS: usize = 10_000;
/// …and this many bytes of their JSON.
const MAX_LISTED_BYTES: usize = 16 << 20;

/// What a listing may still spend: one deadline for every page of every kind (not one per
/// page: 1,000 pages × 4 kinds × `startupTimeout` was hours), and the caps above.
struct ListBudget {
    deadline: tokio::time::Instant,
    limit: Duration,
    items: usize,
    bytes: usize,
}

impl ListBudget {
    fn new(limit: Duration) -> ListBudget {
        ListBudget {
            deadline: tokio::time::Instant::now() + limit,
            limit,
            items: 0,
            bytes: 0,
        }
    }

    fn over(server: &str, what: &'static str, message: String) -> ListError {
        ListError {
            what,
            cause: ForwardError::Other {
                server: server.to_string(),
                message,
            },
        }
    }

    /// The time left for the next page; an error once the listing's deadline has passed.
    fn left(&self, server: &str, what: &'static str) -> Result<Duration, ListError> {
        let left = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(Self::over(server, what, self.late()));
        }
        Ok(left)
    }

    fn late(&self) -> String {
        format!(
            "the listing did not finish within {}s (one deadline for all its pages)",
            self.limit.as_secs()
        )
    }

    /// Charges one page of `items` entries, `bytes` of JSON; an error over either cap.
    fn charge(
        &mut self,
        server: &str,
        what: &'static str,
        items: usize,
        bytes: usize,
    ) -> Result<(), ListError> {
        self.items = self.items.saturating_add(items);
        self.bytes = self.bytes.saturating_add(bytes);
        if self.items > MAX_LISTED_ITEMS || self.bytes > MAX_LISTED_BYTES {
            return Err(Self::over(
                server,
                what,
                format!(
                    "its lists exceed the cap of {MAX_LISTED_ITEMS} entries or \
                     {MAX_LISTED_BYTES} bytes ({} entries, {} bytes so far)",
                    self.items, self.bytes
                ),
            ));
        }
        Ok(())
    }
}

/// Lists what the server's capabilities say it has, all kinds within one deadline and caps.
pub(super) async fn fetch_lists(
    conn: &Connection,
    timeout: Duration,
) -> Result<ServerLists, ListError> {
    let mut budget = ListBudget::new(timeout);
    let caps = conn.info.capabilities.clone();
    let mut lists = ServerLists::default();
    let kinds = [
        (caps.tools.is_some(), ListKind::Tools),
        (caps.prompts.is_some(), ListKind::Prompts),
        (caps.resources.is_some(), ListKind::Resources),
    ];
    for (_, kind) in kinds.into_iter().filter(|(has, _)| *has) {
        let fresh = list_all(conn, kind, &mut budget).await?;
        lists.take_kind(kind, fresh);
    }
    Ok(lists)
}

/// Fetches every page of one kind of list, within `budget`.
async fn list_all(
    conn: &Connection,
    kind: ListKind,
    budget: &mut ListBudget,
) -> Result<ServerLists, ListError> {
    let mut out = ServerLists::default();
    let mut raw = RawPages::default();
    let passes: &[&'static str] = match kind {
        ListKind::Tools => &["tools"],
        ListKind::Prompts => &["prompts"],
        ListKind::Resources => &["resources", "resource templates"],
    };
    for &what in passes {
        let mut cursor: Option<String> = None;
        // A bound on pages so a server that keeps returning cursors cannot loop us forever.
        for _ in 0..1000 {
            let params = Some(PaginatedRequestParams::default().with_cursor(cursor.take()));
            let req = match what {
                "tools" => ClientRequest::ListToolsRequest(ListToolsRequest {
                    method: Default::default(),
                    params,
                    extensions: Default::default(),
                }),
                "prompts" => ClientRequest::ListPromptsRequest(ListPromptsRequest {
                    method: Default::default(),
                    params,
                    extensions: Default::default(),
                }),
                "resources" => ClientRequest::ListResourcesRequest(ListResourcesRequest {
                    method: Default::default(),
                    params,
                    extensions: Default::default(),
                }),
                _ => ClientRequest::ListResourceTemplatesRequest(ListResourceTemplatesRequest {
                    method: Default::default(),
                    params,
                    extensions: Default::default(),
                }),
            };
            let left = budget.left(&conn.server, what)?;
            let result = conn
                .request(req, left, OnBehalf::palisade())
                .await
                .map_err(|source| match source {
                    // Timed out at the listing's deadline: say so, not "one page".
                    ForwardError::Timeout { .. }
                        if tokio::time::Instant::now() >= budget.deadline =>
                    {
                        ListBudget::over(&conn.server, what, budget.late())
                    }
                    source => ListError {
                        what,
                        cause: source,
                    },
                })?;
            let server = conn.server.as_str();
            raw.add(what, &result);
            let next = match what {
                "tools" => {
                    let r: ListToolsResult =
                        parse(server, "tools/list", &result).map_err(|source| ListError {
                            what,
                            cause: source,
                        })?;
                    budget.charge(server, what, r.tools.len(), result.get().len())?;
                    out.tools.extend(r.tools);
                    r.next_cursor
                }
                "prompts" => {
                    let r: ListPromptsResult =
                        parse(server, "prompts/list", &result).map_err(|source| ListError {
                            what,
                            cause: source,
                        })?;
                    budget.charge(server, what, r.prompts.len(), result.get().len())?;
                    out.prompts.extend(r.prompts);
                    r.next_cursor
                }
                "resources" => {
                    let r: ListResourcesResult =
                        parse(server, "resources/list", &result).map_err(|source| ListError {
                            what,
                            cause: source,
                        })?;
                    budget.charge(server, what, r.resources.len(), result.get().len())?;
                    out.resources.extend(r.resources);
                    r.next_cursor
                }
                _ => {
                    let r: ListResourceTemplatesResult =
                        parse(server, "resources/templates/list", &result).map_err(|source| {
                            ListError {
                                what,
                                cause: source,
                            }
                        })?;
                    let n = r.resource_templates.len();
                    budget.charge(server, what, n, result.get().len())?;
                    out.templates.extend(r.resource_templates);
                    r.next_cursor
                }
            };
            match next {
                Some(c) if !c.is_empty() => cursor = Some(c),
                _ => break,
            }
        }
    }
    out.raw = raw.into_items();
    Ok(out)
}

/// The entries of each page as the server sent them, kept by key (see `RawItems`).
#[derive(Default)]
struct RawPages {
    tools: HashMap<String, JsonObject>,
    prompts: HashMap<String, JsonObject>,
    resources: HashMap<String, JsonObject>,
    templates: HashMap<String, JsonObject>,
}

impl RawPages {
    /// Keeps the entries of one page of `what`; entries without their key are left to the
    /// typed view (which refuses them anyway).
    fn add(&mut self, what: &str, page: &serde_json::value::RawValue) {
        let Ok(mut page) = serde_json::from_str::<JsonObject>(page.get()) else {
            return;
        };
        let (list, key, into) = match what {
            "tools" => ("tools", "name", &mut self.tools),
            "prompts" => ("prompts", "name", &mut self.prompts),
            "resources" => ("resources", "uri", &mut self.resources),
            _ => ("resourceTemplates", "uriTemplate", &mut self.templates),
        };
        let Some(serde_json::Value::Array(items)) = page.remove(list) else {
            return;
        };
        for item in items {
            if let serde_json::Value::Object(o) = item {
                if let Some(k) = o.get(key).and_then(|v| v.as_str()) {
                    into.insert(k.to_string(), o);
                }
            }
        }
    }

    fn into_items(self) -> RawItems {
        RawItems {
            tools: Arc::new(self.tools),
            prompts: Arc::new(self.prompts),
            resources: Arc::new(self.resources),
            templates: Arc::new(self.templates),
        }
    }
}

/// Re-lists one kind of a server's lists on its own task, within `timeout` for all its pages.
pub(super) fn spawn_relist(
    relists: &mut tokio::task::JoinSet<(ListKind, Result<ServerLists, ListError>)>,
    conn: Connection,
    kind: ListKind,
    timeout: Duration,
) {
    relists.spawn(async move {
        let listed = list_all(&conn, kind, &mut ListBudget::new(timeout)).await;
        (kind, listed)
    });
}
