//! nft's JSON expressions, read into one borrowed tree because any expression may
//! nest in any other.

use std::borrow::Cow;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::BStr;

/// A JSON value with its strings borrowed from the input: nft's expressions nest freely,
/// so the rule payloads of kube-proxy's tables are read into this rather than into one
/// struct per expression kind. Objects keep their key order.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(Cow<'a, str>),
    List(Vec<Expr<'a>>),
    Object(Vec<(Cow<'a, str>, Expr<'a>)>),
}

impl<'a> Expr<'a> {
    /// The kind and body of a one-key object such as `{"goto": {...}}`.
    pub(crate) fn single(&self) -> Option<(&str, &Expr<'a>)> {
        match self {
            Expr::Object(fields) if fields.len() == 1 => Some((fields[0].0.as_ref(), &fields[0].1)),
            _ => None,
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Expr<'a>> {
        match self {
            Expr::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Expr::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(super) fn as_str_cow(&self) -> Option<Cow<'a, str>> {
        match self {
            Expr::Str(s) => Some(s.clone()),
            _ => None,
        }
    }

    pub(crate) fn as_list(&self) -> Option<&[Expr<'a>]> {
        match self {
            Expr::List(items) => Some(items),
            _ => None,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Expr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Expr<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an nft JSON expression")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Expr::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Expr::Null)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Expr::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Expr::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Expr::Uint(v))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Expr::Float(v))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Expr::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Expr::Str(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Expr::Str(Cow::Owned(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Expr::List(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(1));
                while let Some(BStr(key)) = map.next_key::<BStr<'a>>()? {
                    fields.push((key, map.next_value()?));
                }
                Ok(Expr::Object(fields))
            }
        }
        deserializer.deserialize_any(V(PhantomData))
    }
}
