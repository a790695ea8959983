//! Socket inode → the process, container and pod that own it.
//!
//! `/proc/net` names a socket only by its inode, so [`find_owners`] walks
//! `<proc_root>/<pid>/fd/*` for a `socket:[<inode>]` link, then reads the match's
//! `comm`, `cmdline` and `cgroup` (decoded by [`crate::decode::proc_process`], pure). Plain `std::fs`, not the
//! `procfs` crate: it needs this exact error classification, and `proc_root` lets
//! tests run on a fixture tree.
//!
//! Needs `CAP_SYS_PTRACE` for other users' processes; without it the owners stay
//! unknown and [`Owners::notes`] says so. Processes that exit mid-walk are skipped.
//! Never errors or panics; one bounded pass that stops once every inode has an owner.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::decode::proc_process::{ArgvEvidence, format_cmdline, parse_cgroup, stat_exited, status_uid};
use crate::heart::model::ProcessInfo;

/// Bytes read from `cmdline`: enough for [`MAX_CMDLINE_CHARS`](crate::decode::proc_process::MAX_CMDLINE_CHARS) of any encoding.
const CMDLINE_READ_LIMIT: u64 = 4096;
/// Bytes read from `comm` (the kernel keeps 15 and a newline).
const COMM_READ_LIMIT: u64 = 256;
/// Bytes read from `cgroup`: a v1 file lists one line per hierarchy, each a path.
const CGROUP_READ_LIMIT: u64 = 64 * 1024;
/// Bytes read from `status`: the `Uid:` line is in its first kilobyte.
const STATUS_READ_LIMIT: u64 = 4096;

/// What [`find_owners`] learned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners {
    /// Socket inode → the process that owns it; only inodes asked about, only those
    /// found. When several processes share a socket (a pre-forking server), the one
    /// with the lowest pid, usually the parent.
    pub by_inode: HashMap<u64, ProcessInfo>,
    /// Human sentences about what could not be read, for the report's sources; empty
    /// when every inode was found or nothing stood in the way.
    pub notes: Vec<String>,
    /// Processes whose file descriptors were examined.
    pub processes: usize,
    /// Processes whose file descriptors could not be read for lack of permission
    /// (`CAP_SYS_PTRACE`).
    pub denied: usize,
    /// Processes whose file descriptors could not be read for another reason than
    /// having exited or permission (none on a sane `/proc`).
    pub failed: usize,
}

/// Finds the owners of the socket `inodes` by walking `<proc_root>/<pid>/fd/*`.
/// Never fails: what could not be read is counted in [`Owners`] and told in its notes.
pub fn find_owners(proc_root: &Path, inodes: &HashSet<u64>, argv: ArgvEvidence) -> Owners {
    let mut owners = Owners::default();
    if inodes.is_empty() {
        return owners;
    }
    let pids = match list_pids(proc_root) {
        Ok(pids) => pids,
        Err(e) => {
            owners.notes.push(format!(
                "could not list the processes in {} ({e}): the owners of sockets are unknown",
                proc_root.display()
            ));
            return owners;
        }
    };

    let mut first_failure: Option<String> = None;
    'pids: for (pid, dir_name) in pids {
        let pid_dir = proc_root.join(dir_name);
        let entries = match fs::read_dir(pid_dir.join("fd")) {
            Ok(entries) => entries,
            Err(e) => {
                match e.kind() {
                    // Exited since /proc was listed.
                    _ if gone(&e) => {}
                    // A process that is exiting refuses even root; only a live one
                    // says a privilege is missing.
                    io::ErrorKind::PermissionDenied if exited(&pid_dir) => {}
                    io::ErrorKind::PermissionDenied => owners.denied += 1,
                    _ => {
                        owners.failed += 1;
                        first_failure.get_or_insert_with(|| e.to_string());
                    }
                }
                continue;
            }
        };
        owners.processes += 1;
        // Read once, on the first match; None once the process is known to be gone.
        let mut process: Option<Option<ProcessInfo>> = None;
        let mut denied = false;
        for entry in entries {
            // An error while listing: the process is exiting. Take what was listed.
            let Ok(entry) = entry else { break };
            if !is_number(entry.file_name().as_bytes()) {
                continue;
            }
            let target = match fs::read_link(entry.path()) {
                Ok(target) => target,
                Err(e) => {
                    // NotFound: the fd was closed since the listing.
                    denied |= e.kind() == io::ErrorKind::PermissionDenied;
                    continue;
                }
            };
            let Some(inode) = socket_inode(target.as_os_str().as_bytes()) else {
                continue;
            };
            if !inodes.contains(&inode) || owners.by_inode.contains_key(&inode) {
                continue;
            }
            let Some(info) = process.get_or_insert_with(|| read_process(&pid_dir, pid, argv)) else {
                // Exited after its fd was read; another process may share the socket.
                break;
            };
            owners.by_inode.insert(inode, info.clone());
            if owners.by_inode.len() == inodes.len() {
                break 'pids;
            }
        }
        if denied && !exited(&pid_dir) {
            owners.denied += 1;
        }
    }

    if owners.by_inode.len() < inodes.len() {
        if owners.denied > 0 {
            owners.notes.push(format!(
                "could not read the file descriptors of {} (needs CAP_SYS_PTRACE): owners of some sockets are unknown",
                processes(owners.denied)
            ));
        }
        if let Some(error) = first_failure {
            owners.notes.push(format!(
                "could not read the file descriptors of {} ({error}): owners of some sockets are unknown",
                processes(owners.failed)
            ));
        }
    }
    owners
}

