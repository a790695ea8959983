//! Bounds-checked attribute walking: attributes, numbers, names, nested data and
//! verdicts, and a rule's expressions.

use std::collections::HashMap;

use super::{
    DecodeError, NFTA_DATA_VALUE, NFTA_LIST_ELEM, NFTA_VERDICT_CHAIN, NFTA_VERDICT_CODE, NLA_TYPE_MASK,
};

const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;

/// `n` rounded up to the netlink alignment of four bytes.
pub(crate) fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// The attributes in a buffer, as (type, value); a malformed one ends the walk with
/// an error.
pub(crate) struct Attrs<'b> {
    data: &'b [u8],
}

impl<'b> Attrs<'b> {
    pub fn new(data: &'b [u8]) -> Self {
        Attrs { data }
    }
}

impl<'b> Iterator for Attrs<'b> {
    type Item = Result<(u16, &'b [u8]), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.data.is_empty() {
            return None;
        }
        let data = std::mem::take(&mut self.data);
        let Some(head) = data.get(..4) else {
            return Some(Err(DecodeError::Malformed(
                "an attribute header cut short".into(),
            )));
        };
        let len = usize::from(u16::from_ne_bytes([head[0], head[1]]));
        if len < 4 || len > data.len() {
            return Some(Err(DecodeError::Malformed(format!(
                "an attribute length of {len} with {} bytes left",
                data.len()
            ))));
        }
        let kind = u16::from_ne_bytes([head[2], head[3]]) & NLA_TYPE_MASK;
        self.data = data.get(align4(len)..).unwrap_or_default();
        Some(Ok((kind, &data[4..len])))
    }
}

pub(crate) fn be32(value: &[u8]) -> Result<u32, DecodeError> {
    value
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| DecodeError::Malformed("a 32-bit attribute cut short".into()))
}

pub(crate) fn be64(value: &[u8]) -> Result<u64, DecodeError> {
    let b: [u8; 8] = value
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| DecodeError::Malformed("a 64-bit attribute cut short".into()))?;
    Ok(u64::from_be_bytes(b))
}

/// A NUL-terminated name.
pub fn name(value: &[u8]) -> Result<&str, DecodeError> {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    std::str::from_utf8(&value[..end]).map_err(|_| DecodeError::Malformed("a name that is not UTF-8".into()))
}

/// The bytes of an `NFTA_DATA_VALUE`.
pub(crate) fn data_value(nested: &[u8]) -> Result<&[u8], DecodeError> {
    for attr in Attrs::new(nested) {
        if let (NFTA_DATA_VALUE, value) = attr? {
            return Ok(value);
        }
    }
    Err(DecodeError::Malformed("data without a value".into()))
}

pub(crate) fn read_verdict(nested: &[u8]) -> Result<(i32, Option<String>), DecodeError> {
    let mut code = None;
    let mut chain = None;
    for attr in Attrs::new(nested) {
        match attr? {
            (NFTA_VERDICT_CODE, v) => code = Some(be32(v)? as i32),
            (NFTA_VERDICT_CHAIN, v) => chain = Some(name(v)?.to_string()),
            _ => {}
        }
    }
    let code = code.ok_or_else(|| DecodeError::Malformed("a verdict without a code".into()))?;
    Ok((code, chain))
}

/// An expression's attributes by type, for the types below [`ExprAttrs::TYPES`] (the
/// ones the iptables reader asks for): an array, not a map, as it is built for every
/// expression of every rule.
pub(crate) struct ExprAttrs<'b>([Option<&'b [u8]>; ExprAttrs::TYPES]);

impl<'b> ExprAttrs<'b> {
    pub const TYPES: usize = 16;

    pub fn new(data: &'b [u8]) -> Result<Self, DecodeError> {
        let mut table = [None; Self::TYPES];
        for attr in Attrs::new(data) {
            let (kind, value) = attr?;
            if let Some(slot) = table.get_mut(usize::from(kind)) {
                *slot = Some(value);
            }
        }
        Ok(ExprAttrs(table))
    }

    pub fn get(&self, kind: u16) -> Option<&'b [u8]> {
        self.0.get(usize::from(kind)).copied().flatten()
    }
}

/// An expression's attributes by type (each appears once).
pub(crate) fn attr_map(data: &[u8]) -> Result<HashMap<u16, &[u8]>, DecodeError> {
    Attrs::new(data).collect()
}

/// A rule's expressions (`NFTA_RULE_EXPRESSIONS`), each as its name and its data.
pub(crate) fn expressions(list: &[u8]) -> impl Iterator<Item = Result<(&str, &[u8]), DecodeError>> {
    Attrs::new(list).filter_map(|item| {
        let (kind, element) = match item {
            Ok(item) => item,
            Err(e) => return Some(Err(e)),
        };
        if kind != NFTA_LIST_ELEM {
            return None;
        }
        let mut expr_name = "";
        let mut data: &[u8] = &[];
        for attr in Attrs::new(element) {
            match attr {
                Ok((NFTA_EXPR_NAME, v)) => match name(v) {
                    Ok(n) => expr_name = n,
                    Err(e) => return Some(Err(e)),
                },
                Ok((NFTA_EXPR_DATA, v)) => data = v,
                Ok(_) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok((expr_name, data)))
    })
}

/// The length of the prefix a mask keeps (its leading one bits); None when its ones are
/// not all leading.
pub(crate) fn prefix_len(mask: &[u8]) -> Option<u32> {
    let mut ones = 0;
    let mut seen_zero = false;
    for bit in mask
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1 == 1))
    {
        match (bit, seen_zero) {
            (true, true) => return None,
            (true, false) => ones += 1,
            (false, _) => seen_zero = true,
        }
    }
    Some(ones)
}

#[cfg(test)]
mod tests;
