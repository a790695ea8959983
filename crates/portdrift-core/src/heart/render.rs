//! The human report: what an engineer reads at 3 a.m.
//!
//! Grouped by port, most severe first; each finding is one line saying what is wrong,
//! then the evidence (rule and where it is), and the message says what to do. Info
//! findings are listed when few and counted when many, so leftovers never bury the
//! one line that matters.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::input::Input;
use crate::heart::model::{ProcessInfo, Protocol};
use crate::heart::outcome::{InputState, ScanReport, Summary};
use crate::heart::visible::{into_visible_lines, visible as v};
use crate::heart::words::count_of;

/// Above this many info findings, they are summarised by kind.
pub const INFO_LISTED: usize = 20;

/// What a report may claim at its top. The text report and the agent's page both say
/// it from here, so neither claims more than the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportVerdict {
    /// Every check ran on complete inputs and found nothing: the only all-clear.
    NoDrift,
    /// Every check ran on complete inputs, and found something (perhaps only info or
    /// accepted findings, which is still not "no drift").
    Found,
    /// Something could not be checked: never an all-clear, whatever was found.
    Incomplete,
}

impl ReportVerdict {
    pub fn of(report: &ScanReport) -> ReportVerdict {
        if !report.coverage.complete {
            ReportVerdict::Incomplete
        } else if report.findings.is_empty() {
            ReportVerdict::NoDrift
        } else {
            ReportVerdict::Found
        }
    }
}

/// The all-clear, said only for [`ReportVerdict::NoDrift`].
pub const NO_DRIFT: &str = "No drift: this node's NodePort rules and listeners match the cluster state.";

/// The heading of an incomplete check ([`ReportVerdict::Incomplete`]), before what was not
/// checked.
pub const INCOMPLETE: &str = "INCOMPLETE CHECK, not an all-clear";

/// An incomplete check that found nothing in what it could check.
pub const NOTHING_FOUND_IN_CHECKED: &str = "Nothing was found in what could be checked.";

/// `2 critical, 0 warning, 1 info[, 3 accepted]`.
pub fn counts(s: &Summary) -> String {
    let mut counts = format!("{} critical, {} warning, {} info", s.critical, s.warning, s.info);
    if s.accepted > 0 {
        let _ = write!(counts, ", {} accepted", s.accepted);
    }
    counts
}

/// The findings of one port (or the node-wide ones), as a report lists them.
#[derive(Debug)]
pub struct PortGroup<'a> {
    /// `tcp/30080`, `port 30080` (no protocol) or `node-wide`.
    pub title: String,
    pub protocol: Option<Protocol>,
    pub port: Option<u16>,
    /// The Services of its findings, sorted, each once.
    pub services: Vec<&'a str>,
    pub findings: Vec<&'a Finding>,
}

/// The findings grouped as a report lists them: ports with a critical finding first,
/// then by port number; when there are more than [`INFO_LISTED`] info findings, those are
/// counted by kind (`info_by_kind`) instead of listed, so leftovers never bury the one
/// line that matters.
#[derive(Debug)]
pub struct Grouped<'a> {
    pub groups: Vec<PortGroup<'a>>,
    pub info_by_kind: Option<BTreeMap<Kind, usize>>,
}

pub fn group_by_port(report: &ScanReport) -> Grouped<'_> {
    let many_info = report.summary.info > INFO_LISTED;
    let mut groups: BTreeMap<(u16, String), Vec<&Finding>> = BTreeMap::new();
    for f in &report.findings {
        if many_info && f.severity == Severity::Info {
            continue;
        }
        let key = match (f.port, f.protocol) {
            (Some(p), Some(proto)) => (p, format!("{proto}/{p}")),
            (Some(p), None) => (p, format!("port {p}")),
            _ => (u16::MAX, "node-wide".to_string()),
        };
        groups.entry(key).or_default().push(f);
    }
    // Ports with a critical finding first, then by port number.
    let mut ordered: Vec<_> = groups.into_iter().collect();
    ordered.sort_by_key(|((port, _), fs)| (fs.iter().map(|f| f.severity).min(), *port));
    let groups = ordered
        .into_iter()
        .map(|((_, title), findings)| {
            let mut services: Vec<&str> = findings.iter().filter_map(|f| f.service.as_deref()).collect();
            services.sort();
            services.dedup();
            PortGroup {
                title,
                protocol: findings[0].port.and(findings[0].protocol),
                port: findings[0].port,
                services,
                findings,
            }
        })
        .collect();
    let info_by_kind = many_info.then(|| {
        let mut by_kind: BTreeMap<Kind, usize> = BTreeMap::new();
        for f in report.findings.iter().filter(|f| f.severity == Severity::Info) {
            *by_kind.entry(f.kind).or_default() += 1;
        }
        by_kind
    });
    Grouped { groups, info_by_kind }
}

/// Renders the report as text. Every field that came from a dump, a process or the
/// API is escaped ([`v`]), and the whole once more, so no control byte reaches the
/// terminal.
pub fn render_text(report: &ScanReport) -> String {
    let mut out = String::new();
    render_verdict(&mut out, report);
    let grouped = group_by_port(report);
    for group in grouped.groups {
        let _ = writeln!(
            out,
            "\n{}{}",
            group.title,
            if group.services.is_empty() {
                String::new()
            } else {
                format!("  ({})", v(&group.services.join(", ")))
            }
        );
        for f in group.findings {
            render_finding(&mut out, f);
        }
    }
    if let Some(by_kind) = grouped.info_by_kind {
        let parts: Vec<String> = by_kind.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let _ = writeln!(
            out,
            "\ninfo: {} (harmless leftovers; -o wide or -o json lists them)",
            parts.join(", ")
        );
    }
    render_sources(&mut out, report);
    into_visible_lines(out)
}

