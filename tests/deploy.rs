//! What ships besides the binary: `deploy/` (kustomize base, components, overlays), the
//! Dockerfile and the Grafana dashboard.
//!
//! - every kustomization renders (`kubectl kustomize`) and passes `kubernetes-validate
//!   --strict` for the oldest and the newest Kubernetes this agent supports;
//! - the RBAC is exactly what the code uses: the agent runs inside a bundle's node with
//!   each overlay's DaemonSet arguments, verbatim, against the fake API server, whose
//!   request log gives the (API group, resource, verb) triples it needed; `portdrift scan`
//!   naming a squatter's pod gives those of the process-owners component; every
//!   overlay's ClusterRoles, as bound to the DaemonSet's ServiceAccount, must grant
//!   exactly their union (and, with components/rbac-proxy, kube-rbac-proxy's token and
//!   access reviews), nothing missing and nothing more; the other ClusterRoles only
//!   let their holders read the agent's endpoints;
//! - with components/cilium-maps, and only there, the agent holds CAP_BPF and the host's
//!   BPF filesystem, read-only, at its `--bpf-root`;
//! - with components/rbac-proxy the agent listens on the node's loopback only, and
//!   kube-rbac-proxy serves the node's port over TLS in front of it, letting only the
//!   probes' paths through without a token, as a non-root container with no
//!   capability; probes, Service, ServiceMonitor and annotations follow;
//! - every flag a DaemonSet passes is in `portdrift run --help` (and the agent runs
//!   with them, above);
//! - the PrometheusRule holds exactly the alert rules of the plain rules file; every
//!   alert's `runbook_url` is its section of docs/troubleshooting.md;
//! - every `portdrift_*` metric the dashboard names is in the real agent's `/metrics`;
//!   every query picks nodes by the `node` variable, by the `node` label or else the
//!   instance, which promtool evaluates on targets with and without the label;
//! - the Dockerfile passes hadolint.
//!
//! Needs kubectl, kubernetes-validate, hadolint (scripts/test.sh installs them) and
//! promtool, root and the fake API server example for the agent runs; with `CI` set
//! nothing is skipped.

#![allow(clippy::unwrap_used, reason = "a test's panic is its failure, with its place")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use support::agent_node::{assert_ran, in_node, read_raw};
use tempfile::TempDir;

/// The Kubernetes versions the manifests must be valid for: the oldest the agent's
/// client is built for (k8s-openapi's `v1_33`) and the newest kubernetes-validate knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.33.0", "1.37.0"];

fn deploy_dir() -> PathBuf {
    support::root().join("deploy")
}

/// The kustomizations that render on their own (base and overlays; components only
/// render inside an overlay), as paths relative to `deploy/`.
fn kustomizations() -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![deploy_dir()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "kustomization.yaml") {
                let text = std::fs::read_to_string(&path).unwrap();
                if !text.lines().any(|l| l.trim() == "kind: Component") {
                    let rel = dir.strip_prefix(deploy_dir()).unwrap();
                    found.push(rel.to_string_lossy().into_owned());
                }
            }
        }
    }
    found.sort();
    found
}

/// Every component under `deploy/components`.
fn components() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(deploy_dir().join("components"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `kubectl kustomize deploy/<rel>`: the YAML.
fn render(rel: &str) -> String {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy_dir().join(rel))
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/{rel}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 YAML")
}

/// The documents of a (multi-document) YAML text, as JSON values.
fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("valid YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// A rendered overlay, checked for what every overlay needs.
struct Rendered {
    docs: Vec<Value>,
}

impl Rendered {
    fn of(rel: &str) -> Rendered {
        Rendered {
            docs: documents(&render(rel)),
        }
    }

    fn daemonset(&self) -> &Value {
        let sets = of_kind(&self.docs, "DaemonSet");
        assert_eq!(sets.len(), 1, "one DaemonSet");
        sets[0]
    }

    /// The agent's container: the first.
    fn container(&self) -> &Value {
        &self.daemonset()["spec"]["template"]["spec"]["containers"][0]
    }

    /// kube-rbac-proxy's container, with components/rbac-proxy.
    fn rbac_proxy(&self) -> Option<&Value> {
        self.daemonset()["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers")
            .iter()
            .find(|c| c["name"] == "kube-rbac-proxy")
    }

    /// The agent's `--listen` address.
    fn listen(&self) -> String {
        self.args()
            .iter()
            .find_map(|a| a.strip_prefix("--listen="))
            .unwrap_or(portdrift::agent::http::DEFAULT_LISTEN)
            .to_string()
    }

    /// The agent's `--findings-listen` address; None when it is `off`.
    fn findings_listen(&self) -> Option<String> {
        let addr = self
            .args()
            .iter()
            .find_map(|a| a.strip_prefix("--findings-listen=").map(str::to_string))
            .unwrap_or_else(|| portdrift::agent::http::DEFAULT_FINDINGS_LISTEN.to_string());
        (addr != "off").then_some(addr)
    }

    /// The container that serves the node's HTTP port (the agent, or kube-rbac-proxy
    /// in front of it), and that port.
    fn serving(&self) -> (&Value, u64) {
        let c = self.rbac_proxy().unwrap_or(self.container());
        let port = c["ports"][0]["containerPort"].as_u64().expect("a container port");
        (c, port)
    }

    fn args(&self) -> Vec<String> {
        self.container()["args"]
            .as_array()
            .expect("the container has args")
            .iter()
            .map(|a| a.as_str().expect("string args").to_string())
            .collect()
    }

    fn host_pid(&self) -> bool {
        self.daemonset()["spec"]["template"]["spec"]["hostPID"] == true
    }

    /// The (API group, resource, verb) triples the ClusterRoles bound to the
    /// DaemonSet's ServiceAccount grant.
    fn granted(&self) -> BTreeSet<Triple> {
        let ds = self.daemonset();
        let namespace = ds["metadata"]["namespace"].as_str().unwrap();
        let account = ds["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .unwrap();
        assert!(
            of_kind(&self.docs, "ServiceAccount")
                .iter()
                .any(|sa| sa["metadata"]["name"] == account && sa["metadata"]["namespace"] == namespace),
            "the DaemonSet's ServiceAccount {namespace}/{account} is not in the manifests"
        );
        assert!(
            of_kind(&self.docs, "Role").is_empty() && of_kind(&self.docs, "RoleBinding").is_empty(),
            "only ClusterRoles are expected"
        );
        let roles: BTreeMap<&str, &Value> = of_kind(&self.docs, "ClusterRole")
            .into_iter()
            .map(|r| (r["metadata"]["name"].as_str().unwrap(), r))
            .collect();
        let mut granted = BTreeSet::new();
        let mut bound = BTreeSet::new();
        for binding in of_kind(&self.docs, "ClusterRoleBinding") {
            let ours = binding["subjects"].as_array().into_iter().flatten().any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == account && s["namespace"] == namespace
            });
            if !ours {
                continue;
            }
            assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
            let name = binding["roleRef"]["name"].as_str().unwrap();
            let role = roles
                .get(name)
                .unwrap_or_else(|| panic!("{name} is bound but not in the manifests"));
            bound.insert(name);
            for rule in role["rules"].as_array().into_iter().flatten() {
                assert!(
                    rule.get("resourceNames").is_none() && rule.get("nonResourceURLs").is_none(),
                    "{rule}"
                );
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        for verb in strings(&rule["verbs"]) {
                            assert!(group != "*" && resource != "*" && verb != "*", "{rule}");
                            granted.insert(Triple::new(&group, &resource, &verb));
                        }
                    }
                }
            }
        }
        // The rest are for others to bind (components/rbac-proxy's readers): they only
        // let their holder `get` the agent's endpoints.
        for (name, role) in roles.iter().filter(|(r, _)| !bound.contains(*r)) {
            let paths = reader_paths(role);
            assert!(
                !paths.is_empty() && paths.iter().all(|p| AGENT_PATHS.contains(&p.as_str())),
                "{name} is not bound to the agent, and is not a reader of its endpoints: {role}"
            );
        }
        granted
    }
}

