//! Cilium's service maps built for real, for tests that read them with bpftool: a [`Lab`]
//! describes frontends (a master and its backend slots), backends and reverse-NAT
//! entries; [`Lab::run`] creates the six maps with Cilium's types, sizes and flags
//! (`hash`, `BPF_F_NO_PREALLOC`, `lb{4,6}_key` → `lb{4,6}_service` and so on) on a BPF
//! filesystem of their own, pins them under `tc/globals/` as Cilium does, fills them
//! with one `bpftool batch file`, and runs shell commands beside them.
//!
//! Everything happens in a private mount namespace (`unshare --mount --net`, propagation
//! private) with a fresh BPF filesystem mounted on a temporary directory: the host's
//! `/sys/fs/bpf` is never touched, the maps go when the namespace's last process exits,
//! and the directory is removed when the [`Lab`] is dropped. The namespace also has a
//! network namespace of its own, so a live scan there sees no host rules or listeners.
//!
//! Byte order as `decode/cilium.rs` documents it (and Cilium writes): addresses,
//! ports and the rev-NAT index in network order; slot, backend ID, `count` and `qcount`
//! in the host order of an amd64 or arm64 node, little-endian.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `IPPROTO_ANY`: keys written before Cilium told protocols apart.
pub const ANY: u8 = 0;
pub const TCP: u8 = 6;
pub const UDP: u8 = 17;

/// `SVC_FLAG_*` (`flags` is the low byte, `flags2` the high one).
pub const NODEPORT: u16 = 1 << 1;
pub const EXT_LOCAL: u16 = 1 << 2;
pub const ROUTABLE: u16 = 1 << 6;
pub const INT_LOCAL: u16 = 1 << 12;
pub const TWO_SCOPES: u16 = 1 << 13;

/// `LB_LOOKUP_SCOPE_EXT`, `LB_LOOKUP_SCOPE_INT`.
pub const SCOPE_EXT: u8 = 0;
pub const SCOPE_INT: u8 = 1;

/// `BE_STATE_*`, a backend's `flags` byte.
pub const ACTIVE: u8 = 0;
pub const TERMINATING: u8 = 1;
pub const QUARANTINED: u8 = 2;

/// Cilium's default size of every one of these maps (`--bpf-lb-map-max`).
pub const DEFAULT_ENTRIES: u32 = 65_536;

/// `BPF_F_NO_PREALLOC`: Cilium's `CONDITIONAL_PREALLOC` without `--preallocate-bpf-maps`.
const NO_PREALLOC: u32 = 1;

/// The pin names, as Cilium pins them under `tc/globals/`.
pub const SERVICES4: &str = "cilium_lb4_services_v2";
pub const BACKENDS4: &str = "cilium_lb4_backends_v3";
pub const REV_NAT4: &str = "cilium_lb4_reverse_nat";
pub const SERVICES6: &str = "cilium_lb6_services_v2";
pub const BACKENDS6: &str = "cilium_lb6_backends_v3";
pub const REV_NAT6: &str = "cilium_lb6_reverse_nat";

/// One frontend: its master (slot 0) and its slots `1..`, each naming a backend ID.
#[derive(Debug, Clone, PartialEq)]
pub struct Frontend {
    pub address: IpAddr,
    pub port: u16,
    pub proto: u8,
    pub scope: u8,
    pub flags: u16,
    pub rev_nat: u16,
    /// The master's active count; [`Frontend::new`] makes it `slots.len()`.
    pub count: u16,
    /// The master's count of terminating and quarantined slots, after the active ones.
    pub qcount: u16,
    /// Backend IDs of slots 1, 2, ... in order.
    pub slots: Vec<u32>,
}

impl Frontend {
    /// A frontend whose every slot is active.
    pub fn new(address: &str, port: u16, proto: u8, flags: u16, rev_nat: u16, slots: &[u32]) -> Frontend {
        Frontend {
            address: address.parse().expect("an IP address"),
            port,
            proto,
            scope: SCOPE_EXT,
            flags,
            rev_nat,
            count: u16::try_from(slots.len()).expect("few slots"),
            qcount: 0,
            slots: slots.to_vec(),
        }
    }

    pub fn scope(mut self, scope: u8) -> Frontend {
        self.scope = scope;
        self
    }

    /// `lb{4,6}_key`: address, dport (network order), backend_slot (host order), proto,
    /// scope, two bytes of padding.
    pub fn key(&self, slot: u16) -> Vec<u8> {
        let mut k = octets(self.address);
        k.extend_from_slice(&self.port.to_be_bytes());
        k.extend_from_slice(&slot.to_le_bytes());
        k.extend_from_slice(&[self.proto, self.scope, 0, 0]);
        k
    }

