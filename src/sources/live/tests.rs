use super::*;

/// Under commits that never pause, a netlink read fails every attempt; the dump tool
/// would fail the same way only after its whole time limit at full CPU. The read is
/// reported unread with why, and no fallback is asked for; any other failure still
/// asks for the tool.
#[test]
fn a_read_cut_short_by_every_commit_is_unread_and_runs_no_tool() {
    let live = LiveNode::new(LiveConfig::default());
    let cut: Fetched<Option<u8>> = live
        .read_netlink(|_| Err(NetlinkError::Unstable(3)), Option::is_some)
        .expect("no fallback to the tool");
    assert_eq!(cut.state, Some(SourceState::Error));
    assert!(cut.value.is_none());
    let note = cut.notes.join(" ");
    assert!(
        note.contains("changed during every one of 3 reads") && note.contains("was not run"),
        "{note}"
    );

    let unsupported = live.read_netlink(
        |_| Err::<(Option<u8>, u64), _>(NetlinkError::Unsupported("a rule it cannot print".into())),
        Option::is_some,
    );
    assert!(unsupported.is_err(), "the tool reads what netlink cannot print");
}
