//! A List response decoded as its body arrives, chunk by chunk: the API server's answer
//! to a list (`{"kind":..,"apiVersion":..,"metadata":{..},"items":[..]}`) is walked as
//! bytes come in, and each element of `items` is handed out as its JSON text as soon as
//! it is complete, for the caller to parse from a slice, reduce and drop before the next.
//! Only the element being cut (and the rest of the last chunk) is ever held, never the
//! body; `list_stream.rs` does the same for a file it reads itself.
//!
//! Pushed rather than read (a [`Read`](std::io::Read) would need a thread to block on
//! the network): the caller [`push`](ListChunks::push)es each chunk and takes what it
//! completed with [`next_part`](ListChunks::next_part) until that says it needs more.
//! The scanner only finds where values end; serde_json checks every value's syntax.

use serde::de::IgnoredAny;

use crate::decode::cluster::list_stream::ValueCut;

/// What a List body gives, in document order.
#[derive(Debug, PartialEq, Eq)]
pub enum ListPart<'a> {
    /// The List's `metadata` (its `resourceVersion`, `continue`), as its JSON text.
    Metadata(&'a [u8]),
    /// One element of `items`, as its JSON text.
    Item(&'a [u8]),
}

/// Why a body is not a List.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListBodyError {
    #[error("the list ends early, after {0} bytes (truncated?)")]
    Truncated(u64),
    #[error("the list is not valid JSON at byte {offset}: {message}")]
    Syntax { offset: u64, message: String },
    #[error("the answer is not a List: {0}")]
    NotAList(String),
}

/// Which top-level value is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Metadata,
    Items,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the top-level `{`.
    Start,
    /// Before a key (or, when `first`, the `}` of an empty object).
    Key { first: bool },
    /// Inside a key.
    InKey,
    /// After a key, before its `:`.
    Colon(Field),
    /// Before a value.
    Value(Field),
    /// Inside a value other than `items`.
    InValue(Field),
    /// Inside `items`, before an element (or, when `first`, the `]` of an empty array).
    Element { first: bool },
    /// Inside an element.
    InElement,
    /// After an element: `,` or `]`.
    AfterElement,
    /// After a top-level value: `,` or `}`.
    AfterValue,
    /// After the top-level `}`: only whitespace may follow.
    End,
}

/// A List body being decoded; see the module's comment.
#[derive(Debug)]
pub struct ListChunks {
    /// Bytes pushed and not yet consumed, from `input[start..]`; what is before `start`
    /// is dropped at the next push.
    input: Vec<u8>,
    start: usize,
    /// Where the value being cut began, and how far it has been scanned.
    value_start: usize,
    scanned: usize,
    cut: ValueCut,
    /// Bytes dropped from the front of `input`, for offsets in errors.
    dropped: u64,
    state: State,
}

impl Default for ListChunks {
    fn default() -> Self {
        ListChunks {
            input: Vec::new(),
            start: 0,
            value_start: 0,
            scanned: 0,
            cut: ValueCut::default(),
            dropped: 0,
            state: State::Start,
        }
    }
}

impl ListChunks {
    pub fn new() -> Self {
        ListChunks::default()
    }

    /// Adds the body's next chunk. Call [`next_part`](Self::next_part) until it gives
    /// None before pushing again.
    pub fn push(&mut self, chunk: &[u8]) {
        // Keep only what is still needed: the value being cut, or what is unread.
        let keep = if self.cutting() {
            self.value_start
        } else {
            self.start
        };
        if keep > 0 {
            self.input.drain(..keep);
            self.dropped += keep as u64;
            self.start -= keep;
            self.value_start -= keep.min(self.value_start);
            self.scanned -= keep.min(self.scanned);
        }
        self.input.extend_from_slice(chunk);
    }

