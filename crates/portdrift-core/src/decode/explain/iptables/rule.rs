//! One `-A CHAIN spec` line → its chain and the rule: each match option a condition,
//! read in order (a `!` negates the option after it), and the target its action.

use std::borrow::Cow;

use crate::decode::iptables::tokens::tokens;
use crate::heart::explain::model::{Action, Cond, CtState, Net, Rule, RulePlace, Side};
use crate::heart::model::Protocol;

use super::target::target_action;
use super::values::{mark_value, port_ranges};

/// `-A CHAIN spec` → the chain and its rule.
pub(super) fn read_rule(line: &str, number: u32) -> Option<(&str, Rule)> {
    let rest = line.strip_prefix("-A ")?;
    let (chain, spec) = rest.split_once(' ').unwrap_or((rest, ""));
    let (words, cut) = words_of(spec);
    let mut reader = SpecReader::new(&words);
    if cut {
        reader
            .conds
            .push(Cond::Unknown("an unterminated quote".to_string()));
    }
    reader.read();
    Some((
        chain,
        Rule {
            place: RulePlace::Line(number),
            text: line.to_string(),
            conds: reader.conds,
            action: reader.action,
            comment: reader.comment,
        },
    ))
}

/// The spec's words, and whether an unterminated quote cut them short.
fn words_of(spec: &str) -> (Vec<Cow<'_, str>>, bool) {
    let mut words = Vec::new();
    for word in tokens(spec) {
        match word {
            Ok(w) => words.push(w),
            Err(_) => return (words, true),
        }
    }
    (words, false)
}

/// A rule's words read in order into its conditions, comment and action.
struct SpecReader<'w> {
    words: &'w [Cow<'w, str>],
    /// The word being read.
    at: usize,
    /// The last `-m` module: some options mean something only in theirs.
    module: String,
    conds: Vec<Cond>,
    comment: Option<String>,
    action: Action,
}

