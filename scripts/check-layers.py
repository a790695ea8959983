#!/usr/bin/env python3
"""The layering check of ARCHITECTURE.md: imports point down only, nothing loops, the
pure layers stay pure, test support stays out of the shipped code.

Reads every `*.rs` of the `portdrift` crate's `src/` and the core crate's
(`crates/portdrift-core/src/`: `heart` and `decode`, which the `portdrift` crate
re-exports under the same names, so the two trees are one module tree) outside test code (files named `tests.rs` or under a `tests/`
directory, and inline `mod tests { ... }` blocks), resolves each `crate::...` and
`super::...` path to the module it names, and fails on:

- an import from a layer above the importing file's own;
- an import loop between modules (a module using what an ancestor module declares is
  the tree itself, not a loop);
- in `heart` and `decode`, anything that does I/O, reads the clock, or needs a runtime;
- shipped code using `testing` (test support is compiled for tests only);
- a non-test file over LIMIT lines whose first comment does not say it is one
  cohesive thing ("One cohesive ...").

The test-support crate (`crates/portdrift-test-support/`) is not read: it is test code
outside the layers, a dev-dependency that shipped code cannot name (the compiler holds
that; scripts/test.sh checks that the release build's tree does not have it).

Prints the module-level import loops it finds with `--loops`, for the closing notes of
a refactor; `--self-test` runs the check on a small tree with one of each problem and
fails unless it finds every one. Standard library only, so it runs before anything is
built.
"""

import os
import re
import sys

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ROOTS = [os.path.join(HERE, "src"), os.path.join(HERE, "crates", "portdrift-core", "src")]
if "--root" in sys.argv:
    ROOTS = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "--root"]
LAYERS = ["heart", "decode", "sources", "scan", "agent", "cli"]
LIMIT = 600
# What the pure layers must not name: I/O, processes, sockets, threads, the clock, the
# environment, async runtimes and clients. Address types (std::net::IpAddr) are values.
IMPURE = re.compile(
    r"\b(tokio|hyper|hyper_util|kube|netlink_sys|rustix|libc|tracing)::"
    r"|\bstd::(fs|process|thread|env)\b"
    r"|\bstd::net::(TcpStream|TcpListener|UdpSocket|ToSocketAddrs)\b"
    r"|\b(Instant|SystemTime)::now\b"
    r"|\bFile::(open|create)\b"
)
PATH = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
COHESIVE = re.compile(r"one cohesive", re.IGNORECASE)


