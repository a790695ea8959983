use super::iptables::kernel_probability;
use super::*;

#[test]
fn probabilities_print_as_the_kernel_does() {
    assert_eq!(kernel_probability(3), "0.33333333349");
    assert_eq!(kernel_probability(2), "0.50000000000");
    assert_eq!(kernel_probability(4), "0.25000000000");
}

#[test]
fn ten_thousand_services_make_about_240k_lines() {
    let node = generate(&SynthConfig::default());
    let lines = node.iptables_save.lines().count();
    assert!((200_000..280_000).contains(&lines), "{lines} lines");
}
