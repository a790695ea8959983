//! A registry that records what is registered in it, for the metrics reference
//! (`docs/metrics.md`): the exposition itself leaves out a family until it has a
//! series, and some have none until a finding or a watch gives them one.

use prometheus_client::registry::{Metric, Registry, Unit};

use super::labels::LabelNames;

/// One metric as the reference lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricDoc {
    /// As exposed in the text format: with the prefix, the unit and a counter's `_total`.
    pub name: String,
    /// `counter`, `gauge` or `histogram`.
    pub kind: String,
    pub help: String,
    /// Its label names, in order.
    pub labels: &'static [&'static str],
}

/// A registry (or sub-registry) under `prefix`, and the list it adds to.
pub struct Described<'r> {
    registry: &'r mut Registry,
    prefix: &'static str,
    docs: &'r mut Vec<MetricDoc>,
}

impl<'r> Described<'r> {
    pub fn new(registry: &'r mut Registry, prefix: &'static str, docs: &'r mut Vec<MetricDoc>) -> Self {
        Described {
            registry,
            prefix,
            docs,
        }
    }

    /// Registers `metric` as `name` (under the prefix), with `unit`, if any, appended
    /// to the name as the exposition does.
    pub fn add<M: Metric + LabelNames>(&mut self, name: &str, help: &str, unit: Option<Unit>, metric: M) {
        self.docs.push(metric_doc(
            self.prefix,
            name,
            help,
            unit.as_ref(),
            metric.metric_type().as_str(),
            M::LABELS,
        ));
        match unit {
            Some(unit) => self.registry.register_with_unit(name, help, unit, metric),
            None => self.registry.register(name, help, metric),
        }
    }
}

/// A metric's reference entry, named as the text format names it.
pub fn metric_doc(
    prefix: &str,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    kind: &str,
    labels: &'static [&'static str],
) -> MetricDoc {
    let mut full = match prefix {
        "" => name.to_string(),
        prefix => format!("{prefix}_{name}"),
    };
    if let Some(unit) = unit {
        full = format!("{full}_{}", unit.as_str());
    }
    if kind == "counter" {
        full.push_str("_total");
    }
    MetricDoc {
        name: full,
        kind: kind.to_string(),
        help: help.to_string(),
        labels,
    }
}
