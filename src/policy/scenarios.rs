//! IronCurtain `test-scenarios.json`: a request and an expected decision per scenario
//! (`allow`, `deny`, `escalate`, or `not-allow` meaning "anything but allow").
//! `palisade policy test` and the corpus tests run them through [`Policy::evaluate`].
//!
//! Reads the scenario file; evaluation itself is the engine's.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::load::{read_json, LoadError};
use super::{CallContext, Decision, Policy, Scope, Status};

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioFile {
    pub scenarios: Vec<Scenario>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scenario {
    pub description: String,
    pub request: ScenarioRequest,
    pub expected_decision: Expected,
    #[serde(default)]
    pub source: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioRequest {
    pub server_name: String,
    pub tool_name: String,
    #[serde(default)]
    pub arguments: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expected {
    Allow,
    Deny,
    Escalate,
    NotAllow,
}

impl Expected {
    /// IronCurtain's verifier rule: `not-allow` passes for deny and escalate.
    pub fn accepts(self, s: Status) -> bool {
        match self {
            Expected::NotAllow => s != Status::Allow,
            Expected::Allow => s == Status::Allow,
            Expected::Deny => s == Status::Deny,
            Expected::Escalate => s == Status::Escalate,
        }
    }
}

pub fn load(file: &Path) -> Result<ScenarioFile, LoadError> {
    serde_path_to_error::deserialize(read_json(file)?).map_err(|e| LoadError::Parse {
        file: file.to_path_buf(),
        field: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// One scenario's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub index: usize,
    pub description: String,
    pub decision: Status,
    pub rule: String,
    pub expected: Expected,
    pub pass: bool,
}

/// Where scenario paths are resolved: IronCurtain's verifier runs as its user, so `~` is
/// that user's home and relative paths resolve against its working directory.
#[derive(Debug, Clone)]
pub struct Env {
    pub home: Option<PathBuf>,
    pub cwd: Option<PathBuf>,
    pub scope: Scope,
}

pub fn run(policy: &Policy, file: &ScenarioFile, env: &Env) -> Vec<Outcome> {
    file.scenarios
        .iter()
        .enumerate()
        .map(|(index, s)| {
            let d: Decision = policy.evaluate(&CallContext {
                server: &s.request.server_name,
                tool: &s.request.tool_name,
                arguments: &s.request.arguments,
                cwd: env.cwd.as_deref(),
                home: env.home.as_deref(),
                scope: &env.scope,
                roots: &[],
            });
            Outcome {
                index,
                description: s.description.clone(),
                decision: d.status,
                rule: d.rule,
                expected: s.expected_decision,
                pass: s.expected_decision.accepts(d.status),
            }
        })
        .collect()
}
