//! Whether a rule's conditions hold for the connection: each condition alone, a
//! rule's together (a definite "no" wins over one that cannot be decided), and
//! lookups of a connection's fields in nftables sets and maps.

use crate::heart::explain::model::{
    Cond, CtState, Element, Field, KeyPart, Net, Probe, Rule, Rulesets, SetRef, Side, Table,
};
use crate::heart::model::Protocol;

use super::{Packet, RuleRef, set_name};

/// The result of a condition for this connection.
pub(super) enum Test {
    Yes,
    No { why: String, quiet: bool, address: bool },
    Share(f64),
    Undecided(String),
}

/// Every condition of the rule, for this connection: a definite "no" from any
/// condition wins over one that cannot be decided.
pub(super) fn test_rule(table: &Table, rule: &Rule, packet: &Packet) -> Test {
    let mut share = 1.0;
    let mut undecided = None;
    // The first reason worth showing, else the first quiet one.
    let mut first_no: Option<(String, bool)> = None;
    let mut only_address = true;
    for cond in &rule.conds {
        match test(table, cond, packet) {
            Test::Yes => {}
            Test::Share(p) => share *= p,
            Test::Undecided(why) => {
                undecided.get_or_insert(why);
            }
            Test::No { why, quiet, address } => {
                only_address &= address;
                if first_no.as_ref().is_none_or(|(_, q)| *q && !quiet) {
                    first_no = Some((why, quiet));
                }
            }
        }
    }
    if let Some((why, quiet)) = first_no {
        // Skipped only because it names another address, while its port is ours.
        let address = only_address
            && rule.conds.iter().any(|c| {
                matches!(c, Cond::Port { side: Side::Destination, ranges, negated: false }
                    if ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&packet.port)))
            });
        return Test::No { why, quiet, address };
    }
    if let Some(why) = undecided {
        return Test::Undecided(format!("{why} cannot be decided for this connection"));
    }
    if share < 1.0 {
        Test::Share(share)
    } else {
        Test::Yes
    }
}

fn no(why: impl Into<String>, quiet: bool) -> Test {
    Test::No {
        why: why.into(),
        quiet,
        address: false,
    }
}

/// One condition for this connection. `quiet` skips are the ones about other Services
/// (another port, protocol or address), not listed on the path.
fn test(table: &Table, cond: &Cond, p: &Packet) -> Test {
    match cond {
        Cond::Protocol { protocol, negated } => protocol_test(*protocol, *negated, p),
        Cond::Addr {
            side: Side::Source,
            nets,
            negated,
        } => source_test(nets, *negated, p),
        Cond::Addr {
            side: Side::Destination,
            nets,
            negated,
        } => destination_test(nets, *negated, p),
        Cond::Port {
            side: Side::Destination,
            ranges,
            negated,
        } => port_test(ranges, *negated, p),
        Cond::Port {
            side: Side::Source, ..
        } => Test::Undecided("a source-port match".to_string()),
        Cond::AddrLocal { side, local, negated } => addr_local_test(*side, *local, *negated, p),
        Cond::Interface {
            inbound,
            name,
            negated,
        } => interface_test(*inbound, name, *negated),
        Cond::Mark { value, mask, negated } => mark_test(*value, *mask, *negated, p),
        Cond::CtState { states, negated } => ct_state_test(states, *negated, p),
        Cond::Random { probability } => Test::Share(*probability),
        Cond::Nth { every } => Test::Share(1.0 / f64::from(*every)),
        Cond::Affinity { .. } => no("a new client has no affinity entry yet", false),
        Cond::Lookup { key, set, negated } => lookup_test(table, key, set, *negated, p),
        Cond::Unknown(what) => Test::Undecided(format!("`{what}`")),
    }
}

/// `yes`, turned over for a negated test.
fn flip(yes: bool, negated: bool) -> bool {
    yes != negated
}

fn protocol_test(protocol: Option<Protocol>, negated: bool, p: &Packet) -> Test {
    if flip(protocol == Some(p.protocol), negated) {
        Test::Yes
    } else {
        no("another protocol", true)
    }
}

fn shown(nets: &[Net]) -> String {
    nets.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")
}

fn source_test(nets: &[Net], negated: bool, p: &Packet) -> Test {
    let inside = nets.iter().any(|n| n.contains(p.source));
    if flip(inside, negated) {
        Test::Yes
    } else if negated {
        no(format!("the source {} is in {}", p.source, shown(nets)), false)
    } else {
        no(
            format!("the source {} is not in {}", p.source, shown(nets)),
            false,
        )
    }
}

/// A rule about other addresses of the node, when the connection is to any of them,
/// is skipped and remembered: the port may be handled otherwise at those addresses.
fn destination_test(nets: &[Net], negated: bool, p: &Packet) -> Test {
    let ip = p.destination_ip();
    let inside = match ip {
        Some(ip) => nets.iter().any(|n| n.contains(ip)),
        // "Any node address" is in no named prefix but loopback's, and is
        // not loopback: connections come from outside.
        None => false,
    };
    if flip(inside, negated) {
        Test::Yes
    } else if ip.is_none() && !negated && !nets.iter().any(|n| n.addr.is_loopback()) {
        Test::No {
            why: format!("it applies only to connections to {}", shown(nets)),
            quiet: true,
            address: true,
        }
    } else {
        no(format!("the destination is not in {}", shown(nets)), true)
    }
}

