//! `nft list ruleset` text → kube-proxy's tables in the shared intermediate form.
//!
//! A line-by-line reader for the layout `nft list` prints (one statement per line,
//! blocks closed by a `}` line, a map's `elements = { … }` spanning lines), covering what
//! kube-proxy writes: tables, chains, sets, maps with elements, and rules with
//! `goto`/`jump`/inline `vmap`/`dnat`. Tables other than `ip kube-proxy` and
//! `ip6 kube-proxy` are skipped by counting braces, so their contents (iptables-nft's
//! `xt` matches, anything else) never need to be understood. `nft -a` output is read
//! too: the `# handle N` comments give rules their handles.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use crate::decode::nftables::{
    DnatError, DnatIr, ElementIr, ElementVerdict, MapIr, NftError, ParsedRuleset, RuleIr, TableIr,
    kube_proxy_family, unparsed,
};
use crate::heart::model::Family;

/// Where the reader is in the block structure.
enum Scope {
    Top,
    Table(Family),
    Chain(Family, usize),
    /// A map (its index in the table) or, with `None`, a set, whose elements are not needed.
    Map(Family, Option<usize>),
    /// A map's or set's `elements = { … }`, read until its closing brace.
    Elements(Family, Option<usize>, ElementsReader),
    /// A table that is not kube-proxy's (`None`), or a block inside kube-proxy's table
    /// this parser has no use for; `depth` counts the braces still open.
    Skip(Option<Family>, u32),
}

pub(super) fn parse<'a>(input: &'a str, origin: &str) -> Result<ParsedRuleset<'a>, NftError> {
    let mut parsed = ParsedRuleset::default();
    let mut scope = Scope::Top;
    let mut saw_table = false;
    for (index, raw_line) in input.lines().enumerate() {
        let line = u32::try_from(index + 1).unwrap_or(u32::MAX);
        let (content, handle) = split_handle(raw_line);
        let content = content.trim();
        if matches!(scope, Scope::Top) && content.starts_with("table ") {
            saw_table = true;
        }
        scope = read_line(&mut parsed, scope, content, line, handle);
    }
    if !saw_table
        && input
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    {
        let (line, text) = first_content_line(input);
        return Err(NftError::NotNftText {
            origin: origin.to_string(),
            line,
            reason: format!(
                "no `table` block, starts with `{}`",
                crate::decode::nftables::readable(text)
            ),
        });
    }
    note_truncation(&mut parsed, &scope);
    parsed.note_what_is_left_out();
    Ok(parsed)
}

fn first_content_line(input: &str) -> (u32, &str) {
    input
        .lines()
        .enumerate()
        .find(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (u32::try_from(i + 1).unwrap_or(u32::MAX), l.trim()))
        .unwrap_or((0, ""))
}

/// A dump that ends inside kube-proxy's table was cut short: the table is marked
/// incomplete so nothing "missing" is concluded from it.
fn note_truncation(parsed: &mut ParsedRuleset<'_>, scope: &Scope) {
    let family = match scope {
        Scope::Top | Scope::Skip(None, _) => return,
        Scope::Table(f) | Scope::Chain(f, _) | Scope::Map(f, _) | Scope::Elements(f, _, _) => *f,
        Scope::Skip(Some(f), _) => *f,
    };
    let table = parsed.table_mut(family);
    table.complete = false;
    table
        .notes
        .push("the dump ends inside this table: it looks cut short".to_string());
}

fn read_line<'a>(
    parsed: &mut ParsedRuleset<'a>,
    scope: Scope,
    content: &'a str,
    line: u32,
    handle: Option<u64>,
) -> Scope {
    match scope {
        Scope::Top => read_top_line(parsed, content, line),
        Scope::Table(family) => read_table_line(parsed.table_mut(family), family, content, line),
        Scope::Chain(family, chain) => {
            read_chain_line(parsed.table_mut(family), family, chain, content, line, handle)
        }
        Scope::Map(family, map) => read_map_line(parsed.table_mut(family), family, map, content, line),
        Scope::Elements(family, map, mut reader) => {
            if !reader.feed(content, line) {
                return Scope::Elements(family, map, reader);
            }
            store_elements(parsed.table_mut(family), map, reader.items);
            Scope::Map(family, map)
        }
        Scope::Skip(family, depth) => {
            let depth = depth.saturating_add_signed(brace_balance(content));
            match (depth, family) {
                (0, Some(family)) => Scope::Table(family),
                (0, None) => Scope::Top,
                (depth, family) => Scope::Skip(family, depth),
            }
        }
    }
}

