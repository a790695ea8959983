use super::*;

const REPORT: &str = "portdrift: node node-a: 1 critical, 0 warning, 0 info\n\
\n\
tcp/30080  (shop/web)\n  \
CRITICAL stale-endpoint  iptables-nft  ipv4  → 10.244.2.9:8080\n           \
kube-proxy's rules for nodePort tcp/30080 of shop/web still send new connections to 10.244.2.9:8080, which no EndpointSlice of the Service lists: restart kube-proxy on this node, or run portdrift scan --repair\n           \
rule  KUBE-SEP-ABCDEFGHIJKLMNOP  -A KUBE-SEP-ABCDEFGHIJKLMNOP -p tcp -m comment --comment shop/web:http -m tcp -j DNAT --to-destination 10.244.2.9:8080\n";

fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}

#[test]
fn a_utf8_pipe_gets_the_text_unchanged() {
    let pipe = Terminal {
        width: None,
        color: false,
        unicode: true,
    };
    assert_eq!(for_terminal(REPORT, &pipe), REPORT);
}

#[test]
fn long_lines_wrap_at_spaces_under_their_hanging_indent() {
    let terminal = Terminal {
        width: Some(80),
        color: false,
        unicode: true,
    };
    let wrapped = for_terminal(REPORT, &terminal);
    assert_eq!(words(&wrapped), words(REPORT), "no word is cut or lost");
    let lines: Vec<&str> = wrapped.lines().collect();
    let message = lines
        .iter()
        .position(|l| l.trim_start().starts_with("kube-proxy's rules"))
        .unwrap();
    // The message's continuation lines start under its text, at column 11.
    let continuation = &lines[message + 1];
    assert!(continuation.starts_with(&" ".repeat(11)), "{continuation:?}");
    assert!(!continuation.starts_with(&" ".repeat(12)), "{continuation:?}");
    for line in &lines {
        // Only a word longer than the room (the rule) may overflow.
        if line.chars().count() > 80 {
            assert!(line.split(' ').any(|w| w.len() > 40), "{line:?}");
        }
    }
    assert!(lines.len() > REPORT.lines().count());
}

#[test]
fn a_finding_line_continues_under_its_text_not_its_label() {
    let line = format!("  WARNING  {}\n", "squatter ".repeat(12));
    let wrapped = for_terminal(
        &line,
        &Terminal {
            width: Some(50),
            color: false,
            unicode: true,
        },
    );
    let second = wrapped.lines().nth(1).unwrap();
    assert!(
        second.starts_with(&" ".repeat(11)) && !second.starts_with(&" ".repeat(12)),
        "{wrapped}"
    );
}

#[test]
fn severities_are_coloured_only_when_asked() {
    let coloured = for_terminal(
        REPORT,
        &Terminal {
            width: None,
            color: true,
            unicode: true,
        },
    );
    assert!(
        coloured.contains("  \x1b[1;31mCRITICAL\x1b[0m stale-endpoint"),
        "{coloured}"
    );
    let incomplete = for_terminal(
        "portdrift: node a: INCOMPLETE CHECK, not an all-clear. Not checked:\n",
        &Terminal {
            width: None,
            color: true,
            unicode: true,
        },
    );
    assert!(incomplete.contains("\x1b[1;33mINCOMPLETE CHECK"), "{incomplete}");
    assert!(!for_terminal(REPORT, &Terminal::default()).contains('\x1b'));
}

#[test]
fn outside_a_utf8_locale_the_text_is_ascii() {
    let text = "CRITICAL stale-endpoint  → 10.244.2.9:8080 — see the comment «café»\n";
    let ascii = for_terminal(
        text,
        &Terminal {
            width: None,
            color: false,
            unicode: false,
        },
    );
    assert!(ascii.is_ascii(), "{ascii}");
    assert!(ascii.contains("-> 10.244.2.9:8080 -- see"), "{ascii}");
    assert!(ascii.contains("\\u{ab}caf\\u{e9}\\u{bb}"), "{ascii}");
}

#[test]
fn no_width_or_text_makes_it_panic() {
    let text = "  CRITICAL ééééé ü→ü — ".repeat(9) + "\n" + &"→".repeat(200) + "\n  - a b\n";
    for width in 0..130 {
        for unicode in [true, false] {
            let terminal = Terminal {
                width: Some(width),
                color: true,
                unicode,
            };
            let out = for_terminal(&text, &terminal);
            assert_eq!(
                words(&strip(&out)).concat().chars().filter(|c| *c == 'é').count(),
                if unicode { 45 } else { 0 }
            );
        }
    }
}

fn strip(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
