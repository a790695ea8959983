//! `-o wide`: one line per finding in aligned columns, for `grep`, `sort` and a quick
//! look at many findings; the verdict comes first, as in the report.

use std::fmt::Write;

use crate::heart::finding::Finding;
use crate::heart::outcome::ScanReport;
use crate::heart::visible::{into_visible_lines, visible as v};

// AT comes last, as `ps` puts COMMAND: a rule on the live node is cited in words
// (`iptables-nft table nat chain KUBE-SEP-X rule 2 handle 124`), and the columns before
// it stay split by whitespace.
const HEADER: [&str; 9] = [
    "SEVERITY", "KIND", "PORT", "FAMILY", "BACKEND", "SERVICE", "TARGET", "ID", "AT",
];

/// Renders the verdict, then every finding (info included) a line each, most severe
/// first, then by port. An empty field is `-`; every column but the last is one word.
pub fn render_wide(report: &ScanReport) -> String {
    let mut out = String::new();
    super::render_verdict(&mut out, report);
    if report.findings.is_empty() {
        return into_visible_lines(out);
    }
    let mut findings: Vec<&Finding> = report.findings.iter().collect();
    findings.sort_by_key(|f| (f.accepted.is_some(), f.severity, f.port, f.protocol));
    let rows: Vec<[String; 9]> = findings.iter().map(|f| row(f)).collect();
    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    out.push('\n');
    let header = HEADER.map(str::to_string);
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    into_visible_lines(out)
}

fn row(f: &Finding) -> [String; 9] {
    let or_dash = |s: Option<String>| s.filter(|s| !s.is_empty()).unwrap_or_else(|| "-".to_string());
    let severity = match &f.accepted {
        Some(_) => "ACCEPTED".to_string(),
        None => f.severity.as_str().to_uppercase(),
    };
    let port = match (f.protocol, f.port) {
        (Some(proto), Some(port)) => format!("{proto}/{port}"),
        (None, Some(port)) => port.to_string(),
        _ => "-".to_string(),
    };
    [
        severity,
        f.kind.to_string(),
        port,
        or_dash(f.family.map(|x| x.to_string())),
        or_dash(f.backend.map(|x| x.to_string())),
        // No space may split a column: a field from the API or a dump keeps its
        // spaces escaped.
        or_dash(f.service.as_deref().map(cell)),
        or_dash(f.target.as_deref().map(cell)),
        f.id(),
        or_dash(f.rule_source.as_ref().map(|at| v(&at.to_string()).into_owned())),
    ]
}

/// A field as one cell: escaped, and its spaces shown as `\x20` so that the columns
/// stay columns.
fn cell(text: &str) -> String {
    v(text).replace(' ', "\\x20")
}