/// The headline: the node and the counts, and, when the check was incomplete, what
/// could not be checked before anything else, so a quiet report on partial inputs never
/// reads as an all-clear.
fn render_verdict(out: &mut String, report: &ScanReport) {
    let node = v(report.node.as_deref().unwrap_or("(node unknown)"));
    let counts = counts(&report.summary);
    match ReportVerdict::of(report) {
        ReportVerdict::NoDrift => {
            let _ = writeln!(out, "portdrift: node {node}: {counts}");
            let _ = writeln!(out, "\n{NO_DRIFT}");
        }
        ReportVerdict::Found => {
            let _ = writeln!(out, "portdrift: node {node}: {counts}");
        }
        ReportVerdict::Incomplete => {
            let _ = writeln!(out, "portdrift: node {node}: {INCOMPLETE}. Not checked:");
            for sentence in &report.coverage.not_checked {
                let _ = writeln!(out, "  - {}", v(sentence));
            }
            let _ = writeln!(out, "\nIn what was checked: {counts}");
            if report.findings.is_empty() {
                let _ = writeln!(out, "\n{NOTHING_FOUND_IN_CHECKED}");
            }
        }
    }
}

fn render_finding(out: &mut String, f: &Finding) {
    let mut context = Vec::new();
    if let Some(b) = f.backend {
        context.push(b.to_string());
    }
    if let Some(fam) = f.family {
        context.push(fam.to_string());
    }
    if let Some(t) = &f.target {
        context.push(format!("→ {}", v(t)));
    }
    // An accepted finding says so where its severity would be: it counts for nothing.
    let label = match &f.accepted {
        Some(_) => "ACCEPTED".to_string(),
        None => f.severity.as_str().to_uppercase(),
    };
    let _ = writeln!(out, "  {label:<8} {}  {}", f.kind, context.join("  "));
    let _ = writeln!(out, "           {}", v(&f.message));
    if let Some(a) = &f.accepted {
        let until = a
            .expires
            .as_deref()
            .map(|e| format!(" (until {e})"))
            .unwrap_or_default();
        let _ = writeln!(out, "           accepted: {}{until}", v(&a.reason));
    }
    if let Some(rule) = &f.rule {
        let at = f
            .rule_source
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        let _ = writeln!(out, "           rule  {}  {}", v(&at), v(rule));
    } else if let Some(at) = &f.rule_source {
        let _ = writeln!(out, "           at    {}", v(&at.to_string()));
    }
    if let Some(p) = &f.process {
        let _ = writeln!(out, "           owner {}", describe_owner(p, v));
        if let Some(args) = &p.cmdline {
            let _ = writeln!(out, "           args  {}", v(args));
        }
    }
    for e in &f.evidence {
        let _ = writeln!(out, "           {}", v(e));
    }
}

/// A socket's owner as the report and the page name it: `comm (pid N, uid U, exe)
/// container C pod P`, each untrusted part through `escape`.
pub(crate) fn describe_owner(p: &ProcessInfo, escape: fn(&str) -> std::borrow::Cow<'_, str>) -> String {
    let mut who = format!("{} (pid {}", escape(&p.name), p.pid);
    if let Some(uid) = p.uid {
        let _ = write!(who, ", uid {uid}");
    }
    if let Some(exe) = &p.exe {
        let _ = write!(who, ", {}", escape(exe));
    }
    who.push(')');
    if let Some(c) = &p.container {
        let _ = write!(who, " container {}", escape(c));
    }
    if let Some(pod) = &p.pod {
        let _ = write!(who, " pod {}", escape(pod));
    }
    who
}

fn render_sources(out: &mut String, report: &ScanReport) {
    let _ = writeln!(
        out,
        "\nproxy mode: {} ({})",
        report.coverage.proxy_mode,
        v(&report.coverage.proxy_mode_evidence)
    );
    let _ = writeln!(out, "\nsources:");
    // As wide as the longest name (a live read's are long: "netlink: nf_tables ip
    // (iptables-nft)"), so the columns stay aligned.
    fn name(s: &crate::heart::outcome::InputStatus) -> &str {
        s.origin.as_deref().unwrap_or(s.source.name())
    }
    let width = report
        .sources
        .iter()
        .map(|s| name(s).chars().count())
        .max()
        .unwrap_or(0)
        .max(28);
    for s in &report.sources {
        let mut line = format!("  {:<width$} {:<8}", v(name(s)), s.status.as_str());
        if let Some(b) = s.backend {
            let _ = write!(line, " {b}");
        }
        if let Some(f) = s.family {
            let _ = write!(line, " {f}");
        }
        if let Some(n) = s.items {
            let what = match s.source {
                Input::IpVs | Input::Ipvsadm => "virtual server",
                // The owners' count is of the listeners whose process was found.
                Input::Sockets { .. } | Input::SocketOwners => "listener",
                Input::ClusterState | Input::Api => "Service port",
                Input::CiliumMap { .. } => "map entry",
                _ => "NodePort rule",
            };
            let _ = write!(line, "  {}", count_of(n, what));
        }
        if s.unparsed > 0 {
            let _ = write!(line, "  {} not understood", s.unparsed);
        }
        let _ = writeln!(out, "{}", line.trim_end());
        if s.status != InputState::Absent {
            for n in &s.notes {
                let _ = writeln!(out, "      {}", v(n));
            }
        }
    }
}

pub mod html;
mod terminal;
mod wide;

pub use terminal::{Terminal, for_terminal};
pub use wide::render_wide;

#[cfg(test)]
mod tests;