    /// `lb{4,6}_service` of the master: word 0 (random selection, no affinity), count,
    /// rev_nat_index (network order), flags, flags2, qcount.
    pub fn master_value(&self) -> Vec<u8> {
        service_value(0, self.count, self.rev_nat, self.flags, self.qcount)
    }

    /// `lb{4,6}_service` of a slot: the backend ID in the first word, the frontend's
    /// rev-NAT index, nothing else.
    pub fn slot_value(&self, backend_id: u32) -> Vec<u8> {
        service_value(backend_id, 0, self.rev_nat, 0, 0)
    }

    /// Every entry: the master, then slot 1, 2, ...
    pub fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = vec![(self.key(0), self.master_value())];
        for (i, id) in self.slots.iter().enumerate() {
            let slot = u16::try_from(i + 1).expect("few slots");
            out.push((self.key(slot), self.slot_value(*id)));
        }
        out
    }

    pub fn is_v6(&self) -> bool {
        self.address.is_ipv6()
    }
}

fn service_value(word: u32, count: u16, rev_nat: u16, flags: u16, qcount: u16) -> Vec<u8> {
    let mut v = word.to_le_bytes().to_vec();
    v.extend_from_slice(&count.to_le_bytes());
    v.extend_from_slice(&rev_nat.to_be_bytes());
    v.extend_from_slice(&flags.to_le_bytes());
    v.extend_from_slice(&qcount.to_le_bytes());
    v
}

fn octets(address: IpAddr) -> Vec<u8> {
    match address {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// One backend: `lb{4,6}_backend` under its ID.
#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    pub id: u32,
    pub address: SocketAddr,
    pub proto: u8,
    /// `BE_STATE_*`.
    pub state: u8,
}

impl Backend {
    /// The `__u32` key, host order.
    pub fn key(&self) -> Vec<u8> {
        self.id.to_le_bytes().to_vec()
    }

    /// address, port (network order), proto, flags (the state), cluster_id (host
    /// order), zone, pad.
    pub fn value(&self) -> Vec<u8> {
        let mut v = octets(self.address.ip());
        v.extend_from_slice(&self.address.port().to_be_bytes());
        v.extend_from_slice(&[self.proto, self.state, 0, 0, 0, 0]);
        v
    }
}

/// One reverse-NAT entry: the `__u16` ID (network order) → packed `{address, port}`.
#[derive(Debug, Clone, PartialEq)]
pub struct RevNat {
    pub id: u16,
    pub address: SocketAddr,
}

impl RevNat {
    pub fn key(&self) -> Vec<u8> {
        self.id.to_be_bytes().to_vec()
    }

    pub fn value(&self) -> Vec<u8> {
        let mut v = octets(self.address.ip());
        v.extend_from_slice(&self.address.port().to_be_bytes());
        v
    }
}

/// What one command run in the lab printed, and how it exited.
#[derive(Debug, Clone)]
pub struct Ran {
    pub command: String,
    /// The exit status; -1 if it was killed by a signal.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// stdout parsed as JSON; panics with everything the command printed if it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "`{}` printed no JSON ({e}); exit {}\nstdout: {}\nstderr: {}",
                self.command, self.code, self.stdout, self.stderr
            )
        })
    }
}

/// The maps of one test, and the directory they are built in.
pub struct Lab {
    pub frontends: Vec<Frontend>,
    pub backends: Vec<Backend>,
    pub rev_nats: Vec<RevNat>,
    /// `max_entries` per pin name; [`DEFAULT_ENTRIES`] for a map not listed.
    pub sizes: Vec<(&'static str, u32)>,
    /// Also create the IPv6 maps when no IPv6 entry asks for them (a dual-stack node).
    pub ipv6: bool,
    dir: tempfile::TempDir,
}

impl Default for Lab {
    fn default() -> Lab {
        Lab::new()
    }
}

impl Lab {
    pub fn new() -> Lab {
        let dir = tempfile::Builder::new()
            .prefix("portdrift-bpf-lab.")
            .tempdir()
            .expect("a temporary directory");
        std::fs::create_dir(dir.path().join("bpf")).expect("the mount point");
        Lab {
            frontends: Vec::new(),
            backends: Vec::new(),
            rev_nats: Vec::new(),
            sizes: Vec::new(),
            ipv6: false,
            dir,
        }
    }

    /// The lab's directory, outside the namespace too (files for commands go here).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Where the BPF filesystem is mounted inside the namespace (`$D` in commands):
    /// the `--bpf-root`.
    pub fn bpf_root(&self) -> PathBuf {
        self.dir.path().join("bpf")
    }