/// The agent's HTTP endpoints.
const AGENT_PATHS: [&str; 6] = ["/metrics", "/findings", "/healthz", "/readyz", "/explain", "/"];

/// The non-resource URLs a ClusterRole lets its holder `get`, and nothing else; empty
/// when it grants anything else.
fn reader_paths(role: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    for rule in role["rules"].as_array().into_iter().flatten() {
        let only_urls = rule.get("apiGroups").is_none() && rule.get("resources").is_none();
        if !only_urls || strings(&rule["verbs"]) != ["get"] {
            return Vec::new();
        }
        paths.extend(strings(&rule["nonResourceURLs"]));
    }
    paths
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// What RBAC authorizes: an API group (`""` for the core group), a resource (with its
/// subresource, `nodes/status`) and a verb.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Triple(String, String, String);

impl Triple {
    fn new(group: &str, resource: &str, verb: &str) -> Triple {
        Triple(group.into(), resource.into(), verb.into())
    }

    /// The triple a request needs, from the fake API server's log line
    /// `METHOD /api/v1/...?query`, as the API server's request-info resolver reads it.
    fn of_request(line: &str) -> Triple {
        let (method, target) = line.split_once(' ').expect("METHOD target");
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, rest) = match parts.as_slice() {
            ["api", "v1", rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => panic!("not a resource request: {line}"),
        };
        let rest = match rest {
            ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
            _ => rest,
        };
        let (resource, name, sub) = match rest {
            [resource] => (*resource, None, None),
            [resource, name] => (*resource, Some(*name), None),
            [resource, name, sub] => (*resource, Some(*name), Some(*sub)),
            _ => panic!("unexpected path: {line}"),
        };
        let watch = query.split('&').any(|p| p == "watch=true" || p == "watch=1");
        let verb = match (method, name) {
            ("GET", Some(_)) => "get",
            ("GET", None) if watch => "watch",
            ("GET", None) => "list",
            ("POST", _) => "create",
            ("PATCH", _) => "patch",
            ("PUT", _) => "update",
            ("DELETE", Some(_)) => "delete",
            ("DELETE", None) => "deletecollection",
            _ => panic!("unexpected method: {line}"),
        };
        let resource = match sub {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_string(),
        };
        Triple::new(group, &resource, verb)
    }
}

#[test]
fn requests_map_to_the_rbac_they_need() {
    let t = |g: &str, r: &str, v: &str| Triple::new(g, r, v);
    let cases = [
        (
            "GET /api/v1/services?labelSelector=x&limit=500",
            t("", "services", "list"),
        ),
        (
            "GET /api/v1/services?watch=true&resourceVersion=3",
            t("", "services", "watch"),
        ),
        (
            "GET /apis/discovery.k8s.io/v1/endpointslices?watch=true",
            t("discovery.k8s.io", "endpointslices", "watch"),
        ),
        (
            "GET /api/v1/namespaces/shop/services/web",
            t("", "services", "get"),
        ),
        ("GET /api/v1/nodes/worker-1", t("", "nodes", "get")),
        (
            "PATCH /api/v1/nodes/worker-1/status",
            t("", "nodes/status", "patch"),
        ),
        (
            "POST /apis/events.k8s.io/v1/namespaces/default/events",
            t("events.k8s.io", "events", "create"),
        ),
        (
            "PATCH /apis/events.k8s.io/v1/namespaces/shop/events/web.1",
            t("events.k8s.io", "events", "patch"),
        ),
        (
            "GET /api/v1/pods?fieldSelector=spec.nodeName%3Dw",
            t("", "pods", "list"),
        ),
    ];
    for (line, want) in cases {
        assert_eq!(Triple::of_request(line), want, "{line}");
    }
}

#[test]
fn every_kustomization_renders_and_passes_kubernetes_validate_strict() {
    if !support::require_tool("kubectl", "rendering the kustomizations")
        || !support::require_tool("kubernetes-validate", "validating the manifests")
    {
        return;
    }
    let all = kustomizations();
    assert!(all.contains(&"base".to_string()), "{all:?}");
    assert!(all.len() >= 3, "{all:?}");
    let scratch = TempDir::new().unwrap();
    for rel in &all {
        let file = scratch.path().join(format!("{}.yaml", rel.replace('/', "-")));
        std::fs::write(&file, render(rel)).unwrap();
        for version in KUBERNETES_VERSIONS {
            let out = Command::new("kubernetes-validate")
                .args(["--strict", "--kubernetes-version", version])
                .arg(&file)
                .output()
                .expect("kubernetes-validate runs");
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "deploy/{rel} against {version}:\n{said}");
            // Each resource passes, except the Prometheus Operator's custom resources,
            // which have no schema there (their content is checked below).
            for line in said.lines().filter(|l| !l.trim().is_empty()) {
                let fine = (line.starts_with("INFO") && line.contains(" passed for resource "))
                    || (line.starts_with("WARN") && line.contains("monitoring.coreos.com/v1"));
                assert!(fine, "deploy/{rel} against {version}: {line}");
            }
        }
    }
}

#[test]
fn every_component_is_in_an_overlay_and_overlays_all_has_them_all() {
    let all = std::fs::read_to_string(deploy_dir().join("overlays/all/kustomization.yaml")).unwrap();
    for component in components() {
        assert!(
            all.contains(&format!("../../components/{component}\n")),
            "overlays/all lacks components/{component}"
        );
    }
}

