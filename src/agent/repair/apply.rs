//! The I/O of repair: reading each backend's whole ruleset again right before acting,
//! and applying one action as one kernel transaction, never through a shell.
//!
//! iptables actions go to `iptables[-legacy|-nft]-restore --noflush -w`, one
//! transaction per table. Rules are deleted by their full spec as dumped, so the kernel
//! refuses if a rule changed since; chains go with `-X` after their rules, which the
//! kernel refuses while anything is left in or jumps to them. nftables: `nft -f -`.

use std::io::Read;

use crate::decode::nftables::table_views_json;
use crate::heart::model::{Backend, Family};
use crate::heart::repair::nft_table::TableView;
use crate::sources::tools::{ToolLimits, ToolOutcome, run_tool, run_tool_with_input};

use crate::heart::repair::plan::RepairAction;
use crate::heart::repair::ruleset::{IptablesRuleset, iptables_tools};

/// Why a read or an action failed, for the record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("{command} is not on PATH")]
    Absent { command: String },
    #[error("{command} failed ({why}): {stderr}")]
    Failed {
        command: String,
        why: String,
        stderr: String,
    },
    #[error("{command}: {why}")]
    Unreadable { command: String, why: String },
}

fn run_to_string(program: &str, args: &[&str], limits: ToolLimits) -> Result<String, ApplyError> {
    let run = run_tool(program, args, limits, |r| {
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes)?;
        Ok(bytes)
    });
    let command = run.command.clone();
    match (&run.outcome, run.value) {
        (ToolOutcome::Ok | ToolOutcome::Empty, Some(Ok(bytes))) => {
            String::from_utf8(bytes).map_err(|_| ApplyError::Unreadable {
                command,
                why: "the output is not UTF-8".into(),
            })
        }
        (ToolOutcome::Absent, _) => Err(ApplyError::Absent { command }),
        (outcome, _) => Err(ApplyError::Failed {
            command,
            why: format!("{outcome:?}"),
            stderr: run.stderr,
        }),
    }
}

/// Reads one iptables backend and family in full (`iptables-nft-save`, ...; never `-t`,
/// which makes the legacy tools create tables).
pub fn read_iptables(
    backend: Backend,
    family: Family,
    limits: ToolLimits,
) -> Result<IptablesRuleset, ApplyError> {
    let (save, _) = iptables_tools(backend, family).ok_or_else(|| ApplyError::Unreadable {
        command: backend.to_string(),
        why: "not an iptables backend".into(),
    })?;
    run_to_string(save, &[], limits).map(|text| IptablesRuleset::parse(&text))
}

/// Reads kube-proxy's nftables table of one family; None when it does not exist.
pub fn read_nftables(family: Family, limits: ToolLimits) -> Result<Option<TableView>, ApplyError> {
    let name = match family {
        Family::Ipv4 => "ip",
        Family::Ipv6 => "ip6",
    };
    let args = ["-j", "list", "table", name, "kube-proxy"];
    let run = run_tool("nft", &args, limits, |r| {
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes)?;
        Ok(bytes)
    });
    let command = run.command.clone();
    let bytes = match (&run.outcome, run.value) {
        (ToolOutcome::Ok, Some(Ok(bytes))) => bytes,
        (ToolOutcome::Absent, _) => return Err(ApplyError::Absent { command }),
        (ToolOutcome::Failed(_), _) if run.stderr.contains("No such file or directory") => return Ok(None),
        (outcome, _) => {
            return Err(ApplyError::Failed {
                command,
                why: format!("{outcome:?}"),
                stderr: run.stderr,
            });
        }
    };
    let views = table_views_json(&bytes, &command).map_err(|e| ApplyError::Unreadable {
        command: command.clone(),
        why: e.to_string(),
    })?;
    Ok(views.into_iter().find(|v| v.family == family))
}

/// Applies one action: its script, as one transaction, on the program's stdin.
pub fn execute(action: &RepairAction, limits: ToolLimits) -> Result<(), ApplyError> {
    let (program, args) = action.program();
    let run = run_tool_with_input(program, &args, Some(action.script().into_bytes()), limits, |r| {
        let mut sink = Vec::new();
        r.take(64 << 10).read_to_end(&mut sink)?;
        Ok(())
    });
    match run.outcome {
        ToolOutcome::Ok | ToolOutcome::Empty => Ok(()),
        ToolOutcome::Absent => Err(ApplyError::Absent { command: run.command }),
        outcome => Err(ApplyError::Failed {
            command: run.command,
            why: match outcome {
                ToolOutcome::Failed(why) => why,
                other => format!("{other:?}"),
            },
            stderr: run.stderr,
        }),
    }
}
