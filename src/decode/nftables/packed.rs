//! The intermediate form packed into LZ4-compressed bytes and back: how a reader that
//! follows the kernel's notifications keeps kube-proxy's tables between reads. The
//! decoded tables of a 10,000-Service node hold about 23 MB of small allocations, most
//! of it repeated chain names, which pack into a small fraction of that.
//!
//! Packed in blocks of about [`BLOCK`] bytes, each compressed on its own, so neither
//! packing nor unpacking holds the tables' whole uncompressed bytes next to the tables.
//!
//! Only what a netlink read fills is packed: chains, rules, named maps. A table with
//! anything not understood is not kept (its next read is whole).

use std::borrow::Cow;
use std::net::SocketAddr;

use super::ir::{ChainIr, DnatIr, ElementIr, ElementVerdict, MapIr, ParsedRuleset, RuleIr, TableIr};
use crate::heart::model::Family;

/// Bytes of a block before it is compressed (a block holds whole chains and elements).
const BLOCK: usize = 64 << 10;

/// Tables packed: LZ4 blocks, in order.
#[derive(Debug, Default)]
pub(crate) struct Packed(Vec<Box<[u8]>>);

impl Packed {
    /// The bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.0.iter().map(|b| b.len()).sum::<usize>() + self.0.capacity() * std::mem::size_of::<Box<[u8]>>()
    }

    /// Ends a block once it is large enough: called between whole items only.
    fn item_done(&mut self, out: &mut Vec<u8>) {
        if out.len() >= BLOCK {
            self.flush(out);
        }
    }

    fn flush(&mut self, out: &mut Vec<u8>) {
        if !out.is_empty() {
            self.0
                .push(lz4_flex::block::compress_prepend_size(out).into_boxed_slice());
            out.clear();
        }
    }
}

/// Packs `parsed`'s tables.
pub(crate) fn pack(parsed: &ParsedRuleset<'_>) -> Packed {
    let mut packed = Packed::default();
    let mut out = Vec::with_capacity(BLOCK + 1024);
    put_len(&mut out, parsed.tables.len());
    for table in &parsed.tables {
        out.push(u8::from(table.family == Family::Ipv6));
        put_len(&mut out, table.chains.len());
        for chain in &table.chains {
            put_str(&mut out, &chain.name);
            put_len(&mut out, chain.rules.len());
            for rule in &chain.rules {
                put_rule(&mut out, rule);
            }
            packed.item_done(&mut out);
        }
        put_len(&mut out, table.maps.len());
        for map in &table.maps {
            put_str(&mut out, &map.name);
            put_len(&mut out, map.elements.len());
            for element in &map.elements {
                put_element(&mut out, element);
                packed.item_done(&mut out);
            }
        }
    }
    packed.flush(&mut out);
    packed.0.shrink_to_fit();
    packed
}

/// The tables [`pack`] packed.
pub(crate) fn unpack(packed: &Packed) -> Result<ParsedRuleset<'static>, String> {
    let mut r = Reader {
        blocks: packed.0.iter(),
        block: Vec::new(),
        at: 0,
    };
    let mut parsed = ParsedRuleset::default();
    for _ in 0..r.len()? {
        let family = if r.byte()? == 1 {
            Family::Ipv6
        } else {
            Family::Ipv4
        };
        let mut table = TableIr::new(family);
        let chains = r.len()?;
        table.reserve_chains(chains);
        for _ in 0..chains {
            let name = r.string()?;
            let rules = (0..r.len()?).map(|_| r.rule()).collect::<Result<_, _>>()?;
            table.push_chain(ChainIr {
                name: Cow::Owned(name),
                line: 0,
                rules,
            });
        }
        for _ in 0..r.len()? {
            let name = Cow::Owned(r.string()?);
            let elements = (0..r.len()?).map(|_| r.element()).collect::<Result<_, _>>()?;
            table.maps.push(MapIr { name, elements });
        }
        parsed.tables.push(table);
    }
    Ok(parsed)
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn put_rule(out: &mut Vec<u8>, rule: &RuleIr<'_>) {
    out.push(u8::from(rule.handle.is_some()) | u8::from(rule.dnat.is_some()) << 1);
    out.extend_from_slice(&rule.handle.unwrap_or_default().to_le_bytes());
    out.extend_from_slice(&rule.line.to_le_bytes());
    put_len(out, rule.jumps.len());
    for jump in &rule.jumps {
        put_str(out, jump);
    }
    if let Some(dnat) = &rule.dnat {
        put_str(out, &dnat.addr.to_string());
        put_str(out, &dnat.text);
    }
}

fn put_element(out: &mut Vec<u8>, element: &ElementIr<'_>) {
    put_str(out, &element.key);
    out.extend_from_slice(&element.line.to_le_bytes());
    match &element.comment {
        Some(c) => {
            out.push(1);
            put_str(out, c);
        }
        None => out.push(0),
    }
    let (tag, text) = match &element.verdict {
        ElementVerdict::Goto(c) => (0, &**c),
        ElementVerdict::Jump(c) => (1, &**c),
        ElementVerdict::Drop => (2, ""),
        ElementVerdict::Accept => (3, ""),
        ElementVerdict::Other(s) => (4, s.as_str()),
    };
    out.push(tag);
    put_str(out, text);
}

/// Reads the blocks in order, one unpacked at a time; no field spans two blocks.
struct Reader<'b> {
    blocks: std::slice::Iter<'b, Box<[u8]>>,
    block: Vec<u8>,
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        // An empty field may end the last block.
        if n > 0 && self.at == self.block.len() {
            let next = self.blocks.next().ok_or("kept tables end early")?;
            self.block = lz4_flex::block::decompress_size_prepended(next).map_err(|e| e.to_string())?;
            self.at = 0;
        }
        let field = self
            .block
            .get(self.at..self.at + n)
            .ok_or("a kept block ends inside a field")?;
        self.at += n;
        Ok(field)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn len(&mut self) -> Result<usize, String> {
        Ok(self.u32()? as usize)
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.len()?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|e| e.to_string())
    }

    fn rule(&mut self) -> Result<RuleIr<'static>, String> {
        let flags = self.byte()?;
        let mut handle = [0; 8];
        handle.copy_from_slice(self.take(8)?);
        let line = self.u32()?;
        let jumps = (0..self.len()?)
            .map(|_| self.string().map(Cow::Owned))
            .collect::<Result<_, _>>()?;
        let dnat = match flags & 2 {
            0 => None,
            _ => {
                let addr: SocketAddr = self.string()?.parse().map_err(|e| format!("{e}"))?;
                let text = self.string()?.into();
                Some(Box::new(DnatIr { addr, text }))
            }
        };
        Ok(RuleIr {
            handle: (flags & 1 != 0).then(|| u64::from_le_bytes(handle)),
            line,
            jumps,
            dnat,
        })
    }

    fn element(&mut self) -> Result<ElementIr<'static>, String> {
        let key = self.string()?;
        let line = self.u32()?;
        let comment = match self.byte()? {
            0 => None,
            _ => Some(Cow::Owned(self.string()?)),
        };
        let tag = self.byte()?;
        let text = self.string()?;
        let verdict = match tag {
            0 => ElementVerdict::Goto(Cow::Owned(text)),
            1 => ElementVerdict::Jump(Cow::Owned(text)),
            2 => ElementVerdict::Drop,
            3 => ElementVerdict::Accept,
            _ => ElementVerdict::Other(text),
        };
        Ok(ElementIr {
            key,
            comment,
            verdict,
            line,
        })
    }
}

#[cfg(test)]
mod tests;