/// What the DaemonSet must be in every overlay.
#[test]
fn the_daemonset_is_a_least_privilege_node_agent() {
    if !support::require_tool("kubectl", "rendering the kustomizations") {
        return;
    }
    for rel in kustomizations() {
        let r = Rendered::of(&rel);
        let ds = r.daemonset();
        let spec = &ds["spec"]["template"]["spec"];
        let c = r.container();
        let sc = &c["securityContext"];
        let ctx = format!("deploy/{rel}");
        assert_eq!(spec["hostNetwork"], true, "{ctx}");
        assert_eq!(spec["priorityClassName"], "system-node-critical", "{ctx}");
        // GKE admits that class outside kube-system only under a quota covering it.
        let quotas = of_kind(&r.docs, "ResourceQuota");
        assert!(
            quotas.iter().any(|q| {
                let selector = &q["spec"]["scopeSelector"]["matchExpressions"][0];
                selector["scopeName"] == "PriorityClass"
                    && selector["operator"] == "In"
                    && strings(&selector["values"]).contains(&"system-node-critical".to_string())
                    && q["metadata"]["namespace"] == ds["metadata"]["namespace"]
                    && q["spec"]["hard"]["pods"]
                        .as_str()
                        .and_then(|n| n.parse::<u64>().ok())
                        .is_some_and(|n| n >= 15_000)
            }),
            "{ctx}: no ResourceQuota for system-node-critical pods in the agents' namespace"
        );
        assert!(
            spec["tolerations"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["operator"] == "Exists" && t.get("key").is_none() && t.get("effect").is_none()),
            "{ctx}: it must tolerate every taint"
        );
        assert_eq!(
            spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
            "{ctx}"
        );
        let node_name = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "NODE_NAME")
            .unwrap_or_else(|| panic!("{ctx}: no NODE_NAME"));
        assert_eq!(node_name["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");
        assert_eq!(sc["runAsUser"], 0, "{ctx}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{ctx}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{ctx}");
        assert_ne!(sc["privileged"], true, "{ctx}");
        assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{ctx}");
        let mut added = strings(&sc["capabilities"]["add"]);
        added.sort();
        let mut want = vec!["NET_ADMIN", "NET_RAW"];
        // Reading other processes' file descriptors needs both, and nothing else does.
        if r.host_pid() {
            want.push("SYS_PTRACE");
        }
        // Reading Cilium's maps (components/cilium-maps): the runtime's default seccomp
        // profile lets bpf(2) through only with CAP_BPF.
        let bpf_root = r
            .args()
            .iter()
            .find_map(|a| a.strip_prefix("--bpf-root=").map(str::to_string));
        if bpf_root.is_some() {
            want.push("BPF");
        }
        want.sort();
        assert_eq!(added, want, "{ctx}");
        // The probes and the scrape port agree with --listen, or with the proxy in
        // front of it.
        let args = r.args();
        assert_eq!(args.first().map(String::as_str), Some("run"), "{ctx}");
        let listen = r.listen();
        let (serving, port) = r.serving();
        let tls = r.rbac_proxy().is_some();
        if tls {
            assert!(listen.starts_with("127.0.0.1:"), "{ctx}: {listen}");
            assert!(c.get("ports").is_none(), "{ctx}: the agent declares no port");
        } else {
            assert_eq!(
                listen.rsplit(':').next(),
                Some(port.to_string().as_str()),
                "{ctx}"
            );
        }
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz", "{ctx}");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{ctx}");
        for probe in ["livenessProbe", "readinessProbe"] {
            let get = &c[probe]["httpGet"];
            if tls {
                // A probe's named port would be the agent's own; the proxy's is another
                // container's.
                assert_eq!(get["port"], port, "{ctx}: {probe}");
                assert_eq!(get["scheme"], "HTTPS", "{ctx}: {probe}");
            } else {
                assert_eq!(get["port"], c["ports"][0]["name"], "{ctx}: {probe}");
                assert!(get.get("scheme").is_none_or(|s| s == "HTTP"), "{ctx}: {probe}");
            }
            assert!(
                get.get("host").is_none(),
                "{ctx}: {probe} goes to the pod's address"
            );
        }
        for kind in ["requests", "limits"] {
            for resource in ["cpu", "memory"] {
                assert!(
                    c["resources"][kind][resource].is_string(),
                    "{ctx}: {kind}.{resource}"
                );
            }
        }
        assert!(
            ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].is_string()
                || ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].is_number(),
            "{ctx}"
        );
        // Repair takes the host's xtables lock, as kube-proxy does; nothing else mounts it.
        let repair = args.iter().any(|a| a == "--repair");
        let lock = c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["mountPath"] == "/run/xtables.lock");
        assert_eq!(repair, lock, "{ctx}: the xtables lock is mounted iff --repair");
        // The host's BPF filesystem, only with --bpf-root and where it says: read-only, and
        // seeing a bpffs that Cilium mounts after the agent started.
        let bpf_mount = c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["name"] == "bpf-maps");
        assert_eq!(
            bpf_root.is_some(),
            bpf_mount.is_some(),
            "{ctx}: the BPF filesystem is mounted iff --bpf-root"
        );
        if let (Some(root), Some(m)) = (&bpf_root, bpf_mount) {
            assert_eq!(m["mountPath"], root.as_str(), "{ctx}");
            assert_eq!(m["readOnly"], true, "{ctx}");
            assert_eq!(m["mountPropagation"], "HostToContainer", "{ctx}");
        }
        // The Service selects the DaemonSet's pods, on the named port.
        let labels = &ds["spec"]["template"]["metadata"]["labels"];
        for svc in of_kind(&r.docs, "Service") {
            for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
                assert_eq!(&labels[k], v, "{ctx}: the Service's selector");
            }
            assert_eq!(
                svc["spec"]["ports"][0]["targetPort"], serving["ports"][0]["name"],
                "{ctx}"
            );
            // The ServiceMonitor's job label is the Service's name: the alerts want it.
            assert_eq!(svc["metadata"]["name"], "portdrift", "{ctx}");
        }
        for monitor in of_kind(&r.docs, "ServiceMonitor") {
            let svc = of_kind(&r.docs, "Service")[0];
            for (k, v) in monitor["spec"]["selector"]["matchLabels"].as_object().unwrap() {
                assert_eq!(
                    &svc["metadata"]["labels"][k], v,
                    "{ctx}: the ServiceMonitor's selector"
                );
            }
            let endpoint = &monitor["spec"]["endpoints"][0];
            assert_eq!(endpoint["port"], svc["spec"]["ports"][0]["name"], "{ctx}");
            // Behind the proxy: HTTPS, with Prometheus's own token.
            if tls {
                assert_eq!(endpoint["scheme"], "https", "{ctx}");
                assert_eq!(
                    endpoint["bearerTokenFile"], "/var/run/secrets/kubernetes.io/serviceaccount/token",
                    "{ctx}"
                );
                assert_eq!(endpoint["tlsConfig"]["insecureSkipVerify"], true, "{ctx}");
            } else {
                assert!(endpoint.get("scheme").is_none_or(|s| s == "http"), "{ctx}");
                assert!(endpoint.get("bearerTokenFile").is_none(), "{ctx}");
            }
        }
        let annotations = &ds["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(annotations["prometheus.io/scrape"], "true", "{ctx}");
        assert_eq!(annotations["prometheus.io/port"], port.to_string(), "{ctx}");
        let scheme = if tls { "https" } else { "http" };
        assert!(
            annotations
                .get("prometheus.io/scheme")
                .map_or(!tls, |s| s == scheme),
            "{ctx}: prometheus.io/scheme"
        );
    }
}

/// What kube-rbac-proxy asks the API server: who a bearer token is, and whether they
/// may `get` the path they asked for.
const RBAC_PROXY_REVIEWS: [(&str, &str, &str); 2] = [
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
];

