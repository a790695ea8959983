//! The man pages' sections that clap's definitions do not hold: EXIT STATUS,
//! ENVIRONMENT, EXAMPLES and SEE ALSO, per command.

use clap_mangen::roff::{Roff, bold, italic, roman};

/// Exit statuses every command shares, after its own.
const COMMON_EXITS: [(&str, &str); 2] = [
    (
        "64",
        "The command line is wrong: an unknown flag, a bad value, a flag without the one it needs.",
    ),
    (
        "141",
        "What read the output went away (a closed pipe, as `| head`); nothing is printed.",
    ),
];

/// A command's own exit statuses.
fn exits(command: &str) -> &'static [(&'static str, &'static str)] {
    match command {
        "scan" => &[
            ("0", "Checked completely, and no warning or critical finding."),
            (
                "1",
                "A warning or critical finding (or, with --repair, a repair action failed).",
            ),
            (
                "2",
                "Could not scan: an input could not be read, a named kubeconfig or context could not be used.",
            ),
            (
                "3",
                "Nothing warning or critical was found, but the check was incomplete: the report says first what was not checked.",
            ),
        ],
        "explain" => &[
            ("0", "Where connections go matches what the API says."),
            ("1", "It differs from what the API says."),
            ("2", "Could not explain."),
            ("3", "A rule on the path could not be checked."),
        ],
        "snapshot" => &[
            ("0", "The bundle was written."),
            ("2", "It could not be written."),
        ],
        "run" => &[
            ("0", "Stopped by SIGTERM or SIGINT."),
            (
                "2",
                "Could not start: no node name, a listener or the API server or cluster state file could not be used.",
            ),
        ],
        "ports" => &[
            ("0", "No two Services claim one nodePort."),
            ("1", "Ports collide."),
            ("2", "The Services could not be read."),
        ],
        "lint" => &[
            ("0", "No error (warnings may be printed)."),
            (
                "1",
                "An error: a collision, a nodePort outside the range, a manifest that does not parse.",
            ),
            ("2", "The manifests or the cluster could not be read."),
        ],
        "fleet" => &[
            ("0", "No node drifted, and every node asked answered."),
            (
                "1",
                "A node drifted, could not be checked, or its agent did not answer.",
            ),
            ("2", "Nothing could be listed."),
        ],
        "" => &[
            ("0", "Clean (each command's page says what clean means for it)."),
            ("1", "Findings: drift, collisions, lint errors."),
            ("2", "Could not run."),
            ("3", "scan: nothing found, but the check was incomplete."),
        ],
        _ => &[("0", "Done."), ("2", "Could not be done.")],
    }
}

/// The environment a command reads: (variable, what for, the commands that read it;
/// empty: all).
const ENVIRONMENT: [(&str, &str, &[&str]); 9] = [
    (
        "NODE_NAME",
        "This node's name, when --node is not given (a DaemonSet sets it from spec.nodeName).",
        &["scan", "explain", "snapshot", "run"],
    ),
    (
        "KUBECONFIG",
        "The kubeconfig files to read the API server from when --kubeconfig is not given, as kubectl reads them; then ~/.kube/config, then the in-cluster service account.",
        &["scan", "explain", "snapshot", "run", "ports", "lint", "fleet"],
    ),
    (
        "PORTDRIFT_ACCEPT",
        "The acceptances file, when --accept is not given.",
        &["run"],
    ),
    (
        "RUST_LOG",
        "A log filter (`info,portdrift::sources=debug`); when set, it wins over --log-level and -v.",
        &[],
    ),
    (
        "NO_COLOR",
        "When set and not empty, no colour (with --color auto).",
        &[],
    ),
    (
        "COLUMNS",
        "The width the text report wraps to (default: the terminal's; a pipe is not wrapped).",
        &[],
    ),
    (
        "LC_ALL, LC_CTYPE, LANG",
        "The first one set says the character set; outside UTF-8 the text report is ASCII.",
        &[],
    ),
    ("TERM", "`dumb`: no colour.", &[]),
    (
        "HOME",
        "Where ~/.kube/config is looked for.",
        &["scan", "explain", "snapshot", "run", "ports", "lint", "fleet"],
    ),
];

