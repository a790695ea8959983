use super::*;
use crate::heart::coverage::Coverage;
use crate::heart::input_status::InputStatus;
use crate::heart::model::ProxyMode;
use crate::heart::outcome::{InputState, ScanReport};

fn source(name: &str, origin: Option<&str>, items: usize) -> InputStatus {
    InputStatus {
        source: Input::from_file_name(name).unwrap(),
        status: InputState::Ok,
        origin: origin.map(str::to_string),
        backend: None,
        family: None,
        items: Some(items),
        unparsed: 0,
        notes: Vec::new(),
    }
}

#[test]
fn one_of_a_thing_is_not_plural() {
    assert_eq!(count_of(1, "listener"), "1 listener");
    assert_eq!(count_of(0, "listener"), "0 listeners");
    assert_eq!(count_of(4, "NodePort rule"), "4 NodePort rules");
}

#[test]
fn source_lines_keep_their_columns_whatever_the_names() {
    let report = ScanReport {
        node: None,
        summary: Default::default(),
        findings: Vec::new(),
        sources: vec![
            source("proc/net/udp", None, 1),
            source(
                "iptables-nft-save.txt",
                Some("netlink: nf_tables ip (iptables-nft)"),
                9,
            ),
            source("cluster.json", None, 4),
            InputStatus {
                source: Input::SocketOwners,
                ..source("proc/net/tcp", None, 3)
            },
        ],
        coverage: Coverage::full(ProxyMode::Iptables),
        kube_proxy: None,
        kube_proxy_answered: Default::default(),
        acceptance_use: Vec::new(),
    };
    let text = render_text(&report);
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "sources:")
        .skip(1)
        .take(4)
        .collect();
    let status_at: Vec<usize> = lines.iter().map(|l| l.find(" ok ").unwrap()).collect();
    assert!(status_at.iter().all(|&at| at == status_at[0]), "{lines:#?}");
    assert!(lines[0].ends_with(" 1 listener"), "{lines:#?}");
    assert!(lines[1].ends_with(" 9 NodePort rules"), "{lines:#?}");
    assert!(lines[2].ends_with(" 4 Service ports"), "{lines:#?}");
    assert!(lines[3].ends_with(" 3 listeners"), "{lines:#?}");
}
