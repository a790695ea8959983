use super::*;
use crate::testing::nf_messages::{NEWRULE, new_generation, rule};

const DELRULE: u8 = 8;

/// Runs a classic BPF program as the kernel does on a datagram: the bytes kept (0:
/// dropped). A load past the end drops, as in the kernel.
fn run(program: &[Insn], packet: &[u8]) -> u32 {
    let (mut a, mut x, mut mem) = (0u32, 0u32, [0u32; 16]);
    let mut pc = 0;
    loop {
        let insn = program[pc];
        pc += 1;
        let load = |at: u32, size: usize| -> Option<u32> {
            let bytes = packet.get(at as usize..at as usize + size)?;
            Some(bytes.iter().fold(0u32, |v, b| v << 8 | u32::from(*b)))
        };
        match insn.code & 0x07 {
            LD => {
                let size = match insn.code & 0x18 {
                    B => 1,
                    H => 2,
                    _ => 4,
                };
                a = match insn.code & 0xe0 {
                    IND => match load(x.wrapping_add(insn.k), size) {
                        Some(v) => v,
                        None => return 0,
                    },
                    LEN => packet.len() as u32,
                    MEM => mem[insn.k as usize],
                    other => panic!("load mode {other:#x}"),
                };
            }
            LDX => {
                x = match insn.code & 0xe0 {
                    0 => insn.k,
                    MEM => mem[insn.k as usize],
                    other => panic!("ldx mode {other:#x}"),
                }
            }
            ST => mem[insn.k as usize] = a,
            ALU => {
                let operand = if insn.code & SRC_X != 0 { x } else { insn.k };
                a = match insn.code & 0xf0 {
                    ADD => a.wrapping_add(operand),
                    AND => a & operand,
                    LSH => a << operand,
                    other => panic!("alu op {other:#x}"),
                }
            }
            JMP => {
                let operand = if insn.code & SRC_X != 0 { x } else { insn.k };
                let taken = match insn.code & 0xf0 {
                    JA => {
                        pc += insn.k as usize;
                        continue;
                    }
                    JEQ => a == operand,
                    JGT => a > operand,
                    JGE => a >= operand,
                    other => panic!("jump op {other:#x}"),
                };
                pc += usize::from(if taken { insn.jt } else { insn.jf });
            }
            RET => return insn.k,
            MISC => {
                if insn.code & 0xf8 == TXA {
                    a = x;
                } else {
                    x = a;
                }
            }
            other => panic!("class {other}"),
        }
    }
}

fn known(family: u8, table: &str, chain: &str) -> KnownChain {
    KnownChain {
        family,
        table: table.into(),
        chain: chain.into(),
    }
}

fn nodeports() -> Vec<Insn> {
    program(&[
        known(2, "nat", "KUBE-NODEPORTS"),
        known(2, "filter", "KUBE-NODEPORTS"),
    ])
    .expect("a filter")
}

/// A rule message as the kernel sends it: expressions follow the chain's name.
fn kernel_rule(kind: u8, family: u8, table: &str, chain: &str) -> Vec<u8> {
    let mut message = rule(kind, family, table, chain);
    message.extend_from_slice(&[0; 200]);
    let len = u32::try_from(message.len()).unwrap();
    message[..4].copy_from_slice(&len.to_ne_bytes());
    message
}

fn datagram(messages: &[Vec<u8>]) -> Vec<u8> {
    messages.concat()
}

#[test]
fn a_datagram_of_rules_of_known_chains_only_is_dropped() {
    let filter = nodeports();
    assert!(filter.len() <= MAX_INSNS);
    let rewrite = datagram(&[
        kernel_rule(DELRULE, 2, "nat", "KUBE-NODEPORTS"),
        kernel_rule(DELRULE, 2, "nat", "KUBE-NODEPORTS"),
        kernel_rule(NEWRULE, 2, "filter", "KUBE-NODEPORTS"),
        kernel_rule(NEWRULE, 2, "nat", "KUBE-NODEPORTS"),
    ]);
    assert_eq!(run(&filter, &rewrite), DROP);
    assert_eq!(
        run(&filter, &kernel_rule(NEWRULE, 2, "nat", "KUBE-NODEPORTS")),
        DROP
    );
}