/// With components/rbac-proxy: only the agent's loopback address serves plain HTTP;
/// the node's port is kube-rbac-proxy's, over TLS, in front of it, passing the probes'
/// paths without a token and nothing else; the sidecar is as locked down as a container
/// can be; RBAC holds the proxy's reviews and the readers' roles, and nothing more.
#[test]
fn the_rbac_proxy_component_guards_every_endpoint_but_the_probes() {
    if !support::require_tool("kubectl", "rendering the kustomizations") {
        return;
    }
    let mut proxied = Vec::new();
    for rel in kustomizations() {
        let r = Rendered::of(&rel);
        let ctx = format!("deploy/{rel}");
        let roles: BTreeMap<&str, &Value> = of_kind(&r.docs, "ClusterRole")
            .into_iter()
            .map(|role| (role["metadata"]["name"].as_str().unwrap(), role))
            .collect();
        let Some(proxy) = r.rbac_proxy() else {
            let proxy_roles = [
                "portdrift-rbac-proxy",
                "portdrift-metrics-reader",
                "portdrift-findings-reader",
            ];
            assert!(
                proxy_roles.iter().all(|name| !roles.contains_key(name)),
                "{ctx}: the proxy's roles without the proxy"
            );
            continue;
        };
        proxied.push(rel.clone());
        let containers = r.daemonset()["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(containers.len(), 2, "{ctx}: the agent and the proxy");
        assert_eq!(containers[0]["name"], "portdrift", "{ctx}: the agent stays first");
        // `kubectl logs` and `exec` go to the agent without asking.
        assert_eq!(
            r.daemonset()["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"],
            "portdrift",
            "{ctx}"
        );
        // The agent: on the node's loopback only, at the port the proxy forwards to.
        let listen = r.listen();
        let agent_port = listen
            .strip_prefix("127.0.0.1:")
            .unwrap_or_else(|| panic!("{ctx}: {listen}"));
        let args = strings(&proxy["args"]);
        let flag = |name: &str| -> Vec<&str> {
            args.iter()
                .filter_map(|a| a.strip_prefix(name)?.strip_prefix('='))
                .collect()
        };
        assert_eq!(
            flag("--upstream"),
            [format!("http://127.0.0.1:{agent_port}/").as_str()],
            "{ctx}"
        );
        // The proxy: HTTPS on every address of the node, at the port everything names.
        assert_eq!(flag("--secure-listen-address"), ["0.0.0.0:9741"], "{ctx}");
        assert!(flag("--insecure-listen-address").is_empty(), "{ctx}");
        assert_eq!(flag("--tls-min-version"), ["VersionTLS13"], "{ctx}");
        assert_eq!(proxy["ports"][0]["containerPort"], 9741, "{ctx}");
        assert_eq!(proxy["ports"][0]["name"], "metrics", "{ctx}");
        // Only the probes' paths skip the token and the review.
        assert_eq!(flag("--ignore-paths"), ["/healthz,/readyz"], "{ctx}");
        assert!(flag("--allow-paths").is_empty(), "{ctx}");
        // A released image, pinned.
        let image = proxy["image"].as_str().unwrap();
        let tag = image
            .strip_prefix("quay.io/brancz/kube-rbac-proxy:v")
            .unwrap_or_else(|| panic!("{ctx}: {image}"));
        assert!(
            tag.split('.').count() == 3 && tag.split('.').all(|n| n.parse::<u32>().is_ok()),
            "{ctx}: {image} is not a release"
        );
        let sc = &proxy["securityContext"];
        assert_eq!(sc["runAsNonRoot"], true, "{ctx}");
        assert!(sc["runAsUser"].as_u64().is_some_and(|u| u > 0), "{ctx}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{ctx}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{ctx}");
        assert_ne!(sc["privileged"], true, "{ctx}");
        assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{ctx}");
        assert!(sc["capabilities"].get("add").is_none(), "{ctx}");
        assert!(proxy.get("volumeMounts").is_none(), "{ctx}: it needs no file");
        for kind in ["requests", "limits"] {
            for resource in ["cpu", "memory"] {
                assert!(
                    proxy["resources"][kind][resource].is_string(),
                    "{ctx}: {kind}.{resource}"
                );
            }
        }
        // RBAC: the proxy's reviews for the agent's account (the exact set is checked
        // with the agent's own requests), and readers for scrapers and people.
        let granted = r.granted();
        for (group, resource, verb) in RBAC_PROXY_REVIEWS {
            assert!(
                granted.contains(&Triple::new(group, resource, verb)),
                "{ctx}: {resource}"
            );
        }
        assert_eq!(
            reader_paths(roles["portdrift-metrics-reader"]),
            ["/metrics"],
            "{ctx}"
        );
        // The findings, and what shows them: the page at / and /explain.
        let mut findings_paths = reader_paths(roles["portdrift-findings-reader"]);
        findings_paths.sort();
        assert_eq!(findings_paths, ["/", "/explain", "/findings"], "{ctx}");
    }
    assert!(
        proxied.contains(&"overlays/rbac-proxy".to_string()) && proxied.contains(&"overlays/all".to_string()),
        "{proxied:?}"
    );
    // The overlay lets kube-prometheus's Prometheus read /metrics.
    let r = Rendered::of("overlays/rbac-proxy");
    let reader = of_kind(&r.docs, "ClusterRoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"] == "portdrift-metrics-reader")
        .expect("a binding of portdrift-metrics-reader");
    assert_eq!(
        reader["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}])
    );
    assert_eq!(of_kind(&r.docs, "ServiceMonitor").len(), 1);
}

/// By default nothing that names pods, addresses or processes is served without
/// authentication on the node's network: in every overlay `/findings` is on the node's
/// loopback only. Without the proxy the listener on the node's network (`--listen`) is
/// another one, which the agent, run with the overlay's arguments, makes answer 404 for
/// `/findings` while the loopback one serves it; behind kube-rbac-proxy one loopback
/// listener serves everything, and it is the proxy's upstream.
#[test]
fn findings_are_served_on_the_nodes_loopback_only() {
    if !support::require_tool("kubectl", "rendering the kustomizations") {
        return;
    }
    let base = Rendered::of("base");
    assert_eq!(base.listen(), "0.0.0.0:9741");
    assert_eq!(base.findings_listen().as_deref(), Some("127.0.0.1:9742"));
    let runs = runs();
    for rel in kustomizations() {
        let r = Rendered::of(&rel);
        let ctx = format!("deploy/{rel}");
        let listen = r.listen();
        let findings = r
            .findings_listen()
            .unwrap_or_else(|| panic!("{ctx}: /findings is served nowhere"));
        assert!(findings.starts_with("127.0.0.1:"), "{ctx}: {findings}");
        let one_listener = listen == findings;
        match r.rbac_proxy() {
            Some(proxy) => {
                assert!(
                    one_listener,
                    "{ctx}: the proxy fronts one listener: {listen} {findings}"
                );
                assert!(
                    strings(&proxy["args"]).contains(&format!("--upstream=http://{findings}/")),
                    "{ctx}"
                );
            }
            None => {
                assert!(
                    !listen.starts_with("127."),
                    "{ctx}: {listen} is scraped from the node's network"
                );
                assert!(!one_listener, "{ctx}: /findings on the node's network");
            }
        }
        // The declared ports (host ports, with hostNetwork) are never the findings port.
        let findings_port: u64 = findings.rsplit(':').next().unwrap().parse().unwrap();
        let containers = r.daemonset()["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        for c in containers {
            for p in c["ports"].as_array().into_iter().flatten() {
                assert_ne!(p["containerPort"], findings_port, "{ctx}: {}", c["name"]);
            }
        }
        // The agent as deployed: /findings where each listener says.
        if let Some(runs) = runs {
            let (on_listen, on_findings) = &runs.findings_status[&r.args()];
            let want = if one_listener { "200" } else { "404" };
            assert_eq!(on_listen, want, "{ctx}: /findings on --listen {listen}");
            assert_eq!(
                on_findings, "200",
                "{ctx}: /findings on --findings-listen {findings}"
            );
        }
    }
}

#[test]
fn every_flag_the_daemonsets_pass_is_in_run_help() {
    if !support::require_tool("kubectl", "rendering the kustomizations") {
        return;
    }
    let out = support::portdrift(&["run", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let mut seen = 0;
    for rel in kustomizations() {
        let args = Rendered::of(&rel).args();
        assert_eq!(args[0], "run", "deploy/{rel}");
        for arg in &args[1..] {
            let flag = arg.split('=').next().unwrap();
            assert!(flag.starts_with("--"), "deploy/{rel}: {arg} is not a flag");
            assert!(
                help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                "deploy/{rel} passes {flag}, which `portdrift run --help` does not list:\n{help}"
            );
            seen += 1;
        }
    }
    assert!(seen > 0);
}

#[test]
fn the_prometheusrule_holds_exactly_the_alert_rules() {
    let rules = std::fs::read_to_string(deploy_dir().join("prometheus/portdrift-alerts.yaml")).unwrap();
    let rule =
        std::fs::read_to_string(deploy_dir().join("components/prometheus-operator/prometheusrule.yaml"))
            .unwrap();
    let rules = documents(&rules);
    let rule = documents(&rule);
    assert_eq!(rules.len(), 1);
    assert_eq!(rule.len(), 1);
    assert_eq!(rule[0]["kind"], "PrometheusRule");
    assert_eq!(
        rule[0]["spec"], rules[0],
        "the PrometheusRule differs from deploy/prometheus/portdrift-alerts.yaml: run scripts/gen-prometheusrule.sh"
    );
}

/// Where every alert's runbook lives: the troubleshooting guide in the repository that
/// Cargo.toml names, one section per alert.
fn runbook_page() -> String {
    format!(
        "{}/blob/main/docs/troubleshooting.md",
        env!("CARGO_PKG_REPOSITORY")
    )
}

/// The anchors GitHub gives a Markdown file's headings: the heading's text in lower
/// case, without punctuation, spaces turned into hyphens.
fn heading_anchors(markdown: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(text) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let text = text.trim_start_matches('#');
        if !text.starts_with(' ') {
            continue;
        }
        let anchor: String = text
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        anchors.insert(anchor);
    }
    anchors
}

#[test]
fn heading_anchors_are_githubs() {
    let text = "# Troubleshooting\n\n### PortdriftStaleEndpoint\n```sh\n# not a heading\n```\n\
                ## What `scan` says: exit status 3\n#nospace\n";
    let anchors = heading_anchors(text);
    let want = [
        "troubleshooting",
        "portdriftstaleendpoint",
        "what-scan-says-exit-status-3",
    ];
    assert_eq!(anchors, want.iter().map(|a| a.to_string()).collect());
}

/// Every alert links to its own section of the troubleshooting guide: `runbook_url` is
/// the guide's address with the alert's name, lower-cased, as the anchor, and the guide
/// has a heading of that name. Until docs/troubleshooting.md exists the headings are not
/// checked (and the test says so); once it exists a missing heading fails.
#[test]
fn every_alert_links_to_its_section_of_the_troubleshooting_guide() {
    let rules = std::fs::read_to_string(deploy_dir().join("prometheus/portdrift-alerts.yaml")).unwrap();
    let rules = &documents(&rules)[0];
    let guide = support::root().join("docs/troubleshooting.md");
    let guide = std::fs::read_to_string(&guide).unwrap_or_else(|e| panic!("{}: {e}", guide.display()));
    let anchors = heading_anchors(&guide);
    let mut seen = 0;
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let Some(alert) = rule["alert"].as_str() else {
                continue;
            };
            let anchor = alert.to_lowercase();
            assert_eq!(
                rule["annotations"]["runbook_url"],
                format!("{}#{anchor}", runbook_page()),
                "{alert}"
            );
            assert!(
                rule["annotations"]["runbook"].is_string(),
                "{alert}: the one-sentence runbook stays"
            );
            assert!(
                anchors.contains(&anchor),
                "{alert}: docs/troubleshooting.md has no heading \"{alert}\" (#{anchor})"
            );
            seen += 1;
        }
    }
    assert!(seen >= 14, "{seen} alerts");
}

