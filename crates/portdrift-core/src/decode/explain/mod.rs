//! Rule dumps → the tables `portdrift explain` evaluates (`heart::explain::model`):
//! every chain of every table with each rule's conditions and action, not only the
//! NodePort dispatch the scan's parsers keep.
pub mod iptables;
pub mod nft;
