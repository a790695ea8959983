//! `portdrift explain`: where a new connection to a NodePort goes on this node, rule
//! by rule, as the kernel evaluates the tables it read; and how that compares with
//! what the API says the port should reach.

pub mod eval;
pub mod explanation;
pub mod model;
pub mod render;
