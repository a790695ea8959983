//! Repair planning: which stale rules may go, and exactly how, from findings and the
//! backends' whole rulesets. Pure; the agent executes a plan.

pub mod nft_table;
pub mod plan;
pub mod ruleset;

pub use plan::{Op, PlanContext, Refusal, RepairAction, RepairPlan, RepairRulesets};
