use super::*;
use crate::decode::node::count_ip_vs_services;

/// `ipvsadm -L -n` right after a switch from iptables mode (kube-proxy, Calico): NodePort
/// 31195 on three local addresses. See testdata/wild/README.md.
const MODE_SWITCH: &str =
    include_str!("../../../../../testdata/wild/ipvs-after-mode-switch-calico-v1.8.4/ipvsadm.txt");
/// `ipvsadm -ln` on Azure (kubeadm, Calico) with the trailing spaces it was posted with.
const AZURE: &str = include_str!("../../../../../testdata/wild/ipvs-azure-calico-grep-kube/ipvsadm.txt");

/// `/proc/net/ip_vs` of a kube-proxy IPVS node, written with the kernel's formats
/// (`ip_vs_info_seq_show`): NodePort 30080 on the node addresses 10.0.1.21 and
/// 10.244.1.0 and the ClusterIP 10.96.0.20:80, one endpoint draining at weight 0, kube-dns
/// over UDP, a ClientIP-affinity NodePort (`persistent`), an IPv6 NodePort, a mark
/// service, and a garbled virtual server (7 hex digits) with its real server.
const PROC: &str = concat!(
    "IP Virtual Server version 1.2.1 (size=4096)\n",
    "Prot LocalAddress:Port Scheduler Flags\n",
    "  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n",
    "TCP  0A000115:7580 rr  \n",
    "  -> 0AF40105:1F90      Masq    1      2          1         \n",
    "  -> 0AF40207:1F90      Masq    1      0          0         \n",
    "  -> 0AF40209:1F90      Masq    0      1          3         \n",
    "TCP  0A600014:0050 rr  \n",
    "  -> 0AF40105:1F90      Masq    1      0          0         \n",
    "  -> 0AF40207:1F90      Masq    1      0          0         \n",
    "  -> 0AF40209:1F90      Masq    0      0          0         \n",
    "TCP  0AF40100:7580 rr  \n",
    "  -> 0AF40105:1F90      Masq    1      0          0         \n",
    "  -> 0AF40207:1F90      Masq    1      0          0         \n",
    "  -> 0AF40209:1F90      Masq    0      0          0         \n",
    "UDP  0A60000A:0035 rr  \n",
    "  -> 0AF40102:0035      Masq    1      0          0         \n",
    "TCP  0A000115:7918 rr  persistent 10800 FFFFFFFF\n",
    "  -> 0AF40106:2382      Masq    1      0          0         \n",
    "TCP  [fd00:0000:0000:0000:0000:0000:0a00:0115]:7580 rr \n",
    "  -> [fd00:0010:0244:0001:0000:0000:0000:0005]:1F90      Masq    1      0          0         \n",
    "FWM  00000001 rr \n",
    "  -> 0AF40107:0050      Masq    1      0          0         \n",
    "TCP  0A00115:7580 rr  \n",
    "  -> 0AF40105:1F90      Masq    1      0          0         \n",
);

fn proc(text: &str) -> IpvsTable {
    parse_proc_ip_vs(text.as_bytes()).expect("reading from memory")
}

fn ipvsadm(text: &str) -> IpvsTable {
    parse_ipvsadm(text.as_bytes()).expect("reading from memory")
}

fn tcp(addr: &str) -> VirtualAddr {
    VirtualAddr::Socket {
        protocol: Protocol::Tcp,
        addr: addr.parse().expect("address"),
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("address")
}

#[test]
fn the_mode_switch_capture_is_read_whole() {
    let table = ipvsadm(MODE_SWITCH);
    assert_eq!(table.unparsed, []);
    assert_eq!(table.services.len(), 10);
    assert_eq!(table.services.iter().map(|s| s.reals.len()).sum::<usize>(), 22);
    let nodeports: Vec<String> = table
        .services
        .iter()
        .filter(|s| s.addr.socket().is_some_and(|(_, a)| a.port() == 31195))
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        nodeports,
        [
            "TCP  172.17.0.1:31195 rr",
            "TCP  192.168.185.0:31195 rr",
            "TCP  192.168.191.153:31195 rr"
        ]
    );
    let first = &table.services[0];
    assert_eq!(
        (first.line, first.scheduler.as_str(), first.persistent),
        (4, "rr", None)
    );
    assert_eq!(first.flags, "");
    let reals: Vec<(SocketAddr, u32)> = first.reals.iter().map(|r| (r.addr, r.line)).collect();
    assert_eq!(
        reals,
        [
            (addr("192.168.185.13:80"), 5),
            (addr("192.168.185.14:80"), 6),
            (addr("192.168.185.15:80"), 7)
        ]
    );
    assert!(
        first
            .reals
            .iter()
            .all(|r| r.forward == Forward::Masq && r.weight == 1)
    );
    let webhook = table
        .services
        .iter()
        .find(|s| s.addr == tcp("10.101.177.188:443"))
        .expect("calico's API server");
    let conns: Vec<(u64, u64)> = webhook.reals.iter().map(|r| (r.active, r.inactive)).collect();
    assert_eq!(conns, [(1, 1), (1, 0)]);
    let last = table.services.last().expect("a service");
    assert_eq!(last.addr.to_string(), "UDP  10.96.0.10:53");
    assert_eq!(last.line, 33);
}

