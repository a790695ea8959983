//! One nft rule → conditions and an action, for one family.
//!
//! nft runs a rule's statements in order and stops at the first verdict (a NAT or
//! reject statement is one too), so the action is the first terminal statement.
//! Statements that only count, log or update a set change nothing on the path and are
//! passed over; a mark set before the verdict is kept as the action when there is no
//! other, and makes the rule unknown when there is, since a rule has one action.

mod action;

use std::collections::HashMap;

use crate::decode::nftables::json::{Expr, render_rule};
use crate::heart::explain::model::{Action, Cond, CtState, Field, Rule, RulePlace, SetRef, Side};
use crate::heart::model::{Family, Protocol};

use super::set::{Data, KeyType, nets, number, parse_element, port_range, protocol};

/// What a rule is lowered against.
pub(super) struct RuleCx<'t> {
    pub(super) family: Family,
    /// The declared timeout (seconds) of the table's named sets that have one.
    pub(super) timeouts: &'t HashMap<&'t str, u32>,
}

/// A rule lowered for one family.
pub(super) enum Lowered {
    Rule(Rule, Vec<String>),
    /// The rule reads the other family's header (nft makes `ip daddr` imply `meta
    /// nfproto ipv4`), so no packet of this family matches it.
    OtherFamily,
}

pub(super) fn lower_rule(body: &Expr<'_>, cx: &RuleCx<'_>) -> Lowered {
    let statements = body.get("expr").and_then(Expr::as_list).unwrap_or_default();
    let comment = body.get("comment").and_then(Expr::as_str);
    let text = render_rule(statements, comment);
    let place = body
        .get("handle")
        .and_then(number)
        .map_or(RulePlace::Unknown, RulePlace::Handle);
    let mut b = Builder {
        cx,
        conds: Vec::new(),
        mark: None,
        action: None,
        other_family: false,
        effect_then_match: false,
        notes: Vec::new(),
    };
    for statement in statements {
        if b.action.is_some() {
            // Nothing after a verdict runs.
            break;
        }
        b.statement(statement, &text);
    }
    if b.other_family {
        return Lowered::OtherFamily;
    }
    let action = if b.effect_then_match {
        Action::Unknown(text.clone())
    } else {
        match (b.action, b.mark) {
            (Some(action), _) => action,
            (None, Some((value, mask))) => Action::SetMark { value, mask },
            (None, None) => Action::Continue,
        }
    };
    let rule = Rule {
        place,
        text,
        conds: b.conds,
        action,
        comment: comment.map(str::to_string),
    };
    Lowered::Rule(rule, b.notes)
}

struct Builder<'c> {
    cx: &'c RuleCx<'c>,
    conds: Vec<Cond>,
    /// A `meta mark set` seen so far, as (value, mask) of mark = (mark & !mask) ^ value.
    mark: Option<(u32, u32)>,
    action: Option<Action>,
    other_family: bool,
    /// A match after a mark was set: the mark is set even when that match fails, which
    /// one action after all conditions cannot say.
    effect_then_match: bool,
    notes: Vec<String>,
}

/// What the left side of a match reads.
enum Left {
    Fields(Vec<Field>),
    Nfproto,
    CtState,
    MaskedMark(u32),
    OutInterface,
    Numgen { modulus: u64, offset: u64 },
    Unknown,
}

