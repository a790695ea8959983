use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;

use super::*;

/// Answers one request on a local port with `head` (status line and headers), then
/// each of `pieces` as its own write a little apart, and closes the connection. The
/// request line arrives on the receiver.
fn serve_once(head: &str, pieces: Vec<Vec<u8>>) -> (Api<Service>, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let head = head.to_string();
    let (requests, received) = mpsc::channel();
    thread::spawn(move || {
        let Ok((mut socket, _)) = listener.accept() else {
            return;
        };
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            match socket.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        let text = String::from_utf8_lossy(&request);
        let _ = requests.send(text.lines().next().unwrap_or_default().to_string());
        let _ = socket.write_all(head.as_bytes());
        for piece in pieces {
            let _ = socket.write_all(&piece);
            let _ = socket.flush();
            thread::sleep(Duration::from_millis(20));
        }
    });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    (Api::all(client), received)
}

/// `body` in HTTP chunks cut at `cuts`.
fn chunked(body: &str, cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(body.len());
    let mut pieces: Vec<Vec<u8>> = bounds
        .windows(2)
        .map(|w| {
            let part = &body.as_bytes()[w[0]..w[1]];
            let mut piece = format!("{:x}\r\n", part.len()).into_bytes();
            piece.extend_from_slice(part);
            piece.extend_from_slice(b"\r\n");
            piece
        })
        .collect();
    pieces.push(b"0\r\n\r\n".to_vec());
    pieces
}

const OK_CHUNKED: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

fn service_json(name: &str, port: u16) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"{name}","namespace":"shop","resourceVersion":"{port}","managedFields":[{{"manager":"kubectl","operation":"Update"}}]}},"spec":{{"type":"NodePort","ports":[{{"port":80,"nodePort":{port}}}]}}}}"#
    )
}

async fn read_all(reader: &mut ListReader<Service>) -> Result<Vec<Service>, kube::Error> {
    let mut items = Vec::new();
    while let Some(item) = reader.next().await? {
        items.push(item);
    }
    Ok(items)
}

#[tokio::test]
async fn objects_are_decoded_one_by_one_from_a_chunked_body() {
    let body = format!(
        r#"{{"kind":"ServiceList","apiVersion":"v1","metadata":{{"resourceVersion":"77"}},"items":[{},{},{}]}}"#,
        service_json("a", 30001),
        service_json("b", 30002),
        service_json("c", 30003)
    );
    // Cut inside the metadata, inside an object's string, between objects and their
    // commas, and one byte before the end.
    let second = body
        .find(r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"b""#)
        .unwrap();
    let cuts = [30, 75, 100, second - 1, second, second + 3, body.len() - 1];
    let (api, requests) = serve_once(OK_CHUNKED, chunked(&body, &cuts));
    let params = ListParams::default()
        .labels("!service.kubernetes.io/headless")
        .fields("metadata.namespace=shop")
        .match_any();
    let mut reader = stream_list(&api, &params).await.unwrap();
    let first = reader.next().await.unwrap().expect("a first Service");
    assert_eq!(first.metadata.name.as_deref(), Some("a"));
    // The metadata came before the items: known already, before the list ends.
    assert_eq!(reader.metadata().resource_version.as_deref(), Some("77"));
    let rest = read_all(&mut reader).await.unwrap();
    let names: Vec<_> = rest.iter().map(|s| s.metadata.name.clone().unwrap()).collect();
    assert_eq!(names, ["b", "c"]);
    let port = rest[1].spec.as_ref().unwrap().ports.as_ref().unwrap()[0].node_port;
    assert_eq!(port, Some(30003));
    assert!(reader.next().await.unwrap().is_none(), "stays ended");

    let request = requests.recv().unwrap();
    assert!(request.starts_with("GET /api/v1/services?"), "{request}");
    for wanted in [
        "labelSelector=%21service.kubernetes.io%2Fheadless",
        "fieldSelector=metadata.namespace%3Dshop",
        "resourceVersion=0",
        "resourceVersionMatch=NotOlderThan",
    ] {
        assert!(request.contains(wanted), "{wanted} in {request}");
    }
    assert!(!request.contains("limit="), "{request}");
}

#[tokio::test]
async fn an_api_error_is_kubes_error_with_the_status() {
    let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5","reason":"Expired","code":410}"#;
    let head = format!(
        "HTTP/1.1 410 Gone\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        status.len()
    );
    let (api, _) = serve_once(&head, vec![status.as_bytes().to_vec()]);
    match stream_list(&api, &ListParams::default().match_any()).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a 410 is an error"),
    }
    // Not a Status (a proxy's answer): kube makes one from the code.
    let (api, _) = serve_once(
        "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 8\r\n\r\n",
        vec![b"overload".to_vec()],
    );
    match stream_list(&api, &ListParams::default().match_any()).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.message.as_str()), (500, "overload"))
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a 500 is an error"),
    }
}

#[tokio::test]
async fn a_body_that_is_not_a_whole_list_is_an_error() {
    let good = service_json("a", 30001);
    // The objects before the fault come out; then the error.
    let cases = [
        (
            format!(
                r#"{{"metadata":{{"resourceVersion":"1"}},"items":[{good},{{"metadata":{{"name":"b"}},"spec":[]}}]}}"#
            ),
            "invalid type: sequence",
        ),
        (
            format!(r#"{{"metadata":{{"resourceVersion":"1"}},"items":[{good} {good}]}}"#),
            "expected `,` or `]`",
        ),
        (
            format!(r#"{{"metadata":{{"resourceVersion":"1"}},"items":[{good},"#),
            "the list ends early",
        ),
    ];
    for (body, message) in &cases {
        let (api, _) = serve_once(OK_CHUNKED, chunked(body, &[body.len() / 2]));
        let mut reader = stream_list(&api, &ListParams::default().match_any())
            .await
            .unwrap();
        let first = reader.next().await.unwrap().expect("the good object");
        assert_eq!(first.metadata.name.as_deref(), Some("a"));
        match reader.next().await {
            Err(kube::Error::SerdeError(error)) => {
                assert!(error.to_string().contains(message), "{body}: {error}");
            }
            other => panic!("{body}: {other:?}"),
        }
    }
    // A connection that breaks off mid-body.
    let body = format!(r#"{{"metadata":{{"resourceVersion":"1"}},"items":[{good},{good}"#);
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len() + 100
    );
    let (api, _) = serve_once(&head, vec![body.into_bytes()]);
    let mut reader = stream_list(&api, &ListParams::default().match_any())
        .await
        .unwrap();
    let error = read_all(&mut reader).await.expect_err("cut short");
    assert!(
        matches!(error, kube::Error::ReadEvents(_) | kube::Error::SerdeError(_)),
        "{error:?}"
    );
}