fn read_top_line<'a>(parsed: &mut ParsedRuleset<'a>, content: &'a str, line: u32) -> Scope {
    // nft may print "# Warning: table ip nat is managed by iptables-nft" above a table.
    if content.is_empty() || content.starts_with('#') {
        return Scope::Top;
    }
    let words: Vec<&str> = content.split_whitespace().collect();
    match words.as_slice() {
        ["table", family, name, "{", ..] => match kube_proxy_family(family, name) {
            Some(family) => {
                parsed.table_mut(family);
                Scope::Table(family)
            }
            None => skip_block(None, content),
        },
        _ => {
            parsed
                .unattributed
                .push(unparsed(line, content, "outside any table"));
            Scope::Top
        }
    }
}

/// Skips the block `content` opens; a block opened and closed on one line needs no skip.
fn skip_block(family: Option<Family>, content: &str) -> Scope {
    match (u32::try_from(brace_balance(content)).unwrap_or(0), family) {
        (0, Some(family)) => Scope::Table(family),
        (0, None) => Scope::Top,
        (depth, family) => Scope::Skip(family, depth),
    }
}

fn read_table_line<'a>(table: &mut TableIr<'a>, family: Family, content: &'a str, line: u32) -> Scope {
    if content.is_empty() || content.starts_with("comment ") || content.starts_with("flags ") {
        return Scope::Table(family);
    }
    if content == "}" {
        return Scope::Top;
    }
    let Some(header) = content.strip_suffix('{') else {
        table.unparsed.push(unparsed(
            line,
            content,
            "unexpected statement in table ip/ip6 kube-proxy",
        ));
        return Scope::Table(family);
    };
    match header.trim().split_once(' ') {
        Some(("chain", name)) => {
            let name = unquote(name.trim());
            Scope::Chain(family, table.chain_position(Cow::Borrowed(name), line))
        }
        Some(("map", name)) => {
            table.maps.push(MapIr {
                name: Cow::Borrowed(unquote(name.trim())),
                elements: Vec::new(),
            });
            Scope::Map(family, Some(table.maps.len() - 1))
        }
        Some(("set", _)) => Scope::Map(family, None),
        // Named counters, quotas, flowtables, ct helpers: nothing NodePorts depend on.
        _ => skip_block(Some(family), content),
    }
}

fn read_chain_line<'a>(
    table: &mut TableIr<'a>,
    family: Family,
    chain: usize,
    content: &'a str,
    line: u32,
    handle: Option<u64>,
) -> Scope {
    if content == "}" {
        return Scope::Table(family);
    }
    // Base chain header (`type nat hook prerouting priority dstnat; policy accept;`),
    // and the chain's own comment, are not rules.
    let is_header =
        content.starts_with("type ") || content.starts_with("policy ") || content.starts_with("comment \"");
    if content.is_empty() || is_header {
        return Scope::Chain(family, chain);
    }
    let (mut rule, problem) = lower_rule(content);
    rule.handle = handle;
    rule.line = line;
    if let Some(reason) = problem {
        table.unparsed.push(unparsed(line, content, reason));
    }
    rule.jumps.shrink_to_fit();
    table.chains[chain].rules.push(rule);
    Scope::Chain(family, chain)
}

