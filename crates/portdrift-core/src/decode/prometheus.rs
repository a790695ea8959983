//! Prometheus's HTTP API answers (`/api/v1/query`), for the fleet view from what
//! Prometheus holds: an instant vector's samples, or what is wrong with the answer.

use serde_json::Value;

use crate::heart::views::fleet::prometheus::Sample;

/// Why an answer is not an instant vector; the texts are shown in `fleet`'s error.
#[derive(Debug, thiserror::Error)]
pub enum VectorError {
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// Prometheus's own `error` answer: its `errorType` and `error`.
    #[error("{kind}: {message}")]
    Refused { kind: String, message: String },
    /// Another result type (`matrix`, `scalar`), as its JSON spells it.
    #[error("result type {0} is not a vector")]
    NotVector(Value),
    #[error("no result list")]
    NoResult,
    #[error("a sample without labels")]
    NoLabels,
    #[error("a sample without a value")]
    NoValue,
    #[error("sample value {0:?} is not a number")]
    NotANumber(String),
}

/// Reads the body of `/api/v1/query` for an instant vector: its samples, or what is
/// wrong with it (an `error` answer, another result type, a value that is no number).
pub fn parse_vector(body: &[u8]) -> Result<Vec<Sample>, VectorError> {
    let answer: Value = serde_json::from_slice(body).map_err(VectorError::NotJson)?;
    if answer["status"] != "success" {
        return Err(VectorError::Refused {
            kind: answer["errorType"].as_str().unwrap_or("error").to_string(),
            message: answer["error"]
                .as_str()
                .unwrap_or("status is not success")
                .to_string(),
        });
    }
    let data = &answer["data"];
    if data["resultType"] != "vector" {
        return Err(VectorError::NotVector(data["resultType"].clone()));
    }
    let result = data["result"].as_array().ok_or(VectorError::NoResult)?;
    result
        .iter()
        .map(|s| {
            let labels = s["metric"]
                .as_object()
                .ok_or(VectorError::NoLabels)?
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect();
            let text = s["value"][1].as_str().ok_or(VectorError::NoValue)?;
            let value = text
                .parse()
                .map_err(|_| VectorError::NotANumber(text.to_string()))?;
            Ok(Sample { labels, value })
        })
        .collect()
}

#[cfg(test)]
mod tests;
