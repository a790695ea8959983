//! `iptables-save` / `ip6tables-save` text → explain's tables: every chain of every
//! table, each rule's matches as conditions and its target as an action.
//!
//! Matches this reader does not know become [`Cond::Unknown`] with their module's
//! name, so the evaluator stops at them and says which rule it could not decide.

use std::borrow::Cow;
use std::io::{self, BufRead};
use std::net::IpAddr;

// FxHash: chain names are hashed once per rule line; SipHash's DoS resistance buys
// nothing for a dump read from the local kernel.
use rustc_hash::FxHashMap;

use crate::decode::iptables::tokens::tokens;
use crate::decode::lines::BoundedLines;
use crate::heart::explain::model::{
    Action, BaseChain, Chain, ChainType, Cond, CtState, DnatTo, Hook, Net, Rule, RulePlace, Rulesets, Side,
    Table,
};
use crate::heart::model::{Backend, Family, Protocol};

/// Reads one backend's dump. Only I/O fails; what cannot be read is a gap.
pub fn parse_save<R: BufRead>(
    reader: R,
    origin: &str,
    backend: Backend,
    family: Family,
) -> io::Result<Rulesets> {
    let mut out = Rulesets::default();
    let mut open: Option<Table> = None;
    // The open table's chains by name: a large node's nat table has 50,000 of them.
    let mut index: FxHashMap<String, usize> = FxHashMap::default();
    let mut lines = BoundedLines::new(reader);
    while let Some(line) = lines.next_line()? {
        let number = line.number;
        if line.truncated {
            out.gaps
                .push(format!("{origin}:{number}: the line is too long to read"));
            continue;
        }
        let Ok(text) = std::str::from_utf8(line.bytes) else {
            out.gaps.push(format!("{origin}:{number}: not UTF-8 text"));
            continue;
        };
        let text = text.trim_end_matches([' ', '\t', '\r']);
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        if let Some(name) = text.strip_prefix('*') {
            if let Some(t) = open.take() {
                out.gaps.push(format!("{origin}: table {} has no COMMIT", t.name));
                out.tables.push(t);
            }
            index.clear();
            open = Some(Table {
                backend,
                family,
                name: name.to_string(),
                origin: origin.to_string(),
                chains: Vec::new(),
                sets: Vec::new(),
            });
            continue;
        }
        let Some(table) = open.as_mut() else {
            out.gaps
                .push(format!("{origin}:{number}: a line outside any table"));
            continue;
        };
        if text == "COMMIT" {
            out.tables.extend(open.take());
            continue;
        }
        if let Some(decl) = text.strip_prefix(':') {
            let mut words = decl.split(' ');
            let name = words.next().unwrap_or("");
            let policy = words.next().unwrap_or("-");
            let base = base_chain(&table.name, name, policy);
            if name.is_empty() || (policy != "-" && base.is_none() && !known_builtin(name)) {
                out.gaps
                    .push(format!("{origin}:{number}: an unreadable chain declaration"));
                continue;
            }
            index.insert(name.to_string(), table.chains.len());
            table.chains.push(Chain {
                name: name.to_string(),
                base,
                rules: Vec::new(),
            });
            continue;
        }
        match read_rule(text, number) {
            Some((chain, rule)) => match index.get(chain) {
                Some(&c) => table.chains[c].rules.push(rule),
                None => out.gaps.push(format!(
                    "{origin}:{number}: a rule in the undeclared chain {chain}"
                )),
            },
            None => out.gaps.push(format!("{origin}:{number}: not a rule line")),
        }
    }
    if let Some(t) = open {
        out.gaps.push(format!(
            "{origin}: table {} has no COMMIT: the dump is cut short",
            t.name
        ));
        out.tables.push(t);
    }
    resolve_jumps(&mut out.tables);
    Ok(out)
}

fn known_builtin(name: &str) -> bool {
    matches!(
        name,
        "PREROUTING" | "INPUT" | "FORWARD" | "OUTPUT" | "POSTROUTING"
    )
}

/// The hook and priority the kernel gives each table's built-in chains
/// (`NF_IP_PRI_*`); the nat table's PREROUTING and OUTPUT translate destinations.
fn base_chain(table: &str, chain: &str, policy: &str) -> Option<BaseChain> {
    if policy == "-" {
        return None;
    }
    let hook = Hook::parse(chain)?;
    let (priority, kind) = match table {
        "raw" => (-300, ChainType::Filter),
        "mangle" => (-150, ChainType::Route),
        "nat" => match hook {
            Hook::Prerouting | Hook::Output => (-100, ChainType::Nat),
            _ => (100, ChainType::Nat),
        },
        "filter" => (0, ChainType::Filter),
        "security" => (50, ChainType::Filter),
        _ => return None,
    };
    Some(BaseChain {
        hook,
        priority,
        kind,
        accepts: policy != "DROP",
    })
}

