use super::*;

#[test]
fn every_name_is_one_input_and_every_file_parses_back() {
    let all: Vec<Input> = Input::all().collect();
    for (i, input) in all.iter().enumerate() {
        assert!(
            all[..i].iter().all(|other| other.name() != input.name()),
            "{input:?} shares its name"
        );
        match input.file_name() {
            Some(name) => assert_eq!(Input::from_file_name(name), Some(*input)),
            None => assert_eq!(Input::from_file_name(input.name()), None),
        }
    }
    assert_eq!(all.len(), 6 + 3 + 4 + 7 + 12 + 6);
    assert_eq!(Input::from_file_name("README.md"), None);
    assert_eq!(Input::from_file_name("cluster (API server)"), None);
}

#[test]
fn the_names_are_the_bundle_layout() {
    assert_eq!(
        Input::IPTABLES.map(Input::name),
        [
            "iptables-nft-save.txt",
            "iptables-legacy-save.txt",
            "ip6tables-nft-save.txt",
            "ip6tables-legacy-save.txt",
            "iptables-save.txt",
            "ip6tables-save.txt",
        ]
    );
    assert_eq!(
        Input::SOCKETS.map(Input::proc_path),
        [
            Some("net/tcp"),
            Some("net/tcp6"),
            Some("net/udp"),
            Some("net/udp6")
        ]
    );
    assert_eq!(Input::NftJson.proc_path(), None);
    assert_eq!(
        Input::LocalPortRange.proc_path(),
        Some("sys/net/ipv4/ip_local_port_range")
    );
    // A map's files are named after the map Cilium pins.
    for input in Input::cilium_maps() {
        let Input::CiliumMap { kind, form } = input else {
            panic!("{input:?}");
        };
        let suffix = match form {
            MapForm::Entries => "json",
            MapForm::Info => "info.json",
        };
        assert_eq!(input.name(), format!("bpf/{}.{suffix}", kind.pin_name()));
    }
}

#[test]
fn it_is_written_as_its_name() {
    assert_eq!(
        serde_json::to_string(&Input::Api).unwrap(),
        r#""cluster (API server)""#
    );
    assert_eq!(Input::NftJson.to_string(), "nft.json");
}
