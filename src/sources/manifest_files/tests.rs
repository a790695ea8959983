use super::*;

#[test]
fn directories_are_read_recursively_in_order_and_bad_bytes_are_problems() {
    let dir = tempfile::TempDir::new().unwrap();
    let svc = |name: &str| format!("kind: Service\nmetadata: {{name: {name}}}\n");
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("b.yaml"), svc("b")).unwrap();
    std::fs::write(dir.path().join("sub/a.yml"), svc("a")).unwrap();
    std::fs::write(dir.path().join("README.md"), svc("not-read")).unwrap();
    std::fs::write(dir.path().join("c.json"), b"kind: Service\n\xff\n").unwrap();
    let (services, problems) = read_manifests(&[dir.path().to_path_buf()]).unwrap();
    let names: Vec<_> = services.iter().map(|s| s.name.clone().unwrap()).collect();
    assert_eq!(names, ["b", "a"]);
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].line, 2);
    assert!(problems[0].file.ends_with("c.json"));
    assert!(read_manifests(&[dir.path().join("missing.yaml")]).is_err());
}