    /// A pinned map's path inside the namespace.
    pub fn pin(&self, name: &str) -> PathBuf {
        self.bpf_root().join("tc/globals").join(name)
    }

    /// Writes `contents` to `name` in the lab's directory; its path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).expect("the lab's directory is writable");
        path
    }

    pub fn backend(&mut self, id: u32, address: &str, proto: u8) -> &mut Lab {
        self.backend_in(id, address, proto, ACTIVE)
    }

    pub fn backend_in(&mut self, id: u32, address: &str, proto: u8, state: u8) -> &mut Lab {
        self.backends.push(Backend {
            id,
            address: address.parse().expect("an address:port"),
            proto,
            state,
        });
        self
    }

    pub fn rev_nat(&mut self, id: u16, address: &str) -> &mut Lab {
        self.rev_nats.push(RevNat {
            id,
            address: address.parse().expect("an address:port"),
        });
        self
    }

    /// A frontend and the reverse-NAT entry for its ID (once per ID, so the two scopes
    /// of a Local frontend share theirs, as Cilium's do).
    pub fn frontend(&mut self, f: Frontend) -> &mut Lab {
        if !self.rev_nats.iter().any(|r| r.id == f.rev_nat) {
            self.rev_nats.push(RevNat {
                id: f.rev_nat,
                address: SocketAddr::new(f.address, f.port),
            });
        }
        self.frontends.push(f);
        self
    }

    /// A NodePort Service's frontends as Cilium writes them: the surrogate (`0.0.0.0` or
    /// `::`, not routable) and one per node address, each with `slots`, rev-NAT IDs
    /// `first_rev_nat`, `first_rev_nat + 1`, ... (a Local policy's two scopes are
    /// built with [`Lab::frontend`]).
    pub fn nodeport(
        &mut self,
        port: u16,
        proto: u8,
        node_addresses: &[&str],
        slots: &[u32],
        first_rev_nat: u16,
    ) -> &mut Lab {
        let surrogate = if node_addresses.iter().any(|a| a.contains(':')) {
            "::"
        } else {
            "0.0.0.0"
        };
        self.frontend(Frontend::new(
            surrogate,
            port,
            proto,
            NODEPORT,
            first_rev_nat,
            slots,
        ));
        for (i, addr) in node_addresses.iter().enumerate() {
            let rev_nat = first_rev_nat + u16::try_from(i + 1).expect("few addresses");
            self.frontend(Frontend::new(
                addr,
                port,
                proto,
                NODEPORT | ROUTABLE,
                rev_nat,
                slots,
            ));
        }
        self
    }

    /// The frontend at `address:port` of `scope` (any protocol); panics if there is none.
    pub fn frontend_mut(&mut self, address: &str, port: u16, scope: u8) -> &mut Frontend {
        let address: IpAddr = address.parse().expect("an IP address");
        self.frontends
            .iter_mut()
            .find(|f| f.address == address && f.port == port && f.scope == scope)
            .unwrap_or_else(|| panic!("no frontend {address}:{port} scope {scope}"))
    }

    /// Removes the frontend at `address:port` (every scope and protocol) and its
    /// reverse-NAT entry.
    pub fn remove_frontend(&mut self, address: &str, port: u16) -> &mut Lab {
        let address: IpAddr = address.parse().expect("an IP address");
        let ids: Vec<u16> = self
            .frontends
            .iter()
            .filter(|f| f.address == address && f.port == port)
            .map(|f| f.rev_nat)
            .collect();
        assert!(!ids.is_empty(), "no frontend {address}:{port} to remove");
        self.frontends
            .retain(|f| !(f.address == address && f.port == port));
        self.rev_nats.retain(|r| !ids.contains(&r.id));
        self
    }

    /// Sets `max_entries` of the map pinned as `name`.
    pub fn size(&mut self, name: &'static str, entries: u32) -> &mut Lab {
        self.sizes.retain(|(n, _)| *n != name);
        self.sizes.push((name, entries));
        self
    }

    fn entries_of(&self, name: &str) -> u32 {
        self.sizes
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(DEFAULT_ENTRIES, |(_, e)| *e)
    }

    fn has_v6(&self) -> bool {
        self.ipv6
            || self.frontends.iter().any(Frontend::is_v6)
            || self.backends.iter().any(|b| b.address.is_ipv6())
            || self.rev_nats.iter().any(|r| r.address.is_ipv6())
    }

