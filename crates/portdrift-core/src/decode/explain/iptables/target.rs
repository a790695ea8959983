//! A rule's `-j TARGET [options]` → the action explain follows.

use std::borrow::Cow;

use crate::heart::explain::model::Action;

use super::values::{dnat_to, mark_value};

/// The action of `-j TARGET [options]`.
pub(super) fn target_action(target: &str, goto: bool, options: &[Cow<'_, str>]) -> Action {
    let option = |flag: &str| option_value(options, flag);
    match target {
        "ACCEPT" => Action::Accept,
        "DROP" => Action::Drop,
        "REJECT" => Action::Reject,
        "RETURN" => Action::Return,
        "DNAT" => match option("--to-destination").and_then(dnat_to) {
            Some(to) => Action::Dnat(to),
            None => Action::Unknown(format!("DNAT {}", options.join(" "))),
        },
        "REDIRECT" => redirect_action(option("--to-ports")),
        "MASQUERADE" | "SNAT" => Action::SourceNat,
        "MARK" => mark_action(options),
        // Side effects that never change where a connection goes.
        "LOG" | "NFLOG" | "ULOG" | "TRACE" | "CT" | "NOTRACK" | "CHECKSUM" | "TCPMSS" | "AUDIT"
        | "NFACCT" => Action::Continue,
        "CONNMARK"
            if option("--restore-mark").is_none() && !options.iter().any(|w| w == "--restore-mark") =>
        {
            Action::Continue
        }
        // A chain (resolved once every chain is declared) or a target not modelled.
        other if goto => Action::Unknown(format!("goto {other}")),
        other => Action::Unknown(other.to_string()),
    }
}

/// The word after `flag` among a target's options.
fn option_value<'o>(options: &'o [Cow<'_, str>], flag: &str) -> Option<&'o str> {
    options
        .iter()
        .position(|w| w == flag)
        .and_then(|at| options.get(at + 1))
        .map(|w| w.as_ref())
}

/// `-j REDIRECT [--to-ports P[-Q]]`: to this node, on the first port of the range.
fn redirect_action(to_ports: Option<&str>) -> Action {
    let Some(p) = to_ports else {
        return Action::Redirect(None);
    };
    match p.split(['-', ':']).next().and_then(|p| p.parse().ok()) {
        Some(p) => Action::Redirect(Some(p)),
        None => Action::Unknown(format!("REDIRECT --to-ports {p}")),
    }
}

/// `-j MARK` with any of its forms, as the one `mark = (mark & !mask) ^ value` it is.
fn mark_action(options: &[Cow<'_, str>]) -> Action {
    let mark = |flag: &str| option_value(options, flag).and_then(mark_value);
    if let Some(v) = mark("--set-xmark") {
        Action::SetMark {
            value: v.0,
            mask: v.1,
        }
    } else if let Some((v, m)) = mark("--set-mark") {
        Action::SetMark {
            value: v,
            mask: m | v,
        }
    } else if let Some((v, _)) = mark("--or-mark") {
        Action::SetMark { value: v, mask: v }
    } else if let Some((v, _)) = mark("--xor-mark") {
        Action::SetMark { value: v, mask: 0 }
    } else if let Some((v, _)) = mark("--and-mark") {
        Action::SetMark { value: 0, mask: !v }
    } else {
        Action::Unknown(format!("MARK {}", options.join(" ")))
    }
}