#[test]
fn the_dockerfile_passes_hadolint_and_labels_the_crates_version() {
    let dockerfile = support::root().join("Dockerfile");
    let text = std::fs::read_to_string(&dockerfile).unwrap();
    let version = format!("ARG VERSION={}\n", env!("CARGO_PKG_VERSION"));
    assert!(text.contains(&version), "the Dockerfile lacks {version:?}");
    assert!(
        text.contains("cargo build --release --locked"),
        "the image must build Cargo.lock's versions"
    );
    assert!(text.contains("ENTRYPOINT [\""), "an exec-form entrypoint");
    if !support::require_tool("hadolint", "linting the Dockerfile") {
        return;
    }
    let out = Command::new("hadolint")
        .args(["--no-color", "--failure-threshold", "info"])
        .arg(&dockerfile)
        .output()
        .expect("hadolint runs");
    assert!(
        out.status.success(),
        "hadolint: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// === The agent, run as deployed ===

/// Inside the bundle's node: the fake API server logging every request, a kube-proxy
/// stand-in answering `/healthz` (so its metrics exist; on a port of its own, as the
/// bundle's node replays a silent listener on kube-proxy's 10256), and the agent with
/// the DaemonSet's arguments exactly as rendered, plus only a kubeconfig (in the
/// cluster it uses its ServiceAccount) and the stand-in's address. Once ready, and once the Event and the condition are
/// written when their flags ask for them, /metrics is saved and everything stops.
const RUN_AS_DEPLOYED: &str = r#"
log=$1; shift
# Ask the agent where its --listen and --findings-listen say (behind kube-rbac-proxy, one
# loopback port for both). The acceptances ConfigMap's file is read from where the test
# wrote it, not from the host's /etc.
args=()
for arg in "$@"; do
  case $arg in
    --listen=*) url=http://${arg#--listen=}; url=${url/0.0.0.0/127.0.0.1} ;;
    --findings-listen=*) findings_url=http://${arg#--findings-listen=}; findings_url=${findings_url/0.0.0.0/127.0.0.1} ;;
  esac
  case $arg in
    --accept=*) args+=("--accept=$dir/accept.json") ;;
    *) args+=("$arg") ;;
  esac
