use super::*;

#[test]
fn a_query_string_reads_as_a_request() {
    let r = ExplainRequest::parse(Some("port=tcp/30080&source=10.0.0.9&format=text")).unwrap();
    assert_eq!(r.query.to_string(), "tcp/30080");
    assert_eq!(r.source, Some("10.0.0.9".parse().unwrap()));
    assert!(r.text);
    // An encoded IPv6 address and port.
    let r = ExplainRequest::parse(Some("port=tcp%2F%5Bfd00%3A%3A5%5D%3A30080")).unwrap();
    assert_eq!(r.query.address, Some("fd00::5".parse().unwrap()));
    assert!(!r.text);
}

#[test]
fn a_bad_query_string_says_what_is_wrong() {
    assert!(ExplainRequest::parse(None).unwrap_err().contains("missing port"));
    assert!(
        ExplainRequest::parse(Some("port=tcp/0"))
            .unwrap_err()
            .contains("PROTO/PORT")
    );
    assert!(
        ExplainRequest::parse(Some("port=tcp/1&source=x"))
            .unwrap_err()
            .contains("source")
    );
    assert!(
        ExplainRequest::parse(Some("port=tcp/1&format=xml"))
            .unwrap_err()
            .contains("format")
    );
    assert!(
        ExplainRequest::parse(Some("port=tcp/1&x=1"))
            .unwrap_err()
            .contains("unknown parameter")
    );
}
