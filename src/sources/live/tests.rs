use super::*;
use std::net::TcpListener;

fn limits(ms: u64) -> ToolLimits {
    ToolLimits {
        timeout: Duration::from_millis(ms),
        max_output: 1 << 20,
    }
}

fn lines(r: &mut dyn BufRead) -> io::Result<Vec<String>> {
    r.lines().collect()
}

#[test]
fn a_tool_that_is_not_on_path_is_absent() {
    let run = run_tool("portdrift-no-such-tool", &[], limits(1000), lines);
    assert_eq!(run.outcome, ToolOutcome::Absent);
    assert!(run.value.is_none());
    assert!(find_in("sh", Some(OsStr::new("/nonexistent:"))).is_none());
    assert!(find_in("sh", None).is_none());
}

#[test]
fn output_streams_into_the_consumer() {
    let run = run_tool("echo", &["a b", "c"], limits(5000), lines);
    assert_eq!(run.outcome, ToolOutcome::Ok);
    assert_eq!(run.value.unwrap().unwrap(), vec!["a b c".to_string()]);
    assert_eq!(run.stdout_bytes, 6);
    assert!(run.path.unwrap().is_absolute());
    assert_eq!(run.command, "echo a b c");
}

#[test]
fn a_tool_that_prints_nothing_is_empty() {
    let run = run_tool("true", &[], limits(5000), lines);
    assert_eq!(run.outcome, ToolOutcome::Empty);
}

#[test]
fn a_failing_tool_keeps_its_complaint() {
    let run = run_tool(
        "sh",
        &["-c", "echo 'iptables: something broke' >&2; echo partial; exit 3"],
        limits(5000),
        lines,
    );
    assert_eq!(run.outcome, ToolOutcome::Failed("exit status 3".into()));
    assert_eq!(run.stderr, "iptables: something broke");
    assert_eq!(run.value.unwrap().unwrap(), vec!["partial".to_string()]);
}

#[test]
fn a_hung_tool_is_killed_at_its_deadline_with_its_children() {
    let start = Instant::now();
    // The shell's `sleep` child holds stdout open: only a group kill ends it.
    let run = run_tool(
        "sh",
        &["-c", "echo begun; sleep 30; echo never"],
        limits(300),
        lines,
    );
    assert_eq!(run.outcome, ToolOutcome::TimedOut);
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
    assert_eq!(run.value.unwrap().unwrap(), vec!["begun".to_string()]);
}

#[test]
fn too_much_output_stops_the_tool() {
    let start = Instant::now();
    let run = run_tool(
        "yes",
        &[],
        ToolLimits {
            timeout: Duration::from_secs(10),
            max_output: 1000,
        },
        |r: &mut dyn BufRead| {
            let mut n = 0;
            for line in r.lines() {
                line?;
                n += 1;
            }
            Ok(n)
        },
    );
    assert_eq!(run.outcome, ToolOutcome::TooLarge);
    assert_eq!(run.stdout_bytes, 1000);
    assert!(run.value.unwrap().is_err());
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_consumer_that_stops_early_stops_the_tool() {
    let run = run_tool("yes", &[], limits(10_000), |r: &mut dyn BufRead| {
        let mut first = String::new();
        r.read_line(&mut first)?;
        Ok(first)
    });
    assert!(matches!(run.outcome, ToolOutcome::Failed(_)), "{:?}", run.outcome);
    assert_eq!(run.value.unwrap().unwrap(), "y\n");
}

#[test]
fn stderr_warnings_become_notes() {
    let notes =
        stderr_notes("# Warning: iptables-legacy tables present, use iptables-legacy-save to see them\n");
    assert_eq!(notes.len(), 1);
    assert!(notes[0].contains("iptables-legacy tables present"), "{notes:?}");
    let notes =
        stderr_notes("# Warning: ip6tables-legacy tables present, use ip6tables-legacy-save to see them");
    assert!(
        notes[0].starts_with("the tool says: ip6tables-legacy tables present"),
        "{notes:?}"
    );
    let notes = stderr_notes("# Warning: table ip nat is managed by iptables-nft, do not touch!\n");
    assert_eq!(
        notes,
        vec!["the tool says: table ip nat is managed by iptables-nft, do not touch!".to_string()]
    );
    let notes = stderr_notes("\n  \nsomething odd\nand more\n");
    assert_eq!(notes, vec!["stderr: something odd / and more".to_string()]);
}

fn serve_once(response: impl AsRef<[u8]> + Send + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(response.as_ref());
            if !response.as_ref().is_empty() {
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
            thread::sleep(Duration::from_millis(1500));
        }
    });
    addr
}

#[test]
fn healthz_answers_are_read() {
    let body =
        br#"{"lastUpdated": "2025-11-30 10:00:00 +0000 UTC","currentTime": "2025-11-30 10:00:00 +0000 UTC"}"#;
    let mut response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    response.extend_from_slice(body);
    let addr = serve_once(response);
    let r = http_get(addr, "/healthz", Duration::from_secs(1)).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, body);

    let addr = serve_once(b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n");
    let r = http_get(addr, "/healthz", Duration::from_secs(1)).unwrap();
    assert_eq!(
        (r.status, r.reason.as_str(), &r.body[..]),
        (503, "Service Unavailable", &b"{\"a\":1}"[..])
    );

    // No framing: the body runs to the end of the connection.
    let addr = serve_once(b"HTTP/1.0 200 OK\r\n\r\n{}");
    assert_eq!(
        http_get(addr, "/healthz", Duration::from_secs(1)).unwrap().body,
        b"{}"
    );
}

#[test]
fn healthz_failures_are_told_apart() {
    let addr = serve_once(b"SSH-2.0-OpenSSH_9.2\r\n");
    assert!(matches!(
        http_get(addr, "/healthz", Duration::from_secs(1)),
        Err(HttpError::Garbled { .. })
    ));
    let addr = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{}");
    assert!(matches!(
        http_get(addr, "/healthz", Duration::from_secs(1)),
        Err(HttpError::Garbled { .. })
    ));
    // Accepts, then says nothing.
    let addr = serve_once(b"");
    let start = Instant::now();
    assert!(matches!(
        http_get(addr, "/healthz", Duration::from_millis(300)),
        Err(HttpError::TimedOut { .. })
    ));
    assert!(start.elapsed() < Duration::from_secs(1));
    // Nothing listens.
    let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    assert!(matches!(
        http_get(addr, "/healthz", Duration::from_secs(1)),
        Err(HttpError::Unreachable { .. })
    ));
}
