//! How reading each input of a scan went: the `sources` of the report.

use serde::{Deserialize, Serialize};

use crate::heart::desired::DesiredState;
use crate::heart::input::Input;
use crate::heart::model::{Backend, Family};

/// How reading one source went: "absent" (fine) differs from "error" (not). Only
/// `ok`/`partial`/`empty` say what the node holds, and a dump in any other state is
/// never trusted for "missing" decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
#[serde(rename_all = "kebab-case")]
// The published schemas keep the name this type had when they were first written.
#[schemars(rename = "SourceState")]
pub enum InputState {
    /// Read and understood.
    Ok,
    /// Read, but some of it could not be understood or it looks truncated: findings
    /// that need proof of absence are not drawn from it.
    Partial,
    /// Not present (no file in the bundle, tool not installed).
    Absent,
    /// Read fine, and it holds nothing (a backend without tables).
    Empty,
    /// Present but unreadable.
    Error,
    /// The tool ran and exited with an error (its complaint is in the notes).
    Failed,
    /// The tool did not finish within its time limit and was killed.
    TimedOut,
    /// The tool printed more than the output limit allows; reading stopped there.
    TooLarge,
}

impl InputState {
    /// The state as the report and the JSON print it.
    pub fn as_str(self) -> &'static str {
        match self {
            InputState::Ok => "ok",
            InputState::Partial => "partial",
            InputState::Absent => "absent",
            InputState::Empty => "empty",
            InputState::Error => "error",
            InputState::Failed => "failed",
            InputState::TimedOut => "timed-out",
            InputState::TooLarge => "too-large",
        }
    }

    /// The source could not be read (as opposed to holding nothing, or being absent
    /// on a node that does not use it): what the agent counts as a scan error and a
    /// source that is down.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            InputState::Error | InputState::Failed | InputState::TimedOut | InputState::TooLarge
        )
    }
}

impl std::fmt::Display for InputState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The status of one input, for the report and `/findings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
// The published schemas keep the name this type had when they were first written.
#[schemars(rename = "SourceStatus")]
pub struct InputStatus {
    /// The file or command (`iptables-nft-save.txt`, `proc/net/tcp`, `cluster.json`).
    #[schemars(with = "String")]
    pub source: Input,
    pub status: InputState,
    /// Where it was really read from when that is not the bundle file `source` names:
    /// the command or path on a live node (`iptables-nft-save`, `/proc/net/tcp`).
    pub origin: Option<String>,
    pub backend: Option<Backend>,
    pub family: Option<Family>,
    /// NodePort rules read (rule sources), listeners (socket files), Service ports
    /// (cluster state).
    pub items: Option<usize>,
    /// Lines or objects that could not be understood.
    pub unparsed: usize,
    /// What went wrong or what the source itself said.
    pub notes: Vec<String>,
}

impl InputStatus {
    /// Records what a cluster state holds: its Service ports, and the objects that
    /// could not be read (which make the source partial).
    pub fn describe_cluster_state(&mut self, desired: &DesiredState) {
        self.items = Some(desired.ports.len());
        self.unparsed = desired.problems.len();
        if !desired.problems.is_empty() && self.status == InputState::Ok {
            self.status = InputState::Partial;
        }
        self.notes = desired
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.object, p.problem))
            .collect();
    }

    /// A dump of rules: its backend is known, or at least its family (a dump refused
    /// before its header said which backend wrote it).
    pub fn is_rule_dump(&self) -> bool {
        self.backend.is_some() || self.family.is_some()
    }

    pub fn new(source: Input, status: InputState) -> InputStatus {
        InputStatus {
            source,
            status,
            origin: None,
            backend: None,
            family: None,
            items: None,
            unparsed: 0,
            notes: Vec::new(),
        }
    }
}