/// Targets named like a chain of the table are jumps; the reader cannot know while a
/// rule is read before its target chain's declaration.
fn resolve_jumps(tables: &mut [Table]) {
    for table in tables {
        let names: std::collections::HashSet<String> = table.chains.iter().map(|c| c.name.clone()).collect();
        for chain in &mut table.chains {
            for rule in &mut chain.rules {
                if let Action::Unknown(target) = &rule.action {
                    let (goto, name) = match target.strip_prefix("goto ") {
                        Some(n) => (true, n),
                        None => (false, target.strip_prefix("jump ").unwrap_or(target)),
                    };
                    if names.contains(name) {
                        rule.action = if goto {
                            Action::Goto(name.to_string())
                        } else {
                            Action::Jump(name.to_string())
                        };
                    }
                }
            }
        }
    }
}

/// `-A CHAIN spec` → the chain and its rule.
fn read_rule(line: &str, number: u32) -> Option<(&str, Rule)> {
    let rest = line.strip_prefix("-A ")?;
    let (chain, spec) = rest.split_once(' ').unwrap_or((rest, ""));
    let mut conds = Vec::new();
    let mut comment = None;
    let mut action = Action::Continue;
    let mut words: Vec<Cow<'_, str>> = Vec::new();
    for word in tokens(spec) {
        match word {
            Ok(w) => words.push(w),
            Err(_) => {
                conds.push(Cond::Unknown("an unterminated quote".to_string()));
                break;
            }
        }
    }
    let mut module = String::new();
    let mut negate = false;
    let mut i = 0;
    let next = |i: &mut usize| -> Option<&str> {
        *i += 1;
        words.get(*i).map(|w| w.as_ref())
    };
    while i < words.len() {
        let word = words[i].as_ref();
        let negated = std::mem::take(&mut negate);
        match word {
            "!" => negate = true,
            "-m" | "--match" => {
                module = next(&mut i).unwrap_or("").to_string();
                if let Some(c) = module_cond(&module) {
                    conds.push(c);
                }
            }
            "-p" | "--protocol" => {
                let p = next(&mut i).unwrap_or("");
                if !(p == "all" || p == "0") {
                    conds.push(Cond::Protocol {
                        protocol: Protocol::parse(p),
                        negated,
                    });
                }
            }
            "-s" | "--source" | "-d" | "--destination" => {
                let side = if word.starts_with("-s") || word == "--source" {
                    Side::Source
                } else {
                    Side::Destination
                };
                let value = next(&mut i).unwrap_or("");
                let nets: Option<Vec<Net>> = value.split(',').map(Net::parse).collect();
                conds.push(match nets {
                    Some(nets) => Cond::Addr { side, nets, negated },
                    None => Cond::Unknown(format!("{word} {value}")),
                });
            }
            "-i" | "--in-interface" | "-o" | "--out-interface" => {
                let inbound = word == "-i" || word == "--in-interface";
                let name = next(&mut i).unwrap_or("").to_string();
                conds.push(Cond::Interface {
                    inbound,
                    name,
                    negated,
                });
            }
            "--dport"
            | "--destination-port"
            | "--sport"
            | "--source-port"
            | "--dports"
            | "--sports"
            | "--destination-ports"
            | "--source-ports"
            | "--ports" => {
                let side = if word.starts_with("--s") {
                    Side::Source
                } else {
                    Side::Destination
                };
                let value = next(&mut i).unwrap_or("");
                match port_ranges(value) {
                    Some(ranges) if word != "--ports" => conds.push(Cond::Port {
                        side,
                        ranges,
                        negated,
                    }),
                    _ => conds.push(Cond::Unknown(format!("{word} {value}"))),
                }
            }
            "--dst-type" | "--src-type" => {
                let side = if word == "--dst-type" {
                    Side::Destination
                } else {
                    Side::Source
                };
                let value = next(&mut i).unwrap_or("");
                let types: Vec<&str> = value.split(',').collect();
                conds.push(if types.iter().all(|t| t.eq_ignore_ascii_case("LOCAL")) {
                    Cond::AddrLocal {
                        side,
                        local: true,
                        negated,
                    }
                } else if types.iter().all(|t| {
                    matches!(
                        t.to_ascii_uppercase().as_str(),
                        "BROADCAST"
                            | "MULTICAST"
                            | "ANYCAST"
                            | "BLACKHOLE"
                            | "UNREACHABLE"
                            | "PROHIBIT"
                            | "NAT"
                    )
                }) {
                    Cond::AddrLocal {
                        side,
                        local: false,
                        negated,
                    }
                } else {
                    Cond::Unknown(format!("{word} {value}"))
                });
            }
            "--limit-iface-in" | "--limit-iface-out" => {}
            "--comment" => comment = next(&mut i).map(str::to_string),
            "--ctstate" | "--state" => {
                let value = next(&mut i).unwrap_or("");
                let states: Option<Vec<CtState>> = value.split(',').map(CtState::parse).collect();
                conds.push(match states {
                    Some(states) => Cond::CtState { states, negated },
                    None => Cond::Unknown(format!("{word} {value}")),
                });
            }
            "--mark" if module == "mark" => {
                let value = next(&mut i).unwrap_or("");
                conds.push(match mark_value(value) {
                    Some((value, mask)) => Cond::Mark { value, mask, negated },
                    None => Cond::Unknown(format!("--mark {value}")),
                });
            }
            "--mode" if module == "statistic" => {
                let mode = next(&mut i).unwrap_or("");
                if mode != "random" && mode != "nth" {
                    conds.push(Cond::Unknown(format!("-m statistic --mode {mode}")));
                }
            }
            "--probability" => {
                let value = next(&mut i).unwrap_or("");
                conds.push(match value.parse::<f64>() {
                    Ok(p) if (0.0..=1.0).contains(&p) && !negated => Cond::Random { probability: p },
                    _ => Cond::Unknown(format!("--probability {value}")),
                });
            }
            "--every" => {
                let value = next(&mut i).unwrap_or("");
                conds.push(match value.parse::<u32>() {
                    Ok(n) if n > 0 && !negated => Cond::Nth { every: n },
                    _ => Cond::Unknown(format!("--every {value}")),
                });
            }
            "--packet" => {
                next(&mut i);
            }
            // kube-proxy's session affinity: `-m recent --name X --rcheck --seconds S --reap`.
            "--rcheck" | "--update" => conds.push(Cond::Affinity {
                name: option_after(&words, "--name").unwrap_or_default(),
                seconds: option_after(&words, "--seconds").and_then(|s| s.parse().ok()),
            }),
            "--name" | "--seconds" | "--mask" | "--hitcount" if module == "recent" => {
                next(&mut i);
            }
            "--set" | "--reap" | "--rsource" | "--rdest" | "--rttl" if module == "recent" => {}
            "--nfacct-name" | "--limit" | "--limit-burst" => {
                next(&mut i);
            }
            // A SYN without ACK, RST or FIN: a new TCP connection's first packet.
            "--syn" if !negated => {}
            "--tcp-flags" => {
                let mask = next(&mut i).unwrap_or("").to_string();
                let set = next(&mut i).unwrap_or("");
                if set != "SYN" || negated {
                    conds.push(Cond::Unknown(format!("--tcp-flags {mask} {set}")));
                }
            }
            "-j" | "--jump" | "-g" | "--goto" => {
                let target = next(&mut i).unwrap_or("");
                let goto = word == "-g" || word == "--goto";
                action = target_action(target, goto, &words[i + 1..]);
                // The target's own options follow; they were read by `target_action`.
                break;
            }
            _ => {
                if let Some(flag) = word.strip_prefix("--") {
                    // An option of a module this reader does not decide.
                    let value = words
                        .get(i + 1)
                        .filter(|w| !w.starts_with('-') && w.as_ref() != "!")
                        .map(|w| w.to_string());
                    if value.is_some() {
                        i += 1;
                    }
                    if !ignorable(&module, flag) {
                        conds.push(Cond::Unknown(match value {
                            Some(v) => format!("-m {module} --{flag} {v}"),
                            None => format!("-m {module} --{flag}"),
                        }));
                    }
                } else {
                    conds.push(Cond::Unknown(word.to_string()));
                }
            }
        }
        i += 1;
    }
    Some((
        chain,
        Rule {
            place: RulePlace::Line(number),
            text: line.to_string(),
            conds,
            action,
            comment,
        },
    ))
}