def module_of(rel):
    """src-relative file path -> module path tuple."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def is_test_file(rel):
    parts = rel.split("/")
    return parts[-1] == "tests.rs" or "tests" in parts[:-1]


def shipped_lines(text):
    """The lines outside inline test modules, with comments dropped; and the rest."""
    out = []
    depth = None
    pending_cfg_test = False
    for n, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if depth is not None:
            depth += line.count("{") - line.count("}")
            if depth <= 0:
                depth = None
            continue
        if stripped == "#[cfg(test)]":
            pending_cfg_test = True
            continue
        if pending_cfg_test and re.match(r"(pub(\([a-z]+\))? )?mod \w+ \{", stripped):
            depth = line.count("{") - line.count("}")
            pending_cfg_test = False
            if depth <= 0:
                depth = None
            continue
        if pending_cfg_test and re.match(r"(pub(\([a-z]+\))? )?mod \w+;", stripped):
            pending_cfg_test = False
            continue
        pending_cfg_test = False
        code = line.split("//", 1)[0] if not stripped.startswith("//") else ""
        out.append((n, code))
    return out


def main():
    files = {}
    for root in ROOTS:
        for dirpath, _, names in os.walk(root):
            for name in names:
                if name.endswith(".rs"):
                    full = os.path.join(dirpath, name)
                    rel = os.path.relpath(full, root)
                    # Each crate has a lib.rs and a testing module: neither is checked.
                    files.setdefault(rel, open(full, encoding="utf-8").read())
    modules = {module_of(rel): rel for rel in files}
    problems = []
    edges = {}

    def resolve(mod, root, segs):
        if root == "super":
            base = list(mod[:-1])
            while segs and segs[0] == "super":
                base = base[:-1]
                segs = segs[1:]
        else:
            base = []
        path = base + list(segs)
        # The longest prefix that is a module file.
        for k in range(len(path), 0, -1):
            if tuple(path[:k]) in modules:
                return tuple(path[:k])
        return tuple(path[:1])

    for rel, text in sorted(files.items()):
        mod = module_of(rel)
        if is_test_file(rel) or not mod or mod[0] == "testing":
            continue
        layer = mod[0]
        rank = LAYERS.index(layer) if layer in LAYERS else len(LAYERS)
        lines = shipped_lines(text)
        total = text.count("\n")
        if total > LIMIT and layer in LAYERS:
            head = "\n".join(l for l in text.split("\n")[:12] if l.startswith("//!"))
            if not COHESIVE.search(head):
                problems.append(f"{rel}: {total} lines (over {LIMIT}) and its first comment does not say it is one cohesive thing")
        for n, code in lines:
            if layer in ("heart", "decode"):
                m = IMPURE.search(code)
                if m:
                    problems.append(f"{rel}:{n}: the pure layer `{layer}` names `{m.group(0)}`")
            for m in PATH.finditer(code):
                segs = m.group(2).split("::")[1:]
                target = resolve(mod, m.group(1), segs)
                if not target:
                    continue
                if target[0] == "testing":
                    problems.append(f"{rel}:{n}: shipped code uses test support `{'::'.join(target)}`")
                    continue
                if target[0] in LAYERS and layer in LAYERS and LAYERS.index(target[0]) > rank:
                    problems.append(f"{rel}:{n}: `{layer}` imports `{'::'.join(target)}` from the layer above")
                if target != mod and target != mod[: len(target)]:
                    edges.setdefault(mod, set()).add(target)

    loops = find_loops(edges)
    for loop in loops:
        problems.append("import loop: " + " -> ".join("::".join(m) for m in loop + [loop[0]]))
    if "--loops" in sys.argv:
        print(f"{len(loops)} import loops")
    for p in problems:
        print(p)
    if problems:
        print(f"layering check: {len(problems)} problems (see ARCHITECTURE.md)", file=sys.stderr)
        return 1
    print(f"layering check: {len(files)} files, {len(LAYERS)} layers, no problems")
    return 0


def find_loops(edges):
    """Strongly connected components of more than one module (Tarjan), each as a list."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def self_test():
    """The check must catch each kind of problem it exists for, and pass a clean tree."""
    import subprocess
    import tempfile

    bad = {
        "lib.rs": "pub mod heart; pub mod decode; pub mod sources; pub mod testing;\n",
        "heart/mod.rs": "pub mod model; pub mod detect;\n",
        "heart/model.rs": "use crate::decode::text::Parsed;\n",
        "heart/detect.rs": "fn now() { let _ = std::time::Instant::now(); }\n",
        "decode/mod.rs": "pub mod text; pub mod other;\n",
        "decode/text.rs": "use crate::decode::other::B;\npub struct Parsed;\n",
        "decode/other.rs": "use crate::decode::text::Parsed;\npub struct B;\nfn f() { std::fs::read(\"x\"); }\n",
        "sources/mod.rs": "use crate::testing::synth;\n" + "// line\n" * 700,
        "testing/mod.rs": "pub mod synth;\n",
        "testing/synth.rs": "use crate::sources::X;\n",
        "heart/detect/tests.rs": "use crate::sources::X;\n",
    }
    expected = [
        "heart/model.rs:1: `heart` imports `decode::text` from the layer above",
        "heart/detect.rs:1: the pure layer `heart` names `Instant::now`",
        "decode/other.rs:3: the pure layer `decode` names `std::fs`",
        "sources/mod.rs:1: shipped code uses test support `testing::synth`",
        "sources/mod.rs: 701 lines (over 600)",
        "import loop: decode::other -> decode::text -> decode::other",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in bad.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w", encoding="utf-8") as f:
                f.write(text)
        run = subprocess.run([sys.executable, __file__, "--root", tmp], capture_output=True, text=True)
        missing = [e for e in expected if e not in run.stdout]
        lines = [l for l in run.stdout.splitlines() if l.strip()]
        if run.returncode == 0 or missing or len(lines) != len(expected):
            print("self-test failed: missing", missing, "got", lines, file=sys.stderr)
            return 1
        for rel in ["heart/model.rs", "decode/other.rs", "decode/text.rs", "heart/detect.rs", "sources/mod.rs"]:
            os.remove(os.path.join(tmp, rel))
        with open(os.path.join(tmp, "heart/model.rs"), "w", encoding="utf-8") as f:
            f.write("use std::net::IpAddr;\npub struct Rule(IpAddr);\n")
        with open(os.path.join(tmp, "sources/mod.rs"), "w", encoding="utf-8") as f:
            f.write("use crate::heart::model::Rule;\nfn f() { std::fs::read(\"x\"); }\n")
        run = subprocess.run([sys.executable, __file__, "--root", tmp], capture_output=True, text=True)
        if run.returncode != 0:
            print("self-test failed on a clean tree:", run.stdout, file=sys.stderr)
            return 1
    print("layering check self-test: every planted problem found, the clean tree passes")
    return 0


if __name__ == "__main__":
    sys.exit(self_test() if "--self-test" in sys.argv else main())
