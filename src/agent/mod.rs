//! The daemon: its loops, the API watch, HTTP, metrics, Events and the node condition,
//! and repair's execution.

pub mod acceptances;
pub mod daemon;
pub mod desired_view;
pub mod explain;
pub mod http;
pub mod kube_report;
pub mod metrics;
pub mod repair;
pub mod watch;
