//! Socket inode → the process, container and pod that own it.
//!
//! `/proc/net` names a socket only by its inode, so [`find_owners`] walks
//! `<proc_root>/<pid>/fd/*` for a `socket:[<inode>]` link, then reads the match's
//! `comm`, `cmdline` and `cgroup` ([`parse_cgroup`], pure). Plain `std::fs`, not the
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

use crate::heart::model::ProcessInfo;

/// Longest command line kept, in characters.
const MAX_CMDLINE_CHARS: usize = 256;
/// Bytes read from `cmdline`: enough for [`MAX_CMDLINE_CHARS`] of any encoding.
const CMDLINE_READ_LIMIT: u64 = 4096;
/// Bytes read from `comm` (the kernel keeps 15 and a newline).
const COMM_READ_LIMIT: u64 = 256;
/// Bytes read from `cgroup`: a v1 file lists one line per hierarchy, each a path.
const CGROUP_READ_LIMIT: u64 = 64 * 1024;

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
pub fn find_owners(proc_root: &Path, inodes: &HashSet<u64>) -> Owners {
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
                    io::ErrorKind::NotFound => {}
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
            let Some(info) = process.get_or_insert_with(|| read_process(&pid_dir, pid)) else {
                // Exited after its fd was read; another process may share the socket.
                break;
            };
            owners.by_inode.insert(inode, info.clone());
            if owners.by_inode.len() == inodes.len() {
                break 'pids;
            }
        }
        if denied {
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
fn read_process(pid_dir: &Path, pid: u32) -> Option<ProcessInfo> {
    let comm = read_bounded(&pid_dir.join("comm"), COMM_READ_LIMIT).ok()?;
    let name = String::from_utf8_lossy(&comm).trim_end_matches('\n').to_string();
    let cmdline = read_bounded(&pid_dir.join("cmdline"), CMDLINE_READ_LIMIT)
        .ok()
        .and_then(|raw| format_cmdline(&raw));
    let cgroup = read_bounded(&pid_dir.join("cgroup"), CGROUP_READ_LIMIT)
        .map(|raw| parse_cgroup(&String::from_utf8_lossy(&raw)))
        .unwrap_or_default();
    Some(ProcessInfo {
        pid,
        name,
        container: cgroup.container,
        pod: cgroup.pod,
        cmdline,
    })
}

fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    File::open(path)?.take(limit).read_to_end(&mut buf)?;
    Ok(buf)
}

/// NUL-separated arguments → one line, cut to [`MAX_CMDLINE_CHARS`] characters.
fn format_cmdline(raw: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(raw);
    let joined = text.replace('\0', " ");
    let joined = joined.trim();
    if joined.is_empty() {
        return None;
    }
    Some(match joined.char_indices().nth(MAX_CMDLINE_CHARS) {
        Some((cut, _)) => joined[..cut].to_string(),
        None => joined.to_string(),
    })
}

/// The container and pod a process's cgroup places it in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupIdentity {
    /// `containerd://<id>`, `cri-o://<id>` or `docker://<id>`.
    pub container: Option<String>,
    /// The pod UID, with dashes.
    pub pod: Option<String>,
}

/// Reads the container ID and pod UID from the text of `/proc/<pid>/cgroup` (v1 or
/// v2, systemd or cgroupfs driver; the innermost of nested containers wins). A bare
/// cgroupfs ID names no runtime and is reported as containerd, the common case.
pub fn parse_cgroup(content: &str) -> CgroupIdentity {
    let mut best = CgroupIdentity::default();
    for line in content.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        let found = parse_cgroup_path(path);
        if best.container.is_none() && found.container.is_some() {
            best.container = found.container;
            if found.pod.is_some() {
                best.pod = found.pod;
            }
        } else if best.pod.is_none() {
            best.pod = found.pod;
        }
    }
    best
}

fn parse_cgroup_path(path: &str) -> CgroupIdentity {
    let relative = path.split('/').any(|c| c == "..");
    let mut found = CgroupIdentity::default();
    let mut in_kubepods = false;
    let mut in_pod = false;
    let mut after_docker = false;
    for component in path.split('/') {
        let parent_is_docker = std::mem::replace(&mut after_docker, component == "docker");
        if component.is_empty() || component == "." || component == ".." {
            continue;
        }
        if let Some(slice) = component.strip_suffix(".slice") {
            // kubepods.slice, kubepods-burstable.slice, kubepods-burstable-pod<uid>.slice,
            // kubelet-kubepods-….slice (kind).
            if slice.split('-').any(|s| s == "kubepods") {
                in_kubepods = true;
                if let Some(uid) = slice.rsplit('-').next().and_then(|s| s.strip_prefix("pod")) {
                    let uid = uid.replace('_', "-");
                    if is_pod_uid(&uid) {
                        found.pod = Some(uid);
                        in_pod = true;
                    }
                }
            }
            continue;
        }
        if component == "kubepods" {
            in_kubepods = true;
            continue;
        }
        if let Some(uid) = component.strip_prefix("pod")
            && (in_kubepods || relative)
            && is_pod_uid(uid)
        {
            found.pod = Some(uid.to_string());
            in_pod = true;
            continue;
        }
        if let Some(id) = container_id(component, in_pod || in_kubepods, parent_is_docker) {
            found.container = Some(id);
        }
    }
    found
}

fn container_id(component: &str, in_pod: bool, parent_is_docker: bool) -> Option<String> {
    let (name, scope) = match component.strip_suffix(".scope") {
        Some(name) => (name, true),
        None => (component, false),
    };
    if let Some(id) = name.strip_prefix("cri-containerd-") {
        return is_container_id(id).then(|| format!("containerd://{id}"));
    }
    if name.starts_with("crio-conmon-") {
        return None;
    }
    if let Some(id) = name.strip_prefix("crio-") {
        return is_container_id(id).then(|| format!("cri-o://{id}"));
    }
    if let Some(id) = name.strip_prefix("docker-") {
        return is_container_id(id).then(|| format!("docker://{id}"));
    }
    if !scope && is_container_id(name) {
        if parent_is_docker {
            return Some(format!("docker://{name}"));
        }
        if in_pod {
            return Some(format!("containerd://{name}"));
        }
    }
    None
}

/// A container ID: 64 lowercase hex digits.
fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A pod UID as the kubelet names cgroups: a UUID (36 characters with dashes), or the
/// 32 hex digits of a static pod's config hash.
fn is_pod_uid(s: &str) -> bool {
    let hex = |b: u8| b.is_ascii_hexdigit();
    match s.len() {
        32 => s.bytes().all(hex),
        36 => s.bytes().enumerate().all(|(i, b)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                b == b'-'
            } else {
                hex(b)
            }
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