fn port_test(ranges: &[(u16, u16)], negated: bool, p: &Packet) -> Test {
    let port = p.destination_port();
    let inside = ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&port));
    if flip(inside, negated) {
        Test::Yes
    } else {
        no("another port", true)
    }
}

fn addr_local_test(side: Side, local: bool, negated: bool, p: &Packet) -> Test {
    let is_local = match side {
        Side::Destination => p.destination_local(),
        Side::Source => p.source.is_loopback(),
    };
    if flip(local && is_local, negated) {
        return Test::Yes;
    }
    let what = match side {
        Side::Destination => "destination",
        Side::Source => "source",
    };
    let is = if is_local { "is" } else { "is not" };
    no(format!("the {what} {is} an address of this node"), false)
}

/// Only loopback is decided: connections from outside never arrive on it, and which
/// other interface they arrive on the dump cannot say.
fn interface_test(inbound: bool, name: &str, negated: bool) -> Test {
    if !(inbound && name == "lo") {
        return Test::Undecided(format!(
            "the {} interface match {}{name}",
            if inbound { "input" } else { "output" },
            if negated { "! " } else { "" }
        ));
    }
    if negated {
        Test::Yes
    } else {
        no("the connection does not arrive on lo", false)
    }
}

fn mark_test(value: u32, mask: u32, negated: bool, p: &Packet) -> Test {
    if flip(p.mark & mask == value, negated) {
        Test::Yes
    } else {
        no(
            format!("the mark is {:#x}, not {value:#x}/{mask:#x}", p.mark & mask),
            false,
        )
    }
}

/// A new connection is `new`, and `dnat` once a rule translated it.
fn ct_state_test(states: &[CtState], negated: bool, p: &Packet) -> Test {
    let yes = states.iter().any(|s| match s {
        CtState::New => true,
        CtState::Dnat => p.translated.is_some(),
        _ => false,
    });
    if flip(yes, negated) {
        Test::Yes
    } else {
        no("the connection is new", false)
    }
}

fn lookup_test(table: &Table, key: &[Field], set: &SetRef, negated: bool, p: &Packet) -> Test {
    let Some(elements) = table.elements(set) else {
        return Test::Undecided(format!("the set {} is not in the dump", set_name(set)));
    };
    match find_element(elements, key, p) {
        Lookup::Found(_) if !negated => Test::Yes,
        Lookup::Missing if negated => Test::Yes,
        Lookup::Found(e) => no(format!("{} holds {}", set_name(set), e.text), true),
        Lookup::Missing => no(
            format!("{} has no element for this connection", set_name(set)),
            true,
        ),
        Lookup::Undecided(why) => Test::Undecided(why),
    }
}

pub(super) enum Lookup<'e> {
    Found(&'e Element),
    Missing,
    Undecided(String),
}

/// The element whose key holds this connection's `key` fields.
pub(super) fn find_element<'e>(elements: &'e [Element], key: &[Field], p: &Packet) -> Lookup<'e> {
    let mut undecided = None;
    'elements: for element in elements {
        if element.key.len() != key.len() {
            continue;
        }
        for (field, part) in key.iter().zip(&element.key) {
            match holds(*field, part, p) {
                Some(true) => {}
                Some(false) => continue 'elements,
                None => {
                    undecided.get_or_insert_with(|| format!("the element {}", element.text));
                    continue 'elements;
                }
            }
        }
        return Lookup::Found(element);
    }
    match undecided {
        Some(why) => Lookup::Undecided(format!("{why} cannot be compared with this connection")),
        None => Lookup::Missing,
    }
}

/// Whether one component of an element holds the connection's field; None: unknown.
fn holds(field: Field, part: &KeyPart, p: &Packet) -> Option<bool> {
    let destination = p.destination_ip();
    match (field, part) {
        (Field::Addr(Side::Source), KeyPart::Addr(net)) => Some(net.contains(p.source)),
        // "Any node address" is no loopback address; whether it is in another set the
        // dump cannot say.
        (Field::Addr(Side::Destination), KeyPart::Addr(net)) => match destination {
            Some(ip) => Some(net.contains(ip)),
            None if net.addr.is_loopback() => Some(false),
            None => None,
        },
        (Field::Port(Side::Destination), KeyPart::Port(lo, hi)) => {
            Some((*lo..=*hi).contains(&p.destination_port()))
        }
        (Field::Port(Side::Source), _) => None,
        (Field::L4Proto, KeyPart::Protocol(proto)) => Some(*proto == Some(p.protocol)),
        (Field::AddrType(Side::Destination), KeyPart::AddrType(t)) => {
            Some((t == "local") == p.destination_local())
        }
        (Field::AddrType(Side::Source), KeyPart::AddrType(t)) => {
            Some((t == "local") == p.source.is_loopback())
        }
        (Field::Mark, KeyPart::Int(lo, hi)) => Some((*lo..=*hi).contains(&u64::from(p.mark))),
        (_, KeyPart::Unknown(_)) => None,
        _ => None,
    }
}

/// Whether the rule at `at` could match the new connection of `probe` (for sure or
/// for a share of connections), judged on the connection as it arrives.
pub fn could_match(rules: &Rulesets, at: RuleRef, probe: &Probe) -> bool {
    let table = &rules.tables[at.table];
    let Some(ri) = at.rule else { return false };
    let rule = &table.chains[at.chain].rules[ri];
    matches!(
        test_rule(table, rule, &Packet::new(probe)),
        Test::Yes | Test::Share(_)
    )
}
