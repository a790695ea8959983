use super::*;
use std::net::TcpListener;
use std::thread;

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
