use std::os::unix::fs::symlink;
use std::path::PathBuf;

use super::*;
use crate::decode::proc_process::{CgroupIdentity, MAX_CMDLINE_CHARS};

// === parse_cgroup: real formats (see tests/fixtures/cgroup/README.md) ===

macro_rules! cgroup {
    ($name:literal) => {
        include_str!(concat!("../../../tests/fixtures/cgroup/", $name))
    };
}

const K3S: &str = "86bd33ebf64e01aaafb7dab419436ac025d04abd933bbbb124ddb25c30b59dd7";
const KUBEADM: &str = "d5be5966597725a3cc0fa65c23fdcbd49dc3fae514a1ca0d439a56086565c5cc";
const CRIO: &str = "c64064614423cb790e88b3e5492ff5ccf673b25ae823089f7a60c65cda24d809";
const CRIO_CGROUPFS: &str = "142ad39642321449f32e2d5c7fafecc0400953d3e2db6535a97e9e5ff4c11cc3";
const DOCKER: &str = "d548c5b83fa61d8e3bd86ad42a7ffea9b7c86e3f9d8095c1577d3e1270bb9420";
const KIND: &str = "fc7d8b383769d2cf860a0ecc7ba74764d8dcb067512285e66f291c68419bd4b5";
const POD1: &str = "5c0e4d5c-0b5a-4f71-9d7b-3a4c2e8f1a90";
const POD2: &str = "2c1f0b2e-6f4a-4f1e-9a8b-7c6d5e4f3a21";
const POD3: &str = "9e8d7c6b-5a49-4382-a1b0-c9d8e7f6a5b4";
const POD4: &str = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

fn identity(container: Option<String>, pod: Option<&str>) -> CgroupIdentity {
    CgroupIdentity {
        container,
        pod: pod.map(str::to_string),
    }
}

fn containerd(id: &str) -> Option<String> {
    Some(format!("containerd://{id}"))
}

#[test]
fn containerd_cgroupfs_v1_and_v2() {
    let want = identity(containerd(K3S), Some(POD1));
    assert_eq!(parse_cgroup(cgroup!("k3s-containerd-cgroupfs-v1")), want);
    assert_eq!(parse_cgroup(cgroup!("k3s-containerd-cgroupfs-v2")), want);
}

#[test]
fn static_pod_uid_is_a_config_hash() {
    assert_eq!(
        parse_cgroup(cgroup!("static-pod-cgroupfs-v2")),
        identity(containerd(K3S), Some("8d4a4c6ae2e56d1e0b5e8f1a9b2c3d4e"))
    );
}

#[test]
fn containerd_systemd_v2_all_qos_classes() {
    let want = identity(containerd(KUBEADM), Some(POD2));
    assert_eq!(parse_cgroup(cgroup!("kubeadm-containerd-systemd-v2")), want);
    assert_eq!(
        parse_cgroup(cgroup!("kubeadm-containerd-systemd-v2-guaranteed")),
        want
    );
    let besteffort = cgroup!("kubeadm-containerd-systemd-v2").replace("burstable", "besteffort");
    assert_eq!(parse_cgroup(&besteffort), want);
}

#[test]
fn crio_systemd_v1_multi_line() {
    assert_eq!(
        parse_cgroup(cgroup!("crio-systemd-v1")),
        identity(Some(format!("cri-o://{CRIO}")), Some(POD3))
    );
}

#[test]
fn crio_conmon_is_in_the_pod_but_not_the_container() {
    assert_eq!(
        parse_cgroup(cgroup!("crio-conmon-systemd-v1")),
        identity(None, Some(POD3))
    );
}

#[test]
fn crio_crun_subgroup_and_cgroupfs() {
    assert_eq!(
        parse_cgroup(cgroup!("crio-crun-systemd-v2")),
        identity(Some(format!("cri-o://{CRIO}")), Some(POD3))
    );
    assert_eq!(
        parse_cgroup(cgroup!("crio-cgroupfs-v1")),
        identity(Some(format!("cri-o://{CRIO_CGROUPFS}")), Some(POD3))
    );
}

#[test]
fn docker_outside_kubernetes_has_no_pod() {
    let want = identity(Some(format!("docker://{DOCKER}")), None);
    assert_eq!(parse_cgroup(cgroup!("docker-systemd-v2")), want);
    assert_eq!(parse_cgroup(cgroup!("docker-cgroupfs-v1")), want);
}

