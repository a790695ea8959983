//! The human report: what an engineer reads at 3 a.m.
//!
//! Grouped by port, most severe first; each finding is one line saying what is wrong,
//! then the evidence (rule and where it is), and the message says what to do. Info
//! findings are listed when few and counted when many, so leftovers never bury the
//! one line that matters.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::outcome::{ScanReport, SourceState};
use crate::heart::visible::{into_visible_lines, visible as v};
use crate::heart::words::count_of;

/// Above this many info findings, they are summarised by kind.
const INFO_LISTED: usize = 20;

/// Renders the report as text. Every field that came from a dump, a process or the
/// API is escaped ([`v`]), and the whole once more, so no control byte reaches the
/// terminal.
pub fn render_text(report: &ScanReport) -> String {
    let mut out = String::new();
    render_verdict(&mut out, report);
    let s = report.summary;
    let many_info = s.info > INFO_LISTED;
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
    for ((_, title), findings) in ordered {
        let services: Vec<&str> = {
            let mut v: Vec<&str> = findings.iter().filter_map(|f| f.service.as_deref()).collect();
            v.sort();
            v.dedup();
            v
        };
        let _ = writeln!(
            out,
            "\n{title}{}",
            if services.is_empty() {
                String::new()
            } else {
                format!("  ({})", v(&services.join(", ")))
            }
        );
        for f in findings {
            render_finding(&mut out, f);
        }
    }
    if many_info {
        let mut by_kind: BTreeMap<Kind, usize> = BTreeMap::new();
        for f in report.findings.iter().filter(|f| f.severity == Severity::Info) {
            *by_kind.entry(f.kind).or_default() += 1;
        }
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
    let s = report.summary;
    let mut counts = format!("{} critical, {} warning, {} info", s.critical, s.warning, s.info);
    if s.accepted > 0 {
        let _ = write!(counts, ", {} accepted", s.accepted);
    }
    let coverage = &report.coverage;
    if coverage.complete {
        let _ = writeln!(out, "portdrift: node {node}: {counts}");
        if report.findings.is_empty() {
            let _ = writeln!(
                out,
                "\nNo drift: this node's NodePort rules and listeners match the cluster state."
            );
        }
    } else {
        let _ = writeln!(
            out,
            "portdrift: node {node}: INCOMPLETE CHECK, not an all-clear. Not checked:"
        );
        for sentence in &coverage.not_checked {
            let _ = writeln!(out, "  - {}", v(sentence));
        }
        let _ = writeln!(out, "\nIn what was checked: {counts}");
        if report.findings.is_empty() {
            let _ = writeln!(out, "\nNothing was found in what could be checked.");
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
        let at = f.rule_source.as_deref().unwrap_or("");
        let _ = writeln!(out, "           rule  {}  {}", v(at), v(rule));
    } else if let Some(at) = &f.rule_source {
        let _ = writeln!(out, "           at    {}", v(at));
    }
    if let Some(p) = &f.process {
        let mut who = format!("{} (pid {}", v(&p.name), p.pid);
        if let Some(uid) = p.uid {
            let _ = write!(who, ", uid {uid}");
        }
        if let Some(exe) = &p.exe {
            let _ = write!(who, ", {}", v(exe));
        }
        who.push(')');
        if let Some(c) = &p.container {
            let _ = write!(who, " container {}", v(c));
        }
        if let Some(pod) = &p.pod {
            let _ = write!(who, " pod {}", v(pod));
        }
        let _ = writeln!(out, "           owner {who}");
        if let Some(args) = &p.cmdline {
            let _ = writeln!(out, "           args  {}", v(args));
        }
    }
    for e in &f.evidence {
        let _ = writeln!(out, "           {}", v(e));
    }
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
    fn name(s: &crate::heart::outcome::SourceStatus) -> &str {
        s.origin.as_deref().unwrap_or(&s.source)
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
            let what = if s.source == "proc/net/ip_vs" || s.source == "ipvsadm.txt" {
                "virtual server"
            } else if s.source.starts_with("proc/") {
                "listener"
            } else if s.source == "cluster.json" {
                "Service port"
            } else if s.source.starts_with("bpf/") {
                "map entry"
            } else {
                "NodePort rule"
            };
            let _ = write!(line, "  {}", count_of(n, what));
        }
        if s.unparsed > 0 {
            let _ = write!(line, "  {} not understood", s.unparsed);
        }
        let _ = writeln!(out, "{}", line.trim_end());
        if s.status != SourceState::Absent {
            for n in &s.notes {
                let _ = writeln!(out, "      {}", v(n));
            }
        }
    }
}

mod terminal;
mod wide;

pub use terminal::{Terminal, for_terminal};
pub use wide::render_wide;

#[cfg(test)]
mod tests;
