use super::*;

fn limits(ms: u64) -> ToolLimits {
    ToolLimits {
        timeout: Duration::from_millis(ms),
        max_output: 1 << 20,
    }
}

fn lines(r: &mut dyn BufRead) -> io::Result<Vec<String>> {
    r.lines().collect()
}

#[test]
fn a_tool_that_is_not_on_path_is_absent() {
    let run = run_tool("portdrift-no-such-tool", &[], limits(1000), lines);
    assert_eq!(run.outcome, ToolOutcome::Absent);
    assert!(run.value.is_none());
    assert!(find_in("sh", Some(OsStr::new("/nonexistent:"))).is_none());
    assert!(find_in("sh", None).is_none());
}

#[test]
fn output_streams_into_the_consumer() {
    let run = run_tool("echo", &["a b", "c"], limits(5000), lines);
    assert_eq!(run.outcome, ToolOutcome::Ok);
    assert_eq!(run.value.unwrap().unwrap(), vec!["a b c".to_string()]);
    assert_eq!(run.stdout_bytes, 6);
    assert!(run.path.unwrap().is_absolute());
    assert_eq!(run.command, "echo a b c");
}

#[test]
fn a_tool_that_prints_nothing_is_empty() {
    let run = run_tool("true", &[], limits(5000), lines);
    assert_eq!(run.outcome, ToolOutcome::Empty);
}

#[test]
fn a_failing_tool_keeps_its_complaint() {
    let run = run_tool(
        "sh",
        &["-c", "echo 'iptables: something broke' >&2; echo partial; exit 3"],
        limits(5000),
        lines,
    );
    assert_eq!(run.outcome, ToolOutcome::Failed("exit status 3".into()));
    assert_eq!(run.stderr, "iptables: something broke");
    assert_eq!(run.value.unwrap().unwrap(), vec!["partial".to_string()]);
}

#[test]
fn a_hung_tool_is_killed_at_its_deadline_with_its_children() {
    let start = Instant::now();
    // The shell's `sleep` child holds stdout open: only a group kill ends it.
    let run = run_tool(
        "sh",
        &["-c", "echo begun; sleep 30; echo never"],
        limits(300),
        lines,
    );
    assert_eq!(run.outcome, ToolOutcome::TimedOut);
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
    assert_eq!(run.value.unwrap().unwrap(), vec!["begun".to_string()]);
}

#[test]
fn too_much_output_stops_the_tool() {
    let start = Instant::now();
    let run = run_tool(
        "yes",
        &[],
        ToolLimits {
            timeout: Duration::from_secs(10),
            max_output: 1000,
        },
        |r: &mut dyn BufRead| {
            let mut n = 0;
            for line in r.lines() {
                line?;
                n += 1;
            }
            Ok(n)
        },
    );
    assert_eq!(run.outcome, ToolOutcome::TooLarge);
    assert_eq!(run.stdout_bytes, 1000);
    assert!(run.value.unwrap().is_err());
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_consumer_that_stops_early_stops_the_tool() {
    let run = run_tool("yes", &[], limits(10_000), |r: &mut dyn BufRead| {
        let mut first = String::new();
        r.read_line(&mut first)?;
        Ok(first)
    });
    assert!(matches!(run.outcome, ToolOutcome::Failed(_)), "{:?}", run.outcome);
    assert_eq!(run.value.unwrap().unwrap(), "y\n");
}

#[test]
fn stderr_warnings_become_notes() {
    let notes =
        stderr_notes("# Warning: iptables-legacy tables present, use iptables-legacy-save to see them\n");
    assert_eq!(notes.len(), 1);
    assert!(notes[0].contains("iptables-legacy tables present"), "{notes:?}");
    let notes =
        stderr_notes("# Warning: ip6tables-legacy tables present, use ip6tables-legacy-save to see them");
    assert!(
        notes[0].starts_with("the tool says: ip6tables-legacy tables present"),
        "{notes:?}"
    );
    let notes = stderr_notes("# Warning: table ip nat is managed by iptables-nft, do not touch!\n");
    assert_eq!(
        notes,
        vec!["the tool says: table ip nat is managed by iptables-nft, do not touch!".to_string()]
    );
    let notes = stderr_notes("\n  \nsomething odd\nand more\n");
    assert_eq!(notes, vec!["stderr: something odd / and more".to_string()]);
}