#[test]
fn anything_else_in_a_datagram_keeps_it_whole() {
    let filter = nodeports();
    let ours = || kernel_rule(NEWRULE, 2, "nat", "KUBE-NODEPORTS");
    let others = [
        // The generation that closes a commit.
        new_generation(7),
        kernel_rule(NEWRULE, 2, "nat", "KUBE-SEP-ABC"),
        // A name the known one begins with, or that begins with it.
        kernel_rule(NEWRULE, 2, "nat", "KUBE-NODEPORT"),
        kernel_rule(NEWRULE, 2, "nat", "KUBE-NODEPORTS2"),
        kernel_rule(NEWRULE, 10, "nat", "KUBE-NODEPORTS"),
        kernel_rule(NEWRULE, 2, "mangle", "KUBE-NODEPORTS"),
        // A chain's own message, and a rule without expressions (too short to check).
        crate::testing::nf_messages::message(3, 2, &[(1, b"nat\0"), (3, b"KUBE-NODEPORTS\0")]),
        rule(NEWRULE, 2, "nat", "KUBE-NODEPORTS"),
    ];
    for other in others {
        for at in 0..3 {
            let mut messages = vec![ours(), ours()];
            messages.insert(at, other.clone());
            assert_eq!(run(&filter, &datagram(&messages)), ACCEPT, "{other:?} at {at}");
        }
    }
}

#[test]
fn lengths_that_do_not_add_up_keep_the_datagram() {
    let filter = nodeports();
    let whole = datagram(&[
        kernel_rule(NEWRULE, 2, "nat", "KUBE-NODEPORTS"),
        kernel_rule(NEWRULE, 2, "nat", "KUBE-NODEPORTS"),
    ]);
    // Cut anywhere inside the second message, or claiming more than is there.
    for cut in [whole.len() - 1, whole.len() / 2 + 3, whole.len() / 2 + 30] {
        assert_eq!(run(&filter, &whole[..cut]), ACCEPT, "cut at {cut}");
    }
    let mut long = whole.clone();
    long[..4].copy_from_slice(&100_000u32.to_ne_bytes());
    assert_eq!(run(&filter, &long), ACCEPT);
    assert_eq!(run(&filter, &[]), ACCEPT);
}

#[test]
fn more_messages_than_unrolled_keep_the_datagram() {
    let filter = nodeports();
    let many: Vec<_> = (0..=MAX_MESSAGES)
        .map(|_| kernel_rule(NEWRULE, 2, "nat", "KUBE-NODEPORTS"))
        .collect();
    assert_eq!(run(&filter, &datagram(&many)), ACCEPT);
}

#[test]
fn names_that_cannot_be_checked_make_no_filter() {
    assert!(program(&[]).is_none());
    assert!(program(&[known(2, "nat", "")]).is_none());
    assert!(program(&[known(2, "nat", &"K".repeat(MAX_CHAIN + 1))]).is_none());
    // Four of the longest names still fit the instruction budget.
    let longest: Vec<_> = (0..4)
        .map(|i| {
            known(
                2,
                &"t".repeat(MAX_TABLE),
                &format!("{i}{}", "K".repeat(MAX_CHAIN - 1)),
            )
        })
        .collect();
    if let Some(p) = program(&longest) {
        assert!(p.len() <= MAX_INSNS, "{}", p.len());
    }
    // One long name still leaves a useful filter.
    let long = program(&[known(2, "nat", &"K".repeat(MAX_CHAIN))]).expect("a filter");
    assert!(long.len() <= MAX_INSNS);
    assert_eq!(
        run(&long, &kernel_rule(DELRULE, 2, "nat", &"K".repeat(MAX_CHAIN))),
        DROP
    );
}
