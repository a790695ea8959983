//! The arguments of one rule that NodePort analysis reads.

use std::borrow::Cow;

use super::tokens::{TokenError, tokens};

/// The arguments of one rule that NodePort analysis reads.
#[derive(Debug, Default)]
pub(super) struct RuleArgs<'a> {
    pub(super) protocol: Option<Cow<'a, str>>,
    pub(super) dest: Option<Cow<'a, str>>,
    pub(super) dest_negated: bool,
    pub(super) dport: Option<Cow<'a, str>>,
    /// `-m multiport --dports 80,443,30000:30010`.
    pub(super) dports: Option<Cow<'a, str>>,
    pub(super) comment: Option<Cow<'a, str>>,
    /// Where the comment's text starts, in bytes back from the end of the spec (which
    /// ends the rule's line): where a report finds the comment it left undecoded.
    pub(super) comment_from_end: usize,
    pub(super) target: Option<Cow<'a, str>>,
    pub(super) to_destination: Option<Cow<'a, str>>,
    pub(super) dst_type_local: bool,
    pub(super) nfacct: bool,
}

/// Where the last `-j `/`-g ` option starts (at the start or after a blank).
pub(super) fn last_jump(spec: &[u8]) -> Option<usize> {
    memchr::memrchr_iter(b'-', spec).find(|&i| {
        spec.get(i + 1).is_some_and(|b| matches!(b, b'j' | b'g'))
            && spec.get(i + 2) == Some(&b' ')
            && (i == 0 || spec[i - 1] == b' ')
    })
}

/// Blank-separated words (iptables-save separates arguments with single spaces).
pub(super) fn words(s: &str) -> impl Iterator<Item = &str> {
    s.split_ascii_whitespace()
}

/// Filter chains that hold NodePort REJECT/DROP/ACCEPT rules.
pub(super) const FILTER_DISPATCH_CHAINS: [&str; 3] =
    ["KUBE-EXTERNAL-SERVICES", "KUBE-SERVICES", "KUBE-NODEPORTS"];

impl<'a> RuleArgs<'a> {
    /// Reads only the target and its options. iptables-save prints the target last,
    /// so it follows the last ` -j `/` -g `; a quote after it (which kube-proxy never
    /// writes there) sends the line to the full reader instead.
    pub(super) fn read_target(spec: &'a str) -> Option<RuleArgs<'a>> {
        let Some(at) = last_jump(spec.as_bytes()) else {
            return Some(RuleArgs::default());
        };
        let tail = &spec[at..];
        if memchr::memchr(b'"', tail.as_bytes()).is_some() {
            return None;
        }
        // `-j TARGET [target options]`: split by blanks, no quoting to undo.
        let mut words = words(&tail[3..]);
        let target = words.next()?;
        let mut args = RuleArgs {
            target: Some(Cow::Borrowed(target)),
            ..RuleArgs::default()
        };
        if target == "DNAT" {
            while let Some(w) = words.next() {
                if w == "--to-destination" {
                    args.to_destination = words.next().map(Cow::Borrowed);
                }
            }
        }
        Some(args)
    }

    pub(super) fn read(spec: &'a str) -> Result<RuleArgs<'a>, TokenError> {
        let mut args = RuleArgs::default();
        let mut negate = false;
        let mut iter = tokens(spec);
        while let Some(tok) = iter.next() {
            let tok = tok?;
            let left = iter.rest();
            let mut value = || iter.next().transpose();
            match tok.as_ref() {
                "!" => {
                    negate = true;
                    continue;
                }
                "-p" | "--protocol" => args.protocol = if negate { None } else { value()? },
                "-d" | "--destination" => {
                    args.dest = value()?;
                    args.dest_negated = negate;
                }
                "--dport" | "--destination-port" => args.dport = if negate { None } else { value()? },
                "--dports" | "--destination-ports" => args.dports = if negate { None } else { value()? },
                "--comment" => {
                    let left = left.trim_start_matches([' ', '\t']);
                    args.comment_from_end = left.len() - usize::from(left.starts_with('"'));
                    args.comment = value()?;
                }
                "-j" | "--jump" | "-g" | "--goto" => args.target = value()?,
                "--to-destination" => args.to_destination = value()?,
                "--dst-type" => {
                    let v = value()?;
                    args.dst_type_local = !negate && v.as_deref() == Some("LOCAL");
                }
                "--nfacct-name" => args.nfacct = true,
                _ => {}
            }
            negate = false;
        }
        Ok(args)
    }
}