    /// The `bpftool batch file` that creates and fills the maps.
    pub fn batch(&self) -> String {
        let mut out = String::new();
        let mut families = vec![false];
        if self.has_v6() {
            families.push(true);
        }
        for v6 in families {
            let (addr, [services, backends, rev_nat]) = if v6 {
                (16, [SERVICES6, BACKENDS6, REV_NAT6])
            } else {
                (4, [SERVICES4, BACKENDS4, REV_NAT4])
            };
            for (name, key, value) in [
                (services, addr + 8, 12),
                (backends, 4, addr + 8),
                (rev_nat, 2, addr + 2),
            ] {
                // Kernel map names hold 15 characters: Cilium's are cut there too.
                writeln!(
                    out,
                    "map create {} type hash key {key} value {value} entries {} name {} flags {NO_PREALLOC}",
                    self.pin(name).display(),
                    self.entries_of(name),
                    &name[..15],
                )
                .unwrap();
            }
            for f in self.frontends.iter().filter(|f| f.is_v6() == v6) {
                for (k, v) in f.entries() {
                    out.push_str(&update_line(&self.pin(services), &k, &v));
                }
            }
            for b in self.backends.iter().filter(|b| b.address.is_ipv6() == v6) {
                out.push_str(&update_line(&self.pin(backends), &b.key(), &b.value()));
            }
            for r in self.rev_nats.iter().filter(|r| r.address.is_ipv6() == v6) {
                out.push_str(&update_line(&self.pin(rev_nat), &r.key(), &r.value()));
            }
        }
        out
    }

    /// `bpftool batch` lines that write `f`'s entries (its slots first, then its master,
    /// the order in which Cilium adds backends).
    pub fn update_lines(&self, f: &Frontend) -> String {
        let pin = self.pin(if f.is_v6() { SERVICES6 } else { SERVICES4 });
        let mut entries = f.entries();
        entries.rotate_left(1);
        entries.iter().map(|(k, v)| update_line(&pin, k, v)).collect()
    }

    /// Builds the maps in a private mount (and network) namespace, then runs each of
    /// `commands` there with bash, in order, whatever the exit of the one before. In
    /// the commands `$D` is the BPF filesystem (the `--bpf-root`), `$LAB` the lab's
    /// directory and `$PORTDRIFT` the binary (`portdrift`). Panics with what bash said if
    /// the maps could not be built.
    pub fn run(&self, portdrift: &Path, commands: &[&str]) -> Vec<Ran> {
        let lab = self.dir.path();
        let out = lab.join("ran");
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir(&out).expect("the output directory");
        std::fs::write(lab.join("maps.batch"), self.batch()).expect("the batch file");
        let mut script = String::from(
            "set -euo pipefail\n\
             mount -t bpf bpf \"$D\"\n\
             mkdir -p \"$D/tc/globals\"\n\
             bpftool batch file \"$LAB/maps.batch\" >/dev/null\n\
             set +e\n",
        );
        for (i, command) in commands.iter().enumerate() {
            std::fs::write(out.join(format!("{i}.sh")), command).expect("the command file");
            writeln!(
                script,
                "bash \"$LAB/ran/{i}.sh\" >\"$LAB/ran/{i}.out\" 2>\"$LAB/ran/{i}.err\" </dev/null; echo $? >\"$LAB/ran/{i}.rc\""
            )
            .unwrap();
        }
        std::fs::write(lab.join("lab.sh"), script).expect("the script");
        let ran = Command::new("unshare")
            .args(["--mount", "--net", "--propagation", "private", "bash"])
            .arg(lab.join("lab.sh"))
            .env("D", self.bpf_root())
            .env("LAB", lab)
            .env("PORTDRIFT", portdrift)
            .output()
            .expect("unshare runs");
        let read = |name: String| std::fs::read_to_string(out.join(name)).unwrap_or_default();
        let mut results = Vec::new();
        for (i, command) in commands.iter().enumerate() {
            let rc = read(format!("{i}.rc"));
            assert!(
                !rc.is_empty(),
                "the lab did not get to command {i} (`{command}`): exit {:?}\n{}{}",
                ran.status.code(),
                String::from_utf8_lossy(&ran.stdout),
                String::from_utf8_lossy(&ran.stderr)
            );
            results.push(Ran {
                command: command.to_string(),
                code: rc.trim().parse().unwrap_or(-1),
                stdout: read(format!("{i}.out")),
                stderr: read(format!("{i}.err")),
            });
        }
        assert!(
            ran.status.success(),
            "the lab's namespace ended badly: {}",
            String::from_utf8_lossy(&ran.stderr)
        );
        results
    }
}

fn update_line(pin: &Path, key: &[u8], value: &[u8]) -> String {
    format!(
        "map update pinned {} key hex {} value hex {}\n",
        pin.display(),
        hex(key),
        hex(value)
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}