#[test]
fn cri_dockerd_pod() {
    assert_eq!(
        parse_cgroup(cgroup!("cri-dockerd-systemd-v1")),
        identity(Some(format!("docker://{DOCKER}")), Some(POD4))
    );
}

#[test]
fn kind_pods_innermost_container_wins() {
    let want = identity(containerd(KIND), Some(POD4));
    assert_eq!(parse_cgroup(cgroup!("kind-systemd-v2")), want);
    assert_eq!(parse_cgroup(cgroup!("kind-from-host-v1")), want);
}

#[test]
fn paths_relative_to_a_cgroup_namespace() {
    assert_eq!(
        parse_cgroup(cgroup!("cgroupns-relative-systemd-v2")),
        identity(containerd(KUBEADM), Some(POD2))
    );
    assert_eq!(
        parse_cgroup(cgroup!("cgroupns-relative-cgroupfs-v2")),
        identity(containerd(K3S), Some(POD1))
    );
}

#[test]
fn host_processes_have_neither() {
    for text in [
        cgroup!("host-systemd-v2"),
        cgroup!("host-v1"),
        cgroup!("host-session-v2"),
        cgroup!("kubelet-on-k3s-v2"),
        cgroup!("host-cgroupns-relative-v2"),
        "0::/\n",
        "0::/init.scope\n",
    ] {
        assert_eq!(parse_cgroup(text), CgroupIdentity::default(), "{text}");
    }
}

#[test]
fn near_misses_are_not_containers() {
    let short = &K3S[..63];
    let upper = K3S.to_uppercase();
    for text in [
        String::new(),
        "garbage".to_string(),
        "0:".to_string(),
        // A bare 64-hex directory outside any pod or Docker is not a container.
        format!("0::/system.slice/{K3S}"),
        format!("0::/kubepods/burstable/pod{POD1}/{short}"),
        format!("0::/kubepods/burstable/pod{POD1}/{upper}"),
        format!("0::/kubepods/burstable/pod{POD1}/{K3S}.scope"),
        format!("0::/kubepods/burstable/pod{POD1}/cri-containerd-{short}.scope"),
        format!("0::/kubepods/burstable/pod{POD1}/crio-conmon-{CRIO}"),
        format!("0::/kubepods/burstable/pod{POD1}/docker-{K3S}x.scope"),
        format!("0::/notdocker/{DOCKER}"),
    ] {
        assert_eq!(parse_cgroup(&text).container, None, "{text}");
    }
}

#[test]
fn near_misses_are_not_pods() {
    let underscored = POD1.replace('-', "_");
    for text in [
        // pod directories outside kubepods, or with a UID of the wrong shape.
        format!("0::/system.slice/pod{POD1}/{K3S}"),
        "0::/kubepods/burstable/podnot-a-uid".to_string(),
        format!("0::/kubepods/burstable/pod{underscored}"),
        format!("0::/kubepods/burstable/pod{}", &POD1[1..]),
        format!("0::/kubepods/burstable/pod{}", POD1.replace('-', "x")),
        // In a slice name the UID's dashes would split it.
        format!("0::/kubepods.slice/kubepods-burstable-pod{POD1}.slice"),
        "0::/kubepods.slice/kubepods-burstable-pod.slice".to_string(),
        format!("0::/system.slice/notkubepods-pod{underscored}.slice"),
        // The QoS level alone names no pod.
        "0::/kubepods.slice/kubepods-burstable.slice".to_string(),
        "0::/kubepods/besteffort".to_string(),
    ] {
        assert_eq!(parse_cgroup(&text), CgroupIdentity::default(), "{text}");
    }
}

#[test]
fn first_line_naming_a_container_decides() {
    let text = format!(
        "2:memory:/kubepods/burstable/pod{POD1}\n1:name=systemd:/kubepods/burstable/pod{POD2}/{K3S}\n0::/docker/{DOCKER}\n"
    );
    assert_eq!(parse_cgroup(&text), identity(containerd(K3S), Some(POD2)));
    // A pod without container in one line, a container without pod in another.
    let text = format!("2:memory:/kubepods/burstable/pod{POD1}\n0::/system.slice/docker-{DOCKER}.scope\n");
    assert_eq!(
        parse_cgroup(&text),
        identity(Some(format!("docker://{DOCKER}")), Some(POD1))
    );
}

