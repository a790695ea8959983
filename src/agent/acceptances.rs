//! The agent's acceptances: the file (a mounted ConfigMap) read again when it changes,
//! the last good one kept while the file is bad, and the memory that finds
//! acceptances that have accepted nothing for a week.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use crate::heart::acceptance::{Acceptance, Acceptances, IDLE_AFTER, idle_finding};
use crate::heart::input::Input;
use crate::heart::outcome::{InputState, InputStatus, ScanReport};
use crate::heart::visible::visible;

/// How often the file is looked at: a ConfigMap edit reaches the mounted file within
/// kubelet's sync period (about a minute), so this adds little to it.
pub const RELOAD_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The acceptances file as last read, and the last good acceptances in it.
#[derive(Debug)]
pub struct AcceptanceFile {
    path: PathBuf,
    /// The file's bytes as last read (None: not read yet, or unreadable).
    seen: Option<Vec<u8>>,
    /// The last acceptances that parsed, and when they were read.
    good: Option<(Acceptances, jiff::Timestamp)>,
    /// Why the file as it is now cannot be used.
    problem: Option<String>,
}

impl AcceptanceFile {
    /// The file at `path`, read at once.
    pub fn open(path: PathBuf) -> AcceptanceFile {
        let mut file = AcceptanceFile {
            path,
            seen: None,
            good: None,
            problem: None,
        };
        file.reload();
        file
    }

    /// Reads the file again; true when it changed (what applies, or why not). Each
    /// change is logged once: a bad file says the last good acceptances are kept.
    pub fn reload(&mut self) -> bool {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(error) => {
                let problem = format!("cannot be read: {error}");
                if self.problem.as_ref() == Some(&problem) {
                    return false;
                }
                self.seen = None;
                self.reject(problem);
                return true;
            }
        };
        if self.seen.as_ref() == Some(&bytes) {
            return false;
        }
        match Acceptances::parse(&bytes) {
            Ok(list) => {
                tracing::info!(
                    path = %self.path.display(),
                    entries = list.accept.len(),
                    "acceptances read"
                );
                self.good = Some((list, jiff::Timestamp::now()));
                self.problem = None;
            }
            Err(error) => self.reject(error.to_string()),
        }
        self.seen = Some(bytes);
        true
    }

    fn reject(&mut self, problem: String) {
        match &self.good {
            Some((list, at)) => tracing::error!(
                path = %self.path.display(),
                error = %visible(&problem),
                "the acceptances file cannot be used; the last good one ({} entries, read at {at}) still applies",
                list.accept.len()
            ),
            None => tracing::error!(
                path = %self.path.display(),
                error = %visible(&problem),
                "the acceptances file cannot be used, and none was read before: no entry of it applies"
            ),
        }
        self.problem = Some(problem);
    }

    /// The acceptances that apply now: the last good ones.
    pub fn current(&self) -> Acceptances {
        self.good
            .as_ref()
            .map(|(list, _)| list.clone())
            .unwrap_or_default()
    }

    /// The file as a source of the scan: an error while it cannot be used, saying
    /// what still applies.
    pub fn status(&self) -> InputStatus {
        let state = if self.problem.is_some() {
            InputState::Error
        } else {
            InputState::Ok
        };
        let mut status = InputStatus::new(Input::Acceptances, state);
        status.origin = Some(self.path.display().to_string());
        status.items = self.good.as_ref().map(|(list, _)| list.accept.len());
        if let Some(problem) = &self.problem {
            status.notes.push(format!("the file {problem}"));
            status.notes.push(match &self.good {
                Some((list, at)) => format!(
                    "the last good file, read at {at}, still applies ({} entries)",
                    list.accept.len()
                ),
                None => "no entry of it applies: every finding it would accept counts".into(),
            });
        }
        status
    }
}

/// What the agent remembers of acceptances across scans.
#[derive(Debug, Default)]
pub struct AcceptanceMemory {
    /// Since when each acceptance has accepted nothing.
    unmatched_since: HashMap<Acceptance, jiff::Timestamp>,
    /// Expired acceptances already logged.
    expiry_logged: HashSet<Acceptance>,
}

impl AcceptanceMemory {
    /// After a scan at `now`: logs each acceptance that expired, once; adds an info
    /// finding for each that has accepted nothing for [`IDLE_AFTER`].
    pub fn after_scan(&mut self, report: &mut ScanReport, now: jiff::Timestamp) {
        let used = std::mem::take(&mut report.acceptance_use);
        let mut unmatched_since = HashMap::with_capacity(used.len());
        for (acceptance, matched) in &used {
            if acceptance.expired_by(now) {
                if self.expiry_logged.insert(acceptance.clone()) {
                    tracing::warn!(
                        expired = %acceptance.expires.map(|e| e.to_string()).unwrap_or_default(),
                        "{} (\"{}\") expired: what it accepted counts again",
                        acceptance.origin,
                        visible(&acceptance.reason)
                    );
                }
                continue;
            }
            let since = match self.unmatched_since.get(acceptance) {
                _ if *matched => continue,
                Some(&since) => since,
                None => now,
            };
            unmatched_since.insert(acceptance.clone(), since);
            if now.duration_since(since) >= IDLE_AFTER {
                report.push_finding(idle_finding(acceptance, since));
            }
        }
        self.unmatched_since = unmatched_since;
        self.expiry_logged.retain(|a| used.iter().any(|(u, _)| u == a));
        report.acceptance_use = used;
    }
}

#[cfg(test)]
mod tests;
