//! The cluster's NodePort allocation table (`portdrift ports`): every number the API
//! server has handed out, who holds it, which numbers collide, and what is free.
//!
//! Pure: claims in, a table out, rendered as text or serialized as JSON.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::ops::RangeInclusive;

use serde::Serialize;

use crate::heart::model::Protocol;
use crate::heart::views::claims::{Claim, ClaimProblem};

/// How many of the largest free blocks the table lists.
pub const LARGEST_BLOCKS: usize = 5;

/// A run of consecutive port numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Block {
    pub first: u16,
    pub last: u16,
    pub size: u32,
}

impl Block {
    fn new(first: u16, last: u16) -> Block {
        Block {
            first,
            last,
            size: u32::from(last) - u32::from(first) + 1,
        }
    }
}

/// One row: a claim, and what the table knows about its number.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Allocation {
    #[serde(flatten)]
    pub claim: Claim,
    /// The same Service holds this number for more than one protocol (TCP and UDP
    /// DNS, say): allowed, and worth seeing.
    pub shared_across_protocols: bool,
    /// Another claim holds this number too (see `collisions`).
    pub collision: bool,
    /// Inside the NodePort range (outside: the range was changed, or a file is from
    /// another cluster).
    pub in_range: bool,
}

/// A number held twice: by two Services (whatever the protocols: the allocator
/// counts numbers), by one Service twice for one protocol, or by a health-check node
/// port and a traffic port.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Collision {
    pub port: u16,
    pub holders: Vec<Claim>,
    /// Two holders use one protocol: kube-proxy programs only one of them, the other
    /// Service is unreachable on this port.
    pub same_protocol: bool,
}

/// The free part of the range.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FreePorts {
    pub count: u32,
    /// The largest runs of free numbers, largest first (then lowest first).
    pub largest_blocks: Vec<Block>,
    /// The numbers to hand out next, in order: the lowest free ones of the static
    /// band, then the lowest above it.
    pub next: Vec<u16>,
    /// The API server's static band (KEP-3668): the lowest `min(max(16, size/32), 128)`
    /// numbers of the range, which its allocator takes from last.
    pub static_band: Block,
}

/// The cluster's NodePort allocation table: every number held and by whom, the
/// collisions, and the free ports.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct AllocationTable {
    pub range: Block,
    /// Services that hold at least one number.
    pub services: usize,
    /// Distinct numbers held, in the range or not.
    pub allocated_ports: usize,
    /// Sorted by port, protocol, Service.
    pub allocations: Vec<Allocation>,
    pub collisions: Vec<Collision>,
    pub free: FreePorts,
    /// Values that could not be read (the table may miss what they hold).
    pub problems: Vec<ClaimProblem>,
}

impl AllocationTable {
    /// 1 when a number collides (so a script can gate on it), else 0.
    pub fn exit_code(&self) -> u8 {
        u8::from(!self.collisions.is_empty())
    }
}

