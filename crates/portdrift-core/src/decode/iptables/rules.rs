//! The nat and filter rules NodePort analysis keeps: dispatch rules, DNATs, hostPorts.

// FxHash: chain names are hashed once per rule line; SipHash's DoS resistance buys
// nothing for a dump read from the local kernel and costs measurably at 240k lines.

use crate::heart::kube_proxy;
use crate::heart::model::{DestMatch, MalformedRule, Protocol, Verdict};

use super::args::*;
use super::values::*;
use super::*;

impl Parser {
    pub(super) fn nat_rule(&mut self, number: u32, text: &str, chain: &str, args: &RuleArgs<'_>) {
        // iptables-save prints a chain's rules together: remember the last chain.
        let chain_id = match &self.last_nat_chain {
            Some((name, id)) if **name == *chain => *id,
            _ => {
                let id = self.nat.chain_id(chain, 0);
                self.last_nat_chain = Some((self.nat.chains[id as usize].name.clone(), id));
                id
            }
        };
        let target = args.target.as_deref().unwrap_or("");
        let mut dispatch_target = None;
        if target == "DNAT" {
            let kube_chain = chain.starts_with("KUBE-");
            match args.to_destination.as_deref().map(parse_dnat_destination) {
                Some(Ok((ip, port))) if kube_chain && (ip.is_unspecified() || port == Some(0)) => {
                    self.malformed_rule(
                        "nat",
                        chain,
                        number,
                        text,
                        format!(
                            "DNATs to {}, an address no packet can be sent to",
                            args.to_destination.as_deref().unwrap_or("")
                        ),
                    );
                    return;
                }
                Some(Ok((ip, port))) => {
                    let id = self.dnats.len() as u32;
                    self.dnats.push(Dnat {
                        ip,
                        port,
                        chain: chain_id,
                        rule: self.rule_text(number, text),
                        dport: args.dport.as_deref().and_then(|p| p.parse().ok()),
                    });
                    dispatch_target = Some(DispatchTarget::Dnat(id));
                }
                Some(Err(reason)) => {
                    self.unparsed(number, text, reason);
                    return;
                }
                None if kube_chain => {
                    self.malformed_rule(
                        "nat",
                        chain,
                        number,
                        text,
                        "is a DNAT without a destination (--to-destination)".into(),
                    );
                    return;
                }
                None => {
                    self.unparsed(number, text, "DNAT without --to-destination");
                    return;
                }
            }
        } else if let Some(target_id) = self.nat.find(target) {
            if self.nat.chains[target_id as usize].declared == 0 {
                self.check_jump(TableKind::Nat, target, number, text);
            }
            self.nat.jumps.push((chain_id, target_id));
            self.nat.chains[target_id as usize].referenced = true;
            dispatch_target = Some(DispatchTarget::Chain(target_id));
        } else if target.starts_with("KUBE-") {
            // A jump to a chain the dump never declares: keep it so the path can say so.
            self.check_jump(TableKind::Nat, target, number, text);
            let target_id = self.nat.chain_id(target, 0);
            self.nat.jumps.push((chain_id, target_id));
            self.nat.chains[target_id as usize].referenced = true;
            dispatch_target = Some(DispatchTarget::Chain(target_id));
        }
        if chain == CNI_HOSTPORT_CHAIN {
            if let Some(DispatchTarget::Chain(target_id)) = dispatch_target {
                self.push_hostport(number, text, args, target_id);
            }
            return;
        }
        if chain != "KUBE-NODEPORTS" {
            return;
        }
        // KUBE-MARK-MASQ only marks; the next rule decides (pre-1.24 layout).
        if matches!(target, "KUBE-MARK-MASQ" | "KUBE-MARK-DROP" | "RETURN" | "") {
            return;
        }
        let Some(target) = dispatch_target else {
            self.unparsed(
                number,
                text,
                format!("NodePort rule with an unexpected target {target}"),
            );
            return;
        };
        self.push_dispatch(number, text, "KUBE-NODEPORTS", TableKind::Nat, args, target);
    }

    pub(super) fn malformed_rule(
        &mut self,
        table: &str,
        chain: &str,
        number: u32,
        text: &str,
        problem: String,
    ) {
        self.malformed.push(MalformedRule {
            table: table.to_string(),
            chain: chain.to_string(),
            rule: self.rule_text(number, text),
            problem,
        });
    }

