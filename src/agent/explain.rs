//! The agent's `/explain?port=tcp/30080`: `portdrift explain` on this node, with the
//! desired state of the agent's API view. Each request reads the node afresh (the
//! rules and sockets as they are now) on a blocking thread, one request at a time.

use std::net::IpAddr;
use std::sync::Arc;

use crate::agent::desired_view::DesiredView;
use crate::heart::detect::DetectConfig;
use crate::heart::explain::explanation::Explanation;
use crate::heart::explain::model::PortQuery;
use crate::scan::explain::explain_input;
use crate::scan::input::read_input;
use crate::sources::live::{LiveConfig, LiveNode};

/// Explains a query on this node: the node's name and the explanation, or why not.
pub type Explainer =
    Arc<dyn Fn(PortQuery, Option<IpAddr>) -> Result<(Option<String>, Explanation), String> + Send + Sync>;

/// The most kube-proxy nftables NodePort rules for which the agent runs `nft -j list
/// ruleset`: nft's memory grows with the ruleset (`nft -j list table ip kube-proxy`
/// alone took 1,013 MiB at 10,000 Services: docs/performance.md#a-live-scan), beyond
/// the agent's limit well before that.
const NFT_LIMIT: usize = 2_000;

/// What `/explain` was asked, from its query string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExplainRequest {
    pub query: PortQuery,
    pub source: Option<IpAddr>,
    pub text: bool,
}

impl ExplainRequest {
    /// `port=tcp/30080[&source=IP][&format=text|json]`; Err says what is wrong.
    pub fn parse(query: Option<&str>) -> Result<ExplainRequest, String> {
        let mut port = None;
        let mut source = None;
        let mut text = false;
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match key.as_ref() {
                "port" => port = Some(value.parse::<PortQuery>().map_err(|e| e.to_string())?),
                "source" => {
                    source = Some(
                        value
                            .parse::<IpAddr>()
                            .map_err(|_| format!("source `{value}` is not an IP address"))?,
                    )
                }
                "format" => {
                    text = match value.as_ref() {
                        "text" => true,
                        "json" => false,
                        other => return Err(format!("format `{other}` is not text or json")),
                    }
                }
                other => return Err(format!("unknown parameter `{other}` (port, source, format)")),
            }
        }
        let query = port.ok_or("missing port=PROTO/PORT (for example port=tcp/30080)")?;
        Ok(ExplainRequest { query, source, text })
    }
}

/// The explainer of this node, over the agent's API view.
pub fn live_explainer(node: String, live: LiveConfig, view: DesiredView, detect: DetectConfig) -> Explainer {
    Arc::new(move |query, source| {
        let desired = view
            .desired_state()
            .map_err(|e| format!("the cluster state is not available: {e}"))?;
        let live_node = LiveNode::new(LiveConfig {
            cluster_state: None,
            ..live.clone()
        });
        let mut input =
            read_input(&live_node, Some(&node)).map_err(|e| format!("cannot read this node: {e}"))?;
        input.desired = Some(desired);
        let outcome = explain_input(input, &detect, &live_node, query, source, Some(NFT_LIMIT))?;
        Ok((outcome.node, outcome.explanation))
    })
}

#[cfg(test)]
mod tests;
