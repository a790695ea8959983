//! The rule dumps of the last read, kept so that a dump the kernel says has not
//! changed is not read again.

use crate::heart::input::Input;
use crate::heart::model::{Backend, Family, RuleDump};
use crate::heart::outcome::{InputState, InputStatus, ScanInput};

/// What the last read of each rule dump gave, so an unchanged dump is not read again:
/// on a large node a dump costs far more CPU than the rest of the scan. Reuse only what
/// change notifications cover ([`RuleCache::allow_reuse`]); the rules are lent to the
/// scan and taken back with [`RuleCache::keep`], so the agent holds one copy.
#[derive(Debug, Default)]
pub struct RuleCache {
    /// The dumps whose reads are kept at all.
    keepable: Vec<Input>,
    reuse: Vec<Input>,
    entries: Vec<(Input, CachedRead)>,
    /// Where the last read put each kept dump's sources in `observed.sources`.
    lent: Vec<(Input, std::ops::Range<usize>)>,
}

#[derive(Debug, Clone)]
struct CachedRead {
    present: bool,
    statuses: Vec<InputStatus>,
    /// None while lent to a scan, or when the scan never gave them back.
    sources: Option<Vec<RuleDump>>,
}

impl RuleCache {
    /// A cache that keeps the reads of these dumps (and no others).
    pub fn keeping(dumps: &[Input]) -> RuleCache {
        RuleCache {
            keepable: dumps.to_vec(),
            ..RuleCache::default()
        }
    }

    /// The next read may reuse these dumps' last results instead of reading them.
    pub fn allow_reuse(&mut self, dumps: &[Input]) {
        self.reuse.clear();
        self.reuse.extend_from_slice(dumps);
    }

    /// Takes back the rule sources of the read that last used this cache, from the
    /// finished scan (in the order the read produced them).
    pub fn keep(&mut self, mut sources: Vec<RuleDump>) {
        for (dump, range) in std::mem::take(&mut self.lent) {
            if range.end > sources.len() {
                continue;
            }
            let taken: Vec<RuleDump> = sources
                .splice(
                    range.clone(),
                    std::iter::repeat_with(|| RuleDump::empty("", Backend::IptablesNft, Family::Ipv4))
                        .take(range.len()),
                )
                .collect();
            if let Some((_, read)) = self.entries.iter_mut().find(|(n, _)| *n == dump) {
                read.sources = Some(taken);
            }
        }
    }

    /// Forgets what an earlier read lent and never got back (that scan failed).
    pub(super) fn drop_unreturned(&mut self) {
        self.lent.clear();
    }

    fn reusable(&mut self, dump: Input) -> Option<&mut CachedRead> {
        if !self.reuse.contains(&dump) {
            return None;
        }
        self.entries
            .iter_mut()
            .find(|(n, read)| *n == dump && read.sources.is_some())
            .map(|(_, read)| read)
    }

    fn forget(&mut self, dump: Input) {
        self.entries.retain(|(n, _)| *n != dump);
    }

    /// Keeps `read` for the next scan; false when it is not kept.
    fn store(&mut self, dump: Input, read: CachedRead) -> bool {
        self.forget(dump);
        // A dump that could not be read whole is read again next time, whatever the
        // kernel says: its failure may have been passing.
        let whole = read
            .statuses
            .iter()
            .all(|s| matches!(s.status, InputState::Ok | InputState::Empty | InputState::Absent));
        let keep = whole && self.keepable.contains(&dump);
        if keep {
            self.entries.push((dump, read));
        }
        keep
    }
}

/// Reads one rule dump with `read`, or replays its last result from `cache` when that
/// may be reused.
pub(super) fn read_rules_cached(
    cache: &mut RuleCache,
    dump: Input,
    input: &mut ScanInput,
    read: impl FnOnce(&mut ScanInput) -> bool,
) -> bool {
    let start = input.observed.dumps.len();
    if let Some(last) = cache.reusable(dump) {
        let present = last.present;
        for mut status in last.statuses.clone() {
            status
                .notes
                .push("not read again: the kernel announced no rule change since the last read".into());
            input.sources.push(status);
        }
        input
            .observed
            .dumps
            .extend(last.sources.take().unwrap_or_default());
        let end = input.observed.dumps.len();
        cache.lent.push((dump, start..end));
        return present;
    }
    // The last read goes before this one starts: holding both would add a large
    // node's whole rule set to the read's peak.
    cache.forget(dump);
    let statuses_before = input.sources.len();
    let present = read(input);
    let kept = cache.store(
        dump,
        CachedRead {
            present,
            statuses: input.sources[statuses_before..].to_vec(),
            sources: None,
        },
    );
    if kept {
        cache.lent.push((dump, start..input.observed.dumps.len()));
    }
    present
}