impl<'w> SpecReader<'w> {
    fn new(words: &'w [Cow<'w, str>]) -> SpecReader<'w> {
        SpecReader {
            words,
            at: 0,
            module: String::new(),
            conds: Vec::new(),
            comment: None,
            action: Action::Continue,
        }
    }

    /// Every option up to the target, which ends the matches.
    fn read(&mut self) {
        let words = self.words;
        let mut negated = false;
        while let Some(word) = words.get(self.at) {
            let word: &'w str = word;
            match word {
                "!" => negated = true,
                // The target's own options follow; `target_action` reads them.
                "-j" | "--jump" | "-g" | "--goto" => return self.read_target(word),
                _ => {
                    self.read_option(word, negated);
                    negated = false;
                }
            }
            self.at += 1;
        }
    }

    /// The word after the one being read, which it moves to.
    fn next(&mut self) -> Option<&'w str> {
        self.at += 1;
        self.words.get(self.at).map(|w| w.as_ref())
    }

    /// The option's value; empty when the line ends first.
    fn value(&mut self) -> &'w str {
        self.next().unwrap_or("")
    }

    /// One match option and its values; `negated` when a `!` came before it.
    fn read_option(&mut self, word: &'w str, negated: bool) {
        match word {
            "-m" | "--match" => {
                self.module = self.value().to_string();
                self.conds.extend(module_cond(&self.module));
            }
            "-p" | "--protocol" => {
                let value = self.value();
                self.conds.extend(protocol_cond(value, negated));
            }
            "-s" | "--source" | "-d" | "--destination" => self.push_valued(word, negated, addr_cond),
            "-i" | "--in-interface" | "-o" | "--out-interface" => {
                self.push_valued(word, negated, interface_cond)
            }
            "--dport"
            | "--destination-port"
            | "--sport"
            | "--source-port"
            | "--dports"
            | "--sports"
            | "--destination-ports"
            | "--source-ports"
            | "--ports" => self.push_valued(word, negated, port_cond),
            "--dst-type" | "--src-type" => self.push_valued(word, negated, addr_type_cond),
            "--limit-iface-in" | "--limit-iface-out" => {}
            "--comment" => self.comment = self.next().map(str::to_string),
            "--ctstate" | "--state" => self.push_valued(word, negated, ct_state_cond),
            "--mark" if self.module == "mark" => self.push_valued(word, negated, |_, v, n| mark_cond(v, n)),
            "--probability" => self.push_valued(word, negated, |_, v, n| probability_cond(v, n)),
            "--every" => self.push_valued(word, negated, |_, v, n| every_cond(v, n)),
            "--mode" if self.module == "statistic" => {
                let mode = self.value();
                self.conds.extend(statistic_mode_cond(mode));
            }
            // kube-proxy's session affinity: `-m recent --name X --rcheck --seconds S --reap`.
            "--rcheck" | "--update" => self.conds.push(affinity_cond(self.words)),
            "--name" | "--seconds" | "--mask" | "--hitcount" if self.module == "recent" => {
                self.next();
            }
            "--set" | "--reap" | "--rsource" | "--rdest" | "--rttl" if self.module == "recent" => {}
            "--packet" | "--nfacct-name" | "--limit" | "--limit-burst" => {
                self.next();
            }
            // A SYN without ACK, RST or FIN: a new TCP connection's first packet.
            "--syn" if !negated => {}
            "--tcp-flags" => {
                let (mask, set) = (self.value(), self.value());
                self.conds.extend(tcp_flags_cond(mask, set, negated));
            }
            _ => self.read_unknown(word),
        }
    }

    /// An option with one value, read into a condition by `cond`.
    fn push_valued(&mut self, word: &str, negated: bool, cond: fn(&str, &str, bool) -> Cond) {
        let value = self.value();
        self.conds.push(cond(word, value, negated));
    }

    /// `-j TARGET [options]` (or `-g`): the rule's action.
    fn read_target(&mut self, word: &str) {
        let target = self.value();
        let goto = word == "-g" || word == "--goto";
        // A line that ends at `-j` (hand-made, never iptables-save's) has no options.
        let options = self.words.get(self.at + 1..).unwrap_or_default();
        self.action = target_action(target, goto, options);
    }

    /// An option of a module this reader does not decide, with its value if it has one.
    fn read_unknown(&mut self, word: &str) {
        let Some(flag) = word.strip_prefix("--") else {
            return self.conds.push(Cond::Unknown(word.to_string()));
        };
        let value = self
            .words
            .get(self.at + 1)
            .filter(|w| !w.starts_with('-') && w.as_ref() != "!")
            .map(|w| w.to_string());
        if value.is_some() {
            self.at += 1;
        }
        if !ignorable(&self.module, flag) {
            let module = &self.module;
            self.conds.push(Cond::Unknown(match value {
                Some(v) => format!("-m {module} --{flag} {v}"),
                None => format!("-m {module} --{flag}"),
            }));
        }
    }
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

/// `-p tcp`; None for `all` (or `0`), which every connection matches.
fn protocol_cond(value: &str, negated: bool) -> Option<Cond> {
    (!(value == "all" || value == "0")).then(|| Cond::Protocol {
        protocol: Protocol::parse(value),
        negated,
    })
}

/// `-s 10.0.0.0/8`, `-d 10.96.0.10/32,10.96.0.11`.
fn addr_cond(word: &str, value: &str, negated: bool) -> Cond {
    let side = if matches!(word, "-s" | "--source") {
        Side::Source
    } else {
        Side::Destination
    };
    let nets: Option<Vec<Net>> = value.split(',').map(Net::parse).collect();
    match nets {
        Some(nets) => Cond::Addr { side, nets, negated },
        None => Cond::Unknown(format!("{word} {value}")),
    }
}

/// `-i eth0`, `-o cali+`.
fn interface_cond(word: &str, name: &str, negated: bool) -> Cond {
    Cond::Interface {
        inbound: matches!(word, "-i" | "--in-interface"),
        name: name.to_string(),
        negated,
    }
}

