use super::*;

#[test]
fn the_cli_definition_is_consistent() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}
