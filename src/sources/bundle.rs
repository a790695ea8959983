//! Where a scan's inputs come from: a [`Source`] answers bundle file names. A bundle
//! directory ([`BundleDir`]) answers them from its files; the live node
//! (`sources::live::LiveNode`) from the tools, `/proc` and kube-proxy. The reading
//! logic in the parent module serves both, so a live scan and an offline scan of a
//! snapshot of the same node read the same bytes the same way.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::heart::cilium::MapKind;
use crate::heart::model::{Backend, Family, Lookup};
use crate::heart::outcome::SourceState;

/// One input as a source delivered it.
#[derive(Debug)]
pub struct Fetched<T> {
    /// How getting it went. None: the source has no such input and says nothing about
    /// it (an optional bundle file that is not there): it is not reported at all.
    pub state: Option<SourceState>,
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
    pub fn with_state(state: SourceState, note: impl Into<String>) -> Fetched<T> {
        Fetched {
            state: Some(state),
            notes: vec![note.into()],
            ..Fetched::not_present()
        }
    }
}

/// A provider of bundle files by name (`iptables-nft-save.txt`, `proc/net/tcp`, ...).
///
/// Shared, not exclusive: a scan reads the rule dumps, the node's other files and the
/// cluster state at once, from threads of its own, so its wall time is the longest read
/// rather than their sum. A source with state between reads keeps it behind a lock.
pub trait Source: Sync {
    /// Reads the input `name`, streaming its content into `consume`. The consumer may
    /// run on another thread while a tool prints, hence `Send + 'static`.
    fn fetch<T, F>(&self, name: &str, consume: F) -> Fetched<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static;

    /// What `name` is called in messages and findings (`iptables-nft-save.txt:99` for
    /// a bundle file, `iptables-nft-save:99` for the live tool).
    fn label(&self, name: &str) -> String {
        name.to_string()
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
    fn own_statuses(&self) -> Vec<crate::heart::outcome::SourceStatus> {
        Vec::new()
    }

    /// kube-proxy's nftables tables read another way than as `nft.json` bytes (the
    /// live node reads them from the kernel over netlink). None: read `nft.json`;
    /// Some(Err(why)): that way failed, and `nft.json` is read instead.
    fn nftables_direct(&self) -> Option<Result<Fetched<Vec<crate::heart::model::RuleSource>>, String>> {
        None
    }

    /// An iptables-nft dump (`iptables-nft-save.txt`, `ip6tables-nft-save.txt`) read
    /// and parsed another way than as the tool's text (the live node reads the tables
    /// over netlink). None: read the dump; Some(Err(why)): that way failed, and the
    /// dump is read instead. An Ok(None) value: the family has no iptables-nft table.
    fn iptables_direct(
        &self,
        _name: &str,
    ) -> Option<Result<Fetched<Option<crate::heart::model::RuleSource>>, String>> {
        None
    }

    /// The processes that own these socket inodes, where the source can tell (the
    /// live node can; a bundle records no processes).
    fn owners(&self, _inodes: &std::collections::HashSet<u64>) -> Option<crate::sources::owners::Owners> {
        None
    }
}

/// A reader that counts what passes through it.
pub(crate) struct Counting<R> {
    pub inner: R,
    pub count: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counting<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.count += amt as u64;
        self.inner.consume(amt);
    }
}

/// Files are read through this cap too: nothing in a bundle is legitimately larger.
pub const MAX_FILE: u64 = 256 << 20;

/// Reads a file into `consume`. Not present when it does not exist; `ok` or `empty`
/// (zero bytes) when read; `error` when it cannot be opened.
pub fn fetch_file<T, F>(path: &Path, consume: F) -> Fetched<T>
where
    F: FnOnce(&mut dyn BufRead) -> io::Result<T>,
{
    let start = std::time::Instant::now();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Fetched::not_present(),
        Err(e) => {
            return Fetched {
                state: Some(SourceState::Error),
                value: Some(Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())))),
                ..Fetched::not_present()
            };
        }
    };
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Fetched::with_state(SourceState::Error, format!("{} is a directory", path.display()));
    }
    let mut reader = Counting {
        inner: BufReader::with_capacity(64 << 10, file.take(MAX_FILE)),
        count: 0,
    };
    let value = consume(&mut reader);
    let state = if value.is_err() {
        SourceState::Error
    } else if reader.count == 0 {
        SourceState::Empty
    } else {
        SourceState::Ok
    };
    Fetched {
        state: Some(state),
        value: Some(value),
        notes: Vec::new(),
        bytes: Some(reader.count),
        elapsed: Some(start.elapsed()),
    }
}

// ------------------------------------------------------------------ the manifest

/// The manifest file a snapshot writes beside the captured files.
pub const MANIFEST_FILE: &str = "snapshot.json";

