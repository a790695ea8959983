//! A classic BPF socket filter for the change listener: it drops, in the kernel, a
//! datagram whose every message is a rule added to or deleted from a chain the
//! journal already names as changed. Such a datagram would tell the listener nothing
//! new, and a kube-proxy sync that rewrites `KUBE-NODEPORTS` at 10,000 Services
//! multicasts about 10,000 of them, which cost the agent as much CPU to receive as its
//! scans (with this filter the agent went from 5.9% to 3.2% of a core:
//! docs/performance.md#under-churn).
//!
//! The filter accepts anything it cannot prove redundant: another message kind (the
//! generation that closes each commit among them), another chain, attributes in
//! another order, a datagram with more messages than it unrolls, or a length that
//! does not add up. Every load is bounds-checked first, since a classic BPF load past
//! the end of the packet drops it.
//!
//! Hand-assembled: no maintained crate assembles classic BPF, and the program is a
//! loop unrolled over a datagram's messages, checked against a few (family, table,
//! chain) names.

use super::{NFT_MSG_DELRULE, NFT_MSG_NEWRULE};
use crate::decode::netlink::{NFGENMSG_LEN, NFNL_SUBSYS_NFTABLES, NLMSG_HDRLEN, align4};

/// One instruction, as `struct sock_filter` holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// A chain whose rule messages the filter drops.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KnownChain {
    /// `NFPROTO_*`.
    pub family: u8,
    pub table: Box<str>,
    pub chain: Box<str>,
}

// linux/bpf_common.h and linux/filter.h.
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ST: u16 = 0x02;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const MISC: u16 = 0x07;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const IND: u16 = 0x40;
const MEM: u16 = 0x60;
const LEN: u16 = 0x80;
const ADD: u16 = 0x00;
const AND: u16 = 0x50;
const LSH: u16 = 0x60;
const JA: u16 = 0x00;
const JEQ: u16 = 0x10;
const JGT: u16 = 0x20;
const JGE: u16 = 0x30;
const SRC_X: u16 = 0x08;
const TAX: u16 = 0x00;
const TXA: u16 = 0x80;

/// Keep the whole datagram, or none of it.
const ACCEPT: u32 = u32::MAX;
const DROP: u32 = 0;

/// Scratch slots: the message's start, a temporary, its end.
const M_START: u32 = 0;
const M_TMP: u32 = 1;
const M_END: u32 = 2;

/// The longest names a check is built for; a longer one is not filtered.
const MAX_TABLE: usize = 32;
const MAX_CHAIN: usize = 64;
/// The kernel's limit on a filter's length (`BPF_MAXINSNS`) is 4,096 instructions; a
/// filter is also charged against `net.core.optmem_max` (20 KiB on older kernels), so
/// this stays well under both.
const MAX_INSNS: usize = 2_000;
/// Messages unrolled per datagram at most: a datagram holds at most a page of
/// messages, and a rule message is some hundreds of bytes.
const MAX_MESSAGES: usize = 32;
/// The fewest messages worth a filter: fewer, and most datagrams would be accepted.
const MIN_MESSAGES: usize = 4;

/// The offset of the first attribute in a message.
const ATTRS: u32 = (NLMSG_HDRLEN + NFGENMSG_LEN) as u32;

fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// A 16-bit field as a classic BPF half-word load (network order) sees the host's bytes.
fn as_loaded16(v: u16) -> u32 {
    u32::from(u16::from_be_bytes(v.to_ne_bytes()))
}

/// The checks one chain's messages pass: (load code, offset from the message, value).
fn checks(known: &KnownChain) -> Option<Vec<(u16, u32, u32)>> {
    if known.table.is_empty()
        || known.chain.is_empty()
        || known.table.len() > MAX_TABLE
        || known.chain.len() > MAX_CHAIN
        || known.table.contains('\0')
        || known.chain.contains('\0')
    {
        return None;
    }
    let mut out = vec![(LD | B | IND, NLMSG_HDRLEN as u32, u32::from(known.family))];
    // A string attribute: its length (with the NUL), its type, then its bytes padded
    // with zeros to four, compared a word at a time.
    let mut at = ATTRS;
    for (kind, name) in [(1u16, &*known.table), (2u16, &*known.chain)] {
        let len = 4 + name.len() + 1;
        out.push((LD | H | IND, at, as_loaded16(len as u16)));
        out.push((LD | H | IND, at + 2, as_loaded16(kind)));
        let mut padded = name.as_bytes().to_vec();
        padded.resize(align4(name.len() + 1), 0);
        for (i, word) in padded.chunks(4).enumerate() {
            let word = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
            out.push((LD | W | IND, at + 4 + 4 * i as u32, word));
        }
        at += align4(len) as u32;
    }
    Some(out)
}

