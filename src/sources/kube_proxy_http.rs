//! kube-proxy's own HTTP endpoints (`/healthz`, `/proxyMode`): one bounded `GET` to
//! loopback over a plain `TcpStream`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// kube-proxy's health endpoint (`--healthz-bind-address`, port 10256).
pub const DEFAULT_KUBE_PROXY_HEALTHZ: &str = "127.0.0.1:10256";
/// kube-proxy's metrics server (`--metrics-bind-address`), which answers `/proxyMode`.
pub const DEFAULT_KUBE_PROXY_METRICS: &str = "127.0.0.1:10249";
/// One loopback request: a second is plenty, and a wedged kube-proxy must not hold the scan.
pub const HEALTHZ_TIMEOUT: Duration = Duration::from_secs(1);
const HEALTHZ_MAX_RESPONSE: usize = 64 << 10;

/// An HTTP response, as far as a health check needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub reason: String,
    pub body: Vec<u8>,
}

/// Why the health request got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("unreachable at {addr}: {source}")]
    Unreachable {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("no answer from {addr} within {timeout:?}")]
    TimedOut { addr: SocketAddr, timeout: Duration },
    #[error("garbled answer from {addr}: {reason}")]
    Garbled { addr: SocketAddr, reason: String },
}

/// `GET http://ADDR/PATH` over a plain `TcpStream`, bounded in time and size.
///
/// No HTTP client crate: one loopback request per scan with a short budget needs only
/// std's blocking socket with timeouts, and no async runtime.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<HttpResponse, HttpError> {
    let deadline = Instant::now() + timeout;
    let timed_out = || HttpError::TimedOut { addr, timeout };
    let garbled = |reason: String| HttpError::Garbled { addr, reason };
    let io_error = |e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => HttpError::TimedOut { addr, timeout },
        _ => HttpError::Unreachable { addr, source: e },
    };
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(io_error)?;
    let remaining = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    };
    stream.set_write_timeout(remaining()).map_err(io_error)?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: portdrift/{}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION")
    );
    stream.write_all(request.as_bytes()).map_err(io_error)?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let Some(left) = remaining() else {
            return Err(timed_out());
        };
        stream.set_read_timeout(Some(left)).map_err(io_error)?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if raw.len() > HEALTHZ_MAX_RESPONSE {
                    return Err(garbled(format!("more than {HEALTHZ_MAX_RESPONSE} bytes")));
                }
                if let Some(done) = complete_response(&raw) {
                    return done.map_err(garbled);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error(e)),
        }
    }
    match complete_response(&raw) {
        Some(done) => done.map_err(garbled),
        // The server closed the connection: the body is whatever came.
        None => parse_response(&raw, true).map_err(garbled),
    }
}

/// Some(..) once `raw` holds a whole response (by Content-Length or chunked framing).
fn complete_response(raw: &[u8]) -> Option<Result<HttpResponse, String>> {
    match parse_response(raw, false) {
        Ok(r) => Some(Ok(r)),
        Err(e) if e == INCOMPLETE => None,
        Err(e) => Some(Err(e)),
    }
}

const INCOMPLETE: &str = "incomplete";

/// Parses a response. `at_eof`: the connection is closed, so an unframed body ends here.
fn parse_response(raw: &[u8], at_eof: bool) -> Result<HttpResponse, String> {
    let incomplete = || INCOMPLETE.to_string();
    let Some(head_end) = memchr::memmem::find(raw, b"\r\n\r\n") else {
        return Err(if at_eof {
            if raw.is_empty() {
                "the connection closed without an answer".into()
            } else {
                format!(
                    "not an HTTP response: {:?}",
                    String::from_utf8_lossy(&raw[..raw.len().min(80)])
                )
            }
        } else {
            incomplete()
        });
    };
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| "the headers are not text".to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1 status line: {status_line:?}"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|s| (100..600).contains(s))
        .ok_or_else(|| format!("no status code in {status_line:?}"))?;
    let reason = parts.next().unwrap_or("").to_string();
    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("a header line without a colon: {line:?}"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            content_length = Some(
                value
                    .parse()
                    .map_err(|_| format!("bad Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    let rest = &raw[head_end + 4..];
    let body = if chunked {
        match dechunk(rest) {
            Some(body) => body?,
            None if at_eof => return Err("the chunked body ends early".into()),
            None => return Err(incomplete()),
        }
    } else if let Some(len) = content_length {
        if rest.len() < len {
            if at_eof {
                return Err(format!("the body ends after {} of {len} bytes", rest.len()));
            }
            return Err(incomplete());
        }
        rest[..len].to_vec()
    } else if at_eof {
        rest.to_vec()
    } else {
        return Err(incomplete());
    };
    Ok(HttpResponse { status, reason, body })
}

/// Decodes a chunked body; None while it is incomplete.
fn dechunk(mut data: &[u8]) -> Option<Result<Vec<u8>, String>> {
    let mut body = Vec::new();
    loop {
        let line_end = memchr::memmem::find(data, b"\r\n")?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let Ok(size) = usize::from_str_radix(size_text, 16) else {
            return Some(Err(format!("bad chunk size {size_text:?}")));
        };
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(Ok(body));
        }
        if data.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

#[cfg(test)]
mod tests;