/// Whether reading a process's files failed because it is gone: not there any more,
/// or ESRCH, which the kernel answers for a process that exited during the read.
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// Whether the process of `pid_dir` has exited (or is a zombie) by now.
fn exited(pid_dir: &Path) -> bool {
    fs::read_to_string(pid_dir.join("stat")).map_or(true, |stat| stat_exited(&stat))
}

fn processes(n: usize) -> String {
    if n == 1 {
        "1 process".to_string()
    } else {
        format!("{n} processes")
    }
}

/// The numeric entries of `proc_root` with their names, lowest pid first, so that the
/// first owner found of a shared socket is the one with the lowest pid.
fn list_pids(proc_root: &Path) -> io::Result<Vec<(u32, OsString)>> {
    let mut pids = Vec::new();
    for entry in fs::read_dir(proc_root)? {
        let Ok(entry) = entry else { break };
        let name = entry.file_name();
        if !is_number(name.as_bytes()) {
            continue;
        }
        // Digits only, so the only failure is overflow: not a pid.
        if let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) {
            pids.push((pid, name));
        }
    }
    pids.sort_unstable();
    Ok(pids)
}

fn is_number(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(u8::is_ascii_digit)
}

/// `socket:[12345]` → 12345.
fn socket_inode(link: &[u8]) -> Option<u64> {
    let digits = link.strip_prefix(b"socket:[")?.strip_suffix(b"]")?;
    if !is_number(digits) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The process's name, command line and cgroup identity; None when it has exited
/// (no `comm` to read).
fn read_process(pid_dir: &Path, pid: u32, argv: ArgvEvidence) -> Option<ProcessInfo> {
    let comm = read_bounded(&pid_dir.join("comm"), COMM_READ_LIMIT).ok()?;
    let name = String::from_utf8_lossy(&comm).trim_end_matches('\n').to_string();
    // Arguments carry secrets (`--api-token=…`): read only when asked, then redacted.
    let cmdline = match argv {
        ArgvEvidence::Omitted => None,
        ArgvEvidence::Redacted => read_bounded(&pid_dir.join("cmdline"), CMDLINE_READ_LIMIT)
            .ok()
            .and_then(|raw| format_cmdline(&raw)),
    };
    let exe = fs::read_link(pid_dir.join("exe"))
        .ok()
        .map(|p| crate::heart::visible::visible_bytes(p.as_os_str().as_bytes()));
    let uid = read_bounded(&pid_dir.join("status"), STATUS_READ_LIMIT)
        .ok()
        .and_then(|raw| status_uid(&String::from_utf8_lossy(&raw)));
    let cgroup = read_bounded(&pid_dir.join("cgroup"), CGROUP_READ_LIMIT)
        .map(|raw| parse_cgroup(&String::from_utf8_lossy(&raw)))
        .unwrap_or_default();
    Some(ProcessInfo {
        pid,
        name,
        container: cgroup.container,
        pod: cgroup.pod,
        exe,
        uid,
        cmdline,
    })
}

fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    File::open(path)?.take(limit).read_to_end(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests;