#[test]
fn the_azure_capture_with_trailing_spaces_is_read_whole() {
    let table = ipvsadm(AZURE);
    assert_eq!(table.unparsed, []);
    let listed: Vec<(String, usize)> = table
        .services
        .iter()
        .map(|s| (s.to_string(), s.reals.len()))
        .collect();
    assert_eq!(
        listed,
        [
            ("TCP  10.96.0.1:443 rr".to_string(), 1),
            ("TCP  10.96.0.10:53 rr".to_string(), 2),
            ("TCP  10.106.42.178:44134 rr".to_string(), 1),
            ("UDP  10.96.0.10:53 rr".to_string(), 2),
        ]
    );
    let api = &table.services[0].reals[0];
    assert_eq!(api.to_string(), "-> 172.16.0.4:6443 Masq 1 4 0");
    let last = &table.services[3].reals[1];
    assert_eq!((last.addr, last.line), (addr("192.168.0.18:53"), 13));
}

#[test]
fn the_kernels_table_is_read_in_hex_for_both_families() {
    let table = proc(PROC);
    let read: Vec<String> = table.services.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        read,
        [
            "TCP  10.0.1.21:30080 rr",
            "TCP  10.96.0.20:80 rr",
            "TCP  10.244.1.0:30080 rr",
            "UDP  10.96.0.10:53 rr",
            "TCP  10.0.1.21:31000 rr persistent 10800 FFFFFFFF",
            "TCP  [fd00::a00:115]:30080 rr",
            "FWM  1 rr",
        ]
    );
    let web = &table.services[0];
    let reals: Vec<String> = web.reals.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        reals,
        [
            "-> 10.244.1.5:8080 Masq 1 2 1",
            "-> 10.244.2.7:8080 Masq 1 0 0",
            "-> 10.244.2.9:8080 Masq 0 1 3",
        ]
    );
    assert!(!web.reals[2].serving(), "the draining endpoint is at weight 0");
    assert_eq!(table.services[4].persistent, Some(10800));
    let v6 = &table.services[5];
    assert_eq!(v6.addr, tcp("[fd00::a00:115]:30080"));
    assert_eq!(v6.reals[0].addr, addr("[fd00:10:244:1::5]:8080"));
    assert_eq!(v6.line, 20);
    assert_eq!(
        table.services[6].addr,
        VirtualAddr::Fwmark {
            mark: 1,
            family: None
        }
    );
    assert_eq!(table.services[6].reals.len(), 1);
    // The garbled virtual server and its real server: kept, never dropped or misfiled.
    let unparsed: Vec<(u32, &str)> = table
        .unparsed
        .iter()
        .map(|u| (u.line, u.reason.as_str()))
        .collect();
    assert_eq!(
        unparsed,
        [
            (24, "\"0A00115:7580\" is not the kernel's hex address and port"),
            (
                25,
                "a real server of the virtual server on line 24, which could not be read"
            ),
        ]
    );
    assert_eq!(table.unparsed[0].text, "TCP  0A00115:7580 rr");
    // Nothing lost next to the count the node facts give.
    assert_eq!(count_ip_vs_services(PROC), table.services.len() + 1);
}

/// Printing a table the way ipvsadm does and reading it back gives the same table: the
/// two readers and the rendering agree.
#[test]
fn a_table_printed_as_ipvsadm_reads_back_the_same() {
    let read = proc(PROC);
    let mut text = String::from(
        "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n",
    );
    for vs in &read.services {
        text.push_str(&format!("{vs}\n"));
        for r in &vs.reals {
            text.push_str(&format!("  {r}\n"));
        }
    }
    let mut again = ipvsadm(&text);
    assert_eq!(again.unparsed, []);
    // ipvsadm names a mark service's family; the kernel's file does not.
    for vs in &mut again.services {
        if let VirtualAddr::Fwmark { family, .. } = &mut vs.addr {
            assert_eq!(*family, Some(Family::Ipv4));
            *family = None;
        }
    }
    assert_eq!(again.services, read.services);
}

