//! A node label selector in Kubernetes' equality-based syntax (`key=value`,
//! `key!=value`, `key`, `!key`, joined by commas), so one acceptances file mounted on
//! every node can scope an exception to some of them.

use std::collections::BTreeMap;
use std::fmt;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// Every requirement must hold for the node's labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct NodeSelector {
    text: String,
    requirements: Vec<Requirement>,
}

impl TryFrom<String> for NodeSelector {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in text.split(',').map(str::trim) {
            let valid_key = |k: &str| {
                !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
            };
            let requirement = if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = term.strip_prefix('!') {
                Requirement::Absent(k.trim().into())
            } else {
                Requirement::Exists(term.into())
            };
            let key = match &requirement {
                Requirement::Equals(k, _)
                | Requirement::NotEquals(k, _)
                | Requirement::Exists(k)
                | Requirement::Absent(k) => k,
            };
            if !valid_key(key) {
                return Err(format!(
                    "{text:?}: not a node selector (key=value, key!=value, key or !key, joined by commas)"
                ));
            }
            requirements.push(requirement);
        }
        Ok(NodeSelector { text, requirements })
    }
}

impl NodeSelector {
    /// Whether a node with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::Absent(k) => !labels.contains_key(k),
        })
    }
}

impl fmt::Display for NodeSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