#[test]
fn cgroup_parsing_never_panics() {
    let base = cgroup!("crio-systemd-v1").as_bytes().to_vec();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        let mut buf = base.clone();
        for _ in 0..6 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = (seed as usize) % buf.len();
            buf[at] = b"/:-_.\n0a9pz"[(seed >> 40) as usize % 11];
        }
        let _ = parse_cgroup(&String::from_utf8_lossy(&buf));
    }
}

// === small pieces ===

#[test]
fn socket_links() {
    assert_eq!(socket_inode(b"socket:[16400]"), Some(16400));
    assert_eq!(socket_inode(b"socket:[18446744073709551615]"), Some(u64::MAX));
    for bad in [
        &b"socket:[]"[..],
        b"socket:[12a]",
        b"socket:[-1]",
        b"socket:[+1]",
        b"socket:[18446744073709551616]",
        b"socket:[1",
        b"pipe:[16400]",
        b"anon_inode:[eventfd]",
        b"/dev/null",
        b"",
    ] {
        assert_eq!(socket_inode(bad), None, "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn cmdlines_are_joined_and_cut() {
    assert_eq!(
        format_cmdline(b"haproxy\0-f\0/etc/haproxy/haproxy.cfg\0").as_deref(),
        Some("haproxy -f /etc/haproxy/haproxy.cfg")
    );
    assert_eq!(format_cmdline(b""), None);
    assert_eq!(format_cmdline(b"\0\0"), None);
    let long = "é".repeat(1000);
    let cut = format_cmdline(long.as_bytes()).unwrap();
    assert_eq!(cut.chars().count(), MAX_CMDLINE_CHARS);
    assert_eq!(format_cmdline(b"a\xffb").as_deref(), Some("a\\xffb"));
}

#[test]
fn secret_looking_arguments_are_redacted() {
    let cmd = |args: &[&str]| {
        let raw: Vec<u8> = args.iter().flat_map(|a| a.bytes().chain([0])).collect();
        format_cmdline(&raw).unwrap()
    };
    assert_eq!(
        cmd(&[
            "agent",
            "--api-token=SUPERSECRET123",
            "--port",
            "30080",
            "--db-password",
            "hunter2"
        ]),
        "agent --api-token=<redacted> --port 30080 --db-password <redacted>"
    );
    assert_eq!(
        cmd(&[
            "env",
            "AWS_SECRET_ACCESS_KEY=abc",
            "PGPASSWORD=pw",
            "HOME=/root",
            "run",
            "-tlsKey=/k.pem"
        ]),
        "env AWS_SECRET_ACCESS_KEY=<redacted> PGPASSWORD=<redacted> HOME=/root run -tlsKey=<redacted>"
    );
    // A secret flag followed by another flag had no value to hide.
    assert_eq!(cmd(&["x", "--token", "--verbose"]), "x --token --verbose");
    assert_eq!(
        cmd(&["x", "--Credentials-File", "/etc/creds"]),
        "x --Credentials-File <redacted>"
    );
}

#[test]
fn the_command_line_is_left_out_unless_asked_for() {
    let t = node();
    let owners = find_owners(t.root(), &set(&[4001]), ArgvEvidence::Omitted);
    let haproxy = &owners.by_inode[&4001];
    assert_eq!((haproxy.pid, haproxy.cmdline.as_deref()), (4242, None));
}

// === find_owners on a fixture /proc tree ===

/// A `/proc` tree in a temporary directory.
struct ProcTree {
    dir: tempfile::TempDir,
}

impl ProcTree {
    fn new() -> ProcTree {
        ProcTree {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A process with `comm`, `cgroup`, `cmdline` and fds linking to `targets`
    /// (`(fd name, link target)`).
    fn process(&self, pid: &str, comm: &str, cgroup: &str, cmdline: &[u8], fds: &[(&str, &str)]) {
        let dir = self.path(pid);
        fs::create_dir_all(dir.join("fd")).unwrap();
        fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        fs::write(dir.join("cgroup"), cgroup).unwrap();
        fs::write(dir.join("cmdline"), cmdline).unwrap();
        for (fd, target) in fds {
            symlink(target, dir.join("fd").join(fd)).unwrap();
        }
    }
}

fn set(inodes: &[u64]) -> HashSet<u64> {
    inodes.iter().copied().collect()
}

/// A node with systemd, a pre-forking haproxy on the host, a pod, and odd entries.
fn node() -> ProcTree {
    let t = ProcTree::new();
    t.process(
        "1",
        "systemd",
        cgroup!("host-systemd-v2"),
        b"/sbin/init\0",
        &[
            ("0", "/dev/null"),
            ("1", "socket:[100]"),
            ("2", "anon_inode:[eventfd]"),
        ],
    );
    // haproxy's master and a worker share the listening socket 4001.
    t.process(
        "4242",
        "haproxy",
        cgroup!("host-systemd-v2"),
        b"haproxy\0-f\0/etc/haproxy/haproxy.cfg\0",
        &[("3", "socket:[4001]"), ("4", "socket:[4002]")],
    );
    t.process(
        "4243",
        "haproxy",
        cgroup!("host-systemd-v2"),
        b"haproxy\0-f\0/etc/haproxy/haproxy.cfg\0",
        &[("3", "socket:[4001]"), ("5", "socket:[4003]")],
    );
    t.process(
        "31337",
        "squatterd",
        cgroup!("kubeadm-containerd-systemd-v2"),
        b"",
        &[
            // Odd entries: a non-numeric fd name, malformed links, a pipe with a
            // number asked about.
            ("x", "socket:[5001]"),
            ("7", "socket:[notanumber]"),
            ("8", "socket:[]"),
            ("9", "pipe:[5001]"),
            ("10", "socket:[5000]"),
        ],
    );
    // Exited after /proc was listed: the pid directory has nothing in it.
    fs::create_dir_all(t.path("950")).unwrap();
    // Exited between readlink and comm: its fd still names 6000, but there is no comm.
    fs::create_dir_all(t.path("960/fd")).unwrap();
    symlink("socket:[6000]", t.path("960/fd/3")).unwrap();
    // ...which a later process shares.
    t.process(
        "1200",
        "sshd",
        cgroup!("host-v1"),
        b"sshd: /usr/sbin/sshd\0",
        &[("3", "socket:[6000]")],
    );
    // Not pids: symlinks, directories, an overflowing number.
    symlink("1", t.path("self")).unwrap();
    symlink("1", t.path("thread-self")).unwrap();
    fs::create_dir_all(t.path("sys/fd")).unwrap();
    symlink("socket:[7000]", t.path("sys/fd/1")).unwrap();
    t.process("123abc", "nope", "", b"", &[("1", "socket:[7000]")]);
    t.process("99999999999", "nope", "", b"", &[("1", "socket:[7000]")]);
    t.process("0042", "zeropad", "", b"", &[("1", "socket:[7001]")]);
    t
}

#[test]
fn fixture_tree_attributes_sockets() {
    let t = node();
    let owners = find_owners(
        t.root(),
        &set(&[4001, 4003, 5000, 5001, 6000, 7000, 9999]),
        ArgvEvidence::Redacted,
    );

    let haproxy = &owners.by_inode[&4001];
    // The master (lowest pid), not the worker that shares the socket.
    assert_eq!(haproxy.pid, 4242);
    assert_eq!(haproxy.name, "haproxy");
    assert_eq!(haproxy.container, None);
    assert_eq!(haproxy.pod, None);
    assert_eq!(
        haproxy.cmdline.as_deref(),
        Some("haproxy -f /etc/haproxy/haproxy.cfg")
    );
    assert_eq!(owners.by_inode[&4003].pid, 4243);

    let pod = &owners.by_inode[&5000];
    assert_eq!(pod.pid, 31337);
    assert_eq!(pod.name, "squatterd");
    assert_eq!(pod.container, containerd(KUBEADM));
    assert_eq!(pod.pod.as_deref(), Some(POD2));
    assert_eq!(pod.cmdline, None);

    // Held by a process that exited mid-walk, and by a live one.
    assert_eq!(owners.by_inode[&6000].pid, 1200);
    assert_eq!(owners.by_inode[&6000].name, "sshd");

    // Only behind a non-numeric fd name or a pipe, only in non-pid dirs, or nowhere.
    for inode in [5001, 7000, 9999] {
        assert!(!owners.by_inode.contains_key(&inode), "{inode}");
    }
    // Only what was asked about.
    assert!(!owners.by_inode.contains_key(&4002));
    assert!(!owners.by_inode.contains_key(&100));
    assert_eq!(owners.by_inode.len(), 4);

    // 0042, 1, 960, 1200, 4242, 4243, 31337; 950 had no fd directory.
    assert_eq!(owners.processes, 7);
    assert_eq!((owners.denied, owners.failed), (0, 0));
    assert!(owners.notes.is_empty(), "{:?}", owners.notes);
}

#[test]
fn zero_padded_pid_dirs_are_read_under_their_own_name() {
    // Not a shape the kernel writes; the point is that it is read, not mangled.
    let t = node();
    let owners = find_owners(t.root(), &set(&[7001]), ArgvEvidence::Omitted);
    assert_eq!(owners.by_inode[&7001].pid, 42);
    assert_eq!(owners.by_inode[&7001].name, "zeropad");
}

#[test]
fn stops_once_every_inode_is_found() {
    let t = node();
    let owners = find_owners(t.root(), &set(&[100]), ArgvEvidence::Omitted);
    assert_eq!(owners.by_inode[&100].pid, 1);
    assert_eq!(owners.processes, 1);
}

#[test]
fn nothing_asked_nothing_read() {
    let owners = find_owners(
        Path::new("/nonexistent/proc"),
        &HashSet::new(),
        ArgvEvidence::Omitted,
    );
    assert_eq!(owners, Owners::default());
}

#[test]
fn missing_proc_root_is_a_note() {
    let owners = find_owners(Path::new("/nonexistent/proc"), &set(&[1]), ArgvEvidence::Omitted);
    assert!(owners.by_inode.is_empty());
    assert_eq!(owners.notes.len(), 1);
    assert!(
        owners.notes[0].contains("/nonexistent/proc"),
        "{:?}",
        owners.notes
    );
}

#[test]
fn other_fd_errors_are_counted_and_told_once() {
    let t = ProcTree::new();
    t.process("10", "a", "", b"", &[("1", "socket:[1]")]);
    // An fd "directory" that is a file, twice: ENOTDIR, neither exited nor denied.
    for pid in ["20", "30"] {
        fs::create_dir_all(t.path(pid)).unwrap();
        fs::write(t.path(pid).join("fd"), "").unwrap();
    }
    let owners = find_owners(t.root(), &set(&[1, 2]), ArgvEvidence::Omitted);
    assert_eq!(owners.by_inode[&1].pid, 10);
    assert_eq!((owners.denied, owners.failed), (0, 2));
    assert_eq!(owners.notes.len(), 1, "{:?}", owners.notes);
    assert!(owners.notes[0].starts_with("could not read the file descriptors of 2 processes ("));

    // When every inode was found, what could not be read did not matter.
    let owners = find_owners(t.root(), &set(&[1]), ArgvEvidence::Omitted);
    assert!(owners.notes.is_empty());
}

#[test]
fn unreadable_comm_means_gone_but_cgroup_and_cmdline_are_optional() {
    let t = ProcTree::new();
    fs::create_dir_all(t.path("10/fd")).unwrap();
    symlink("socket:[1]", t.path("10/fd/1")).unwrap();
    fs::write(t.path("10/comm"), "bare\n").unwrap();
    let owners = find_owners(t.root(), &set(&[1]), ArgvEvidence::Omitted);
    let p = &owners.by_inode[&1];
    assert_eq!((p.pid, p.name.as_str()), (10, "bare"));
    assert_eq!((&p.container, &p.pod, &p.cmdline), (&None, &None, &None));
}

#[test]
fn many_processes_and_fds() {
    let t = ProcTree::new();
    let fds: Vec<(String, String)> = (0..40)
        .map(|i| (i.to_string(), format!("socket:[{}]", 10_000 + i)))
        .collect();
    let fds: Vec<(&str, &str)> = fds.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    for pid in 100..130 {
        t.process(&pid.to_string(), "worker", "0::/\n", b"", &fds);
    }
    // Every worker shares every socket: the lowest pid owns them; 55 is nobody's, so
    // every process is read.
    let owners = find_owners(t.root(), &set(&[10_000, 10_039, 55]), ArgvEvidence::Omitted);
    assert_eq!(owners.by_inode[&10_000].pid, 100);
    assert_eq!(owners.by_inode[&10_039].pid, 100);
    assert_eq!(owners.processes, 30);
    assert!(owners.notes.is_empty());
}