/// A module that matches by itself, before its options: the ones explain cannot decide.
fn module_cond(module: &str) -> Option<Cond> {
    match module {
        "tcp" | "udp" | "sctp" | "multiport" | "addrtype" | "comment" | "conntrack" | "state" | "mark"
        | "statistic" | "recent" | "nfacct" | "limit" => None,
        "set" | "socket" | "physdev" | "owner" | "u32" | "bpf" | "cgroup" | "string" | "ipvs" | "policy"
        | "rpfilter" | "iprange" | "connmark" | "mac" | "hashlimit" | "connlimit" | "pkttype"
        | "devgroup" | "length" | "ttl" | "hl" | "dscp" | "tos" | "realm" | "quota" | "time" | "osf" => {
            Some(Cond::Unknown(format!("-m {module}")))
        }
        other => Some(Cond::Unknown(format!("-m {other}"))),
    }
}

/// Options of known modules that do not change whether a new connection matches.
fn ignorable(module: &str, flag: &str) -> bool {
    match module {
        "tcp" => false,
        "conntrack" => matches!(flag, "ctdir"),
        _ => false,
    }
}

fn option_after(words: &[Cow<'_, str>], flag: &str) -> Option<String> {
    let at = words.iter().position(|w| w == flag)?;
    words.get(at + 1).map(|w| w.to_string())
}

/// `30080`, `30000:30100`, `80,443,8000:8080`.
fn port_ranges(value: &str) -> Option<Vec<(u16, u16)>> {
    value
        .split(',')
        .map(|part| match part.split_once(':') {
            Some((lo, hi)) => {
                let lo = if lo.is_empty() { 0 } else { lo.parse().ok()? };
                let hi = if hi.is_empty() { u16::MAX } else { hi.parse().ok()? };
                Some((lo, hi))
            }
            None => part.parse().ok().map(|p| (p, p)),
        })
        .collect()
}

/// `0x4000/0x4000`, `0x4000`, `16384`.
fn mark_value(value: &str) -> Option<(u32, u32)> {
    let (v, m) = match value.split_once('/') {
        Some((v, m)) => (v, Some(m)),
        None => (value, None),
    };
    let num = |s: &str| match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    };
    Some((num(v)?, m.map_or(Some(u32::MAX), num)?))
}

