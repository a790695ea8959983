//! Where a scan's inputs come from: a [`Source`] answers each [`Input`]. A bundle
//! directory (`sources::bundle::BundleDir`) answers from its files; the live node
//! (`sources::live::LiveNode`) from the tools, netlink, `/proc` and kube-proxy. The
//! reading logic in `scan::input` serves both, so a live scan and an offline scan of a
//! snapshot of the same node read the same bytes the same way.

use std::collections::HashSet;
use std::convert::Infallible;
use std::io::{self, BufRead};
use std::time::Duration;

use crate::heart::input::Input;
use crate::heart::model::{Lookup, RuleDump};
use crate::heart::outcome::{InputState, InputStatus};
use crate::sources::owners::Owners;

/// One input as a source delivered it.
#[derive(Debug)]
pub struct Fetched<T> {
    /// How getting it went. None: the source has no such input and says nothing about
    /// it (an optional bundle file that is not there): it is not reported at all.
    pub state: Option<InputState>,
    /// What the consumer returned; None when it never ran.
    pub value: Option<io::Result<T>>,
    /// What the source said about it (a tool's warnings, a recorded failure).
    pub notes: Vec<String>,
    /// Bytes handed to the consumer.
    pub bytes: Option<u64>,
    /// How long getting it took.
    pub elapsed: Option<Duration>,
}

impl<T> Fetched<T> {
    /// Not there, nothing to say.
    pub fn not_present() -> Fetched<T> {
        Fetched {
            state: None,
            value: None,
            notes: Vec::new(),
            bytes: None,
            elapsed: None,
        }
    }

    /// A state with a note and no content.
    pub fn with_state(state: InputState, note: impl Into<String>) -> Fetched<T> {
        Fetched {
            state: Some(state),
            notes: vec![note.into()],
            ..Fetched::not_present()
        }
    }

    /// The same fetch, its value passed through `f`.
    pub fn map<U>(mut self, f: impl FnOnce(T) -> U) -> Fetched<U> {
        let value = self.value.take().map(|v| v.map(f));
        self.with_value(value)
    }

    /// The same fetch's state, notes and figures around another value (its own is
    /// dropped: take it first).
    fn with_value<U>(self, value: Option<io::Result<U>>) -> Fetched<U> {
        Fetched {
            state: self.state,
            value,
            notes: self.notes,
            bytes: self.bytes,
            elapsed: self.elapsed,
        }
    }
}

/// An input's content as a source gave it: what the consumer made of its bytes, or
/// rules the source read and parsed itself (`R`: [`Rules`] for a reader that takes
/// them, [`Infallible`] for one that takes bytes alone).
#[derive(Debug)]
pub enum Read<T, R> {
    Bytes(T),
    Rules(R),
}

impl<T> Read<T, Infallible> {
    /// The consumer's value: a reader of bytes alone is never given rules.
    pub fn into_bytes(self) -> T {
        match self {
            Read::Bytes(value) => value,
            Read::Rules(never) => match never {},
        }
    }
}

impl<T, R> Fetched<Read<T, R>> {
    /// The fetch of rules when the source answered with them, else of the bytes.
    pub fn split(mut self) -> Read<Fetched<T>, Fetched<R>> {
        match self.value.take() {
            Some(Ok(Read::Rules(rules))) => Read::Rules(self.with_value(Some(Ok(rules)))),
            Some(Ok(Read::Bytes(value))) => Read::Bytes(self.with_value(Some(Ok(value)))),
            Some(Err(e)) => Read::Bytes(self.with_value(Some(Err(e)))),
            None => Read::Bytes(self.with_value(None)),
        }
    }
}

/// Rule dumps a source read and parsed itself (the live node's tables, over netlink):
/// none when the backend holds no table.
#[derive(Debug, Default)]
pub struct Rules {
    /// How the read is named in reports (`netlink: nf_tables ip (iptables-nft)`).
    pub origin: String,
    pub dumps: Vec<RuleDump>,
}

/// What a reader takes besides bytes: [`Rules`], or nothing ([`Infallible`]).
pub trait RuleAnswer: Sized + Send + 'static {
    /// How rules a source read become the answer; None for a reader of bytes alone,
    /// for which a source reads no rules (a snapshot copies the tool's text).
    const FROM_RULES: Option<fn(Rules) -> Self>;
}

impl RuleAnswer for Infallible {
    const FROM_RULES: Option<fn(Rules) -> Self> = None;
}

impl RuleAnswer for Rules {
    const FROM_RULES: Option<fn(Rules) -> Self> = Some(std::convert::identity);
}

/// A provider of a scan's inputs.
///
/// Shared, not exclusive: a scan reads the rule dumps, the node's other files and the
/// cluster state at once, from threads of its own, so its wall time is the longest read
/// rather than their sum. A source with state between reads keeps it behind a lock.
pub trait Source: Sync {
    /// Reads `input`, streaming its content into `consume`; or, for a reader that takes
    /// rules, may answer with rules read another way (the live node reads kube-proxy's
    /// nftables tables and iptables-nft's over netlink, and reads the tool's text when
    /// that fails, saying why first in the notes). The consumer may run on another
    /// thread while a tool prints, hence `Send + 'static`.
    fn fetch<T, R, F>(&self, input: Input, consume: F) -> Fetched<Read<T, R>>
    where
        T: Send + 'static,
        R: RuleAnswer,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static;

    /// [`Source::fetch`] of the bytes alone.
    fn fetch_bytes<T, F>(&self, input: Input, consume: F) -> Fetched<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        self.fetch::<T, Infallible, F>(input, consume)
            .map(Read::into_bytes)
    }

    /// What `input` is called in messages and findings (`iptables-nft-save.txt:99` for
    /// a bundle file, `iptables-nft-save:99` for the live tool).
    fn label(&self, input: Input) -> String {
        input.name().to_string()
    }

    /// How findings cite the rules it gives: by line of a file the reader holds, or on
    /// the live node by chain, rule number and handle (nothing keeps the listing read).
    fn lookup(&self) -> Lookup {
        Lookup::Lines
    }

    /// Whether its iptables dumps show every table the kernel has (the live node runs
    /// the tools without `-t`). A bundle's file may have been captured a table at a time.
    fn dumps_whole(&self) -> bool {
        false
    }

    /// Whether reading an input again may give another answer (the live node, whose
    /// maps change while they are walked): the reader then reads Cilium's maps twice.
    fn rereads_may_differ(&self) -> bool {
        false
    }

    /// Statuses about the source itself (an unreadable manifest), for the report.
    fn own_statuses(&self) -> Vec<InputStatus> {
        Vec::new()
    }

    /// The processes that own these socket inodes, where the source can tell (the
    /// live node can; a bundle records no processes).
    fn owners(&self, _inodes: &HashSet<u64>) -> Option<Owners> {
        None
    }
}
