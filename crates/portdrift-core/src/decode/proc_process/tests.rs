// These tests read this process's own /proc files, to check the decoders on the real
// kernel's format: the decoders stay pure, the tests may read.
#![allow(clippy::disallowed_methods)]

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

#[test]
fn stat_limits_and_boot_time_read_as_proc5_lays_them_out() {
    let stat = "4242 (port drift (x)) S 1 4242 4242 0 -1 4194560 900 0 0 0 7 3 20 5 20 0 9 0 1234 100000 2500 18446744073709551615";
    assert_eq!(
        parse_stat(stat),
        Some(StatFields {
            cpu_ticks: 10,
            threads: 9,
            start_ticks: 1234,
            virtual_bytes: 100000,
            resident_pages: 2500,
        })
    );
    assert_eq!(parse_stat("4242 (portdrift) S 1 4242"), None);
    let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax cpu time              unlimited            unlimited            seconds   \nMax open files            1048576              1048576              files     \n";
    assert_eq!(max_open_files(limits), Some(1_048_576));
    assert_eq!(
        max_open_files("Max open files            unlimited            unlimited            files"),
        None
    );
    assert_eq!(
        boot_time("cpu  1 2 3\nbtime 1764825600\nprocesses 9\n"),
        Some(1_764_825_600)
    );
    assert_eq!(boot_time("cpu  1 2 3\n"), None);
}

#[test]
fn this_process_reads_whole() {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields = parse_stat(&stat).expect("its stat line reads");
    assert!(fields.threads >= 1 && fields.resident_pages > 0 && fields.virtual_bytes > 0);
    assert!(max_open_files(&std::fs::read_to_string("/proc/self/limits").unwrap()).is_some());
    assert!(boot_time(&std::fs::read_to_string("/proc/stat").unwrap()).is_some());
}

#[test]
fn an_exited_process_is_told_from_a_live_one_by_its_state() {
    assert!(stat_exited("4242 (sh) Z 1 4242 4242 0 -1 4194564 0 0"));
    assert!(stat_exited("4242 (a (Z) b) X 1"));
    assert!(!stat_exited("4242 (a) Z) S 1 4242"), "the command may hold `) Z`");
    assert!(!stat_exited("4242 (sh) R 1 4242"));
    assert!(!stat_exited("not a stat line"));
}