done
set -- "${args[@]}"
python3 "$dir/kube-proxy.py" >"$dir/kube-proxy.log" 2>&1 &
stand_in_up() { curl -s -m 1 -o /dev/null http://127.0.0.1:10299/healthz; }
wait_for 10 stand_in_up || fail "the kube-proxy stand-in did not start: $(cat "$dir/kube-proxy.log")"
# Without streaming lists the agent falls back to lists: what it asks then is a
# superset of what it asks a server that streams them. No start-up jitter in a test.
api_flags="--request-log $dir/$log --no-streaming-lists" start_api
NODE_NAME=$node "$pd" "$@" --kubeconfig "$dir/kubeconfig" --kube-proxy-healthz 127.0.0.1:10299 \
  --startup-jitter 0s 2>"$dir/agent.log" &
agent_pid=$!
wait_for 20 ready || fail "the agent never became ready"
# The test's own reads carry observer=test, so that they are not taken for the agent's.
event_sent() { curl -s -m 2 "http://$api/apis/events.k8s.io/v1/events?observer=test" | grep -q '"reason"'; }
condition_set() { curl -s -m 2 "http://$api/api/v1/nodes/$node?observer=test" | grep -q NodePortDrift; }
case " $* " in *" --events "*) wait_for 10 event_sent || fail "no Event" ;; esac
case " $* " in *" --node-condition "*) wait_for 10 condition_set || fail "no condition" ;; esac
kube_proxy_read() { get /metrics | grep -q '^portdrift_kube_proxy_healthy 1'; }
wait_for 10 kube_proxy_read || fail "the kube-proxy stand-in was never read"
get /metrics >"$dir/metrics-$log.txt"
# /findings, on each listener: the --listen one (the node's network, unless loopback) and
# the --findings-listen one.
curl -s -m 2 -o /dev/null -w '%{http_code}' "$url/findings" >"$dir/findings-listen-$log"
curl -s -m 2 -o /dev/null -w '%{http_code}' "$findings_url/findings" >"$dir/findings-private-$log"
stop_agent
stop_api
"#;

/// Inside the bundle's node: `portdrift scan` as an engineer runs it in the agent's
/// container, with a squatter that runs in a pod (a /proc tree of a process whose
/// cgroup is a kubelet pod's), so that it names the pod.
const SCAN_AS_DEPLOYED: &str = r#"
log=$1; procroot=$2
api_flags="--request-log $dir/$log" start_api
NODE_NAME=$node "$pd" scan --kubeconfig "$dir/kubeconfig" --proc-root "$procroot" \
  --kube-proxy-healthz off --format json >"$dir/scan.json" 2>"$dir/scan.log"
stop_api
"#;

/// What the agent asked of the API, per distinct argument list of the overlays'
/// DaemonSets, and what `scan` with a pod's squatter asked; the metrics of the run with
/// the most flags. None when the runs cannot happen here (no root, outside CI).
struct Runs {
    by_args: BTreeMap<Vec<String>, BTreeSet<Triple>>,
    /// Per argument list, the HTTP status of `/findings` on the `--listen` listener and
    /// on the `--findings-listen` one.
    findings_status: BTreeMap<Vec<String>, (String, String)>,
    scan: BTreeSet<Triple>,
    metrics: String,
}

fn triples(log: &str) -> BTreeSet<Triple> {
    log.lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("observer=test"))
        .map(Triple::of_request)
        .collect()
}

const BUNDLE: &str = "udp-stale-endpoint";

fn runs() -> Option<&'static Runs> {
    static RUNS: OnceLock<Option<Runs>> = OnceLock::new();
    RUNS.get_or_init(|| {
        if !support::require_root("the agent run as deployed")
            || !support::require_tool("kubectl", "rendering the kustomizations")
        {
            return None;
        }
        let arg_lists: BTreeSet<Vec<String>> = kustomizations()
            .iter()
            .map(|rel| Rendered::of(rel).args())
            .collect();
        let scratch = TempDir::new().unwrap();
        let dir = scratch.path();
        let stand_in = format!(
            "{}\nHTTPServer((\"127.0.0.1\", 10299), Healthz).serve_forever()\n",
            support::KUBE_PROXY_HEALTHZ_PY
        );
        std::fs::write(dir.join("kube-proxy.py"), stand_in).unwrap();
        // The acceptances ConfigMap as overlays/all renders it, where the agent reads it.
        let all = Rendered::of("overlays/all");
        let accept = all
            .docs
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "portdrift-acceptances")
            .and_then(|d| d["data"]["accept.json"].as_str())
            .expect("overlays/all has the acceptances ConfigMap");
        std::fs::write(dir.join("accept.json"), accept).unwrap();
        let mut by_args = BTreeMap::new();
        let mut findings_status = BTreeMap::new();
        // The dashboard is checked against the run with the most features on.
        let (mut metrics, mut most_args) = (String::new(), 0);
        for (i, args) in arg_lists.iter().enumerate() {
            let log = format!("requests-{i}");
            let mut script_args = vec![log.as_str()];
            script_args.extend(args.iter().map(String::as_str));
            let out = in_node(
                BUNDLE,
                RUN_AS_DEPLOYED,
                &script_args,
                dir,
                Duration::from_secs(90),
            );
            assert_ran(&out, dir);
            by_args.insert(args.clone(), triples(&read_raw(dir, &log)));
            findings_status.insert(
                args.clone(),
                (
                    read_raw(dir, &format!("findings-listen-{log}")),
                    read_raw(dir, &format!("findings-private-{log}")),
                ),
            );
            if args.len() > most_args {
                most_args = args.len();
                metrics = read_raw(dir, &format!("metrics-{log}.txt"));
            }
        }
        let procroot = squatter_in_a_pod(dir);
        let out = in_node(
            BUNDLE,
            SCAN_AS_DEPLOYED,
            &["requests-scan", procroot.to_str().unwrap()],
            dir,
            Duration::from_secs(90),
        );
        assert_ran(&out, dir);
        let report: Value = serde_json::from_str(&read_raw(dir, "scan.json"))
            .unwrap_or_else(|e| panic!("scan printed no JSON ({e}): {}", read_raw(dir, "scan.log")));
        let pod_named = report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| f["kind"] == "squatter" && f["process"]["pod"].is_string());
        assert!(pod_named, "the scan found no squatter in a pod: {report:#}");
        Some(Runs {
            by_args,
            findings_status,
            scan: triples(&read_raw(dir, "requests-scan")),
            metrics,
        })
    })
    .as_ref()
}

/// A /proc tree with one process, `haproxy`, listening on tcp/30080 in a kubelet pod's
/// cgroup (containerd, systemd driver).
fn squatter_in_a_pod(dir: &Path) -> PathBuf {
    let root = dir.join("proc");
    let fixtures = support::root().join("tests/fixtures");
    std::fs::create_dir_all(root.join("net")).unwrap();
    std::fs::copy(fixtures.join("proc-net/tcp"), root.join("net/tcp")).unwrap();
    let pid = root.join("4242");
    std::fs::create_dir_all(pid.join("fd")).unwrap();
    // The fixture's tcp/30080 listener (0x7580) has inode 16400.
    std::os::unix::fs::symlink("socket:[16400]", pid.join("fd/3")).unwrap();
    std::fs::write(pid.join("comm"), "haproxy\n").unwrap();
    std::fs::write(pid.join("cmdline"), "haproxy\0-f\0/etc/haproxy.cfg\0").unwrap();
    std::fs::copy(
        fixtures.join("cgroup/kubeadm-containerd-systemd-v2"),
        pid.join("cgroup"),
    )
    .unwrap();
    root
}