#[test]
fn ipvsadm_forms_of_ipv6_marks_and_flags_are_read() {
    let table = ipvsadm(concat!(
        "TCP  [fd00::a00:115]:30080 rr\n",
        "  -> [fd00:10:244:1::5]:8080      Masq    1      0          0\n",
        "\n",
        "TCP  10.0.1.21:31000 sh (sh-fallback,sh-port) persistent 360 mask 255.255.255.0 ops\n",
        "FWM  7 IPv6 wlc\n",
        "  -> [fd00::7]:80                 Tunnel  3      0          0\n",
    ));
    assert_eq!(table.unparsed, []);
    assert_eq!(table.services[0].reals[0].addr, addr("[fd00:10:244:1::5]:8080"));
    let sticky = &table.services[1];
    assert_eq!(sticky.persistent, Some(360));
    assert_eq!(
        sticky.flags,
        "(sh-fallback,sh-port) persistent 360 mask 255.255.255.0 ops"
    );
    assert_eq!(sticky.line, 4);
    assert_eq!(
        table.services[2].addr,
        VirtualAddr::Fwmark {
            mark: 7,
            family: Some(Family::Ipv6)
        }
    );
    assert_eq!(table.services[2].reals[0].forward, Forward::Tunnel);
    assert_eq!(table.services[2].to_string(), "FWM  7 IPv6 wlc");
}

#[test]
fn names_instead_of_numbers_are_kept_with_the_reason() {
    let table = ipvsadm(concat!(
        "TCP  node-1:31195 rr\n",
        "  -> 10-244-1-5.web.default.svc:http Masq 1 0 0\n",
        "TCP  10.0.1.21:31195 rr\n",
        "  -> 10.244.1.5:80 Masq 1 0 0\n",
    ));
    assert_eq!(table.services.len(), 1);
    assert_eq!(table.services[0].reals.len(), 1);
    assert_eq!(table.unparsed.len(), 2);
    assert!(
        table.unparsed[0].reason.contains("unless run with -n"),
        "{:?}",
        table.unparsed[0]
    );
    assert_eq!(table.unparsed[1].line, 2);
    assert!(table.unparsed[1].reason.contains("unless run with -n"));
}

#[test]
fn a_kernel_table_cut_mid_line_says_so() {
    let cut = &PROC[..PROC.find("  -> 0AF40207").expect("a line") + 12];
    let table = proc(cut);
    assert_eq!(table.services.len(), 1);
    assert_eq!(table.services[0].reals.len(), 1, "the cut line is not read");
    assert_eq!(table.unparsed.len(), 1);
    assert_eq!(table.unparsed[0].line, 6);
    assert!(table.unparsed[0].reason.contains("cut short"));
    // A paste without its last newline is whole.
    let pasted = ipvsadm(AZURE.trim_end());
    assert_eq!(pasted.unparsed, []);
    assert_eq!(pasted.services[3].reals.len(), 2);
}

#[test]
fn lines_of_other_shapes_are_kept_not_guessed() {
    let table = ipvsadm(concat!(
        "  -> 10.244.1.5:80 Masq 1 0 0\n",
        "Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes\n",
        "TCP  10.0.1.21:30080                  12       40       38     2400     3100\n",
        "  -> 10.244.1.5:8080                    6       20       19     1200     1550\n",
        "TCP  10.0.1.21:30081 rr persistent\n",
        "TCP  10.0.1.21:30082 rr\n",
        "  -> 10.244.1.5:8080 Bypass 1 0 0\n",
        "  -> 10.244.1.6:8080 Masq -1 0 0\n",
        "  -> 10.244.1.7:8080 Masq 1 0\n",
        "ICMP 10.0.1.21:0 rr\n",
    ));
    assert_eq!(table.services.len(), 1, "{table:#?}");
    assert_eq!(table.services[0].line, 6);
    assert_eq!(table.services[0].reals, []);
    let lines: Vec<u32> = table.unparsed.iter().map(|u| u.line).collect();
    assert_eq!(lines, [1, 2, 3, 4, 5, 7, 8, 9, 10]);
    assert_eq!(
        table.unparsed[0].reason,
        "a real server before any virtual server"
    );
    assert!(table.unparsed[1].reason.contains("another listing"));
    assert!(table.unparsed[4].reason.contains("persistent"));
    assert!(table.unparsed[5].reason.contains("Bypass"));
    assert!(table.unparsed[6].reason.contains("weight"));
    assert!(table.unparsed[7].reason.contains("4 columns"));
}

#[test]
fn bytes_that_are_not_a_table_never_panic_and_are_all_kept() {
    let junk: &[u8] = b"\xff\xfe\x00garbage\n[\n  ->\nTCP\nTCP  [::1\nFWM  zz rr\nTCP  0A000115:7580\n\r\n";
    for table in [
        parse_proc_ip_vs(junk).expect("memory"),
        parse_ipvsadm(junk).expect("memory"),
    ] {
        assert_eq!(table.services, []);
        assert_eq!(table.unparsed.len(), 7, "{table:#?}");
    }
    let long = format!("TCP  10.0.1.21:30080 {}\n", "r".repeat(10_000));
    let table = ipvsadm(&long);
    assert_eq!(table.services, []);
    assert!(table.unparsed[0].reason.contains("longer than"));
    assert!(table.unparsed[0].text.chars().count() <= EXCERPT + 1);
}
