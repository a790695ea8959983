//! `portdrift explain`'s text: what could not be checked first, then a short numbered
//! path (the steps every connection takes, then each branch with its share), the
//! outcome, the API's view beside it, and one closing sentence.
//!
//! Rule text, chain names, comments and process names come from the node: each goes
//! through [`visible`] before it is printed.

use std::fmt::Write;

use crate::heart::explain::explanation::{Explanation, Outcome, Path, PathStep, StepResult, percent};
use crate::heart::visible::visible;

/// The explanation as text, for a terminal.
pub fn render_text(e: &Explanation, node: Option<&str>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} to {}{}, from {}, {}",
        e.port,
        visible(&e.destination),
        node.map(|n| format!(" ({})", visible(n))).unwrap_or_default(),
        e.source,
        e.family
    );
    write_not_checked(&mut out, e);
    write_path(&mut out, e);
    write_outcome(&mut out, e);
    write_expected(&mut out, e);
    write_differences(&mut out, e);
    write_shadowed(&mut out, e);
    write_notes(&mut out, e);
    let _ = writeln!(out, "\n{}", summary(e));
    out
}

/// What could not be checked comes before any conclusion drawn without it.
fn write_not_checked(out: &mut String, e: &Explanation) {
    if e.not_checked.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nNot checked (the path below is promised only as far as it goes):"
    );
    for n in &e.not_checked {
        let _ = writeln!(out, "  - {}", visible(n));
    }
}

/// The steps every path shares, numbered, then each path's own steps: numbered on
/// when there is one path, under its share when there are several.
fn write_path(out: &mut String, e: &Explanation) {
    let common = common_prefix(&e.paths);
    let _ = writeln!(out, "\nPath:");
    if e.passed_over > 0 {
        let _ = writeln!(
            out,
            "      ({} rule{} about other ports, protocols or addresses passed over, not listed)",
            e.passed_over,
            if e.passed_over == 1 { "" } else { "s" }
        );
    }
    let mut n = 0;
    if let Some(first) = e.paths.first() {
        for step in first.steps[..common].iter().filter(|s| shown(s)) {
            n += 1;
            write_step(out, &format!("{n:>3}."), step);
        }
    }
    if e.paths.len() > 1 {
        let _ = writeln!(out, "      then, for new connections:");
    }
    for path in &e.paths {
        let tail = path.steps[common.min(path.steps.len())..]
            .iter()
            .filter(|s| shown(s));
        if e.paths.len() > 1 {
            let _ = writeln!(out, "      {:>6}  {}", percent(path.fraction), end_of(path));
            for step in tail {
                write_step(out, "          ", step);
            }
        } else {
            for step in tail {
                n += 1;
                write_step(out, &format!("{n:>3}."), step);
            }
            let _ = writeln!(out, "      = {}", end_of(path));
        }
    }
}

/// The outcome, the endpoints with their shares, and who listens where connections
/// are delivered to this node.
fn write_outcome(out: &mut String, e: &Explanation) {
    let _ = writeln!(out, "\nOutcome: {}", e.outcome.as_str());
    for share in &e.endpoints {
        let _ = writeln!(out, "  {:<28} {}", share.target, percent(share.fraction));
    }
    if let Some(local) = &e.local {
        let who = match (&local.listening, &local.process) {
            (None, _) => "whether anything listens was not read".to_string(),
            (Some(false), _) => "nothing listens on it".to_string(),
            (Some(true), Some(p)) => format!("{} (pid {}) listens on it", visible(&p.name), p.pid),
            (Some(true), None) => "a socket listens on it (its process was not found)".to_string(),
        };
        let _ = writeln!(out, "  delivered to this node's port {}: {who}", local.port);
    }
}

/// What the API says the port should do, when a cluster state was read.
fn write_expected(out: &mut String, e: &Explanation) {
    let Some(expected) = &e.expected else { return };
    let _ = writeln!(out, "\nThe API:");
    match &expected.service {
        Some(service) => {
            let _ = writeln!(
                out,
                "  {} (externalTrafficPolicy {}): {}",
                visible(service),
                expected.traffic_policy.as_deref().unwrap_or("Cluster"),
                expected.outcome.as_str()
            );
        }
        None => {
            let _ = writeln!(out, "  no Service owns {}: none", e.port);
        }
    }
    for share in &expected.endpoints {
        let _ = writeln!(out, "  {:<28} {}", share.target, percent(share.fraction));
    }
    if expected.uncertain {
        let _ = writeln!(
            out,
            "  (the API's endpoints for this port are not exactly known; see the scan's coverage)"
        );
    }
}

