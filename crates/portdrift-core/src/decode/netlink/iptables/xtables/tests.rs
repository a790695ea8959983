use super::matches::address_types;
use super::save_string;

#[test]
fn strings_are_quoted_as_xtables_save_string_quotes_them() {
    let mut out = String::new();
    save_string(&mut out, "plain_name-1");
    save_string(&mut out, "ns/svc:http");
    save_string(&mut out, "say \"hi\"");
    save_string(&mut out, "");
    assert_eq!(out, r#" plain_name-1 "ns/svc:http" "say \"hi\"" """#);
}

#[test]
fn address_types_are_named_in_bit_order() {
    assert_eq!(address_types(1 << 2), "LOCAL");
    assert_eq!(address_types((1 << 1) | (1 << 2)), "UNICAST,LOCAL");
}