#[test]
fn the_cluster_roles_grant_exactly_what_the_code_uses() {
    let Some(runs) = runs() else {
        return;
    };
    assert!(
        runs.scan.contains(&Triple::new("", "pods", "list")),
        "the scan never listed pods: {:?}",
        runs.scan
    );
    for rel in kustomizations() {
        let r = Rendered::of(&rel);
        let mut used = runs.by_args[&r.args()].clone();
        // An Event's series is patched 30 minutes into a persisting finding, long after
        // this run ends; tests/events.rs has the agent make that request.
        if used.contains(&Triple::new("events.k8s.io", "events", "create")) {
            used.insert(Triple::new("events.k8s.io", "events", "patch"));
        }
        // `portdrift scan` in the agent's container names a squatter's pod only where
        // the agent can see host processes at all.
        if r.host_pid() {
            used.extend(runs.scan.iter().cloned());
        }
        // kube-rbac-proxy shares the agent's ServiceAccount and asks about every
        // request it authenticates (its delegating authenticator and authorizer).
        if r.rbac_proxy().is_some() {
            used.extend(RBAC_PROXY_REVIEWS.map(|(g, res, v)| Triple::new(g, res, v)));
        }
        let granted = r.granted();
        let missing: Vec<_> = used.difference(&granted).collect();
        let unused: Vec<_> = granted.difference(&used).collect();
        assert!(
            missing.is_empty() && unused.is_empty(),
            "deploy/{rel}: the code uses but RBAC does not grant {missing:?}; RBAC grants but the code never uses {unused:?}"
        );
    }
}

