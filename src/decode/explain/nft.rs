//! TEMPORARY STUB (replaced by the real decoder).
use crate::heart::explain::model::Rulesets;
use crate::heart::model::Family;
#[derive(Debug, thiserror::Error)]
#[error("stub")]
pub struct NftExplainError;
pub fn parse_ruleset(
    _json: &[u8],
    _origin: &str,
    _skip: &dyn Fn(Family, &str) -> bool,
) -> Result<Rulesets, NftExplainError> {
    Ok(Rulesets::default())
}
