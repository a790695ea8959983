//! What a matched rule does to a branch: a verdict that ends it, a jump or goto, a
//! mark, an address translation, or the action a verdict map or `numgen` picks.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::heart::explain::model::{Action, Destination, DnatTo, Field, Hook, KeyPart, SetRef, target_of};
use crate::heart::model::Family;

use super::conditions::{Lookup, find_element};
use super::{Branch, End, Entry, Flow, Packet, RuleRef, Step, StepKind, Translation, Walker, set_name, stop};

/// A rule that matched: where, how deep in jumps, the part of the connections
/// reaching it that it takes, and the map element that chose its action, if one did.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hit<'v> {
    hook: Hook,
    at: RuleRef,
    depth: usize,
    share: f64,
    via: Option<&'v str>,
}

impl Hit<'_> {
    pub(super) fn new(hook: Hook, at: RuleRef, depth: usize, share: f64) -> Hit<'static> {
        Hit {
            hook,
            at,
            depth,
            share,
            via: None,
        }
    }

    /// The step that says what the rule did.
    fn step(&self, does: String) -> Step {
        Step {
            hook: self.hook,
            at: self.at,
            kind: StepKind::Matched {
                does: match self.via {
                    Some(via) => format!("{via}: {does}"),
                    None => does,
                },
                share: self.share,
            },
        }
    }
}

impl<'a> Walker<'a> {
    /// Applies a matched rule's action to the branch.
    pub(super) fn act(
        &mut self,
        hit: Hit<'_>,
        action: &Action,
        mut branch: Branch,
        emit: &mut dyn FnMut(Branch, Flow),
    ) {
        match action {
            Action::Continue => self.go_on(hit, "continue".to_string(), branch, emit),
            Action::SetMark { value, mask } => {
                branch.packet.mark = (branch.packet.mark & !mask) ^ value;
                let does = format!("set mark {:#x}", branch.packet.mark);
                self.go_on(hit, does, branch, emit)
            }
            Action::Jump(target) => self.jump(hit, target, false, branch, emit),
            Action::Goto(target) => self.jump(hit, target, true, branch, emit),
            Action::Return => {
                branch.steps.push(hit.step("return".to_string()));
                emit(branch, Flow::Returned)
            }
            // Accepted by this base chain; the next base chain at the hook still runs.
            Action::Accept => end(hit, "accept", End::Accepted, branch, emit),
            Action::Drop => end(hit, "drop", End::Dropped(hit.at), branch, emit),
            Action::Reject => end(hit, "reject", End::Rejected(hit.at), branch, emit),
            Action::Dnat(to) if self.translates(hit.at) => {
                let translation = dnat(*to, &branch.packet, hit.at);
                bind(hit, translation, branch, emit)
            }
            Action::Redirect(port) if self.translates(hit.at) => {
                let translation = redirect(*port, &branch.packet, hit.at);
                bind(hit, translation, branch, emit)
            }
            Action::Dnat(_) | Action::Redirect(_) => stop(
                branch,
                hit.at,
                "a DNAT outside a nat chain at prerouting, which this explanation does not model".to_string(),
                emit,
            ),
            Action::SourceNat => end(hit, "source NAT", End::Accepted, branch, emit),
            Action::Vmap { key, map } => self.vmap(hit, key, map, branch, emit),
            Action::Numgen { modulus, map } => self.numgen(hit, *modulus, map, branch, emit),
            Action::Unknown(what) => stop(
                branch,
                hit.at,
                format!("its action ({what}) is not one this explanation follows"),
                emit,
            ),
        }
    }

    /// A rule that changes nothing of where the connection goes: the next rule runs.
    fn go_on(&mut self, hit: Hit<'_>, does: String, mut branch: Branch, emit: &mut dyn FnMut(Branch, Flow)) {
        branch.steps.push(hit.step(does));
        self.after(hit.hook, hit.at, branch, hit.depth, emit)
    }

    /// Runs the chain `target`: what returns from it goes on after the rule for a
    /// jump, and returns from the calling chain for a goto.
    fn jump(
        &mut self,
        hit: Hit<'_>,
        target: &str,
        goto: bool,
        mut branch: Branch,
        emit: &mut dyn FnMut(Branch, Flow),
    ) {
        let Some(chain) = self.rules.tables[hit.at.table].chain(target) else {
            return stop(
                branch,
                hit.at,
                format!("it leads to the chain {target}, which the dump does not hold"),
                emit,
            );
        };
        branch
            .steps
            .push(hit.step(format!("{} {target}", if goto { "goto" } else { "jump" })));
        let mut returned = Vec::new();
        let entry = Entry {
            table: hit.at.table,
            chain,
            from: 0,
        };
        self.run(
            hit.hook,
            entry,
            branch,
            hit.depth + 1,
            &mut |b, flow| match flow {
                Flow::Ended => emit(b, Flow::Ended),
                Flow::Returned => returned.push(b),
            },
        );
        for b in returned {
            if goto {
                emit(b, Flow::Returned);
            } else {
                self.after(hit.hook, hit.at, b, hit.depth, emit);
            }
        }
    }