fn read_map_line<'a>(
    table: &mut TableIr<'a>,
    family: Family,
    map: Option<usize>,
    content: &'a str,
    line: u32,
) -> Scope {
    if content == "}" {
        return Scope::Table(family);
    }
    if let Some(rest) = content.strip_prefix("elements = {") {
        let mut reader = ElementsReader::default();
        if reader.feed(rest, line) {
            store_elements(table, map, reader.items);
            return Scope::Map(family, map);
        }
        return Scope::Elements(family, map, reader);
    }
    const PROPERTIES: [&str; 9] = [
        "type ",
        "flags ",
        "timeout ",
        "size ",
        "comment ",
        "policy ",
        "gc-interval ",
        "counter",
        "auto-merge",
    ];
    if !content.is_empty() && !PROPERTIES.iter().any(|p| content.starts_with(p)) {
        table
            .unparsed
            .push(unparsed(line, content, "unexpected statement in a map or set"));
    }
    Scope::Map(family, map)
}

/// Reads the items of `elements = { a, b,\n c }`, splitting at top-level commas and
/// remembering the line each item starts on.
#[derive(Default)]
struct ElementsReader {
    items: Vec<(u32, String)>,
    current: String,
    current_line: u32,
    depth: u32,
    in_quote: bool,
}

impl ElementsReader {
    /// Feeds one line; true once the closing brace is seen.
    fn feed(&mut self, text: &str, line: u32) -> bool {
        for ch in text.chars() {
            if self.in_quote {
                self.in_quote = ch != '"';
                self.current.push(ch);
                continue;
            }
            match ch {
                '}' if self.depth == 0 => {
                    self.finish_item();
                    return true;
                }
                ',' if self.depth == 0 => {
                    self.finish_item();
                    continue;
                }
                '"' => self.in_quote = true,
                '{' => self.depth += 1,
                '}' => self.depth -= 1,
                _ => {}
            }
            if self.current.trim().is_empty() && !ch.is_whitespace() {
                self.current.clear();
                self.current_line = line;
            }
            self.current.push(ch);
        }
        self.current.push(' ');
        false
    }

    fn finish_item(&mut self) {
        let item = self.current.trim();
        if !item.is_empty() {
            self.items.push((self.current_line, item.to_string()));
        }
        self.current.clear();
    }
}

fn store_elements(table: &mut TableIr<'_>, map: Option<usize>, items: Vec<(u32, String)>) {
    let Some(map) = map else { return }; // A set's elements (addresses) route nothing.
    for (line, item) in items {
        match parse_element(&item, line) {
            Some(element) => table.maps[map].elements.push(element),
            None => {
                let reason = format!(
                    "element of map {} is not a `key : value` pair",
                    table.maps[map].name
                );
                table.unparsed.push(unparsed(line, &item, reason));
            }
        }
    }
}

/// `tcp . 3006 comment "ns6/svc6:p80" : goto reject-chain`. The separator is the last
/// ` : ` outside quotes (IPv6 keys contain colons, but never with spaces around them).
fn parse_element(item: &str, line: u32) -> Option<ElementIr<'static>> {
    let separator = last_unquoted(item, " : ")?;
    let (key_part, value) = (&item[..separator], item[separator + 3..].trim());
    let mut key_words = Vec::new();
    let mut comment = None;
    let mut words = tokenize(key_part).into_iter();
    while let Some(word) = words.next() {
        match word {
            "comment" => comment = words.next().map(|c| unquote(c).to_string()),
            // Dynamic elements carry their timers; they are not part of the key.
            "timeout" | "expires" => {
                words.next();
            }
            _ => key_words.push(word),
        }
    }
    let verdict = match value.split_once(' ') {
        Some(("goto", chain)) => ElementVerdict::Goto(Cow::Owned(unquote(chain.trim()).to_string())),
        Some(("jump", chain)) => ElementVerdict::Jump(Cow::Owned(unquote(chain.trim()).to_string())),
        None if value == "drop" => ElementVerdict::Drop,
        None if value == "accept" => ElementVerdict::Accept,
        _ => ElementVerdict::Other(value.to_string()),
    };
    Some(ElementIr {
        key: key_words.join(" "),
        comment: comment.map(Cow::Owned),
        verdict,
        line,
    })
}