/// `snapshot.json`: how the capture of each source went, so that a bundle records what
/// could not be read (an absent tool, one that failed or hung) and a scan of the bundle
/// reports it as the live scan did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Manifest {
    /// Format version of this file.
    pub version: u32,
    /// The portdrift that wrote it.
    pub portdrift: String,
    /// When the capture started (RFC 3339, UTC).
    #[schemars(extend("format" = "date-time"))]
    pub captured_at: String,
    /// Written as the envelope's `node` ([`crate::heart::document::Document`]), and read
    /// back from it.
    #[serde(skip_serializing)]
    pub node: Option<String>,
    pub sources: Vec<ManifestEntry>,
}

/// How the capture of one bundle file went. Every key is written (null or `[]` when it
/// does not apply, as the JSON contract says); the defaults read older manifests that
/// left them out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ManifestEntry {
    /// The bundle file name (`iptables-nft-save.txt`).
    pub source: String,
    /// What it was read from (`iptables-nft-save`, `/proc/net/tcp`).
    #[serde(default)]
    pub origin: Option<String>,
    pub status: SourceState,
    /// Whether the file is in the bundle.
    #[serde(default)]
    pub file: bool,
    /// How much the source gave, when it was read.
    #[serde(default)]
    pub bytes: Option<u64>,
    /// How long reading it took, when it was read.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The largest `snapshot.json` read.
const MAX_MANIFEST: u64 = 4 << 20;

// ------------------------------------------------------------------ a bundle directory

/// A bundle directory as a [`Source`]. When it holds a `snapshot.json`, the recorded
/// outcome of each capture is applied: a dump whose tool failed or timed out is read
/// but not trusted, and a file that could not be captured is reported as the capture
/// saw it.
#[derive(Debug, Clone)]
pub struct BundleDir {
    dir: PathBuf,
    manifest: Option<Manifest>,
    manifest_problem: Option<String>,
    cluster_state: Option<PathBuf>,
}

impl BundleDir {
    /// Opens `dir`. `cluster_state` replaces the bundle's `cluster.json`.
    pub fn new(dir: &Path, cluster_state: Option<PathBuf>) -> BundleDir {
        let (manifest, manifest_problem) = match read_manifest(&dir.join(MANIFEST_FILE)) {
            Ok(m) => (m, None),
            Err(e) => (None, Some(e)),
        };
        BundleDir {
            dir: dir.to_path_buf(),
            manifest,
            manifest_problem,
            cluster_state,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    fn recorded(&self, name: &str) -> Option<&ManifestEntry> {
        self.manifest.as_ref()?.sources.iter().find(|e| e.source == name)
    }
}

fn read_manifest(path: &Path) -> Result<Option<Manifest>, String> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let mut bytes = Vec::new();
    file.take(MAX_MANIFEST)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("not a portdrift snapshot manifest: {e}"))
}

impl Source for BundleDir {
    fn fetch<T, F>(&self, name: &str, consume: F) -> Fetched<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        if name == "cluster.json"
            && let Some(path) = &self.cluster_state
        {
            return fetch_required(path, consume);
        }
        let mut fetched = fetch_file(&self.dir.join(name), consume);
        let Some(rec) = self.recorded(name) else {
            return fetched;
        };
        match fetched.state {
            // Not in the bundle: report what the capture saw.
            None => {
                fetched.state = Some(rec.status);
                fetched.notes = rec.notes.clone();
                if rec.file {
                    fetched.state = Some(SourceState::Error);
                    fetched.notes.push(format!(
                        "{MANIFEST_FILE} lists {name} as captured, but the file is missing"
                    ));
                }
            }
            Some(SourceState::Error) => {}
            Some(read) => {
                fetched.notes = rec.notes.clone();
                fetched.state = Some(match rec.status {
                    // The file's own reading decides (ok or empty).
                    SourceState::Ok | SourceState::Partial => read,
                    // Captured from a tool that failed, hung or printed too much: the
                    // content is what it printed, and it is not trusted.
                    s @ (SourceState::Failed | SourceState::TimedOut | SourceState::TooLarge) => s,
                    SourceState::Error => SourceState::Error,
                    SourceState::Absent | SourceState::Empty => {
                        fetched.notes.push(format!(
                            "{MANIFEST_FILE} says the capture found it {}, but the file is present; reading the file",
                            rec.status
                        ));
                        read
                    }
                });
            }
        }
        fetched
    }

    fn own_statuses(&self) -> Vec<crate::heart::outcome::SourceStatus> {
        match &self.manifest_problem {
            Some(p) => {
                let mut s = crate::heart::outcome::SourceStatus::new(MANIFEST_FILE, SourceState::Error);
                s.notes.push(format!("ignored: {p}"));
                vec![s]
            }
            None => Vec::new(),
        }
    }
}

/// A file that must be there (a cluster state named on the command line).
pub fn fetch_required<T, F>(path: &Path, consume: F) -> Fetched<T>
where
    F: FnOnce(&mut dyn BufRead) -> io::Result<T>,
{
    let fetched = fetch_file(path, consume);
    if fetched.state.is_none() {
        return Fetched {
            state: Some(SourceState::Error),
            value: Some(Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such file", path.display()),
            ))),
            ..Fetched::not_present()
        };
    }
    fetched
}

