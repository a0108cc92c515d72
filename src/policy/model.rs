//! The on-disk formats Palisade shares with IronCurtain, as plain serde types.
//!
//! Pure data: no I/O, no evaluation. `load` turns these into the engine's indexed form.
//! Unknown keys inside rules, conditions and annotations are refused (`deny_unknown_fields`)
//! so a typo such as `"within"` spelled `"witin"` is a load error, never a rule that quietly
//! matches more than intended. Top-level bookkeeping keys (`generatedAt`, hashes) are ignored.

use serde::{Deserialize, Serialize};

/// What a compiled rule concludes, and what the engine decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Allow,
    Escalate,
    Deny,
}

/// Folds per-role decisions into one: deny > escalate > allow. The first deny decides at
/// once; an escalation reports every escalated role. Shared by the compiled-rule engine and
/// the built-in default so both combine roles the same way.
#[derive(Debug, Default)]
pub(crate) struct MostRestrictive {
    best: Option<super::Decision>,
    escalated: Vec<Role>,
}

impl MostRestrictive {
    /// Adds one role's decision; returns it when it is a deny, which decides the call.
    pub(crate) fn add(&mut self, role: Role, d: super::Decision) -> Option<super::Decision> {
        if d.status == Status::Deny {
            return Some(d);
        }
        if d.status == Status::Escalate && !self.escalated.contains(&role) {
            self.escalated.push(role);
        }
        if self
            .best
            .as_ref()
            .is_none_or(|b| d.status.severity() > b.status.severity())
        {
            self.best = Some(d);
        }
        None
    }

    /// The combined decision (`None` when no role was added); an allow reports `roles`.
    pub(crate) fn finish(self, roles: Vec<Role>) -> Option<super::Decision> {
        let escalated = self.escalated;
        self.best.map(|mut d| {
            d.roles = if d.status == Status::Escalate {
                escalated
            } else {
                roles
            };
            d
        })
    }
}

impl Status {
    /// Higher is more restrictive: deny > escalate > allow.
    pub fn severity(self) -> u8 {
        match self {
            Status::Allow => 0,
            Status::Escalate => 1,
            Status::Deny => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Allow => "allow",
            Status::Escalate => "escalate",
            Status::Deny => "deny",
        }
    }
}

/// The semantic role of one tool argument (IronCurtain's fixed vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    ReadPath,
    WritePath,
    DeletePath,
    WriteHistory,
    DeleteHistory,
    FetchUrl,
    GitRemoteUrl,
    GithubOwner,
    GithubRepo,
    BranchName,
    CommitMessage,
    EmailAddress,
    EmailBody,
    SharePermission,
    ProxyDomain,
    None,
}

/// How a role's values are interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleCategory {
    Path,
    Url,
    Identifier,
    Opaque,
}

impl Role {
    pub fn category(self) -> RoleCategory {
        use Role::*;
        match self {
            ReadPath | WritePath | DeletePath | WriteHistory | DeleteHistory => RoleCategory::Path,
            FetchUrl | GitRemoteUrl => RoleCategory::Url,
            GithubOwner | GithubRepo | ProxyDomain => RoleCategory::Identifier,
            BranchName | CommitMessage | EmailAddress | EmailBody | SharePermission | None => {
                RoleCategory::Opaque
            }
        }
    }

    /// Roles that name a resource are evaluated one by one through the rule chain; opaque
    /// roles (branch names, message bodies) only matter to `lists` conditions.
    pub fn is_resource(self) -> bool {
        self.category() != RoleCategory::Opaque
    }

    /// Path roles the session sandbox dir discharges (all path roles).
    pub fn sandbox_safe(self) -> bool {
        self.category() == RoleCategory::Path
    }

    /// Path roles that change the filesystem: they make a derived root read-write.
    pub fn writes(self) -> bool {
        matches!(
            self,
            Role::WritePath | Role::DeletePath | Role::WriteHistory | Role::DeleteHistory
        )
    }

    pub fn as_str(self) -> &'static str {
        use Role::*;
        match self {
            ReadPath => "read-path",
            WritePath => "write-path",
            DeletePath => "delete-path",
            WriteHistory => "write-history",
            DeleteHistory => "delete-history",
            FetchUrl => "fetch-url",
            GitRemoteUrl => "git-remote-url",
            GithubOwner => "github-owner",
            GithubRepo => "github-repo",
            BranchName => "branch-name",
            CommitMessage => "commit-message",
            EmailAddress => "email-address",
            EmailBody => "email-body",
            SharePermission => "share-permission",
            ProxyDomain => "proxy-domain",
            None => "none",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `compiled-policy.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompiledPolicyFile {
    /// Other top-level keys (`generatedAt`, hashes, `listDefinitions`) are bookkeeping the
    /// engine does not need: lists are matched by the type their rule condition names.
    pub rules: Vec<CompiledRule>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CompiledRule {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub principle: Option<String>,
    #[serde(rename = "if")]
    pub condition: Condition,
    pub then: Status,
    pub reason: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Condition {
    pub roles: Option<Vec<Role>>,
    pub server: Option<Vec<String>>,
    pub tool: Option<Vec<String>>,
    pub paths: Option<PathCondition>,
    pub domains: Option<DomainCondition>,
    pub lists: Option<Vec<ListCondition>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PathCondition {
    pub roles: Vec<Role>,
    pub within: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DomainCondition {
    pub roles: Vec<Role>,
    pub allowed: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListCondition {
    pub roles: Vec<Role>,
    pub allowed: Vec<String>,
    pub match_type: ListType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListType {
    Domains,
    Emails,
    Identifiers,
}

/// `dynamic-lists.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicListsFile {
    pub lists: serde_json::Map<String, serde_json::Value>,
}

/// One resolved list: effective values = (values + manualAdditions) - manualRemovals.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedList {
    pub values: Vec<String>,
    #[serde(default)]
    pub manual_additions: Vec<String>,
    #[serde(default)]
    pub manual_removals: Vec<String>,
}

/// `tool-annotations.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotationsFile {
    pub servers: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerAnnotations {
    pub tools: Vec<StoredAnnotation>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredAnnotation {
    pub tool_name: String,
    #[serde(default)]
    pub server_name: Option<String>,
    #[serde(default)]
    pub comment: Option<String>,
    /// Argument name -> roles, in file order (serde_json keeps order): role evaluation order
    /// follows it, which decides which rule a decision is attributed to.
    pub args: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub input_schema: Option<serde_json::Value>,
}

/// An argument's roles: a plain list, or roles that depend on sibling arguments (a JSON
/// array or an object; `load` picks the variant by shape so errors name the bad role).
#[derive(Debug, Clone)]
pub enum RoleSpec {
    Static(Vec<Role>),
    Conditional(ConditionalRoles),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionalRoles {
    pub default: Vec<Role>,
    pub when: Vec<WhenRoles>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhenRoles {
    pub condition: RoleCondition,
    pub roles: Vec<Role>,
}

/// Exactly one of `equals`, `in`, `is` (checked at load).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleCondition {
    pub arg: String,
    #[serde(default)]
    pub equals: Option<serde_json::Value>,
    #[serde(default, rename = "in")]
    pub one_of: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    pub is: Option<Presence>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Presence {
    Present,
    Absent,
    Truthy,
    Falsy,
}
