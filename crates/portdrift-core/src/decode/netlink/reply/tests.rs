use super::*;
use crate::testing::nf_messages::message;

#[test]
fn a_datagram_is_taken_apart_message_by_message() {
    let mut datagram = message(16, 0, &[(1, &7u32.to_be_bytes())]);
    let mut done = message(0, 0, &[]);
    done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
    datagram.extend_from_slice(&done);
    let (first, rest) = split_reply(&datagram).unwrap();
    assert_eq!(first.message.len(), datagram.len() - done.len());
    let Body::Message { interrupted, attrs } = first.body else {
        panic!("{first:?}");
    };
    assert!(!interrupted);
    assert_eq!(generation(attrs.unwrap()), Ok(Some(7)));
    let (second, rest) = split_reply(rest).unwrap();
    assert_eq!(second.body, Body::Done);
    assert!(rest.is_empty());
}

#[test]
fn an_error_cut_short_is_malformed_only_when_read() {
    let mut short = message(0, 0, &[]);
    short[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
    short.truncate(18);
    short[..4].copy_from_slice(&18u32.to_ne_bytes());
    let (reply, _) = split_reply(&short).unwrap();
    assert!(matches!(reply.body, Body::Error(Err(DecodeError::Malformed(_)))));
}

#[test]
fn a_table_answer_gives_its_handle() {
    let msg = message(0, 2, &[(1, b"kube-proxy\0"), (4, &9u64.to_be_bytes())]);
    let (reply, _) = split_reply(&msg).unwrap();
    let Body::Message { attrs, .. } = reply.body else {
        panic!("{reply:?}");
    };
    assert_eq!(table_handle(attrs.unwrap()), Ok(Some(9)));
}