/// A command's examples: (what it does, the command line).
fn examples(command: &str) -> &'static [(&'static str, &'static str)] {
    match command {
        "scan" => &[
            (
                "Scan this node (as root, in the host's network namespace):",
                "portdrift scan",
            ),
            (
                "Scan a captured bundle, one line per finding:",
                "portdrift scan --from bundle/ -o wide",
            ),
            (
                "With the cluster state from kubectl:",
                "kubectl get services,endpointslices,nodes -A -o json | portdrift scan --cluster-state -",
            ),
            (
                "See what repair would do, changing nothing:",
                "portdrift scan --repair --repair-dry-run",
            ),
        ],
        "explain" => &[
            (
                "Where a new connection to tcp/30080 goes:",
                "portdrift explain tcp/30080",
            ),
            (
                "From a bundle, as JSON:",
                "portdrift explain udp/30514 --from bundle/ -o json",
            ),
        ],
        "snapshot" => &[(
            "Capture this node for a later scan:",
            "portdrift snapshot --out /tmp/node-a",
        )],
        "run" => &[
            (
                "The agent, as the DaemonSet runs it:",
                "portdrift run --log-format json --events --node-condition",
            ),
            (
                "Try the agent without a cluster:",
                "portdrift run --node node-a --cluster-state cluster.json --listen 127.0.0.1:9741",
            ),
        ],
        "ports" => &[
            ("The cluster's NodePort allocation:", "portdrift ports"),
            (
                "From a file:",
                "kubectl get services -A -o json | portdrift ports --cluster-state -",
            ),
        ],
        "lint" => &[
            (
                "Before a deploy, against the cluster:",
                "helm template . | portdrift lint - --context prod",
            ),
            ("Manifests in a directory, offline:", "portdrift lint deploy/"),
        ],
        "fleet" => &[
            ("Every drifted node's findings:", "portdrift fleet"),
            (
                "From Prometheus instead:",
                "portdrift fleet --prometheus http://prometheus:9090",
            ),
        ],
        "completions" => &[(
            "Bash completion for this shell:",
            "source <(portdrift completions bash)",
        )],
        "man" => &[("Install the pages:", "portdrift man /usr/local/share/man/man1")],
        _ => &[
            ("Scan this node:", "portdrift scan"),
            ("Scan a bundle:", "portdrift scan --from bundle/"),
            ("A command's flags:", "portdrift scan --help"),
        ],
    }
}

/// The extra sections of `command`'s page (`""`: portdrift.1), as roff. `commands`
/// are the pages there are, for SEE ALSO.
pub fn extra_sections(command: &str, commands: &[&str]) -> Roff {
    let mut roff = Roff::default();
    roff.control("SH", ["EXIT STATUS"]);
    for (status, meaning) in exits(command).iter().chain(&COMMON_EXITS) {
        roff.control("TP", []);
        roff.text([bold(*status)]);
        roff.text([roman(*meaning)]);
    }
    roff.control("SH", ["ENVIRONMENT"]);
    for (name, meaning, readers) in ENVIRONMENT {
        if !command.is_empty() && !readers.is_empty() && !readers.contains(&command) {
            continue;
        }
        roff.control("TP", []);
        roff.text([bold(name)]);
        roff.text([roman(meaning)]);
    }
    roff.control("SH", ["EXAMPLES"]);
    for (what, line) in examples(command) {
        roff.control("PP", []);
        roff.text([roman(*what)]);
        roff.control("RS", ["4"]);
        roff.control("nf", []);
        roff.text([bold(*line)]);
        roff.control("fi", []);
        roff.control("RE", []);
    }
    roff.control("SH", ["SEE ALSO"]);
    let mut pages: Vec<String> = std::iter::once("portdrift".to_string())
        .chain(commands.iter().map(|c| format!("portdrift-{c}")))
        .filter(|page| {
            let this = if command.is_empty() {
                "portdrift".to_string()
            } else {
                format!("portdrift-{command}")
            };
            *page != this
        })
        .collect();
    pages.extend(["kubectl", "iptables-save", "nft"].map(str::to_string));
    let mut refs = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        let section = match page.as_str() {
            "iptables-save" | "nft" => "(8)",
            _ => "(1)",
        };
        refs.push(bold(page.clone()));
        refs.push(roman(if i + 1 == pages.len() {
            format!("{section}.")
        } else {
            format!("{section}, ")
        }));
    }
    roff.text(refs);
    roff.control("PP", []);
    roff.text([
        roman("The documentation: "),
        italic("https://github.com/portdrift/portdrift/tree/main/docs"),
    ]);
    roff
}
