//! The agent's page (`GET /`): the last scan as server-rendered HTML, for a person who
//! has `kubectl port-forward`ed to the agent during an incident.
//!
//! It says what the text report says, from the same [`ReportVerdict`] and [`group_by_port`]:
//! what could not be checked comes first, and "No drift" only on a complete check that
//! found nothing. Two views, one per listener: [`View::Full`] (the findings listener:
//! every finding with its Service, target, rule and process) and [`View::CountsOnly`]
//! (the node's network: only what `/metrics` shows there, counts by kind and severity,
//! never a pod's address, a rule or a process).
//!
//! No script, no form, nothing loaded from elsewhere: the page is HTML and a small
//! inline style sheet, served under a Content-Security-Policy that allows only that.
//! Every string that came from a dump, the API or a process is escaped twice over
//! ([`escape`]): its control characters made visible as [`crate::heart::visible`] does,
//! then `& < > " '` as entities, so a rule comment holding `<script>` is shown as text.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::outcome::{InputState, ScanReport};
use crate::heart::render::{
    INCOMPLETE, NO_DRIFT, NOTHING_FOUND_IN_CHECKED, PortGroup, ReportVerdict, counts, describe_owner,
    group_by_port,
};
use crate::heart::visible::visible;
use crate::heart::words::count_of;

/// Where the documentation is read.
pub const DOCS_URL: &str = concat!(env!("CARGO_PKG_REPOSITORY"), "/tree/main/docs");

const TROUBLESHOOTING_URL: &str = concat!(env!("CARGO_PKG_REPOSITORY"), "/blob/main/docs/troubleshooting.md");

/// Which listener the page is served on, and so how much it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The findings listener (`--findings-listen`, the node's loopback by default),
    /// which serves `/findings`: every finding, with the Service, target, rule and
    /// process it names, and what was not checked.
    Full,
    /// The node's network (`--listen`): what `/metrics` shows there (the verdict, the
    /// coverage's state, counts by kind and severity) and nothing that names a pod, an
    /// address, a rule or a process.
    CountsOnly,
}

/// What the page says besides the report, all passed in: the heart reads no clock.
#[derive(Debug, Clone, Copy)]
pub struct PageContext {
    pub view: View,
    /// When the page is rendered.
    pub now: jiff::Timestamp,
    /// When the scan that made the report finished.
    pub scanned_at: jiff::Timestamp,
    /// What `/readyz` answers now.
    pub ready: bool,
}

