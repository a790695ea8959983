use super::*;

#[test]
fn cpu_ticks_are_own_and_children_user_and_system_time() {
    // A command with spaces and parentheses in its name; fields 14-17 are 7, 3, 20, 5.
    let stat = "4242 (port drift (x)) S 1 4242 4242 0 -1 4194560 900 0 0 0 7 3 20 5 20 0 9 0 1234 100000 2500 18446744073709551615";
    assert_eq!(stat_cpu_ticks(stat), Some(35));
    assert_eq!(stat_cpu_ticks("4242 (portdrift) S 1 4242"), None, "cut short");
    assert_eq!(stat_cpu_ticks("no command at all"), None);
    assert_eq!(
        stat_cpu_ticks("1 (a) S 1 1 1 0 -1 0 0 0 0 0 x 3 20 5"),
        None,
        "a field that is not a number"
    );
}

#[test]
fn this_process_stat_line_reads() {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    assert!(stat_cpu_ticks(&stat).is_some(), "{stat}");
}