impl Builder<'_> {
    fn statement(&mut self, statement: &Expr<'_>, rule_text: &str) {
        let text = || render_rule(std::slice::from_ref(statement), None);
        let Some((kind, body)) = statement.single() else {
            return self.push(Cond::Unknown(text()));
        };
        match kind {
            "match" => self.lower_match(body, &text()),
            // Accounting, logging, set and map updates (kube-proxy's affinity `update`),
            // conntrack helpers and labels, flow offload (established flows only), a
            // copy to elsewhere: none changes where this connection goes.
            "counter" | "log" | "set" | "map" | "ct helper" | "ct timeout" | "ct expectation" | "last"
            | "flow" | "dup" | "secmark" => {}
            // A limit lets a lone new connection through; `over` is the reverse and
            // depends on the traffic before it.
            "limit" if !matches!(body.get("inv"), Some(Expr::Bool(true))) => {}
            // iptables-nft's comment match always matches (its text is not in the JSON).
            "xt" if body.get("type").and_then(Expr::as_str) == Some("match")
                && body.get("name").and_then(Expr::as_str) == Some("comment") => {}
            "xt" if body.get("type").and_then(Expr::as_str) == Some("match") => {
                self.push(Cond::Unknown(text()))
            }
            // An iptables-nft target nft could not translate: the JSON keeps its name
            // only, which is enough for the targets that take no part of the path.
            "xt" if body.get("type").and_then(Expr::as_str) == Some("target") => {
                let action = match body.get("name").and_then(Expr::as_str) {
                    Some("MASQUERADE" | "SNAT") => Action::SourceNat,
                    Some("REJECT") => Action::Reject,
                    _ => Action::Unknown(text()),
                };
                self.finish(action, rule_text)
            }
            "accept" | "drop" | "return" | "continue" | "jump" | "goto" => {
                self.finish(super::set::verdict(statement), rule_text)
            }
            "vmap" => {
                let action = self.lower_vmap(body, &text());
                self.finish(action, rule_text)
            }
            "reject" => self.finish(Action::Reject, rule_text),
            "masquerade" | "snat" => self.finish(Action::SourceNat, rule_text),
            "dnat" => {
                let action = self.lower_dnat(body, &text());
                self.finish(action, rule_text)
            }
            "redirect" => {
                let action = match body.get("port") {
                    None => Action::Redirect(None),
                    Some(port) => match port_range(port) {
                        Some((lo, hi)) => {
                            if lo != hi {
                                self.notes.push(format!("`{}` is read as its first port", text()));
                            }
                            Action::Redirect(Some(lo))
                        }
                        None => Action::Unknown(text()),
                    },
                };
                self.finish(action, rule_text)
            }
            "mangle" => self.lower_mangle(body, &text(), rule_text),
            // The connection bypasses conntrack, and with it NAT: not a path this
            // evaluator follows. Queues, forwarding and proxies leave the ruleset.
            "notrack" | "queue" | "fwd" | "tproxy" | "synproxy" | "xt" => {
                self.finish(Action::Unknown(text()), rule_text)
            }
            _ => self.push(Cond::Unknown(text())),
        }
    }

    fn push(&mut self, cond: Cond) {
        if self.mark.is_some() {
            self.effect_then_match = true;
        }
        if !self.conds.contains(&cond) {
            self.conds.push(cond);
        }
    }

    /// The rule's terminal statement.
    fn finish(&mut self, action: Action, rule_text: &str) {
        self.action = Some(match (self.mark, action) {
            (None, action) => action,
            (Some((value, mask)), Action::Continue) => Action::SetMark { value, mask },
            (Some(_), _) => Action::Unknown(rule_text.to_string()),
        });
    }

    fn require(&mut self, family: Family) {
        if family != self.cx.family {
            self.other_family = true;
        }
    }

    /// The connection field an expression reads, with what nft implies by it: the
    /// family of `ip`/`ip6` fields, the protocol of `tcp dport`.
    fn field(&mut self, expr: &Expr<'_>) -> Option<Field> {
        let (kind, body) = expr.single()?;
        let key = |name: &str| body.get(name).and_then(Expr::as_str);
        match kind {
            "payload" => {
                let side = match key("field")? {
                    "saddr" | "sport" => Some(Side::Source),
                    "daddr" | "dport" => Some(Side::Destination),
                    _ => None,
                };
                match (key("protocol")?, key("field")?) {
                    ("ip", "saddr" | "daddr") => {
                        self.require(Family::Ipv4);
                        Some(Field::Addr(side?))
                    }
                    ("ip6", "saddr" | "daddr") => {
                        self.require(Family::Ipv6);
                        Some(Field::Addr(side?))
                    }
                    ("ip", "protocol") => {
                        self.require(Family::Ipv4);
                        Some(Field::L4Proto)
                    }
                    // A new connection's first packet carries no extension header.
                    ("ip6", "nexthdr") => {
                        self.require(Family::Ipv6);
                        Some(Field::L4Proto)
                    }
                    ("th", "sport" | "dport") => Some(Field::Port(side?)),
                    (proto @ ("tcp" | "udp" | "sctp"), "sport" | "dport") => {
                        self.push(Cond::Protocol {
                            protocol: Protocol::parse(proto),
                            negated: false,
                        });
                        Some(Field::Port(side?))
                    }
                    _ => None,
                }
            }
            "meta" => match key("key")? {
                "l4proto" => Some(Field::L4Proto),
                // `iif` names the interface by index; the dump prints its name.
                "iifname" | "iif" => Some(Field::InInterface),
                "mark" => Some(Field::Mark),
                _ => None,
            },
            "fib" if key("result") == Some("type") => {
                let flags = match body.get("flags")? {
                    Expr::List(flags) => flags.as_slice(),
                    flag => std::slice::from_ref(flag),
                };
                match flags {
                    [flag] if flag.as_str() == Some("saddr") => Some(Field::AddrType(Side::Source)),
                    [flag] if flag.as_str() == Some("daddr") => Some(Field::AddrType(Side::Destination)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn left(&mut self, expr: &Expr<'_>) -> Left {
        let is_meta = |e: &Expr<'_>, name: &str| matches!(e.single(), Some(("meta", body)) if body.get("key").and_then(Expr::as_str) == Some(name));
        match expr.single() {
            Some(("concat", Expr::List(parts))) => {
                let fields: Option<Vec<Field>> = parts.iter().map(|p| self.field(p)).collect();
                fields.map_or(Left::Unknown, Left::Fields)
            }
            Some(("meta", body)) => match body.get("key").and_then(Expr::as_str) {
                Some("nfproto") => Left::Nfproto,
                Some("oifname" | "oif") => Left::OutInterface,
                _ => self.field(expr).map_or(Left::Unknown, |f| Left::Fields(vec![f])),
            },
            Some(("ct", body))
                if body.get("dir").is_none() && body.get("key").and_then(Expr::as_str) == Some("state") =>
            {
                Left::CtState
            }
            Some(("&", Expr::List(operands))) => match operands.as_slice() {
                [mark, mask] if is_meta(mark, "mark") => {
                    match number(mask).and_then(|m| u32::try_from(m).ok()) {
                        Some(mask) => Left::MaskedMark(mask),
                        None => Left::Unknown,
                    }
                }
                _ => Left::Unknown,
            },
            Some(("numgen", body)) if body.get("mode").and_then(Expr::as_str) == Some("random") => {
                match (
                    body.get("mod").and_then(number),
                    body.get("offset").map_or(Some(0), number),
                ) {
                    (Some(modulus), Some(offset)) if modulus > 0 => Left::Numgen { modulus, offset },
                    _ => Left::Unknown,
                }
            }
            _ => self.field(expr).map_or(Left::Unknown, |f| Left::Fields(vec![f])),
        }
    }

    /// `left op right`: a condition on what the left side reads.
    fn lower_match(&mut self, body: &Expr<'_>, text: &str) {
        let unknown = || Cond::Unknown(text.to_string());
        let (Some(left), Some(right)) = (body.get("left"), body.get("right")) else {
            return self.push(unknown());
        };
        let op = body.get("op").and_then(Expr::as_str).unwrap_or("==");
        // Read before the operator: the left side may imply a family or a protocol.
        let left = self.left(left);
        let negated = match op {
            "==" | "in" => false,
            "!=" => true,
            // `tcp dport < 1024`: a port range.
            "<" | ">" | "<=" | ">=" => {
                return self.push(port_comparison(op, &left, right).unwrap_or_else(unknown));
            }
            _ => return self.push(unknown()),
        };
        let items = match_items(right);
        let strings: Option<Vec<&str>> = items.iter().map(Expr::as_str).collect();
        let cond = match left {
            Left::Unknown => None,
            Left::Nfproto => match families(strings) {
                Some(families) => return self.keep_family(&families, negated),
                None => None,
            },
            Left::CtState => ct_state_cond(strings, right, negated),
            Left::MaskedMark(mask) => number(right)
                .and_then(|v| u32::try_from(v).ok())
                .map(|value| Cond::Mark { value, mask, negated }),
            Left::OutInterface => right.as_str().map(|name| Cond::Interface {
                inbound: false,
                name: wildcard(name),
                negated,
            }),
            Left::Numgen { modulus, offset } => numgen_cond(modulus, offset, op, right, negated),
            Left::Fields(fields) => self.fields_cond(fields, right, items, negated),
        };
        self.push(cond.unwrap_or_else(unknown));
    }

    /// `meta nfproto ipv4`: decided by the table copy's family, so no condition; a
    /// rule for the other family drops out.
    fn keep_family(&mut self, families: &[Family], negated: bool) {
        if families.contains(&self.cx.family) == negated {
            self.other_family = true;
        }
    }

    /// A match on connection fields: a named set, an inline set, or a value.
    fn fields_cond(
        &mut self,
        fields: Vec<Field>,
        right: &Expr<'_>,
        items: &[Expr<'_>],
        negated: bool,
    ) -> Option<Cond> {
        if let Some(name) = right.as_str().and_then(|s| s.strip_prefix('@')) {
            return Some(self.named_set_cond(fields, name, negated));
        }
        // Several values of one field, or a concatenation: an inline set.
        let inline = match fields.as_slice() {
            [Field::L4Proto | Field::InInterface | Field::Mark] => items.len() > 1,
            [_] => false,
            _ => true,
        };
        value_cond(&fields, items, negated)
            .or_else(|| inline.then(|| inline_set_cond(fields, items, negated)))
    }

    /// `… @name`: a lookup in the table's set, or kube-proxy's session affinity.
    fn named_set_cond(&self, fields: Vec<Field>, name: &str, negated: bool) -> Cond {
        // kube-proxy's session affinity: `ip saddr @affinity-…`, a set of recent
        // clients with a timeout.
        if fields == [Field::Addr(Side::Source)] && name.starts_with("affinity-") && !negated {
            return Cond::Affinity {
                name: name.to_string(),
                seconds: self.cx.timeouts.get(name).copied(),
            };
        }
        Cond::Lookup {
            key: fields,
            set: SetRef::Named(name.to_string()),
            negated,
        }
    }
}

/// A match of one field against values the model has a condition for.
fn value_cond(fields: &[Field], items: &[Expr<'_>], negated: bool) -> Option<Cond> {
    match fields {
        [Field::Addr(side)] => {
            let lists: Option<Vec<_>> = items.iter().map(nets).collect();
            lists.map(|l| Cond::Addr {
                side: *side,
                nets: l.into_iter().flatten().collect(),
                negated,
            })
        }
        [Field::Port(side)] => {
            let ranges: Option<Vec<_>> = items.iter().map(port_range).collect();
            ranges.map(|ranges| Cond::Port {
                side: *side,
                ranges,
                negated,
            })
        }
        [Field::L4Proto] if items.len() == 1 => {
            protocol(&items[0]).map(|protocol| Cond::Protocol { protocol, negated })
        }
        [Field::AddrType(side)] => addr_local(*side, items, negated),
        [Field::InInterface] if items.len() == 1 => items[0].as_str().map(|name| Cond::Interface {
            inbound: true,
            name: wildcard(name),
            negated,
        }),
        [Field::Mark] if items.len() == 1 => {
            number(&items[0])
                .and_then(|v| u32::try_from(v).ok())
                .map(|value| Cond::Mark {
                    value,
                    mask: u32::MAX,
                    negated,
                })
        }
        _ => None,
    }
}

/// `{ a, b }` or a concatenation's values, as a lookup in a set written in the rule.
fn inline_set_cond(fields: Vec<Field>, items: &[Expr<'_>], negated: bool) -> Cond {
    let types: Vec<KeyType> = fields.iter().copied().map(KeyType::of_field).collect();
    let elements = items
        .iter()
        .flat_map(|item| parse_element(item, &types, Data::None, 0))
        .collect();
    Cond::Lookup {
        key: fields,
        set: SetRef::Inline(elements),
        negated,
    }
}

/// The values a match compares with: a set's items, or the one value.
fn match_items<'r, 'e>(right: &'r Expr<'e>) -> &'r [Expr<'e>] {
    match right.single() {
        Some(("set", Expr::List(items))) => items.as_slice(),
        Some(("set", item)) => std::slice::from_ref(item),
        _ => std::slice::from_ref(right),
    }
}

/// `tcp dport < 1024` and the like, as the one port range they are.
fn port_comparison(op: &str, left: &Left, right: &Expr<'_>) -> Option<Cond> {
    let (Left::Fields(fields), Some(p)) = (left, right_port(right)) else {
        return None;
    };
    let [Field::Port(side)] = fields.as_slice() else {
        return None;
    };
    compare_ports(op, p).map(|range| Cond::Port {
        side: *side,
        ranges: vec![range],
        negated: false,
    })
}

/// `ipv4`, `ipv6` or both; None when empty or another name is among them.
fn families(names: Option<Vec<&str>>) -> Option<Vec<Family>> {
    let families: Vec<Family> = names
        .unwrap_or_default()
        .into_iter()
        .map(|s| match s {
            "ipv4" => Some(Family::Ipv4),
            "ipv6" => Some(Family::Ipv6),
            _ => None,
        })
        .collect::<Option<_>>()?;
    (!families.is_empty()).then_some(families)
}

/// `ct state new,established`, written as a set or as a list.
fn ct_state_cond(names: Option<Vec<&str>>, right: &Expr<'_>, negated: bool) -> Option<Cond> {
    let names = names.or_else(|| right.as_list().and_then(|l| l.iter().map(Expr::as_str).collect()))?;
    names
        .iter()
        .map(|s| CtState::parse(s))
        .collect::<Option<Vec<_>>>()
        .map(|states| Cond::CtState { states, negated })
}

/// `numgen random mod N == K`: one number in N (or all but one, negated).
fn numgen_cond(modulus: u64, offset: u64, op: &str, right: &Expr<'_>, negated: bool) -> Option<Cond> {
    match (number(right), op) {
        (Some(k), "==" | "!=") if k >= offset && k - offset < modulus => {
            let share = 1.0 / modulus as f64;
            Some(Cond::Random {
                probability: if negated { 1.0 - share } else { share },
            })
        }
        _ => None,
    }
}

fn right_port(right: &Expr<'_>) -> Option<u16> {
    number(right).and_then(|n| u16::try_from(n).ok())
}

fn compare_ports(op: &str, p: u16) -> Option<(u16, u16)> {
    match op {
        "<" => p.checked_sub(1).map(|hi| (0, hi)),
        "<=" => Some((0, p)),
        ">" => p.checked_add(1).map(|lo| (lo, u16::MAX)),
        ">=" => Some((p, u16::MAX)),
        _ => None,
    }
}

/// `fib daddr type local` and the like: `local` is whether the address is this node's;
/// no connection's address is broadcast or multicast. Whether one is `unicast`,
/// `blackhole` or `unreachable` depends on routes explain does not read (and, after a
/// DNAT, the destination is not this node's), so those stay undecided.
fn addr_local(side: Side, items: &[Expr<'_>], negated: bool) -> Option<Cond> {
    let names: Vec<&str> = items.iter().map(Expr::as_str).collect::<Option<_>>()?;
    let known = names
        .iter()
        .all(|n| matches!(*n, "local" | "broadcast" | "multicast"));
    (known && !names.is_empty()).then(|| Cond::AddrLocal {
        side,
        local: names.contains(&"local"),
        negated,
    })
}

/// nft writes an interface wildcard `eth*`; the model, like iptables, `eth+`.
fn wildcard(name: &str) -> String {
    match name.strip_suffix('*') {
        Some(stem) if !stem.ends_with('\\') => format!("{stem}+"),
        _ => name.to_string(),
    }
}
