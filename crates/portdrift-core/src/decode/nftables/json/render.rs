//! Rules and map elements rendered as `nft list` prints them, so a finding shows the
//! rule the operator will see on the node, and the JSON and text front ends agree. This
//! covers what kube-proxy writes and common hand-written rules; anything else falls back
//! to its JSON.

use std::fmt::Write as _;

use super::expr::Expr;

pub(crate) fn render_rule(statements: &[Expr<'_>], comment: Option<&str>) -> String {
    let mut out = String::new();
    for statement in statements {
        if !out.is_empty() {
            out.push(' ');
        }
        render_statement(statement, &mut out);
    }
    if let Some(comment) = comment {
        let _ = write!(out, " comment \"{comment}\"");
    }
    out
}

fn render_statement(statement: &Expr<'_>, out: &mut String) {
    let Some((kind, value)) = statement.single() else {
        return render_json(statement, out);
    };
    match kind {
        "match" => render_match(value, out),
        "counter" => match (value.get("packets"), value.get("bytes")) {
            (Some(p), Some(b)) => {
                out.push_str("counter packets ");
                render_expr(p, out);
                out.push_str(" bytes ");
                render_expr(b, out);
            }
            _ => {
                out.push_str("counter name ");
                render_expr(value, out);
            }
        },
        "dnat" | "snat" => render_nat(kind, value, out),
        "goto" | "jump" => {
            out.push_str(kind);
            out.push(' ');
            match value.get("target") {
                Some(target) => render_expr(target, out),
                None => render_json(value, out),
            }
        }
        "vmap" => {
            render_field(value, "key", out);
            out.push_str(" vmap ");
            render_field(value, "data", out);
        }
        "accept" | "drop" | "return" | "continue" => out.push_str(kind),
        "masquerade" => {
            out.push_str("masquerade");
            render_flags(value.get("flags"), out);
        }
        "reject" => render_reject(value, out),
        "mangle" => {
            render_field(value, "key", out);
            out.push_str(" set ");
            render_field(value, "value", out);
        }
        "set" => {
            // `update @affinity-… { ip saddr }`
            render_field(value, "op", out);
            out.push(' ');
            render_field(value, "set", out);
            out.push_str(" { ");
            render_field(value, "elem", out);
            out.push_str(" }");
        }
        _ => render_json(statement, out),
    }
}

/// `left op right`; nft leaves out the implicit `==` and `in`.
fn render_match(value: &Expr<'_>, out: &mut String) {
    render_field(value, "left", out);
    match value.get("op").and_then(Expr::as_str) {
        Some("==") | Some("in") | None => {}
        Some(op) => {
            out.push(' ');
            out.push_str(op);
        }
    }
    out.push(' ');
    render_field(value, "right", out);
}

/// `dnat to 10.0.0.1:80`, `dnat to [fd00::1]:80`, `dnat ip to …` (inet tables).
fn render_nat(kind: &str, value: &Expr<'_>, out: &mut String) {
    out.push_str(kind);
    if let Some(family) = value.get("family").and_then(Expr::as_str) {
        out.push(' ');
        out.push_str(family);
    }
    out.push_str(" to ");
    let addr = value.get("addr");
    let bracket = value.get("port").is_some() && addr.and_then(Expr::as_str).is_some_and(|a| a.contains(':'));
    if bracket {
        out.push('[');
    }
    render_field(value, "addr", out);
    if bracket {
        out.push(']');
    }
    if let Some(port) = value.get("port") {
        out.push(':');
        render_expr(port, out);
    }
    render_flags(value.get("flags"), out);
}

fn render_reject(value: &Expr<'_>, out: &mut String) {
    out.push_str("reject");
    // nft prints the family's default (port-unreachable) as a bare `reject`.
    match (
        value.get("type").and_then(Expr::as_str),
        value.get("expr").and_then(Expr::as_str),
    ) {
        (_, None) | (_, Some("port-unreachable")) => {}
        (Some(t), Some(e)) => {
            let _ = write!(out, " with {t} {e}");
        }
        (None, Some(e)) => {
            let _ = write!(out, " with {e}");
        }
    }
}

fn render_flags(flags: Option<&Expr<'_>>, out: &mut String) {
    match flags {
        Some(Expr::Str(flag)) => {
            out.push(' ');
            out.push_str(flag);
        }
        Some(Expr::List(flags)) => {
            for flag in flags {
                out.push(' ');
                render_expr(flag, out);
            }
        }
        _ => {}
    }
}

/// Renders `value`'s field `name`, if it has one.
fn render_field(value: &Expr<'_>, name: &str, out: &mut String) {
    if let Some(field) = value.get(name) {
        render_expr(field, out);
    }
}

pub(crate) fn render_expr_string(expr: &Expr<'_>) -> String {
    let mut out = String::new();
    render_expr(expr, &mut out);
    out
}

/// Keys nft prints without the `meta` prefix.
const UNQUALIFIED_META_KEYS: [&str; 6] = ["iif", "oif", "iifname", "oifname", "iifgroup", "oifgroup"];

fn render_expr(expr: &Expr<'_>, out: &mut String) {
    match expr {
        Expr::Null => {}
        Expr::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        Expr::Int(n) => {
            let _ = write!(out, "{n}");
        }
        Expr::Uint(n) => {
            let _ = write!(out, "{n}");
        }
        Expr::Float(n) => {
            let _ = write!(out, "{n}");
        }
        Expr::Str(s) => out.push_str(s),
        Expr::List(items) => render_joined(items, ", ", out),
        Expr::Object(_) => render_object_expr(expr, out),
    }
}

fn render_joined(items: &[Expr<'_>], separator: &str, out: &mut String) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(separator);
        }
        render_expr(item, out);
    }
}