    /// `… vmap @map`: the action of the element the connection's key finds; with
    /// none, the next rule runs.
    fn vmap(
        &mut self,
        hit: Hit<'_>,
        key: &[Field],
        map: &SetRef,
        mut branch: Branch,
        emit: &mut dyn FnMut(Branch, Flow),
    ) {
        let rules = self.rules;
        let Some(elements) = rules.tables[hit.at.table].elements(map) else {
            return stop(branch, hit.at, not_in_dump(map), emit);
        };
        match find_element(elements, key, &branch.packet) {
            Lookup::Found(element) => {
                let Some(action) = element.action.clone() else {
                    return stop(
                        branch,
                        hit.at,
                        format!("the element {} of {} has no verdict", element.text, set_name(map)),
                        emit,
                    );
                };
                let via = format!("{} finds {}", set_name(map), element.text);
                self.act(
                    Hit {
                        via: Some(&via),
                        ..hit
                    },
                    &action,
                    branch,
                    emit,
                )
            }
            Lookup::Missing => {
                branch.steps.push(Step {
                    hook: hit.hook,
                    at: hit.at,
                    kind: StepKind::Skipped {
                        why: format!("{} has no element for this connection", set_name(map)),
                    },
                });
                self.after(hit.hook, hit.at, branch, hit.depth, emit)
            }
            Lookup::Undecided(why) => stop(branch, hit.at, why, emit),
        }
    }

    /// `numgen random mod N vmap { … }`: a branch for each element, with the share of
    /// the numbers it holds.
    fn numgen(
        &mut self,
        hit: Hit<'_>,
        modulus: u32,
        map: &SetRef,
        branch: Branch,
        emit: &mut dyn FnMut(Branch, Flow),
    ) {
        let rules = self.rules;
        let Some(elements) = rules.tables[hit.at.table].elements(map) else {
            return stop(branch, hit.at, not_in_dump(map), emit);
        };
        let modulus = f64::from(modulus.max(1));
        let mut rest = branch.share;
        for element in elements {
            let Some(KeyPart::Int(lo, hi)) = element.key.first() else {
                continue;
            };
            let Some(action) = element.action.clone() else {
                continue;
            };
            let part = ((hi.saturating_sub(*lo) + 1) as f64 / modulus).min(1.0);
            let mut b = branch.clone();
            b.share *= part;
            rest -= b.share;
            self.may_branch();
            let via = format!("numgen picks {}", element.text);
            self.act(
                Hit {
                    share: part,
                    via: Some(&via),
                    ..hit
                },
                &action,
                b,
                emit,
            );
        }
        if rest > 1e-9 {
            // Numbers no element holds: the rule does nothing for them.
            let mut b = branch;
            b.share = rest;
            self.after(hit.hook, hit.at, b, hit.depth, emit);
        }
    }
}

/// A verdict (or a source NAT) that ends the branch in this chain.
fn end(hit: Hit<'_>, does: &str, end: End, mut branch: Branch, emit: &mut dyn FnMut(Branch, Flow)) {
    branch.steps.push(hit.step(does.to_string()));
    branch.end = end;
    emit(branch, Flow::Ended)
}

/// Binds an address translation to the connection: the nat chain's verdict, after
/// which the next base chain at the hook runs.
fn bind(hit: Hit<'_>, translation: Translation, mut branch: Branch, emit: &mut dyn FnMut(Branch, Flow)) {
    let does = if translation.redirect {
        format!("redirect to this node's port {}", translation.to.port())
    } else {
        format!("dnat to {}", translation.to)
    };
    branch.steps.push(hit.step(does));
    branch.packet.translated = Some(translation);
    branch.end = End::Accepted;
    emit(branch, Flow::Ended)
}

/// A DNAT to `to`: delivered here when it is the address connected to or loopback.
fn dnat(to: DnatTo, packet: &Packet, by: RuleRef) -> Translation {
    let local = match packet.destination {
        Destination::Addr(ip) => ip == to.addr,
        Destination::AnyNodeAddress(_) => false,
    } || to.addr.is_loopback();
    Translation {
        to: target_of(to, packet.port),
        local,
        redirect: false,
        by,
    }
}

/// A REDIRECT to this node's `port` (the connection's own when none is given), at
/// the address connected to; "any node address" stands as loopback.
fn redirect(port: Option<u16>, packet: &Packet, by: RuleRef) -> Translation {
    let here = match packet.destination {
        Destination::Addr(ip) => ip,
        Destination::AnyNodeAddress(Family::Ipv4) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Destination::AnyNodeAddress(Family::Ipv6) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    };
    Translation {
        to: SocketAddr::new(here, port.unwrap_or(packet.port)),
        local: true,
        redirect: true,
        by,
    }
}

fn not_in_dump(map: &SetRef) -> String {
    format!("the map {} is not in the dump", set_name(map))
}
