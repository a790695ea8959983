//! API scenarios against the fake API server or a stand-in: a bound on each, waiting
//! for a condition, and reading a request's head.

/// Runs an API scenario under a bound, so that a broken client or server fails the test
/// rather than hanging it.
pub async fn scenario(body: impl std::future::Future<Output = ()>) {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    tokio::time::timeout(std::time::Duration::from_secs(60), body)
        .await
        .expect("the scenario finished within 60 s");
}

/// Reads an HTTP request from `stream` up to the blank line that ends its head (the
/// stand-in servers answer GETs, which have no body); None if it ends or fails first.
pub async fn read_request_head(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    Some(request)
}

/// Waits until `condition` holds, or panics after `within`.
pub async fn eventually(what: &str, within: std::time::Duration, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
