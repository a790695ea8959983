use super::{TokenError, tokens};

fn split(s: &str) -> Result<Vec<String>, TokenError> {
    tokens(s).map(|t| t.map(|c| c.into_owned())).collect()
}

#[test]
fn splits_plain_and_quoted_arguments() {
    let got = split(r#"-p tcp -m comment --comment "ns1/svc1:p80 cluster IP" -j KUBE-SVC-X"#).unwrap();
    assert_eq!(
        got,
        [
            "-p",
            "tcp",
            "-m",
            "comment",
            "--comment",
            "ns1/svc1:p80 cluster IP",
            "-j",
            "KUBE-SVC-X"
        ]
    );
}

#[test]
fn unescapes_quotes_inside_comments() {
    let got = split(r#"--comment "say \"hi\" \\ now" -j X"#).unwrap();
    assert_eq!(got, ["--comment", r#"say "hi" \ now"#, "-j", "X"]);
}

#[test]
fn reports_an_unterminated_quote() {
    assert_eq!(
        split(r#"--comment "never closed"#),
        Err(TokenError::UnterminatedQuote)
    );
}

#[test]
fn tolerates_double_spaces() {
    let got = split("-m nfacct --nfacct-name  localhost_nps_accepted_pkts").unwrap();
    assert_eq!(
        got,
        ["-m", "nfacct", "--nfacct-name", "localhost_nps_accepted_pkts"]
    );
}