/// The metric names a Prometheus text exposition offers to queries: every sample's
/// name, and for each declared family the names its type gives (a histogram's
/// `_bucket`, `_sum`, `_count`; a counter's `_total`), so that a family with no series
/// yet (no repair so far) still counts.
fn exposed_names(metrics: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in metrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            names.insert(name.to_string());
            match kind {
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                "summary" => {
                    for suffix in ["_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                "counter" if !name.ends_with("_total") => {
                    names.insert(format!("{name}_total"));
                }
                _ => {}
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// Every `portdrift_…` name in the strings of a JSON value.
fn metric_names_in(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => {
            let bytes = s.as_bytes();
            let mut from = 0;
            while let Some(i) = s[from..].find("portdrift_") {
                let start = from + i;
                let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
                let end = start
                    + bytes[start..]
                        .iter()
                        .position(|&b| !word(b))
                        .unwrap_or(bytes.len() - start);
                if start == 0 || !word(bytes[start - 1]) {
                    out.insert(s[start..end].to_string());
                }
                from = end;
            }
        }
        Value::Array(items) => items.iter().for_each(|v| metric_names_in(v, out)),
        Value::Object(map) => map.values().for_each(|v| metric_names_in(v, out)),
        _ => {}
    }
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(deploy_dir().join("grafana/portdrift-dashboard.json")).unwrap();
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

#[test]
fn the_dashboard_queries_only_what_the_agent_exports() {
    let dash = dashboard();
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10);
    for panel in panels {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{}", panel["title"]);
        for t in targets {
            assert!(
                t["expr"]
                    .as_str()
                    .is_some_and(|e| e.contains("job=\"portdrift\"")),
                "{}: every query keeps to the portdrift job: {t}",
                panel["title"]
            );
        }
    }
    // Grafana's import asks for a data source only when the dashboard declares one as
    // an input, and the data source variable starts on it.
    let inputs = dash["__inputs"].as_array().expect("__inputs");
    assert!(
        inputs.iter().any(|i| i["type"] == "datasource"
            && i["pluginId"] == "prometheus"
            && i["name"] == "DS_PROMETHEUS"),
        "{inputs:?}"
    );
    let variables = dash["templating"]["list"].as_array().expect("variables");
    let source = variables
        .iter()
        .find(|v| v["type"] == "datasource")
        .expect("a data source variable");
    assert_eq!(source["current"]["value"], "${DS_PROMETHEUS}");
    let mut named = BTreeSet::new();
    metric_names_in(&dash, &mut named);
    assert!(named.len() >= 15, "{named:?}");
    let Some(runs) = runs() else {
        return;
    };
    let exposed = exposed_names(&runs.metrics);
    let unknown: Vec<_> = named.difference(&exposed).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries metrics the agent does not export: {unknown:?}\n/metrics:\n{}",
        runs.metrics
    );
}

/// components/acceptances: the agent as deployed reads the ConfigMap's file, and what
/// ships in it is a good acceptances file (the source is up, not an error).
#[test]
fn the_agent_as_deployed_reads_the_acceptances_configmap() {
    let Some(runs) = runs() else {
        return;
    };
    assert!(
        runs.metrics
            .contains("portdrift_source_up{source=\"acceptances\"} 1"),
        "{}",
        runs.metrics
    );
}

/// How every dashboard query picks nodes: by the `node` label where the target has one
/// (the ServiceMonitor's relabelling, or a scrape config's, adds it), else by the
/// instance, which is then named as the node: each selector comes as this pair.
const BY_NODE_LABEL: &str = r#"node!="", node=~"$node""#;
const BY_INSTANCE: &str = r#"node="", instance=~"$node""#;
const INSTANCE_AS_NODE: &str = r#""node", "$1", "instance", "(.*)")"#;

/// The dashboard's query targets: (panel title, expression, legend).
fn dashboard_targets(dash: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        for t in panel["targets"].as_array().expect("targets") {
            out.push((
                panel["title"].as_str().unwrap().to_string(),
                t["expr"].as_str().expect("an expr").to_string(),
                t["legendFormat"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    out
}

/// The `node` variable's PromQL (inside Grafana's `query_result(...)`).
fn node_variable_query(dash: &Value) -> String {
    let variables = dash["templating"]["list"].as_array().expect("variables");
    let node = variables
        .iter()
        .find(|v| v["name"] == "node")
        .expect("a node variable");
    assert_eq!(node["type"], "query");
    assert_eq!(node["includeAll"], true);
    assert_eq!(node["multi"], true);
    assert_eq!(node["allValue"], ".*");
    // query_result prints `{node="NAME"} 1 TIMESTAMP`; the regex keeps NAME.
    assert_eq!(node["regex"], r#"/node="([^"]+)"/"#);
    let query = node["query"]["query"].as_str().expect("a query");
    assert_eq!(node["definition"], query);
    query
        .strip_prefix("query_result(")
        .and_then(|q| q.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not a query_result: {query}"))
        .to_string()
}

/// Every query picks nodes by the `node` variable, by label or else by instance, and
/// names a node the same way in its legend; there is no `instance` variable left.
#[test]
fn the_dashboard_picks_and_names_nodes_by_label_else_instance() {
    let dash = dashboard();
    let text = serde_json::to_string(&dash).unwrap();
    assert!(!text.contains("$instance"), "a query still uses $instance");
    let variable = node_variable_query(&dash);
    assert!(
        variable.contains(r#"node!="""#)
            && variable.contains(r#"node="""#)
            && variable.contains(INSTANCE_AS_NODE),
        "{variable}"
    );
    for (title, expr, legend) in dashboard_targets(&dash) {
        // Every selector (a `{...}`) is one of the pair, and each pair's fallback is
        // renamed to a node.
        let selectors: Vec<&str> = expr
            .split('{')
            .skip(1)
            .map(|rest| rest.split('}').next().unwrap())
            .collect();
        let by_label = selectors.iter().filter(|s| s.contains(BY_NODE_LABEL)).count();
        let by_instance = selectors.iter().filter(|s| s.contains(BY_INSTANCE)).count();
        assert!(by_label > 0, "{title}: {expr}");
        assert_eq!(
            by_label + by_instance,
            selectors.len(),
            "{title}: a selector without the node: {expr}"
        );
        assert_eq!(
            by_label, by_instance,
            "{title}: a selector without its fallback: {expr}"
        );
        assert_eq!(
            expr.matches(INSTANCE_AS_NODE).count(),
            by_instance,
            "{title}: a fallback not named as a node: {expr}"
        );
        assert!(!legend.contains("instance"), "{title}: {legend}");
    }
}

/// The node variable and the queries, evaluated by promtool on targets with a `node`
/// label and without one (and another job's): every query parses, the variable lists
/// each node once (the label, else the instance), and a panel shows and filters nodes
/// by those names, as Grafana fills in one node, several, or All.
#[test]
fn the_dashboards_node_filter_works_with_and_without_a_node_label() {
    if !support::require_tool("promtool", "evaluating the dashboard's queries") {
        return;
    }
    let dash = dashboard();
    // What Grafana puts in place of $node: All (the allValue), one node, several (its
    // values joined by |), each value's regex metacharacters escaped with two
    // backslashes (one for the PromQL string, one for the regex).
    let all = ".*";
    let labelled = "node-a";
    let unlabelled = r"10\\.0\\.0\\.9:9741";
    let both = r"(node-a|10\\.0\\.0\\.9:9741)";
    let fill = |expr: &str, node: &str| expr.replace("$node", node).replace("$__rate_interval", "5m");
    let targets = dashboard_targets(&dash);
    let target = |title: &str| {
        targets
            .iter()
            .find(|(t, _, _)| t == title)
            .map(|(_, e, _)| e.clone())
            .unwrap_or_else(|| panic!("no panel {title:?}"))
    };
    // Every query as a recording rule, so that promtool parses them all.
    let records: Vec<Value> = targets
        .iter()
        .enumerate()
        .map(|(i, (_, expr, _))| serde_json::json!({"record": format!("dashboard:query_{i}:test"), "expr": fill(expr, all)}))
        .chain([serde_json::json!({"record": "dashboard:node_variable:test", "expr": node_variable_query(&dash)})])
        .collect();
    let rules = serde_json::json!({"groups": [{"name": "dashboard", "rules": records}]});
    let series = |s: &str, v: &str| serde_json::json!({"series": s, "values": v});
    let input = [
        series(
            r#"portdrift_build_info{job="portdrift",instance="10.0.0.7:9741",node="node-a",version="0.1.0"}"#,
            "1x10",
        ),
        series(
            r#"portdrift_build_info{job="portdrift",instance="10.0.0.9:9741",version="0.1.0"}"#,
            "1x10",
        ),
        series(
            r#"portdrift_build_info{job="elsewhere",instance="10.0.0.5:9741",version="0.1.0"}"#,
            "1x10",
        ),
        series(
            r#"portdrift_findings_by_severity{job="portdrift",instance="10.0.0.7:9741",node="node-a",kind="stale-endpoint",severity="critical"}"#,
            "2x10",
        ),
        series(
            r#"portdrift_findings_by_severity{job="portdrift",instance="10.0.0.9:9741",kind="squatter",severity="warning"}"#,
            "1x10",
        ),
        series(
            r#"portdrift_scans_total{job="portdrift",instance="10.0.0.7:9741",node="node-a"}"#,
            "0+60x10",
        ),
        series(
            r#"portdrift_scans_total{job="portdrift",instance="10.0.0.9:9741"}"#,
            "0+120x10",
        ),
    ];
    let case = |expr: String, samples: &[(&str, f64)]| {
        let samples: Vec<Value> = samples
            .iter()
            .map(|(labels, value)| serde_json::json!({"labels": labels, "value": value}))
            .collect();
        serde_json::json!({"expr": expr, "eval_time": "8m", "exp_samples": samples})
    };
    let by_node = target("Findings by node and severity");
    let critical = target("Nodes with critical findings");
    let rates = target("Scans per second");
    let a = r#"{node="node-a", severity="critical"}"#;
    let b = r#"{node="10.0.0.9:9741", severity="warning"}"#;
    let cases = [
        case(
            node_variable_query(&dash),
            &[(r#"{node="node-a"}"#, 1.0), (r#"{node="10.0.0.9:9741"}"#, 1.0)],
        ),
        case(fill(&by_node, all), &[(a, 2.0), (b, 1.0)]),
        case(fill(&by_node, labelled), &[(a, 2.0)]),
        case(fill(&by_node, unlabelled), &[(b, 1.0)]),
        case(fill(&by_node, both), &[(a, 2.0), (b, 1.0)]),
        case(fill(&critical, all), &[("{}", 1.0)]),
        case(fill(&critical, unlabelled), &[("{}", 0.0)]),
        case(
            fill(&rates, all),
            &[(r#"{node="node-a"}"#, 1.0), (r#"{node="10.0.0.9:9741"}"#, 2.0)],
        ),
        case(fill(&rates, unlabelled), &[(r#"{node="10.0.0.9:9741"}"#, 2.0)]),
    ];
    let tests = serde_json::json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input, "promql_expr_test": cases}],
    });
    let scratch = TempDir::new().unwrap();
    std::fs::write(
        scratch.path().join("rules.yaml"),
        serde_yaml_ng::to_string(&rules).unwrap(),
    )
    .unwrap();
    std::fs::write(
        scratch.path().join("tests.yaml"),
        serde_yaml_ng::to_string(&tests).unwrap(),
    )
    .unwrap();
    for args in [["check", "rules", "rules.yaml"], ["test", "rules", "tests.yaml"]] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(scratch.path())
            .output()
            .expect("promtool runs");
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn exposed_names_understand_types() {
    let text = "# TYPE portdrift_scans counter\nportdrift_scans_total 3\n\
                # TYPE portdrift_scan_duration_seconds histogram\n\
                # TYPE portdrift_repairs_total counter\n";
    let names = exposed_names(text);
    for n in [
        "portdrift_scans_total",
        "portdrift_scan_duration_seconds_bucket",
        "portdrift_scan_duration_seconds_count",
        "portdrift_repairs_total",
    ] {
        assert!(names.contains(n), "{n}: {names:?}");
    }
    assert!(!names.contains("portdrift_repairs_total_total"));
    let mut found = BTreeSet::new();
    metric_names_in(
        &serde_json::json!({"expr": "rate(portdrift_scans_total{job=\"portdrift\"}[5m]) / x_portdrift_y"}),
        &mut found,
    );
    assert_eq!(found, BTreeSet::from(["portdrift_scans_total".to_string()]));
}
