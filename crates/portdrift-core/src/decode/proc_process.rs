//! What `/proc/<pid>` says about a process, decoded: its command line for a report, and
//! the container and pod its cgroup path names (containerd, CRI-O, Docker; cgroup v1
//! and v2; the systemd and cgroupfs drivers). Pure: text in, values out.

/// The CPU time a `/proc/<pid>/stat` line counts for its process, in clock ticks: its
/// own (user and system) and its waited-for children's. None when the line does not
/// read as one.
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    // utime, stime, cutime and cstime.
    (14..=17).map(|n| stat_field(stat, n)).sum()
}

/// Whether a `/proc/<pid>/stat` line is of a process that has exited (state `Z`, a
/// zombie, or `X`, dead): its file descriptors are gone, and the kernel refuses to list
/// them with EACCES even to root, which is no missing privilege.
pub fn stat_exited(stat: &str) -> bool {
    // The state is field 3.
    matches!(stat_text_field(stat, 3), Some("Z" | "X" | "x"))
}

/// Field `n` (from 3, as proc(5) numbers them) of a `/proc/<pid>/stat` line, as a
/// number.
fn stat_field(stat: &str, n: usize) -> Option<u64> {
    stat_text_field(stat, n)?.parse().ok()
}

/// Field `n` (from 3) of a `/proc/<pid>/stat` line, as it is written.
fn stat_text_field(stat: &str, n: usize) -> Option<&str> {
    // The command (field 2) is in parentheses and may itself hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(n.checked_sub(3)?)
}

/// What `/proc/self/stat` says of a process for its `process_*` metrics (fields 14, 15,
/// 20, 22, 23 and 24 of proc(5)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFields {
    /// User and system time, own only, in clock ticks.
    pub cpu_ticks: u64,
    pub threads: u64,
    /// Clock ticks after boot when it started.
    pub start_ticks: u64,
    pub virtual_bytes: u64,
    pub resident_pages: u64,
}

/// The fields of a `/proc/<pid>/stat` line the `process_*` metrics need.
pub fn parse_stat(stat: &str) -> Option<StatFields> {
    let field = |n: usize| stat_field(stat, n);
    Some(StatFields {
        cpu_ticks: field(14)? + field(15)?,
        threads: field(20)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The soft limit on open files from `/proc/<pid>/limits` (None when unlimited or
/// not there).
pub fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The boot time, in seconds since the epoch, from `/proc/stat`'s `btime` line.
pub fn boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// Longest command line kept, in characters.
pub const MAX_CMDLINE_CHARS: usize = 256;

/// What a process's command line may show: arguments are where secrets are passed
/// (`--api-token=…`, `PGPASSWORD=…`), and findings are served and logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArgvEvidence {
    /// No arguments at all: the process is named by comm, exe, pid, uid, container and
    /// pod.
    #[default]
    Omitted,
    /// The arguments, with the value of every secret-looking one replaced.
    Redacted,
}

/// What a redacted value is shown as.
pub const REDACTED: &str = "<redacted>";

/// Words that make an argument's value secret, matched in its name case-insensitively.
const SECRET_WORDS: [&str; 7] = [
    "token",
    "password",
    "passwd",
    "secret",
    "key",
    "credential",
    "auth",
];

/// NUL-separated arguments → one line with secrets redacted ([`redact_args`]), cut to
/// [`MAX_CMDLINE_CHARS`] characters; each byte that is not UTF-8 is named (`\xff`).
pub fn format_cmdline(raw: &[u8]) -> Option<String> {
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(crate::heart::visible::visible_bytes)
        .collect();
    let joined = redact_args(&args).join(" ");
    let joined = joined.trim();
    if joined.is_empty() {
        return None;
    }
    Some(match joined.char_indices().nth(MAX_CMDLINE_CHARS) {
        Some((cut, _)) => joined[..cut].to_string(),
        None => joined.to_string(),
    })
}

/// The arguments with the value of each secret-looking one replaced by [`REDACTED`]:
/// `--api-token=v` and `-password=v`, `--api-token v` (the next argument), and
/// `DB_PASSWORD=v` as `env` passes it. The name stays, so the reader sees what was set.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut next_is_secret = false;
    for arg in args {
        if std::mem::take(&mut next_is_secret) && !arg.starts_with('-') {
            out.push(REDACTED.to_string());
            continue;
        }
        let flag = arg.starts_with('-');
        match arg.split_once('=') {
            Some((name, _)) if is_secret_name(name) => out.push(format!("{name}={REDACTED}")),
            None if flag && is_secret_name(arg) => {
                next_is_secret = true;
                out.push(arg.clone());
            }
            _ => out.push(arg.clone()),
        }
    }
    out
}

fn is_secret_name(name: &str) -> bool {
    let name = name.trim_start_matches('-').to_ascii_lowercase();
    !name.is_empty() && SECRET_WORDS.iter().any(|w| name.contains(w))
}

/// The real user id from the text of `/proc/<pid>/status` (its `Uid:` line: real,
/// effective, saved, filesystem).
pub fn status_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
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
