//! What the fake API server counts for `scripts/bench-api.sh`: every request once, under
//! the phase it arrived in and a signature without selectors or resourceVersion
//! numbers, and exactly the response body bytes a client receives.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use portdrift::agent::watch::{ClusterView, WatchOptions};
use support::fake_apiserver::{FakeApiServer, TrafficLine, objects};
use support::{eventually, scenario};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Requests by signature in `phase`.
fn requests_in(traffic: &[TrafficLine], phase: &str) -> BTreeMap<String, u64> {
    let lines = traffic.iter().filter(|t| t.phase == phase);
    lines.map(|t| (t.signature.clone(), t.requests)).collect()
}

/// One HTTP/1.0 GET of `target`: the body.
async fn get_body(server: &FakeApiServer, target: &str) -> Vec<u8> {
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let request = format!("GET {target} HTTP/1.0\r\nHost: {}\r\n\r\n", server.addr());
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let head_end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    answer.split_off(head_end + 4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_traffic_count_has_every_request_once_and_the_bytes_sent() {
    scenario(async {
        let server = FakeApiServer::start_with_bookmarks(None).await;
        for i in 0..5 {
            let name = format!("web-{i}");
            server.apply(&objects::service("shop", &name, "10.96.0.10", 30080 + i));
        }

        // A raw list: the bytes counted are the body's, under a signature that keeps
        // the page size and drops the selector.
        let body = get_body(&server, "/api/v1/services?labelSelector=a%3Db&limit=2").await;
        let traffic = server.traffic();
        let raw = traffic
            .iter()
            .find(|t| t.signature == "services list rv=<none> limit=2")
            .unwrap_or_else(|| panic!("{traffic:?}"));
        assert_eq!((raw.phase.as_str(), raw.requests), ("startup", 1));
        assert_eq!(raw.bytes, body.len() as u64);

        // The agents' view: each of its requests counted once, at start-up.
        let options = WatchOptions {
            staleness: Duration::from_secs(60),
            watch_timeout: Duration::from_secs(30),
            ..WatchOptions::default()
        };
        let view = ClusterView::start(server.config(), Some("worker-1"), options).unwrap();
        tokio::time::timeout(Duration::from_secs(20), view.wait_synced())
            .await
            .expect("synced");
        eventually("the three watches", Duration::from_secs(20), || {
            server.open_watches() == 3
        })
        .await;
        let startup = requests_in(&server.traffic(), "startup");
        assert_eq!(
            startup.values().sum::<u64>(),
            server.requests().len() as u64,
            "{startup:?}"
        );
        assert!(
            startup
                .keys()
                .all(|s| !s.contains("Selector") && !s.contains("resourceVersion=")),
            "{startup:?}"
        );
        assert!(
            startup.keys().any(|s| s.starts_with("services watch ")),
            "{startup:?}"
        );

        // After the phase changes, the 410 and the relist are counted apart.
        server.set_traffic_phase("relist");
        server.force_gone();
        eventually("the relist", Duration::from_secs(20), || {
            let status = view.status();
            status.services.relists >= 1 && status.endpoint_slices.relists >= 1 && status.fresh
        })
        .await;
        let traffic = server.traffic();
        assert_eq!(
            requests_in(&traffic, "startup"),
            startup,
            "the start-up count moved"
        );
        let relist = requests_in(&traffic, "relist");
        assert_eq!(
            relist.values().sum::<u64>() + startup.values().sum::<u64>(),
            server.requests().len() as u64
        );
        // The relist is a streaming list again, its parameters kept in the signature.
        assert!(
            relist
                .keys()
                .any(|s| s.starts_with("services watch ") && s.contains("sendInitialEvents=true")),
            "{relist:?}"
        );
        // The 410's ERROR events went to the watches opened at start-up, in this phase.
        let sent_after = traffic
            .iter()
            .filter(|t| t.phase == "relist" && t.signature.contains(" watch "));
        assert!(sent_after.map(|t| t.bytes).sum::<u64>() > 0);
    })
    .await;
}