/// `s` safe in HTML text and in a quoted attribute value: every control character made
/// visible (`\x1b`, as [`visible`]), then `&`, `<`, `>`, `"` and `'` as entities.
/// Borrowed when there is nothing to escape.
pub fn escape(s: &str) -> Cow<'_, str> {
    let s = visible(s);
    if !s.contains(['&', '<', '>', '"', '\'']) {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

use escape as e;

const STYLE: &str = "\
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em;color:#1b1b1b;background:#fff;max-width:110em}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.15em;margin:1.4em 0 .4em}h3{font-size:1em;margin:1.2em 0 .3em}
nav a{margin-right:1em}
.verdict{border-left:6px solid #506070;padding:.5em 1em;margin:1em 0;background:#f5f6f7}
.verdict h2{margin:.2em 0}
.v-ok{border-color:#1a7f37;background:#eef8f0}.v-critical{border-color:#b00020;background:#fdeef0}
.v-warning,.v-incomplete{border-color:#b35900;background:#fff6e5}
table{border-collapse:collapse;margin:.4em 0;width:100%}
th,td{border:1px solid #d4d4d4;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px/1.35 ui-monospace,monospace;white-space:pre-wrap;overflow-wrap:anywhere}code.t{white-space:nowrap}
.sev{font-weight:bold;text-transform:uppercase;font-size:.85em}
.critical{color:#b00020}.warning{color:#b35900}.info{color:#506070}.accepted{color:#6b6b6b}
tr.accepted td{background:#f7f7f7;color:#555}
.muted,small{color:#666}
";

/// The page of `report`, for `context.view`'s listener.
pub fn render_page(report: &ScanReport, context: &PageContext) -> String {
    let mut out = String::with_capacity(8 * 1024);
    let node = report.node.as_deref().unwrap_or("(node unknown)");
    head(&mut out, &format!("portdrift: node {}", e(node)), false);
    let _ = writeln!(out, "<header><h1>portdrift: node {}</h1>", e(node));
    nav(&mut out, context.view);
    let ago = context.now.as_second() - context.scanned_at.as_second();
    let _ = writeln!(
        out,
        "<p class=\"muted\">Last scan finished {} ({} ago). Agent {}.</p></header>",
        jiff::Timestamp::from_second(context.scanned_at.as_second()).unwrap_or(context.scanned_at),
        age(ago),
        if context.ready {
            "ready"
        } else {
            "not ready (<a href=\"/readyz\">/readyz</a>: the API view is not synced or not current, or no recent scan succeeded)"
        }
    );
    verdict(&mut out, report, context.view);
    match context.view {
        View::Full => {
            findings(&mut out, report);
            coverage(&mut out, report, true);
            sources(&mut out, report);
        }
        View::CountsOnly => {
            counts_by_kind(&mut out, report);
            coverage(&mut out, report, false);
            let _ = writeln!(
                out,
                "<p class=\"muted\">This listener is on the node's network and shows counts only. \
                 Each finding, with its Service, pods' addresses, rules and processes, and what could not be checked, \
                 is on the agent's <code>--findings-listen</code> address (the node's loopback by default), \
                 with <code>/findings</code> and <code>/explain</code>: reach it with <code>kubectl port-forward</code>.</p>"
            );
        }
    }
    foot(&mut out);
    out
}

/// The page before the first scan: the agent is starting. It reloads itself every 5 s
/// (a `<meta>` refresh, no script).
pub fn render_starting(view: View) -> String {
    let mut out = String::with_capacity(2 * 1024);
    head(&mut out, "portdrift: starting", true);
    let _ = writeln!(out, "<header><h1>portdrift: starting</h1>");
    nav(&mut out, view);
    let _ = writeln!(out, "</header>");
    let _ = writeln!(
        out,
        "<section class=\"verdict v-incomplete\"><h2>No scan has completed yet</h2>\
         <p>The agent is starting: it scans once its view of the API server is synced. \
         Nothing is known about this node yet, so nothing is claimed. This page reloads every 5 seconds.</p></section>"
    );
    foot(&mut out);
    out
}

fn head(out: &mut String, title: &str, refresh: bool) {
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"referrer\" content=\"no-referrer\">"
    );
    if refresh {
        let _ = writeln!(out, "<meta http-equiv=\"refresh\" content=\"5\">");
    }
    let _ = writeln!(
        out,
        "<title>{title}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>"
    );
}

fn nav(out: &mut String, view: View) {
    let _ = write!(out, "<nav><a href=\"/metrics\">/metrics</a>");
    if view == View::Full {
        let _ = write!(out, "<a href=\"/findings\">/findings</a>");
    }
    let _ = writeln!(
        out,
        "<a href=\"/healthz\">/healthz</a><a href=\"/readyz\">/readyz</a>\
         <a href=\"{DOCS_URL}\">docs</a><a href=\"{TROUBLESHOOTING_URL}\">troubleshooting</a></nav>"
    );
}

fn foot(out: &mut String) {
    let _ = writeln!(
        out,
        "<footer><p class=\"muted\">portdrift {}. This page runs no script; \
         what it shows from the node and the cluster is escaped, never interpreted.</p></footer>\n</body>\n</html>",
        env!("CARGO_PKG_VERSION")
    );
}

/// `12 s`, `4 min 3 s`, `2 h 5 min`.
fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// The worst severity of findings that count (not accepted), as a CSS class.
fn worst(report: &ScanReport) -> &'static str {
    let s = report.summary;
    if s.critical > 0 {
        "critical"
    } else if s.warning > 0 {
        "warning"
    } else {
        "info"
    }
}

/// What the text report says at its top, in the same order: what was not checked
/// first. Counts only: how many things were not checked, not what (the sentences name
/// Services and sources' errors).
fn verdict(out: &mut String, report: &ScanReport, view: View) {
    let counts = counts(&report.summary);
    match ReportVerdict::of(report) {
        ReportVerdict::NoDrift => {
            let _ = writeln!(
                out,
                "<section class=\"verdict v-ok\"><h2>No drift</h2><p>{}</p><p>{counts}</p></section>",
                e(NO_DRIFT)
            );
        }
        ReportVerdict::Found => {
            let _ = writeln!(
                out,
                "<section class=\"verdict v-{}\"><h2>Findings: {counts}</h2></section>",
                worst(report)
            );
        }
        ReportVerdict::Incomplete => {
            let not_checked = &report.coverage.not_checked;
            let _ = writeln!(
                out,
                "<section class=\"verdict v-incomplete\"><h2>{}</h2>",
                e(INCOMPLETE)
            );
            match view {
                View::Full => {
                    let _ = writeln!(out, "<p>Not checked:</p>\n<ul>");
                    for sentence in not_checked {
                        let _ = writeln!(out, "<li>{}</li>", e(sentence));
                    }
                    let _ = writeln!(out, "</ul>");
                }
                View::CountsOnly => {
                    let _ = writeln!(
                        out,
                        "<p>{} could not be checked; the findings listener says what.</p>",
                        count_of(not_checked.len(), "thing")
                    );
                }
            }
            let _ = writeln!(out, "<p>In what was checked: {counts}</p>");
            if report.findings.is_empty() {
                let _ = writeln!(out, "<p>{}</p>", e(NOTHING_FOUND_IN_CHECKED));
            }
            let _ = writeln!(out, "</section>");
        }
    }
}

/// The findings by port, as the text report groups them, each port with a link to
/// `/explain` for it.
fn findings(out: &mut String, report: &ScanReport) {
    if report.findings.is_empty() {
        return;
    }
    let grouped = group_by_port(report);
    let _ = writeln!(out, "<h2>Findings by port</h2>");
    for group in &grouped.groups {
        port_group(out, group);
    }
    if let Some(by_kind) = &grouped.info_by_kind {
        let parts: Vec<String> = by_kind.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let _ = writeln!(
            out,
            "<p class=\"info\">info: {} (harmless leftovers, not listed here; <a href=\"/findings\">/findings</a> lists them)</p>",
            parts.join(", ")
        );
    }
}

fn port_group(out: &mut String, group: &PortGroup<'_>) {
    let _ = write!(out, "<section class=\"port\"><h3");
    if let (Some(protocol), Some(port)) = (group.protocol, group.port) {
        let _ = write!(out, " id=\"{protocol}-{port}\"");
    }
    let _ = write!(out, ">{}", e(&group.title));
    if !group.services.is_empty() {
        let _ = write!(out, " <small>({})</small>", e(&group.services.join(", ")));
    }
    let _ = writeln!(out, "</h3>");
    if let (Some(protocol), Some(port)) = (group.protocol, group.port) {
        let _ = writeln!(
            out,
            "<p><a href=\"/explain?port={protocol}/{port}&amp;format=text\">explain {protocol}/{port}</a>: \
             where a new connection to this port goes on this node now</p>"
        );
    }
    let _ = writeln!(
        out,
        "<table><thead><tr><th>severity</th><th>kind</th><th>service</th><th>target</th><th>rule</th><th>message</th></tr></thead><tbody>"
    );
    for f in &group.findings {
        finding_row(out, f);
    }
    let _ = writeln!(out, "</tbody></table></section>");
}

fn finding_row(out: &mut String, f: &Finding) {
    let severity = f.severity.as_str();
    match &f.accepted {
        Some(_) => {
            let _ = write!(
                out,
                "<tr class=\"accepted\"><td><span class=\"sev accepted\">accepted</span> <small>({severity})</small></td>"
            );
        }
        None => {
            let _ = write!(
                out,
                "<tr><td><span class=\"sev {severity}\">{severity}</span></td>"
            );
        }
    }
    let mut context = Vec::new();
    if let Some(b) = f.backend {
        context.push(b.as_str());
    }
    if let Some(fam) = f.family {
        context.push(fam.as_str());
    }
    let _ = write!(out, "<td>{}", f.kind);
    if !context.is_empty() {
        let _ = write!(out, "<br><small>{}</small>", context.join(" "));
    }
    let _ = write!(out, "</td><td>");
    match &f.service {
        Some(service) => {
            let _ = write!(out, "{}", e(service));
            if let Some(name) = f.service_port.as_deref().filter(|n| !n.is_empty()) {
                let _ = write!(out, "<br><small>port {}</small>", e(name));
            }
        }
        None => out.push_str("<span class=\"muted\">none</span>"),
    }
    let _ = write!(out, "</td><td>");
    match &f.target {
        Some(target) => {
            let _ = write!(out, "<code class=\"t\">{}</code>", e(target));
        }
        None => out.push_str("<span class=\"muted\">none</span>"),
    }
    let _ = write!(out, "</td><td>");
    if let Some(rule) = &f.rule {
        let _ = write!(out, "<code>{}</code>", e(rule));
    }
    if let Some(at) = &f.rule_source {
        let _ = write!(out, "<br><small>at {}</small>", e(&at.to_string()));
    }
    let _ = write!(out, "</td><td>{}", e(&f.message));
    details(out, f);
    let _ = writeln!(out, "</td></tr>");
}

/// What the text report says under a finding's message: its acceptance, its process,
/// its evidence.
fn details(out: &mut String, f: &Finding) {
    if let Some(a) = &f.accepted {
        let _ = write!(out, "<br><small>accepted: {}", e(&a.reason));
        if let Some(until) = &a.expires {
            let _ = write!(out, " (until {})", e(until));
        }
        let _ = write!(out, "; by {}</small>", e(&a.by));
    }
    if f.on_stale_cluster_state {
        let _ = write!(
            out,
            "<br><small>drawn from a cluster state that is no longer current</small>"
        );
    }
    if let Some(p) = &f.process {
        let _ = write!(out, "<br><small>owner {}</small>", describe_owner(p, e));
        if let Some(args) = &p.cmdline {
            let _ = write!(out, "<br><small>args <code>{}</code></small>", e(args));
        }
    }
    for line in &f.evidence {
        let _ = write!(out, "<br><small>{}</small>", e(line));
    }
}

/// Counts by kind and severity, as `/metrics` has them (`portdrift_findings_by_severity`,
/// `portdrift_findings_accepted`).
fn counts_by_kind(out: &mut String, report: &ScanReport) {
    // critical, warning, info, accepted
    let mut by_kind: BTreeMap<Kind, [usize; 4]> = BTreeMap::new();
    for f in &report.findings {
        let at = match (&f.accepted, f.severity) {
            (Some(_), _) => 3,
            (None, Severity::Critical) => 0,
            (None, Severity::Warning) => 1,
            (None, Severity::Info) => 2,
        };
        by_kind.entry(f.kind).or_default()[at] += 1;
    }
    if by_kind.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<h2>Findings by kind</h2>\n<table><thead><tr><th>kind</th><th>critical</th><th>warning</th><th>info</th><th>accepted</th></tr></thead><tbody>"
    );
    for (kind, n) in by_kind {
        let _ = write!(out, "<tr><td>{kind}</td>");
        for (count, class) in n.iter().zip(["critical", "warning", "info", "accepted"]) {
            // Zeros stay grey, so the eye finds the counts that matter.
            let class = if *count == 0 { "muted" } else { class };
            let _ = write!(out, "<td class=\"n {class}\">{count}</td>");
        }
        let _ = writeln!(out, "</tr>");
    }
    let _ = writeln!(out, "</tbody></table>");
}

/// The proxy mode and the cluster state; on the findings listener, what the mode was
/// decided from too.
fn coverage(out: &mut String, report: &ScanReport, full: bool) {
    let c = &report.coverage;
    let _ = write!(
        out,
        "<h2>Coverage</h2>\n<table><tbody><tr><th>proxy mode</th><td>{}",
        c.proxy_mode
    );
    if full && !c.proxy_mode_evidence.is_empty() {
        let _ = write!(out, " <small>({})</small>", e(&c.proxy_mode_evidence));
    }
    let _ = writeln!(
        out,
        "</td></tr>\n<tr><th>cluster state</th><td>{}</td></tr>\n<tr><th>checked</th><td>{}</td></tr></tbody></table>",
        if c.cluster_state {
            "read in full, and current"
        } else {
            "not read in full, or not current"
        },
        if c.complete {
            "everything, on complete inputs".to_string()
        } else {
            format!(
                "not everything: {} not checked",
                count_of(c.not_checked.len(), "thing")
            )
        }
    );
}

/// What each source gave, on the findings listener (its notes name paths and errors).
fn sources(out: &mut String, report: &ScanReport) {
    if report.sources.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<h2>Sources</h2>\n<table><thead><tr><th>source</th><th>status</th><th>items</th><th>not understood</th><th>notes</th></tr></thead><tbody>"
    );
    for s in &report.sources {
        let name = s.origin.as_deref().unwrap_or(s.source.name());
        let _ = write!(out, "<tr><td>{}", e(name));
        let context: Vec<&str> = s
            .backend
            .map(|b| b.as_str())
            .into_iter()
            .chain(s.family.map(|f| f.as_str()))
            .collect();
        if !context.is_empty() {
            let _ = write!(out, "<br><small>{}</small>", context.join(" "));
        }
        let _ = write!(
            out,
            "</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>",
            s.status.as_str(),
            s.items.map(|n| n.to_string()).unwrap_or_default(),
            s.unparsed
        );
        // As the text report: an absent source's notes say only why it is absent.
        let notes = if s.status == InputState::Absent {
            &[][..]
        } else {
            &s.notes[..]
        };
        for (i, note) in notes.iter().enumerate() {
            if i > 0 {
                out.push_str("<br>");
            }
            let _ = write!(out, "<small>{}</small>", e(note));
        }
        let _ = writeln!(out, "</td></tr>");
    }
    let _ = writeln!(out, "</tbody></table>");
}

#[cfg(test)]
mod tests;