fn write_differences(out: &mut String, e: &Explanation) {
    if e.differences.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nDifferences:");
    for d in &e.differences {
        let ids = if d.findings.is_empty() {
            String::new()
        } else {
            format!(" [finding {}]", d.findings.join(", "))
        };
        let _ = writeln!(out, "  - {}{ids}", visible(&d.explanation));
    }
}

fn write_shadowed(out: &mut String, e: &Explanation) {
    if e.shadowed.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nShadowed (never sees these connections):");
    for s in &e.shadowed {
        let _ = writeln!(out, "  - {}  {}", visible(&s.at), visible(&s.rule));
        let _ = writeln!(out, "      {}", visible(&s.why));
    }
}

fn write_notes(out: &mut String, e: &Explanation) {
    if e.notes.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nNotes:");
    for n in &e.notes {
        let _ = writeln!(out, "  - {}", visible(n));
    }
}

/// Steps worth a line: policies that accept and chains not run are in the JSON only.
fn shown(s: &PathStep) -> bool {
    match s.result {
        StepResult::Matched | StepResult::Skipped => true,
        StepResult::Policy => s.does != "policy accept",
        StepResult::NotRun => true,
    }
}

fn write_step(out: &mut String, label: &str, s: &PathStep) {
    let rule = s
        .rule
        .as_deref()
        .map(|r| visible(r).into_owned())
        .unwrap_or_default();
    // The table and chain are printed already: a handle needs only its number.
    let place = match (s.line, s.handle) {
        (_, Some(h)) => format!("handle {h}"),
        _ => visible(&s.at).into_owned(),
    };
    let _ = writeln!(
        out,
        "{label} {} {} {} {}  {place}",
        s.hook,
        s.backend,
        visible(&s.table),
        visible(&s.chain),
    );
    if !rule.is_empty() {
        let _ = writeln!(out, "{}      {}", " ".repeat(label.len()), shorten(&rule, 160));
    }
    let share = s
        .share
        .map(|p| format!(" ({} of those reaching it)", percent(p)))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "{}      → {}{share}",
        " ".repeat(label.len()),
        visible(&s.does)
    );
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let cut: String = s.chars().take(max).collect();
        format!("{cut}…")
    }
}

fn end_of(path: &Path) -> String {
    match (path.outcome, &path.target) {
        (Outcome::Dnat, Some(t)) => format!("dnat to {t}"),
        (Outcome::Local, Some(t)) => format!("delivered to {t}"),
        (Outcome::Undetermined, _) => format!(
            "undetermined: {}",
            visible(path.undecided.as_deref().unwrap_or("a rule could not be decided"))
        ),
        (o, _) => o.as_str().to_string(),
    }
}

/// How many leading steps every path shares.
fn common_prefix(paths: &[Path]) -> usize {
    let Some(first) = paths.first() else { return 0 };
    let mut n = first.steps.len();
    for p in &paths[1..] {
        n = n.min(
            first
                .steps
                .iter()
                .zip(&p.steps)
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    n
}

/// The closing sentence.
pub fn summary(e: &Explanation) -> String {
    let lead = if e.complete {
        String::new()
    } else {
        "Not every rule could be checked (see above), so this is not certain: ".to_string()
    };
    let what = match e.outcome {
        Outcome::Dnat => {
            let n = e.endpoints.len();
            let spread = if n == 1 {
                format!("all to {}", e.endpoints[0].target)
            } else if e
                .endpoints
                .iter()
                .all(|s| (s.fraction - e.endpoints[0].fraction).abs() < 1e-3)
            {
                format!("{} each over {n} endpoints", percent(e.endpoints[0].fraction))
            } else {
                format!("unevenly over {n} endpoints")
            };
            format!("new connections to {} are DNATed, {spread}", e.port)
        }
        Outcome::Drop => format!("new connections to {} are dropped", e.port),
        Outcome::Reject => format!("new connections to {} are rejected", e.port),
        Outcome::Local => format!("new connections to {} are delivered to this node", e.port),
        Outcome::None => format!("no rule takes new connections to {} and nothing listens", e.port),
        Outcome::Undetermined => format!("where new connections to {} go cannot be determined", e.port),
    };
    let api = match &e.expected {
        None => ", and no cluster state was read to compare with".to_string(),
        Some(x) if e.differences.is_empty() && x.uncertain => {
            ", matching what the API says as far as its endpoints are known".to_string()
        }
        Some(_) if e.differences.is_empty() => ", as the API says".to_string(),
        Some(_) => format!(
            ", which differs from the API in {} way{}",
            e.differences.len(),
            if e.differences.len() == 1 { "" } else { "s" }
        ),
    };
    format!("{lead}{what}{api}.")
}
