use super::*;

#[test]
fn errors_and_other_result_types_are_refused() {
    let error = br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#;
    assert_eq!(
        parse_vector(error).unwrap_err().to_string(),
        "bad_data: parse error at char 3"
    );
    let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
    assert_eq!(
        parse_vector(matrix).unwrap_err().to_string(),
        r#"result type "matrix" is not a vector"#
    );
    assert!(
        parse_vector(b"<html>")
            .unwrap_err()
            .to_string()
            .starts_with("not JSON")
    );
    let odd =
        br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}"#;
    assert_eq!(
        parse_vector(odd).unwrap_err().to_string(),
        r#"sample value "x" is not a number"#
    );
}

#[test]
fn a_vector_is_its_samples() {
    let body = br#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"node":"n1","job":"portdrift"},"value":[1.7e9,"2"]}]}}"#;
    let samples = parse_vector(body).unwrap();
    assert_eq!(samples.len(), 1);
    assert_eq!(samples[0].labels["node"], "n1");
    assert_eq!(samples[0].value, 2.0);
}