/// Builds the table from every Service's claims.
pub fn allocation_table(
    mut claims: Vec<Claim>,
    range: RangeInclusive<u16>,
    next: usize,
    problems: Vec<ClaimProblem>,
) -> AllocationTable {
    claims.sort();
    claims.dedup();
    let by_number = group_by_number(&claims);
    let collisions: Vec<Collision> = by_number
        .iter()
        .filter_map(|(&port, holders)| collision(port, holders))
        .collect();
    let allocations = claims
        .iter()
        .map(|claim| {
            let holders = &by_number[&claim.port];
            Allocation {
                claim: claim.clone(),
                shared_across_protocols: holders.iter().any(|h| h.protocol != claim.protocol)
                    && holders.iter().all(|h| h.service == claim.service),
                collision: collision(claim.port, holders).is_some(),
                in_range: range.contains(&claim.port),
            }
        })
        .collect();
    let services = {
        let mut names: Vec<&str> = claims.iter().map(|c| c.service.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names.len()
    };
    let taken: Vec<u16> = by_number.keys().copied().collect();
    AllocationTable {
        range: Block::new(*range.start(), *range.end()),
        services,
        allocated_ports: taken.len(),
        allocations,
        collisions,
        free: free_ports(&range, &taken, next),
        problems,
    }
}

/// Claims by number, each group in claim order.
fn group_by_number(claims: &[Claim]) -> BTreeMap<u16, Vec<&Claim>> {
    let mut by_number: BTreeMap<u16, Vec<&Claim>> = BTreeMap::new();
    for claim in claims {
        by_number.entry(claim.port).or_default().push(claim);
    }
    by_number
}

/// The collision on `port`, if its holders collide.
fn collision(port: u16, holders: &[&Claim]) -> Option<Collision> {
    let first = holders.first()?;
    let several_services = holders.iter().any(|h| h.service != first.service);
    let health_check_and_other = holders.len() > 1 && holders.iter().any(|h| h.health_check);
    let mut protocols: Vec<Protocol> = holders.iter().map(|h| h.protocol).collect();
    protocols.sort_unstable();
    let before = protocols.len();
    protocols.dedup();
    let same_protocol = protocols.len() < before;
    (several_services || health_check_and_other || same_protocol).then(|| Collision {
        port,
        holders: holders.iter().map(|h| (*h).clone()).collect(),
        same_protocol,
    })
}

/// The API server's static band of `range` (KEP-3668, GA in 1.29): the lowest
/// `min(max(16, size/32), 128)` numbers. Its dynamic allocator takes random numbers
/// from above the band first, so a number picked by hand from inside the band is the
/// least likely to be taken by an auto-allocated Service before the manifest lands.
pub fn static_band(range: &RangeInclusive<u16>) -> Block {
    let size = u32::from(*range.end()) - u32::from(*range.start()) + 1;
    let band = (size / 32).clamp(16, 128).min(size);
    let last = u32::from(*range.start()) + band - 1;
    Block::new(*range.start(), u16::try_from(last).unwrap_or(*range.end()))
}

/// The free numbers to hand out, `count` of them: the lowest free numbers of the static
/// band, then the lowest free numbers above it. Deterministic, so that two runs (or
/// two teams reading the same output) agree; see [`static_band`] for why low first.
pub fn next_free(range: &RangeInclusive<u16>, taken: &[u16], count: usize) -> Vec<u16> {
    range
        .clone()
        .filter(|p| taken.binary_search(p).is_err())
        .take(count)
        .collect()
}

/// Free numbers of `range`, given the sorted, deduplicated numbers `taken`.
fn free_ports(range: &RangeInclusive<u16>, taken: &[u16], next: usize) -> FreePorts {
    let blocks = free_blocks(range, taken);
    let count = blocks.iter().map(|b| b.size).sum();
    let mut largest = blocks;
    largest.sort_by(|a, b| b.size.cmp(&a.size).then(a.first.cmp(&b.first)));
    largest.truncate(LARGEST_BLOCKS);
    FreePorts {
        count,
        largest_blocks: largest,
        next: next_free(range, taken, next),
        static_band: static_band(range),
    }
}

/// The maximal runs of free numbers in `range`, lowest first.
fn free_blocks(range: &RangeInclusive<u16>, taken: &[u16]) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut start = Some(*range.start());
    for &port in taken.iter().filter(|p| range.contains(p)) {
        if let Some(first) = start
            && port > first
        {
            blocks.push(Block::new(first, port - 1));
        }
        start = port.checked_add(1).filter(|p| range.contains(p));
    }
    if let Some(first) = start {
        blocks.push(Block::new(first, *range.end()));
    }
    blocks
}