    /// The next part completed by what was pushed, None when more input is needed (or
    /// the List is complete: see [`finish`](Self::finish)).
    pub fn next_part(&mut self) -> Result<Option<ListPart<'_>>, ListBodyError> {
        loop {
            if self.cutting() {
                let Some(end) = self.cut_value() else {
                    return Ok(None);
                };
                let (begin, state) = (self.value_start, self.state);
                self.start = end;
                let value = begin..end;
                match state {
                    State::InKey => {
                        let key: String = self.parse(value)?;
                        let field = match key.as_str() {
                            "metadata" => Field::Metadata,
                            "items" => Field::Items,
                            _ => Field::Other,
                        };
                        self.state = State::Colon(field);
                    }
                    State::InValue(Field::Metadata) => {
                        self.state = State::AfterValue;
                        return Ok(Some(ListPart::Metadata(&self.input[value])));
                    }
                    State::InValue(Field::Items) => {
                        // Only `null` reaches here: an array is walked element by element.
                        self.parse::<()>(value)
                            .map_err(|_| ListBodyError::NotAList("its items are not an array".to_string()))?;
                        self.state = State::AfterValue;
                    }
                    State::InValue(Field::Other) => {
                        self.parse::<IgnoredAny>(value)?;
                        self.state = State::AfterValue;
                    }
                    _ => {
                        self.state = State::AfterElement;
                        return Ok(Some(ListPart::Item(&self.input[value])));
                    }
                }
                continue;
            }
            let Some(byte) = self.skip_whitespace() else {
                return Ok(None);
            };
            let expected = match (self.state, byte) {
                (State::Start, b'{') => self.step(State::Key { first: true }),
                (State::Start, _) => {
                    return Err(ListBodyError::NotAList(
                        "the answer is not a JSON object".to_string(),
                    ));
                }
                (State::Key { first: true }, b'}') => self.step(State::End),
                (State::Key { .. }, b'"') => self.begin_value(State::InKey),
                (State::Key { .. }, _) => "an object key",
                (State::Colon(field), b':') => self.step(State::Value(field)),
                (State::Colon(_), _) => "`:`",
                (State::Value(Field::Items), b'[') => self.step(State::Element { first: true }),
                (State::Value(Field::Items), b'n') => self.begin_value(State::InValue(Field::Items)),
                (State::Value(Field::Items), _) => {
                    return Err(ListBodyError::NotAList("its items are not an array".to_string()));
                }
                (State::Value(field), _) => self.begin_value(State::InValue(field)),
                (State::Element { first: true }, b']') => self.step(State::AfterValue),
                (State::Element { .. }, _) => self.begin_value(State::InElement),
                (State::AfterElement, b',') => self.step(State::Element { first: false }),
                (State::AfterElement, b']') => self.step(State::AfterValue),
                (State::AfterElement, _) => "`,` or `]`",
                (State::AfterValue, b',') => self.step(State::Key { first: false }),
                (State::AfterValue, b'}') => self.step(State::End),
                (State::AfterValue, _) => "`,` or `}`",
                (State::End, _) => "nothing after the List",
                (State::InKey | State::InValue(_) | State::InElement, _) => {
                    unreachable!("values are cut above")
                }
            };
            if !expected.is_empty() {
                return Err(self.syntax(self.start, format!("expected {expected}")));
            }
        }
    }

    /// The body has ended: an error unless the List was complete.
    pub fn finish(&self) -> Result<(), ListBodyError> {
        if self.state == State::End {
            Ok(())
        } else {
            Err(ListBodyError::Truncated(self.dropped + self.input.len() as u64))
        }
    }

    fn cutting(&self) -> bool {
        matches!(self.state, State::InKey | State::InValue(_) | State::InElement)
    }

    /// Consumes the byte at `start` and moves to `state`; "" (nothing was expected).
    fn step(&mut self, state: State) -> &'static str {
        self.start += 1;
        self.state = state;
        ""
    }

    /// A value starts at `start` (its first byte is scanned by the cut).
    fn begin_value(&mut self, state: State) -> &'static str {
        self.value_start = self.start;
        self.scanned = self.start;
        self.cut = ValueCut::default();
        self.state = state;
        ""
    }

    /// Scans the value being cut on; where it ends, once it does.
    fn cut_value(&mut self) -> Option<usize> {
        let end = self.cut.find_end(&self.input[self.scanned..]);
        match end {
            Some(length) => Some(self.scanned + length),
            None => {
                self.scanned = self.input.len();
                None
            }
        }
    }

    /// The first byte at or after `start` that is not whitespace, which is consumed up
    /// to it; None when the input runs out first.
    fn skip_whitespace(&mut self) -> Option<u8> {
        let rest = &self.input[self.start..];
        match rest
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            Some(skip) => {
                self.start += skip;
                Some(rest[skip])
            }
            None => {
                self.start = self.input.len();
                None
            }
        }
    }

    fn parse<'a, T: serde::Deserialize<'a>>(
        &'a self,
        value: std::ops::Range<usize>,
    ) -> Result<T, ListBodyError> {
        let start = value.start;
        serde_json::from_slice(&self.input[value])
            .map_err(|e| self.syntax(start + e.column().saturating_sub(1), e.to_string()))
    }

    fn syntax(&self, at: usize, message: String) -> ListBodyError {
        ListBodyError::Syntax {
            offset: self.dropped + at as u64,
            message,
        }
    }
}

#[cfg(test)]
mod tests;
