//! One pass: sources → decode → detect, live or from a bundle.

pub mod capture;
pub mod cluster_services;
pub mod input;