/// `--dport 30080`, `--dports 30000:30010,30080`; `--ports` (either side) is not decided.
fn port_cond(word: &str, value: &str, negated: bool) -> Cond {
    let side = if word.starts_with("--s") {
        Side::Source
    } else {
        Side::Destination
    };
    match port_ranges(value) {
        Some(ranges) if word != "--ports" => Cond::Port {
            side,
            ranges,
            negated,
        },
        _ => Cond::Unknown(format!("{word} {value}")),
    }
}

/// `--dst-type LOCAL`: whether the address is this node's. Types a NodePort's
/// connection never has (`BROADCAST`, …) are decided as not local; others are not.
fn addr_type_cond(word: &str, value: &str, negated: bool) -> Cond {
    let side = if word == "--dst-type" {
        Side::Destination
    } else {
        Side::Source
    };
    let types: Vec<&str> = value.split(',').collect();
    let local = if types.iter().all(|t| t.eq_ignore_ascii_case("LOCAL")) {
        true
    } else if types.iter().all(|t| not_a_connections_type(t)) {
        false
    } else {
        return Cond::Unknown(format!("{word} {value}"));
    };
    Cond::AddrLocal { side, local, negated }
}

fn not_a_connections_type(t: &str) -> bool {
    matches!(
        t.to_ascii_uppercase().as_str(),
        "BROADCAST" | "MULTICAST" | "ANYCAST" | "BLACKHOLE" | "UNREACHABLE" | "PROHIBIT" | "NAT"
    )
}

/// `--ctstate NEW,ESTABLISHED`.
fn ct_state_cond(word: &str, value: &str, negated: bool) -> Cond {
    let states: Option<Vec<CtState>> = value.split(',').map(CtState::parse).collect();
    match states {
        Some(states) => Cond::CtState { states, negated },
        None => Cond::Unknown(format!("{word} {value}")),
    }
}

/// `-m mark --mark 0x4000/0x4000`.
fn mark_cond(value: &str, negated: bool) -> Cond {
    match mark_value(value) {
        Some((value, mask)) => Cond::Mark { value, mask, negated },
        None => Cond::Unknown(format!("--mark {value}")),
    }
}

/// `-m statistic --mode random|nth`: the mode's own option decides; another mode is
/// not one explain knows.
fn statistic_mode_cond(mode: &str) -> Option<Cond> {
    (mode != "random" && mode != "nth").then(|| Cond::Unknown(format!("-m statistic --mode {mode}")))
}

/// `--probability 0.3333333349`: that share of new connections; negated, not decided.
fn probability_cond(value: &str, negated: bool) -> Cond {
    match value.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) && !negated => Cond::Random { probability: p },
        _ => Cond::Unknown(format!("--probability {value}")),
    }
}

/// `--every 3`: one connection in that many; negated, not decided.
fn every_cond(value: &str, negated: bool) -> Cond {
    match value.parse::<u32>() {
        Ok(n) if n > 0 && !negated => Cond::Nth { every: n },
        _ => Cond::Unknown(format!("--every {value}")),
    }
}

/// `-m recent --rcheck`: its name and timeout are options anywhere on the line.
fn affinity_cond(words: &[Cow<'_, str>]) -> Cond {
    Cond::Affinity {
        name: option_after(words, "--name").unwrap_or_default(),
        seconds: option_after(words, "--seconds").and_then(|s| s.parse().ok()),
    }
}

fn option_after(words: &[Cow<'_, str>], flag: &str) -> Option<String> {
    let at = words.iter().position(|w| w == flag)?;
    words.get(at + 1).map(|w| w.to_string())
}

/// `--tcp-flags MASK SYN` is a new connection's first packet; other flags are not decided.
fn tcp_flags_cond(mask: &str, set: &str, negated: bool) -> Option<Cond> {
    (set != "SYN" || negated).then(|| Cond::Unknown(format!("--tcp-flags {mask} {set}")))
}