/// Reads where a rule can send a packet: every `goto`/`jump` (also inside an inline
/// `vmap { … }`) and its `dnat to ADDR:PORT`. A DNAT portdrift cannot read is returned
/// as a problem; the rule's jumps are still kept.
fn lower_rule(content: &str) -> (RuleIr<'_>, Option<String>) {
    let mut rule = RuleIr::default();
    let mut problem = None;
    let words = tokenize(content);
    for (i, word) in words.iter().enumerate() {
        match *word {
            "goto" | "jump" => {
                if let Some(target) = words.get(i + 1).map(|t| unquote(t.trim_end_matches(','))) {
                    rule.jumps.push(Cow::Borrowed(target));
                }
            }
            "vmap"
                if words
                    .get(i + 1)
                    .is_some_and(|m| m.strip_prefix('@') == Some(super::SERVICE_NODEPORTS_MAP)) =>
            {
                rule.nodeport_dispatch = true;
            }
            // `ct status dnat` is a match on conntrack state, not a DNAT.
            "dnat" if i > 0 && words[i - 1] == "status" => {}
            "dnat" => match dnat_address(&words[i + 1..]) {
                Ok(addr) => {
                    rule.dnat = Some(Box::new(DnatIr {
                        addr,
                        text: content.into(),
                    }))
                }
                Err(reason) => problem = Some(reason.to_string()),
            },
            _ => {}
        }
    }
    (rule, problem)
}

/// The words after `dnat`: `to ADDR`, or `ip to ADDR` / `ip6 to ADDR` in inet tables.
fn dnat_address(words: &[&str]) -> Result<SocketAddr, DnatError> {
    let after_to = match words {
        ["to", rest @ ..] | ["ip" | "ip6", "to", rest @ ..] => rest,
        _ => return Err(DnatError::Form),
    };
    let target = after_to.first().copied().unwrap_or_default();
    if let Ok(addr) = target.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if target.parse::<IpAddr>().is_ok() {
        return Err(DnatError::WithoutPort);
    }
    Err(DnatError::ComputedAddress)
}

/// Splits off `nft -a`'s trailing `# handle N`.
fn split_handle(line: &str) -> (&str, Option<u64>) {
    const MARK: &str = "# handle ";
    if let Some(pos) = line.rfind(MARK)
        && line[..pos].bytes().filter(|&b| b == b'"').count() % 2 == 0
        && let Ok(handle) = line[pos + MARK.len()..].trim().parse::<u64>()
    {
        return (line[..pos].trim_end(), Some(handle));
    }
    (line, None)
}

/// Whitespace-separated words, a quoted string (`"a b"`) staying one word.
fn tokenize(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut start = None;
    let mut in_quote = false;
    for (i, ch) in text.char_indices() {
        match ch {
            '"' => {
                in_quote = !in_quote;
                start.get_or_insert(i);
            }
            c if c.is_whitespace() && !in_quote => {
                if let Some(s) = start.take() {
                    words.push(&text[s..i]);
                }
            }
            _ => {
                start.get_or_insert(i);
            }
        }
    }
    if let Some(s) = start {
        words.push(&text[s..]);
    }
    words
}

fn unquote(word: &str) -> &str {
    word.strip_prefix('"')
        .and_then(|w| w.strip_suffix('"'))
        .unwrap_or(word)
}

/// Opening minus closing braces outside quotes.
fn brace_balance(text: &str) -> i32 {
    let mut balance = 0;
    let mut in_quote = false;
    for ch in text.chars() {
        match ch {
            '"' => in_quote = !in_quote,
            '{' if !in_quote => balance += 1,
            '}' if !in_quote => balance -= 1,
            _ => {}
        }
    }
    balance
}

fn last_unquoted(text: &str, needle: &str) -> Option<usize> {
    let mut found = None;
    let mut in_quote = false;
    for (i, ch) in text.char_indices() {
        if ch == '"' {
            in_quote = !in_quote;
        } else if !in_quote && text[i..].starts_with(needle) {
            found = Some(i);
        }
    }
    found
}

#[cfg(test)]
mod tests;
