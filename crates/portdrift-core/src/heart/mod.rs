//! The pure heart: the model, the desired state with kube-proxy's semantics, the
//! detector, findings, coverage, repair planning and rendering. Values in, values out:
//! no I/O, no clock, no async runtime.

pub mod acceptance;
pub mod cilium;
pub mod citation;
pub mod coverage;
pub mod desired;
pub mod detect;
pub mod document;
pub mod explain;
pub mod finding;
pub mod input;
pub mod input_status;
pub mod ipvs;
pub mod kube_proxy;
pub mod model;
pub mod observed;
pub mod outcome;
pub mod proxy_mode;
pub mod render;
pub mod repair;
pub mod views;
pub mod visible;
pub mod words;
