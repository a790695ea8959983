//! The command line's own documentation, generated from its clap definition: shell
//! completion scripts and man pages, so they can never disagree with `--help`.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;

use super::Cli;

/// Writes `shell`'s completion script to `out`: the commands `--help` lists (not the
/// hidden `dev`), with value hints (directories for --from, level names for
/// --log-level).
pub fn write_completions(shell: clap_complete::Shell, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut command = without_hidden_commands(Cli::command());
    clap_complete::generate(shell, &mut command, "portdrift", out);
    out.flush().context("writing the completion script")
}

/// `command` without its hidden subcommands: completion scripts offer every
/// subcommand they are given.
fn without_hidden_commands(command: clap::Command) -> clap::Command {
    let shown: Vec<clap::Command> = command
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut bare = clap::Command::new("portdrift")
        .version(crate::BUILD_VERSION)
        .args(command.get_arguments().cloned())
        .subcommands(shown);
    if let Some(about) = command.get_about() {
        bare = bare.about(about.clone());
    }
    bare
}

/// Writes `portdrift.1` and `portdrift-COMMAND.1` for each command `--help` lists into
/// `dir`; returns the files written. Each page has EXIT STATUS, ENVIRONMENT, EXAMPLES
/// and SEE ALSO after what clap's definitions give.
pub fn write_man_pages(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // No `help` command in the pages: it would refer to a portdrift-help(1) that is
    // not written (`portdrift help CMD` still works).
    let command = Cli::command().disable_help_subcommand(true);
    let source = format!("portdrift {}", env!("CARGO_PKG_VERSION"));
    let names: Vec<&str> = documented(&command).map(clap::Command::get_name).collect();
    let mut pages = vec![("portdrift".to_string(), "", command.clone())];
    for sub in documented(&command) {
        let name = format!("portdrift-{}", sub.get_name());
        // Its title and NAME say portdrift-scan; its synopsis, `portdrift scan`. No
        // version of its own: a subcommand has no -V.
        let page = sub
            .clone()
            .display_name(name.clone())
            .bin_name(format!("portdrift {}", sub.get_name()));
        pages.push((name, sub.get_name(), page));
    }
    let mut written = Vec::new();
    for (name, command_name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let bytes = render_man_page(page, &source, command_name, &names)
            .with_context(|| format!("cannot render {name}.1"))?;
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// One page: clap_mangen's sections (not its EXTRA, which repeats the exit statuses in
/// a paragraph), then [`super::man::extra_sections`].
fn render_man_page(
    page: clap::Command,
    source: &str,
    command: &str,
    commands: &[&str],
) -> std::io::Result<Vec<u8>> {
    let has_args = page.get_arguments().any(|a| !a.is_hide_set());
    let has_subcommands = page.get_subcommands().any(|s| !s.is_hide_set());
    let man = clap_mangen::Man::new(page).source(source.to_string());
    let mut bytes = Vec::new();
    man.render_title(&mut bytes)?;
    man.render_name_section(&mut bytes)?;
    man.render_synopsis_section(&mut bytes)?;
    man.render_description_section(&mut bytes)?;
    if has_args {
        man.render_options_section(&mut bytes)?;
    }
    if has_subcommands {
        man.render_subcommands_section(&mut bytes)?;
    }
    super::man::extra_sections(command, commands).to_writer(&mut bytes)?;
    Ok(bytes)
}

/// `docs/cli.md`: every command's `--help`, as the binary prints it.
pub fn cli_reference() -> String {
    // The environment's values (NODE_NAME) are not part of the reference.
    fn without_env_values(command: clap::Command) -> clap::Command {
        command
            .mut_args(|a| a.hide_env_values(true))
            .mut_subcommands(without_env_values)
    }
    let mut command = without_env_values(Cli::command());
    let mut out = String::from(
        "# Command-line reference\n\n\
         Generated from portdrift's clap definitions (`portdrift dev cli-reference`); a test\n\
         fails when this file is out of date. Each section is the command's `--help`.\n",
    );
    let mut section = |title: &str, help: String| {
        out.push_str(&format!("\n## {title}\n\n```text\n{}\n```\n", help.trim_end()));
    };
    section("portdrift", command.render_long_help().to_string());
    for sub in documented(&command) {
        let name = format!("portdrift {}", sub.get_name());
        let help = sub.clone().bin_name(&name).render_long_help().to_string();
        section(&name, help);
    }
    out
}

/// The commands `--help` lists that have pages of their own: not the hidden ones, nor
/// `help` itself.
fn documented(command: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    command
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// `docs/metrics.md`: every metric `portdrift run` serves on `/metrics`, from what its
/// registry records as each is registered.
pub fn metrics_reference() -> String {
    let metrics = crate::agent::metrics::Metrics::new();
    let mut out = String::from(
        "# Metrics reference\n\n\
         Every metric `portdrift run` serves on `/metrics`, generated from the agent's\n\
         registry (`portdrift dev metrics-reference`); a test fails when this file is out of\n\
         date. Names are as the text format shows them (a counter's `_total`, a histogram's\n\
         `_bucket`, `_sum` and `_count` series). Families described as the last scan's have\n\
         no series until a scan gives them one. [operate.md](operate.md) says how to use them.\n\n\
         | metric | type | labels | what it counts |\n\
         |---|---|---|---|\n",
    );
    for doc in metrics.docs() {
        let labels = doc
            .labels
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ");
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            doc.name,
            doc.kind,
            labels,
            doc.help.replace('|', "\\|")
        ));
    }
    out.push_str(
        "\n## kube-proxy: reachable, then healthy\n\n\
         A kube-proxy that answers nothing is exported as such,\n\
         `portdrift_kube_proxy_reachable{source=\"kube-proxy-healthz.json\"} 0` (and\n\
         `source=\"kube-proxy-mode.txt\"` for its metrics server), not as a missing series. The\n\
         label is the source's name in the report's sources and in `portdrift_source_up`, and\n\
         the name of its file in a snapshot. `portdrift_kube_proxy_healthy` stays\n\
         what `/healthz` answered, and is absent while it answers nothing. They are two series\n\
         rather than one `healthy 0` because they call for different action, each with its own\n\
         alert: a kube-proxy that answers 503 runs but does not sync its rules\n\
         (`PortdriftKubeProxyUnhealthy`); one that answers nothing is not running, listens\n\
         elsewhere, or is not there by design (`PortdriftKubeProxyUnreachable`). On nodes where a\n\
         kube-proxy replacement handles Services, `--kube-proxy-healthz off --kube-proxy-metrics\n\
         off` stops asking, and `portdrift_kube_proxy_reachable` has no series.\n",
    );
    out
}