/// The filter that drops datagrams made only of rule messages of `known` chains; None
/// when none of them can be checked.
pub fn program(known: &[KnownChain]) -> Option<Vec<Insn>> {
    let entries: Vec<Vec<(u16, u32, u32)>> = known.iter().filter_map(checks).collect();
    if entries.is_empty() {
        return None;
    }
    // Bytes a message must hold for every check's load to stay inside it.
    let need = entries
        .iter()
        .flatten()
        .map(|&(code, at, _)| {
            at + match code & 0x18 {
                B => 1,
                H => 2,
                _ => 4,
            }
        })
        .max()
        .unwrap_or(ATTRS);
    let per_message = message_insns(&entries, need, true).len();
    // Beside the messages: the first instruction and the last.
    let messages = ((MAX_INSNS - 2) / per_message).min(MAX_MESSAGES);
    if messages < MIN_MESSAGES {
        return None;
    }
    // X = 0: the first message.
    let mut out = vec![stmt(LDX | W, 0)];
    for i in 0..messages {
        out.extend(message_insns(&entries, need, i == 0));
    }
    // More messages than unrolled.
    out.push(stmt(RET, ACCEPT));
    Some(out)
}

/// Accepts the datagram unless the offset in scratch `slot` is within it; leaves X at
/// the message's start.
fn within_datagram(slot: u32) -> [Insn; 5] {
    [
        stmt(LD | W | LEN, 0),
        stmt(LDX | W | MEM, slot),
        jump(JMP | JGE | SRC_X, 0, 1, 0),
        stmt(RET, ACCEPT),
        stmt(LDX | W | MEM, M_START),
    ]
}

/// The instructions for one message starting at X: they return, or leave X at the
/// next message.
fn message_insns(entries: &[Vec<(u16, u32, u32)>], need: u32, first: bool) -> Vec<Insn> {
    let mut out = vec![
        // Past the last message: every one was redundant (an empty datagram is kept).
        stmt(LD | W | LEN, 0),
        jump(JMP | JGT | SRC_X, 0, 1, 0),
        stmt(RET, if first { ACCEPT } else { DROP }),
        stmt(MISC | TXA, 0),
        stmt(ST, M_START),
        // The length field is inside the datagram.
        stmt(ALU | ADD, 4),
        stmt(ST, M_TMP),
    ];
    out.extend(within_datagram(M_TMP));
    out.extend([
        // nlmsg_len, host order, under 64 KiB: its upper half is zero.
        stmt(LD | H | IND, if cfg!(target_endian = "little") { 2 } else { 0 }),
        jump(JMP | JEQ, 0, 1, 0),
        stmt(RET, ACCEPT),
    ]);
    let (hi, lo) = if cfg!(target_endian = "little") {
        (1, 0)
    } else {
        (2, 3)
    };
    out.extend([
        stmt(LD | B | IND, hi),
        stmt(ALU | LSH, 8),
        stmt(ST, M_TMP),
        stmt(LD | B | IND, lo),
        stmt(LDX | W | MEM, M_TMP),
        stmt(ALU | ADD | SRC_X, 0),
        // Long enough for every check.
        jump(JMP | JGE, need, 1, 0),
        stmt(RET, ACCEPT),
        // Its end is inside the datagram.
        stmt(LDX | W | MEM, M_START),
        stmt(ALU | ADD | SRC_X, 0),
        stmt(ST, M_END),
    ]);
    out.extend(within_datagram(M_END));
    out.extend([
        // A rule added or deleted.
        stmt(LD | H | IND, 4),
        jump(
            JMP | JEQ,
            as_loaded16(NFNL_SUBSYS_NFTABLES << 8 | u16::from(NFT_MSG_NEWRULE)),
            2,
            0,
        ),
        jump(
            JMP | JEQ,
            as_loaded16(NFNL_SUBSYS_NFTABLES << 8 | u16::from(NFT_MSG_DELRULE)),
            1,
            0,
        ),
        stmt(RET, ACCEPT),
    ]);
    // Each known chain: a mismatch goes on to the next one; a full match to `next`.
    let mut blocks: Vec<Vec<Insn>> = Vec::new();
    for entry in entries {
        let len = 2 * entry.len() + 1;
        let mut block = Vec::with_capacity(len);
        for (i, &(code, at, value)) in entry.iter().enumerate() {
            let left = len - 2 * (i + 1);
            block.push(stmt(code, at));
            block.push(jump(JMP | JEQ, value, 0, left as u8));
        }
        blocks.push(block);
    }
    // After a matching block, its jump skips the blocks after it and the ACCEPT.
    let mut after: usize = blocks.iter().map(|b| b.len() + 1).sum();
    for mut block in blocks {
        after -= block.len() + 1;
        block.push(stmt(JMP | JA, (after + 1) as u32));
        out.extend(block);
    }
    out.push(stmt(RET, ACCEPT));
    // Next message: X = the end, aligned to four.
    out.extend([
        stmt(LD | W | MEM, M_END),
        stmt(ALU | ADD, 3),
        stmt(ALU | AND, !3),
        stmt(MISC | TAX, 0),
    ]);
    out
}

#[cfg(test)]
mod tests;