/// The iptables dumps a bundle may hold, with what their names say.
pub const IPTABLES_FILES: [(&str, Option<Backend>, Family); 6] = [
    ("iptables-nft-save.txt", Some(Backend::IptablesNft), Family::Ipv4),
    (
        "iptables-legacy-save.txt",
        Some(Backend::IptablesLegacy),
        Family::Ipv4,
    ),
    ("ip6tables-nft-save.txt", Some(Backend::IptablesNft), Family::Ipv6),
    (
        "ip6tables-legacy-save.txt",
        Some(Backend::IptablesLegacy),
        Family::Ipv6,
    ),
    // A dump whose backend only its header tells.
    ("iptables-save.txt", None, Family::Ipv4),
    ("ip6tables-save.txt", None, Family::Ipv6),
];

/// `net.ipv4.ip_local_port_range`, as the bundle holds it.
pub const LOCAL_PORT_RANGE_FILE: &str = "proc/sys/net/ipv4/ip_local_port_range";
/// `net.ipv4.ip_local_reserved_ports`, as the bundle holds it.
pub const RESERVED_PORTS_FILE: &str = "proc/sys/net/ipv4/ip_local_reserved_ports";
/// The body of kube-proxy's `/healthz` answer.
pub const HEALTHZ_FILE: &str = "kube-proxy-healthz.json";
/// The body of kube-proxy's `/proxyMode` answer (`iptables`, `ipvs`, `nftables`).
pub const PROXY_MODE_FILE: &str = "kube-proxy-mode.txt";
/// The node's interfaces (IPVS mode's `kube-ipvs0` among them).
pub const NET_DEV_FILE: &str = "proc/net/dev";
/// The kernel's IPVS virtual servers (present while the `ip_vs` module is loaded).
pub const IP_VS_FILE: &str = "proc/net/ip_vs";
/// `ipvsadm -Ln` as a bundle may hold it (a paste): read when `proc/net/ip_vs` is not.
pub const IPVSADM_FILE: &str = "ipvsadm.txt";
/// Every nftables table (`nft -j list ruleset`), for `portdrift explain`: other
/// components' tables (firewalld, a CNI's) act on NodePort connections too. A bundle
/// without it offers its `nft.json`.
pub const NFT_RULESET_FILE: &str = "nft-ruleset.json";
/// The node's facts besides rules and sockets, in the order a bundle lists them.
pub const NODE_FACT_FILES: [&str; 7] = [
    LOCAL_PORT_RANGE_FILE,
    RESERVED_PORTS_FILE,
    HEALTHZ_FILE,
    PROXY_MODE_FILE,
    NET_DEV_FILE,
    IP_VS_FILE,
    IPVSADM_FILE,
];

/// One of Cilium's service maps in a bundle: its entries as `bpftool -j map dump
/// pinned` prints them, and its type and sizes as `bpftool -j map show pinned` does.
#[derive(Debug, Clone, Copy)]
pub struct CiliumMapFiles {
    pub kind: MapKind,
    pub dump: &'static str,
    pub info: &'static str,
}

/// Cilium's service maps, under `bpf/` in a bundle, services first in each family.
pub const CILIUM_MAP_FILES: [CiliumMapFiles; 6] = [
    CiliumMapFiles {
        kind: MapKind::Services4,
        dump: "bpf/cilium_lb4_services_v2.json",
        info: "bpf/cilium_lb4_services_v2.info.json",
    },
    CiliumMapFiles {
        kind: MapKind::Backends4,
        dump: "bpf/cilium_lb4_backends_v3.json",
        info: "bpf/cilium_lb4_backends_v3.info.json",
    },
    CiliumMapFiles {
        kind: MapKind::RevNat4,
        dump: "bpf/cilium_lb4_reverse_nat.json",
        info: "bpf/cilium_lb4_reverse_nat.info.json",
    },
    CiliumMapFiles {
        kind: MapKind::Services6,
        dump: "bpf/cilium_lb6_services_v2.json",
        info: "bpf/cilium_lb6_services_v2.info.json",
    },
    CiliumMapFiles {
        kind: MapKind::Backends6,
        dump: "bpf/cilium_lb6_backends_v3.json",
        info: "bpf/cilium_lb6_backends_v3.info.json",
    },
    CiliumMapFiles {
        kind: MapKind::RevNat6,
        dump: "bpf/cilium_lb6_reverse_nat.json",
        info: "bpf/cilium_lb6_reverse_nat.info.json",
    },
];

/// The map a `bpf/` file name holds, and whether it is the `.info.json` form.
pub fn cilium_map_file(name: &str) -> Option<(MapKind, bool)> {
    CILIUM_MAP_FILES.iter().find_map(|f| {
        if f.dump == name {
            Some((f.kind, false))
        } else if f.info == name {
            Some((f.kind, true))
        } else {
            None
        }
    })
}

/// The rule dumps whose every change the kernel announces on the nf_tables netlink
/// group: iptables-nft's and kube-proxy's nftables tables. The legacy backend's are not
/// among them and are read every time.
pub const NF_TABLES_DUMPS: [&str; 3] = ["iptables-nft-save.txt", "ip6tables-nft-save.txt", "nft.json"];