/// The table for a terminal: one line per allocation, sorted by port, then the
/// collisions, the free ports and the problems.
pub fn render_table(table: &AllocationTable) -> String {
    let mut out = String::new();
    let range = &table.range;
    let _ = writeln!(
        out,
        "NodePort range {}-{}: {} ports allocated to {} Services ({} rows), {} free",
        range.first,
        range.last,
        table.allocated_ports,
        table.services,
        table.allocations.len(),
        table.free.count
    );
    if !table.allocations.is_empty() {
        out.push('\n');
        render_rows(&mut out, &table.allocations);
    }
    render_collisions(&mut out, &table.collisions);
    render_free(&mut out, &table.free);
    if !table.problems.is_empty() {
        let _ = writeln!(out, "\nnot read (what they hold may be missing above):");
        for p in &table.problems {
            let _ = writeln!(out, "  {}: {}", p.service, p.problem);
        }
    }
    out
}

fn render_rows(out: &mut String, allocations: &[Allocation]) {
    let width = |f: &dyn Fn(&Allocation) -> usize, title: &str| {
        allocations.iter().map(f).max().unwrap_or(0).max(title.len())
    };
    let service_w = width(&|a| a.claim.service.len(), "SERVICE");
    let name_w = width(&|a| a.claim.port_name.as_deref().map_or(1, str::len), "PORT-NAME");
    let type_w = width(&|a| a.claim.service_type.len(), "TYPE");
    let _ = writeln!(
        out,
        "{:<5}  {:<5}  {:<service_w$}  {:<name_w$}  {:<type_w$}  NOTES",
        "PORT", "PROTO", "SERVICE", "PORT-NAME", "TYPE"
    );
    for a in allocations {
        let line = format!(
            "{:<5}  {:<5}  {:<service_w$}  {:<name_w$}  {:<type_w$}  {}",
            a.claim.port,
            a.claim.protocol.as_str(),
            a.claim.service,
            a.claim.port_name.as_deref().unwrap_or("-"),
            a.claim.service_type,
            notes(a)
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// The NOTES column.
fn notes(a: &Allocation) -> String {
    let mut notes = Vec::new();
    if a.collision {
        notes.push("COLLISION");
    }
    if a.claim.health_check {
        notes.push("health-check node port");
    }
    if a.shared_across_protocols {
        notes.push("shared across protocols");
    }
    if !a.in_range {
        notes.push("outside the range");
    }
    notes.join(", ")
}

fn render_collisions(out: &mut String, collisions: &[Collision]) {
    if collisions.is_empty() {
        return;
    }
    let _ = writeln!(out, "\ncollisions ({}):", collisions.len());
    for c in collisions {
        let holders: Vec<String> = c
            .holders
            .iter()
            .map(|h| {
                let what = if h.health_check {
                    "health check".to_string()
                } else {
                    h.port_name.clone().unwrap_or_else(|| "-".into())
                };
                format!("{} ({} {what})", h.service, h.protocol.as_str())
            })
            .collect();
        let effect = if c.same_protocol {
            "kube-proxy programs one of them; the other is unreachable on this port"
        } else {
            "the API server allocates numbers, not protocol/port pairs"
        };
        let _ = writeln!(out, "  {}: {} — {effect}", c.port, holders.join(", "));
    }
}

fn render_free(out: &mut String, free: &FreePorts) {
    if free.count == 0 {
        let _ = writeln!(
            out,
            "\nfree: none: the range is exhausted (new NodePort and LoadBalancer Services will fail)"
        );
        return;
    }
    let blocks: Vec<String> = free
        .largest_blocks
        .iter()
        .map(|b| match b.size {
            1 => format!("{}", b.first),
            n => format!("{}-{} ({n})", b.first, b.last),
        })
        .collect();
    let _ = writeln!(
        out,
        "\nfree: {}; largest blocks: {}",
        free.count,
        blocks.join(", ")
    );
    if !free.next.is_empty() {
        let next: Vec<String> = free.next.iter().map(u16::to_string).collect();
        let band = free.static_band;
        let _ = writeln!(
            out,
            "next free: {} (lowest first, from the static band {}-{} that dynamic allocation avoids)",
            next.join(" "),
            band.first,
            band.last
        );
    }
}

#[cfg(test)]
mod tests;