    pub(super) fn push_hostport(&mut self, number: u32, text: &str, args: &RuleArgs<'_>, chain: u32) {
        let Some(protocol) = args.protocol.as_deref().and_then(Protocol::parse) else {
            return;
        };
        let ports = match (args.dports.as_deref(), args.dport.as_deref()) {
            (Some(list), _) => parse_port_list(list),
            (None, Some(p)) => parse_port_list(p),
            (None, None) => None,
        };
        let Some(ports) = ports else {
            self.unparsed(number, text, "hostPort rule without a readable destination port");
            return;
        };
        self.hostports.push(HostPortEntry {
            protocol,
            ports,
            chain,
            rule: self.rule_text(number, text),
        });
    }

    pub(super) fn filter_rule(&mut self, number: u32, text: &str, chain: &str, args: &RuleArgs<'_>) {
        let target = args.target.as_deref().unwrap_or("");
        // The iptables proxier's per-Service verdicts (a clusterIP's REJECT for a Service
        // without endpoints, too) show its mode where the nat table is not in the dump.
        if matches!(chain, "KUBE-SERVICES" | "KUBE-EXTERNAL-SERVICES") && matches!(target, "REJECT" | "DROP")
        {
            self.filter_verdicts += 1;
        }
        let (chain_name, verdict) = match (chain, target) {
            ("KUBE-EXTERNAL-SERVICES", "REJECT") if args.dst_type_local => {
                ("KUBE-EXTERNAL-SERVICES", Verdict::Reject)
            }
            ("KUBE-EXTERNAL-SERVICES", "DROP") if args.dst_type_local => {
                ("KUBE-EXTERNAL-SERVICES", Verdict::Drop)
            }
            // Releases before KUBE-EXTERNAL-SERVICES wrote NodePort REJECTs here.
            ("KUBE-SERVICES", "REJECT") if args.dst_type_local => ("KUBE-SERVICES", Verdict::Reject),
            ("KUBE-NODEPORTS", "ACCEPT") => ("KUBE-NODEPORTS", Verdict::HealthCheckAccept),
            _ => return,
        };
        self.push_dispatch(
            number,
            text,
            chain_name,
            TableKind::Filter,
            args,
            DispatchTarget::Verdict(verdict),
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_dispatch(
        &mut self,
        number: u32,
        text: &str,
        chain: &'static str,
        table: TableKind,
        args: &RuleArgs<'_>,
        target: DispatchTarget,
    ) {
        let Some(protocol) = args.protocol.as_deref().and_then(Protocol::parse) else {
            self.unparsed(
                number,
                text,
                "NodePort rule without a tcp/udp/sctp protocol match",
            );
            return;
        };
        let Some(port) = args.dport.as_deref().and_then(|p| p.parse::<u16>().ok()) else {
            self.unparsed(number, text, "NodePort rule without a single destination port");
            return;
        };
        let dest = match args.dest.as_deref() {
            None => DestMatch::Any,
            Some(d) if !args.dest_negated && args.nfacct && is_loopback_net(d) => DestMatch::Localhost,
            Some(d) if !args.dest_negated && is_loopback_net(d) => DestMatch::Localhost,
            Some(d) if args.dest_negated => DestMatch::Addr(format!("!{d}")),
            Some(d) => DestMatch::Addr(d.to_string()),
        };
        // A jump to one of kube-proxy's hashed chains names its Service by the hash;
        // its comment is decoded only when a report needs it (`undecoded_comment`),
        // which saves three allocations per rule on a healthy node.
        let hashed = match target {
            DispatchTarget::Chain(id) => kube_proxy::chain_hash(&self.nat.chains[id as usize].name).is_some(),
            _ => false,
        };
        let (comment, undecoded_comment) = if hashed {
            (None, comment_service_span(text, args))
        } else {
            (args.comment.as_deref().and_then(service_of_comment), None)
        };
        self.dispatch.push(Dispatch {
            table,
            chain,
            protocol,
            port,
            dest,
            target,
            comment,
            undecoded_comment,
            rule: self.rule_text(number, text),
        });
    }
}