/// The action of `-j TARGET [options]`.
fn target_action(target: &str, goto: bool, options: &[Cow<'_, str>]) -> Action {
    let option = |flag: &str| {
        options
            .iter()
            .position(|w| w == flag)
            .and_then(|at| options.get(at + 1))
            .map(|w| w.as_ref())
    };
    match target {
        "ACCEPT" => Action::Accept,
        "DROP" => Action::Drop,
        "REJECT" => Action::Reject,
        "RETURN" => Action::Return,
        "DNAT" => match option("--to-destination").and_then(dnat_to) {
            Some(to) => Action::Dnat(to),
            None => Action::Unknown(format!("DNAT {}", options.join(" "))),
        },
        "REDIRECT" => match option("--to-ports") {
            None => Action::Redirect(None),
            Some(p) => match p.split(['-', ':']).next().and_then(|p| p.parse().ok()) {
                Some(p) => Action::Redirect(Some(p)),
                None => Action::Unknown(format!("REDIRECT --to-ports {p}")),
            },
        },
        "MASQUERADE" | "SNAT" => Action::SourceNat,
        "MARK" => {
            if let Some(v) = option("--set-xmark").and_then(mark_value) {
                Action::SetMark {
                    value: v.0,
                    mask: v.1,
                }
            } else if let Some((v, m)) = option("--set-mark").and_then(mark_value) {
                Action::SetMark {
                    value: v,
                    mask: m | v,
                }
            } else if let Some((v, _)) = option("--or-mark").and_then(mark_value) {
                Action::SetMark { value: v, mask: v }
            } else if let Some((v, _)) = option("--xor-mark").and_then(mark_value) {
                Action::SetMark { value: v, mask: 0 }
            } else if let Some((v, _)) = option("--and-mark").and_then(mark_value) {
                Action::SetMark { value: 0, mask: !v }
            } else {
                Action::Unknown(format!("MARK {}", options.join(" ")))
            }
        }
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

/// `10.244.1.5:8080`, `10.244.1.5`, `[fd00::5]:8080`, `10.0.0.1-10.0.0.3:80-81` (a
/// range: its first address and port).
fn dnat_to(value: &str) -> Option<DnatTo> {
    if let Some(rest) = value.strip_prefix('[') {
        let (addr, port) = rest.split_once(']')?;
        let addr: IpAddr = addr.parse().ok()?;
        let port = match port.strip_prefix(':') {
            Some(p) => Some(p.split('-').next()?.parse().ok()?),
            None => None,
        };
        return Some(DnatTo { addr, port });
    }
    if let Ok(addr) = value.parse::<IpAddr>() {
        return Some(DnatTo { addr, port: None });
    }
    let (addr, port) = value.rsplit_once(':')?;
    let addr: IpAddr = addr.split('-').next()?.parse().ok()?;
    let port = port.split('-').next()?.parse().ok()?;
    Some(DnatTo {
        addr,
        port: Some(port),
    })
}

#[cfg(test)]
mod tests;
