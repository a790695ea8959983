//! One pass: sources → decode → detect, live or from a bundle.

pub mod bundle_error;
pub mod capture;
pub mod cluster_api;
pub mod cluster_services;
pub mod explain;
pub mod input;
pub mod nft_reads;
pub mod oneshot;
pub mod readers;