fn render_object_expr(expr: &Expr<'_>, out: &mut String) {
    let Some((kind, value)) = expr.single() else {
        return render_json(expr, out);
    };
    let field = |name: &str| value.get(name).and_then(Expr::as_str).unwrap_or_default();
    match kind {
        "concat" => render_joined(value.as_list().unwrap_or_default(), " . ", out),
        "payload" if value.get("protocol").is_some() => {
            let _ = write!(out, "{} {}", field("protocol"), field("field"));
        }
        "meta" if UNQUALIFIED_META_KEYS.contains(&field("key")) => out.push_str(field("key")),
        "meta" => {
            let _ = write!(out, "meta {}", field("key"));
        }
        "ct" => {
            let _ = write!(out, "ct {}", field("key"));
        }
        "fib" => {
            out.push_str("fib ");
            match value.get("flags") {
                Some(Expr::List(flags)) => render_joined(flags, " . ", out),
                Some(flag) => render_expr(flag, out),
                None => {}
            }
            let _ = write!(out, " {}", field("result"));
        }
        "numgen" => {
            let _ = write!(out, "numgen {} mod ", field("mode"));
            render_field(value, "mod", out);
            if let Some(offset) = value
                .get("offset")
                .filter(|o| !matches!(o, Expr::Uint(0) | Expr::Int(0)))
            {
                out.push_str(" offset ");
                render_expr(offset, out);
            }
        }
        "prefix" => {
            render_field(value, "addr", out);
            out.push('/');
            render_field(value, "len", out);
        }
        "range" => render_joined(value.as_list().unwrap_or_default(), "-", out),
        "set" => render_anonymous_set(value, out),
        "elem" => render_field(value, "val", out),
        "&" | "|" | "^" | "<<" | ">>" => {
            render_joined(value.as_list().unwrap_or_default(), &format!(" {kind} "), out)
        }
        "goto" | "jump" => {
            out.push_str(kind);
            out.push(' ');
            render_field(value, "target", out);
        }
        "accept" | "drop" | "return" | "continue" => out.push_str(kind),
        _ => render_json(expr, out),
    }
}

/// `{ 0 : goto a, 1 : goto b }` (verdict map) or `{ 10.0.0.0/8, … }` (set).
fn render_anonymous_set(value: &Expr<'_>, out: &mut String) {
    out.push_str("{ ");
    let items = match value {
        Expr::List(items) => items.as_slice(),
        single => std::slice::from_ref(single),
    };
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        match item.as_list() {
            Some([key, data]) => {
                render_expr(key, out);
                out.push_str(" : ");
                render_expr(data, out);
            }
            _ => render_expr(item, out),
        }
    }
    out.push_str(" }");
}

/// Compact JSON, the fallback for expressions nft's text form is not reproduced for.
fn render_json(expr: &Expr<'_>, out: &mut String) {
    match expr {
        Expr::Null => out.push_str("null"),
        Expr::Str(s) => {
            let _ = write!(out, "{}", serde_json::Value::String(s.to_string()));
        }
        Expr::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render_json(item, out);
            }
            out.push(']');
        }
        Expr::Object(fields) => {
            out.push('{');
            for (i, (key, value)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}:", serde_json::Value::String(key.to_string()));
                render_json(value, out);
            }
            out.push('}');
        }
        scalar => render_expr(scalar, out),
    }
}
