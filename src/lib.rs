//! portdrift: finds where a Kubernetes node's NodePort plumbing has drifted from what
//! the cluster says.
//!
//! Data flows desired + observed → [`detect`] → findings → report. The parsers and the
//! detector are pure; I/O lives at the edges (`snapshot`, the binary).
#![forbid(unsafe_code)]

pub mod agent;
pub mod cli;
pub mod coverage;
pub mod desired;
pub mod detect;
pub mod finding;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod kube_proxy;
pub mod kube_report;
pub mod metrics;
pub mod model;
pub mod observed;
#[cfg(test)]
#[path = "../tests/support/promtool.rs"]
mod promtool;
pub mod proxy_mode;
pub mod repair;
pub mod report;
pub mod scan;
pub mod snapshot;
pub mod synth;
pub mod views;
